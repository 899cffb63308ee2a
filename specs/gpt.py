"""OpenAI GPT (Radford et al. 2018) = Hugging Face `OpenAIGPTForSequenceClassification` of openai-gpt, 2 labels:
BPE vocabulary of 40,478 and 512 learned positions, no segments, no embedding norm, dropout 0.1; 12 causal
post-norm blocks (x = LN(x + attn(x))) of 768 wide, 12 heads, FFN 3,072 with tanh GELU (its "gelu"), LayerNorm
eps 1e-5, no final norm; classification from the last real token (`score`, no bias; SoT Sec. 4.3)."""

from vspec.spec import MHSA, MLP, Hub, LastTokenHead, Model, Norm, PostNormBlock, PublishedWeights, TokenEmbed

SPEC = Model(
    embedder=TokenEmbed(vocab_size=40478, max_positions=512, seq_len=128, type_vocab_size=0, drop=0.1),
    block=PostNormBlock(attention=MHSA(heads=12, attn_drop=0.1, proj_drop=0.1),
                ffn=MLP(hidden=3072, act="gelu_tanh", drop=0.1, hidden_drop=0.0), norm=Norm(eps=1e-5)),
    depth=12, dim=768, num_classes=2, class_token=False, pos_embed="none", final_norm=False,
    head=LastTokenHead(), causal=True,
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "hub": PublishedWeights(
        source=Hub("openai-community/openai-gpt", "model.safetensors", config="config.json"),
        converter="hf", params=116_536_320, classes=0,
        licence="MIT", tokenizer="openai-community/openai-gpt",
        score="SoT Table 6: the fine-tuned baseline's dev CoLA MCC / RTE / MNLI / QNLI acc 54.32 / 63.17 / "
              "82.10 / 86.36",
    ),
}
