"""Language bodies (BERT, RoBERTa, ELECTRA, OpenAI GPT, GPT-2): the text embedder and the heads that read a padded
token sequence; their blocks are the core's (`Block`, `PostNormBlock` for BERT's layout).

One folder: `spec.py` (its kinds, torch-free), `modules.py` (a module per kind) and `family.py` (its table
entries); Hugging Face's weights convert with `vspec.convert.from_hf`, and `vspec.train.text` trains them.
"""
