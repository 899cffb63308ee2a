"""iRPE's attention module: multi-head self-attention with contextual product relative position encodings
(vspec.spec.IRPEAttention). The projections are ViT's (`qkv`, `proj`); the lookup tables sit in the core,
where the profiler counts the attention's MACs."""

import torch
from einops import rearrange
from torch import nn

from ...nn.context import BuildContext
from ...nn.layers import AttentionCoreBase, ProjectedAttention
from ...ops.attention import sdpa
from ...ops.dropout import Dropout, dropout
from . import spec as family_spec
from .ops import contextual_bias, contextual_values, product_buckets

__all__ = ["IRPEAttention", "IRPECore"]


class IRPECore(AttentionCoreBase):
    """softmax(q k^T * scale + bias) v (+ the values' encodings). The bias of keys (Eq. 15) and queries is the
    float attn_mask of F.scaled_dot_product_attention; with encodings on values (Eq. 16) the map is needed
    after the softmax, so it is materialised. Tables: `table_q`, `table_k` (1 or H, head_dim, buckets),
    `table_v` (1 or H, buckets, head_dim), zero at init (released); `buckets` (N, N) from the layout."""

    def __init__(self, spec: family_spec.IRPEAttention, ctx: BuildContext):
        super().__init__()
        tokens, head_dim = ctx.tokens, spec.inner_dim(ctx.dim) // spec.heads
        self.drop, self.scale = spec.attn_drop, spec.scale or head_dim**-0.5
        n, heads = spec.buckets(tokens), 1 if spec.shared_head else spec.heads
        shapes = {"q": (heads, head_dim, n), "k": (heads, head_dim, n), "v": (heads, n, head_dim)}
        for place in "qkv":
            table = nn.Parameter(torch.zeros(shapes[place])) if place in spec.on else None
            self.register_parameter(f"table_{place}", table)
        buckets = product_buckets(tokens.grid, tokens.prefix, tokens.joined, spec.alpha, spec.beta, spec.gamma)
        self.register_buffer("buckets", buckets, persistent=False)

    def bias(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
        """(B, H, N, N): the keys' term (q_i * scale) . r^K_{bucket(i, j)} plus the queries' term
        (k_j * scale) . r^Q_{bucket(j, i)}; None with neither."""
        bias = None
        if self.table_k is not None:
            bias = contextual_bias(q * self.scale, self.table_k, self.buckets)
        if self.table_q is not None:
            term = contextual_bias(k * self.scale, self.table_q, self.buckets).transpose(-2, -1)
            bias = term if bias is None else bias + term
        return bias

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of q, k, v (B, H, N, d) with the encodings' bias (and values); (B, H, N, d)."""
        drop = self.drop if self.training else 0.0
        bias = self.bias(q, k)
        if self.table_v is None:
            return sdpa(q, k, v, attn_mask=bias, dropout_p=drop, scale=self.scale)
        logits = (q * self.scale) @ k.transpose(-2, -1)
        attn = (logits if bias is None else logits + bias).softmax(dim=-1)
        attn = dropout(attn, drop) if drop else attn
        return attn @ v + contextual_values(attn, self.table_v, self.buckets)

    def attention_map(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None,
                      causal: bool = False) -> torch.Tensor:
        """softmax(q k^T * scale + bias) in float64, the map forward applies to v."""
        q, k = q.double(), k.double()
        logits = (q * self.scale) @ k.transpose(-2, -1)
        tables = {p: getattr(self, f"table_{p}") for p in "qk"}
        if tables["k"] is not None:
            logits = logits + contextual_bias(q * self.scale, tables["k"].double(), self.buckets)
        if tables["q"] is not None:
            logits = logits + contextual_bias(k * self.scale, tables["q"].double(), self.buckets).transpose(-2, -1)
        return logits.softmax(-1)


class IRPEAttention(ProjectedAttention):
    """MHSA with iRPE's encodings: q, k, v from the fused `qkv` (or `projections`), the core above, `proj`."""

    def __init__(self, spec: family_spec.IRPEAttention, ctx: BuildContext):
        super().__init__()
        self.heads = spec.heads
        self.init_projections(spec, ctx.dim, spec.inner_dim(ctx.dim))
        self.core = IRPECore(spec, ctx)
        self.proj_drop = Dropout(spec.proj_drop) if spec.proj_drop else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens (B, N, dim) -> (B, N, dim)."""
        q, k, v = (rearrange(y, "b n (h d) -> b h n d", h=self.heads) for y in self.project(x))
        x = rearrange(self.core(q, k, v), "b h n d -> b n (h d)")
        return self.proj_drop(self.output(x))
