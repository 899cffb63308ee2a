"""ELECTRA-small (Clark et al. 2020; Refiner Table 6's "BERT-small", 14 M parameters) = Hugging Face
`ElectraForSequenceClassification` of google/electra-small-discriminator, 2 labels: embeddings 128 wide (uncased
vocabulary of 30,522, 512 positions, 2 segments, LayerNorm, dropout) projected to 256; 12 post-norm blocks of 256
wide, 4 heads, FFN 1,024, exact GELU, LayerNorm eps 1e-12; its classification head on [CLS]: dropout -> dense ->
GELU -> dropout -> out_proj."""

from vspec.spec import MHSA, MLP, FirstTokenHead, Hub, Model, Norm, PostNormBlock, PublishedWeights, TokenEmbed

LN = Norm(eps=1e-12)

SPEC = Model(
    embedder=TokenEmbed(vocab_size=30522, max_positions=512, seq_len=128, type_vocab_size=2, padding_id=0, norm=LN,
                        drop=0.1, width=128),
    block=PostNormBlock(attention=MHSA(heads=4, attn_drop=0.1, proj_drop=0.1),
                ffn=MLP(hidden=1024, drop=0.1, hidden_drop=0.0), norm=LN),
    depth=12, dim=256, num_classes=2, class_token=False, pos_embed="none", final_norm=False,
    head=FirstTokenHead(pooler="gelu", drop_in=0.1, drop=0.1),
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "discriminator": PublishedWeights(
        source=Hub("google/electra-small-discriminator", "pytorch_model.bin", config="config.json"),
        converter="hf", params=13_549_314, classes=0,
        licence="Apache-2.0", tokenizer="google/electra-small-discriminator",
        score="GLUE test 77.4 (ELECTRA-Small++, the released small model: google-research/electra README)",
        notes="the discriminator's body; the classification head starts fresh",
    ),
}
