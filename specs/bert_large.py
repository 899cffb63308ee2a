"""BERT-large = Hugging Face `BertForSequenceClassification` of bert-large-uncased, 2 labels: bert_base's layout
at 24 blocks of 1,024 wide, 16 heads, FFN 4,096. SoT's language body (Table 6)."""

from vspec.spec import MHSA, MLP, FirstTokenHead, Hub, Model, Norm, PostNormBlock, PublishedWeights, TokenEmbed

LN = Norm(eps=1e-12)

SPEC = Model(
    embedder=TokenEmbed(vocab_size=30522, max_positions=512, seq_len=128, type_vocab_size=2, padding_id=0, norm=LN,
                        drop=0.1),
    block=PostNormBlock(attention=MHSA(heads=16, attn_drop=0.1, proj_drop=0.1),
                ffn=MLP(hidden=4096, drop=0.1, hidden_drop=0.0), norm=LN),
    depth=24, dim=1024, num_classes=2, class_token=False, pos_embed="none", final_norm=False,
    head=FirstTokenHead(pooler="tanh", drop=0.1),
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "hub": PublishedWeights(
        source=Hub("google-bert/bert-large-uncased", "model.safetensors", config="config.json"),
        converter="hf", params=335_143_938, classes=0,
        licence="Apache-2.0", tokenizer="google-bert/bert-large-uncased",
        score="GLUE test 82.1 (BERT, Table 1)",
    ),
}
