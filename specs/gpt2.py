"""GPT-2 small (Radford et al. 2019) = Hugging Face `GPT2ForSequenceClassification` of gpt2, 2 labels: BPE
vocabulary of 50,257 and 1,024 learned positions, dropout 0.1; 12 causal pre-norm blocks of 768 wide, 12 heads,
FFN 3,072 with tanh GELU (gelu_new), LayerNorm eps 1e-5, the final LayerNorm; classification from the last real
token (`score`, no bias). Shapes assume 128 tokens (any length to 1,024 runs)."""

from vspec.spec import MHSA, MLP, Block, Hub, LastTokenHead, Model, Norm, PublishedWeights, TokenEmbed

SPEC = Model(
    embedder=TokenEmbed(vocab_size=50257, max_positions=1024, seq_len=128, type_vocab_size=0, drop=0.1),
    block=Block(attention=MHSA(heads=12, attn_drop=0.1, proj_drop=0.1),
                ffn=MLP(hidden=3072, act="gelu_tanh", drop=0.1, hidden_drop=0.0), norm=Norm(eps=1e-5)),
    depth=12, dim=768, num_classes=2, class_token=False, pos_embed="none", final_norm=True,
    head=LastTokenHead(), causal=True,
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "hub": PublishedWeights(
        source=Hub("openai-community/gpt2", "model.safetensors", config="config.json"),
        converter="hf", params=124_441_344, classes=0,
        licence="MIT", tokenizer="openai-community/gpt2",
        score=None,
    ),
}
