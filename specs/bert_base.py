"""BERT-base (Devlin et al. 2019) = Hugging Face `BertForSequenceClassification` of bert-base-uncased, 2 labels:
word (30,522, uncased) + position (512) + segment (2) embeddings -> LayerNorm -> dropout; 12 post-norm blocks of
768 wide, 12 heads, FFN 3,072 with exact GELU, LayerNorm eps 1e-12, dropout 0.1; the tanh pooler on [CLS], then
dropout and the classifier. SoT's language body (Tables 1 and 6). Shapes assume 128 tokens (any length to 512
runs)."""

from vspec.spec import MHSA, MLP, FirstTokenHead, Hub, Model, Norm, PostNormBlock, PublishedWeights, TokenEmbed

LN = Norm(eps=1e-12)

SPEC = Model(
    embedder=TokenEmbed(vocab_size=30522, max_positions=512, seq_len=128, type_vocab_size=2, padding_id=0, norm=LN,
                        drop=0.1),
    block=PostNormBlock(attention=MHSA(heads=12, attn_drop=0.1, proj_drop=0.1),
                ffn=MLP(hidden=3072, drop=0.1, hidden_drop=0.0), norm=LN),
    depth=12, dim=768, num_classes=2, class_token=False, pos_embed="none", final_norm=False,
    head=FirstTokenHead(pooler="tanh", drop=0.1),
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "hub": PublishedWeights(
        source=Hub("google-bert/bert-base-uncased", "model.safetensors", config="config.json"),
        converter="hf", params=109_483_778, classes=0,
        licence="Apache-2.0", tokenizer="google-bert/bert-base-uncased",
        score="GLUE test 79.6 (BERT, Table 1)",
    ),
}
