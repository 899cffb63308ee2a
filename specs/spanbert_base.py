"""SpanBERT-base (Joshi et al. 2020) = Hugging Face SpanBERT/spanbert-base-cased as `BertForSequenceClassification`,
2 labels: BERT-base's layout with the cased vocabulary (28,996 words). SoT's language body (Table 6)."""

from vspec.spec import MHSA, MLP, FirstTokenHead, Hub, Model, Norm, PostNormBlock, PublishedWeights, TokenEmbed

LN = Norm(eps=1e-12)

SPEC = Model(
    embedder=TokenEmbed(vocab_size=28996, max_positions=512, seq_len=128, type_vocab_size=2, padding_id=0, norm=LN,
                        drop=0.1),
    block=PostNormBlock(attention=MHSA(heads=12, attn_drop=0.1, proj_drop=0.1),
                ffn=MLP(hidden=3072, drop=0.1, hidden_drop=0.0), norm=LN),
    depth=12, dim=768, num_classes=2, class_token=False, pos_embed="none", final_norm=False,
    head=FirstTokenHead(pooler="tanh", drop=0.1),
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "hub": PublishedWeights(
        source=Hub("SpanBERT/spanbert-base-cased", "pytorch_model.bin", config="config.json"),
        converter="hf", params=108_311_810, classes=0,
        licence="CC-BY-NC-4.0", tokenizer="SpanBERT/spanbert-base-cased",
        score="SoT Table 6: the fine-tuned baseline's dev CoLA MCC / RTE / MNLI / QNLI acc 57.48 / 73.65 / "
              "85.53 / 92.71",
        config={"model_type": "bert"},  # its config.json predates model_type
        notes="fp16 weights (converted to float32); a non-commercial licence",
    ),
}
