"""GPT-2 medium = Hugging Face `GPT2ForSequenceClassification` of gpt2-medium, 2 labels: gpt2's layout at 24
blocks of 1,024 wide, 16 heads, FFN 4,096."""

from vspec.spec import MHSA, MLP, Block, Hub, LastTokenHead, Model, Norm, PublishedWeights, TokenEmbed

SPEC = Model(
    embedder=TokenEmbed(vocab_size=50257, max_positions=1024, seq_len=128, type_vocab_size=0, drop=0.1),
    block=Block(attention=MHSA(heads=16, attn_drop=0.1, proj_drop=0.1),
                ffn=MLP(hidden=4096, act="gelu_tanh", drop=0.1, hidden_drop=0.0), norm=Norm(eps=1e-5)),
    depth=24, dim=1024, num_classes=2, class_token=False, pos_embed="none", final_norm=True,
    head=LastTokenHead(), causal=True,
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "hub": PublishedWeights(
        source=Hub("openai-community/gpt2-medium", "model.safetensors", config="config.json"),
        converter="hf", params=354_825_216, classes=0,
        licence="MIT", tokenizer="openai-community/gpt2-medium",
        score=None,
    ),
}
