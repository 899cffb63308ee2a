"""A small language body (`text_body`) with a head or attention of a test's choosing; the comparison of a body's
hidden states with a Hugging Face base model's (`assert_same_hidden_states`)."""

from vspec.spec import (
    MHSA,
    MLP,
    FirstTokenHead,
    LastTokenHead,
    Model,
    Norm,
    PostNormBlock,
    TokenEmbed,
)

VOCAB, LENGTH = 60, 12


def text_body(head=None, attention=None, causal: bool = False, dim: int = 32) -> Model:
    """A BERT-like body (post-norm) of two blocks, 12 tokens, or a GPT-like one (causal, last-token head)."""
    return Model(embedder=TokenEmbed(vocab_size=VOCAB, max_positions=16, seq_len=LENGTH, padding_id=0,
                                     norm=Norm(eps=1e-12)),
                 block=PostNormBlock(attention=attention or MHSA(heads=4), ffn=MLP(hidden=2 * dim),
                                     norm=Norm(eps=1e-12)),
                 depth=2, dim=dim, num_classes=3, class_token=False, pos_embed="none", final_norm=False,
                 head=head or (LastTokenHead() if causal else FirstTokenHead(pooler="tanh")), causal=causal)


def assert_same_hidden_states(model, out, ids, mask) -> None:
    """A vspec text body's per-block hidden states (`forward_intermediates`) equal a Hugging Face base model's output
    `out` (with output_hidden_states) at the real tokens of `mask`, within 1e-5: HF's states after each block, the
    last one GPT-2's after its final norm (forward_intermediates' final features); and where HF has a pooler, the
    vspec model's output (its head with 0 classes) equals the pooler output."""
    import torch

    with torch.no_grad():
        final, layers = model.forward_intermediates(ids, attention_mask=mask)
        pooled = model(ids, mask)
    real = mask.bool()
    assert len(layers) == len(out.hidden_states) - 1
    for got, want in zip([*layers[:-1], final], out.hidden_states[1:]):
        assert (got[real] - want[real]).abs().max() < 1e-5
    assert (final[real] - out.last_hidden_state[real]).abs().max() < 1e-5
    if getattr(out, "pooler_output", None) is not None:
        assert (pooled - out.pooler_output).abs().max() < 1e-5
