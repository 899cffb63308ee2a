"""A small language body (`text_body`) with a head or attention of a test's choosing."""

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
