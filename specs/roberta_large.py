"""RoBERTa-large = Hugging Face `RobertaForSequenceClassification` of roberta-large, 2 labels: roberta_base's
layout at 24 blocks of 1,024 wide, 16 heads, FFN 4,096. SoT's language body (Table 6)."""

from vspec.spec import MHSA, MLP, FirstTokenHead, Hub, Model, Norm, PostNormBlock, PublishedWeights, TokenEmbed

LN = Norm(eps=1e-5)

SPEC = Model(
    embedder=TokenEmbed(vocab_size=50265, max_positions=514, seq_len=128, type_vocab_size=1, padding_id=1,
                        pad_positions=True, norm=LN, drop=0.1),
    block=PostNormBlock(attention=MHSA(heads=16, attn_drop=0.1, proj_drop=0.1),
                ffn=MLP(hidden=4096, drop=0.1, hidden_drop=0.0), norm=LN),
    depth=24, dim=1024, num_classes=2, class_token=False, pos_embed="none", final_norm=False,
    head=FirstTokenHead(pooler="tanh", drop_in=0.1, drop=0.1),
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "hub": PublishedWeights(
        source=Hub("FacebookAI/roberta-large", "model.safetensors", config="config.json"),
        converter="hf", params=355_361_794, classes=0,
        licence="MIT", tokenizer="FacebookAI/roberta-large",
        score="SoT Table 6: the fine-tuned baseline's dev CoLA MCC / RTE / MNLI / QNLI acc 67.98 / 86.60 / "
              "90.20 / 94.70",
    ),
}
