"""The text demo's spec (`tools/text_demo.py`): a small BERT-like body trained from scratch on rt-polarity's review
snippets (SoT's head against the first-token head): a WordPiece vocabulary of up to 8,000 words, 64 tokens,
2 post-norm blocks of 128 wide, 4 heads, FFN 512, dropout 0.1; BERT's pooler on [CLS]."""

from vspec.spec import MHSA, MLP, FirstTokenHead, Model, Norm, PostNormBlock, TokenEmbed

LN = Norm(eps=1e-12)

SPEC = Model(
    embedder=TokenEmbed(vocab_size=8000, max_positions=64, seq_len=64, type_vocab_size=2, padding_id=0, norm=LN,
                        drop=0.1),
    block=PostNormBlock(attention=MHSA(heads=4, attn_drop=0.1, proj_drop=0.1),
                        ffn=MLP(hidden=512, drop=0.1, hidden_drop=0.0), norm=LN),
    depth=2, dim=128, num_classes=2, class_token=False, pos_embed="none", final_norm=False,
    head=FirstTokenHead(pooler="tanh", drop=0.1),
)
