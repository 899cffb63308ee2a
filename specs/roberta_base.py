"""RoBERTa-base (Liu et al. 2019) = Hugging Face `RobertaForSequenceClassification` of roberta-base, 2 labels: BPE
vocabulary of 50,265, padding id 1, positions counted from 2 over the real tokens (514 rows), one segment; BERT's
post-norm blocks (12 x 768, 12 heads, FFN 3,072, exact GELU) with LayerNorm eps 1e-5; the classification head on
<s>: dropout -> dense -> tanh -> dropout -> out_proj. SoT's language body (Table 6)."""

from vspec.spec import MHSA, MLP, FirstTokenHead, Hub, Model, Norm, PostNormBlock, PublishedWeights, TokenEmbed

LN = Norm(eps=1e-5)

SPEC = Model(
    embedder=TokenEmbed(vocab_size=50265, max_positions=514, seq_len=128, type_vocab_size=1, padding_id=1,
                        pad_positions=True, norm=LN, drop=0.1),
    block=PostNormBlock(attention=MHSA(heads=12, attn_drop=0.1, proj_drop=0.1),
                ffn=MLP(hidden=3072, drop=0.1, hidden_drop=0.0), norm=LN),
    depth=12, dim=768, num_classes=2, class_token=False, pos_embed="none", final_norm=False,
    head=FirstTokenHead(pooler="tanh", drop_in=0.1, drop=0.1),
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "hub": PublishedWeights(
        source=Hub("FacebookAI/roberta-base", "model.safetensors", config="config.json"),
        converter="hf", params=124_647_170, classes=0,
        licence="MIT", tokenizer="FacebookAI/roberta-base",
        score="SoT Table 6: the fine-tuned baseline's dev CoLA MCC / RTE / MNLI / QNLI acc 61.58 / 77.60 / "
              "87.50 / 92.70",
    ),
}
