"""Small layers shared by the component modules, and the one norm factory."""

import torch
from torch import nn

from .._moved import moved as _moved
from ..ops import fast, grouped_linear, linear, structured
from ..ops.attention import sdpa
from ..spec import Norm, Projections
from ..spec.vit import role_widths

__all__ = [
    "AttentionCore", "AttentionCoreBase", "BatchNormTokens", "Component", "DropPath", "LayerNorm2d", "LayerScale",
    "Linear", "ProjectedAttention", "RoleMatrix", "RoleProjections", "make_norm", "masked_mean", "maybe", "residual",
    "sdpa_masks",
]


class Component(nn.Module):
    """What a component module may declare: `no_weight_decay_names`, its parameters that weight decay must
    skip (timm's `no_weight_decay`)."""

    no_weight_decay_names: tuple[str, ...] = ()


class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) with an optional activation, computed by
    `vspec.ops.linear`: bias and activation fused into the matmul on the CPU."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, act: str | None = None):
        super().__init__(in_features, out_features, bias=bias)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """act(x W^T + b), through `vspec.ops.linear`."""
        return linear(x, self.weight, self.bias, self.act)

    def extra_repr(self) -> str:
        """nn.Linear's, and the fused activation."""
        return super().extra_repr() + (f", act={self.act}" if self.act else "")


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of a (B, C, H, W) map, at every position."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """LayerNorm over the channels of a map (B, C, H, W)."""
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class BatchNormTokens(nn.Module):
    """BatchNorm over the last (channel) axis of a (..., C) tensor: statistics over every other axis
    (the batch and all tokens). It wraps a BatchNorm1d on (M, C) rows, so that SyncBatchNorm can
    replace it under DDP."""

    def __init__(self, channels: int, eps: float):
        super().__init__()
        self.bn = nn.BatchNorm1d(channels, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """BatchNorm over the channels of tokens (..., C)."""
        return self.bn(x.reshape(-1, x.shape[-1])).view(x.shape)


def make_norm(spec: Norm | None, channels: int, layout: str = "tokens") -> nn.Module:
    """The module of a Norm spec (None: no norm) over `channels`, for tensors laid out as `tokens`
    (..., C) or as a `map` (B, C, H, W).

    Args:
        spec: the Norm spec (None: no norm).
        channels: the channels normalised.
        layout: "tokens" (..., C) or "map" (B, C, H, W).
    """
    if spec is None or spec.kind == "none":
        return nn.Identity()
    if spec.kind == "layernorm":
        return nn.LayerNorm(channels, eps=spec.eps) if layout == "tokens" else LayerNorm2d(channels, eps=spec.eps)
    return BatchNormTokens(channels, eps=spec.eps) if layout == "tokens" else nn.BatchNorm2d(channels, eps=spec.eps)


class AttentionCoreBase(nn.Module):
    """Where an attention's token mixing sits (its maps, or the fused kernel that hides them): the
    profiler tells the attention's MACs (the papers' conventions count or drop them) by this location,
    whatever ops compute them.

    What `vspec analyze` reads of a core: `attention_map(q, k, mask, causal)`, the map it applies to v, from the inputs
    of its forward (a core that hides its map does not have one); or, with `returns_maps`, the maps its forward
    returns second (forward -> (A v, maps): the maps are materialised anyway)."""

    returns_maps: bool = False

    def attention_map(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None,
                      causal: bool = False) -> torch.Tensor:
        """The attention probabilities (B, heads, N, M); NotImplementedError where the core gives none."""
        raise NotImplementedError(f"{type(self).__name__} gives no attention map")


class AttentionCore(AttentionCoreBase):
    """softmax(q k^T * scale + mask) v through F.scaled_dot_product_attention, with dropout on the
    attention in training."""

    def __init__(self, drop: float = 0.0, scale: float | None = None):
        super().__init__()
        self.drop, self.scale = drop, scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """softmax(q k^T x scale) v through SDPA, with the mask, causal masking and attention dropout."""
        drop = self.drop if self.training else 0.0
        return sdpa(q, k, v, attn_mask=mask, dropout_p=drop, is_causal=causal, scale=self.scale)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The similarity of each query to each key, before the scale: q k^T."""
        return q @ k.transpose(-2, -1)

    def attention_map(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None,
                      causal: bool = False) -> torch.Tensor:
        """softmax(scores * scale + mask) in float64 (scale None: head_dim ** -0.5; a boolean mask: False is
        -inf; causal: the lower triangle), the map forward applies to v."""
        q, k = q.double(), k.double()
        logits = self.scores(q, k) * (self.scale if self.scale is not None else q.shape[-1] ** -0.5)
        if causal:
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else logits + mask.double()
        return logits.softmax(-1)


def sdpa_masks(padding: torch.Tensor | None, causal: bool, n: int) -> tuple[torch.Tensor | None, bool]:
    """A block's masks as SDPA takes them: the key-padding mask (B, N), True at real tokens, becomes a boolean
    attn_mask (B, 1, 1, N) (True: may attend), and-ed with the lower triangle when causal; causal alone stays
    SDPA's `is_causal`. Causal and padded, each token may also attend to itself: a real token already does, and a
    padding token before the first real one (left padding) would otherwise have no key at all, whose NaN would
    reach the real tokens as a key of theirs in the next block.

    Args:
        padding: (B, N), True at real tokens; None for none.
        causal: token i attends to tokens <= i only.
        n: N, the sequence's length.
    """
    if padding is None:
        return None, causal
    keep = padding.bool()[:, None, None, :]
    if causal:
        lower = torch.ones(n, n, dtype=torch.bool, device=padding.device).tril()
        keep = (keep & lower) | torch.eye(n, dtype=torch.bool, device=padding.device)
    return keep, False


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The mean over the tokens of x (B, N, C) that `mask` (B, N) keeps (all of them without a mask; 0 where it
    keeps none).

    Args:
        x: the tokens (B, N, C).
        mask: (B, N), True at the tokens kept; None keeps all.
    """
    if mask is None:
        return x.mean(dim=1)
    keep = mask.to(x.dtype)[..., None]
    return (x * keep).sum(1) / keep.sum(1).clamp(min=1)


class LayerScale(nn.Module):
    """Per-channel learnable scale (CaiT), initialised to `init`."""

    def __init__(self, dim: int, init: float):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x times the per-channel scale."""
        return x * self.gamma


class DropPath(nn.Module):
    """Stochastic depth: zero a sample's residual branch with probability p in training, scaling the
    kept ones by 1 / (1 - p). `residual` adds a branch through it in one pass."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """In training, each sample zeroed with probability p and the others scaled by 1 / (1 - p); else x."""
        if not self.training or self.p == 0.0:
            return x
        return x * self.factor(x)  # scale the per-sample mask, not the whole tensor

    def factor(self, x: torch.Tensor) -> torch.Tensor:
        """Each sample's factor, 0 (probability p) or 1 / (1 - p), shaped (batch, 1, ...) in x's dtype.

        Args:
            x: the branch the factor multiplies (batch first).
        """
        return x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1 - self.p).div_(1 - self.p)

    def extra_repr(self) -> str:
        """The drop probability."""
        return f"p={self.p}"


def residual(x: torch.Tensor, branch: torch.Tensor, drop_path: nn.Module) -> torch.Tensor:
    """x + drop_path(branch). Where drop_path is a DropPath in training and the fast paths run (`fast.enabled`), one
    pass (addcmul with the per-sample factor, the same random draw) instead of a product and a sum over the stream.

    Args:
        x: the residual stream.
        branch: the block's branch output.
        drop_path: a DropPath, or an identity (no stochastic depth).
    """
    if isinstance(drop_path, DropPath) and drop_path.training and drop_path.p > 0 and fast.enabled(x):
        return torch.addcmul(x, branch, drop_path.factor(branch))
    return x + drop_path(branch)


def maybe(module_cls, enabled: bool, *args, **kwargs) -> nn.Module:
    """`module_cls(*args)` when enabled, else an identity (keeps forward code branch-free).

    Args:
        module_cls: the module's class.
        enabled: whether to make it.
        *args: its positional arguments.
        **kwargs: its keyword arguments.
    """
    return module_cls(*args, **kwargs) if enabled else nn.Identity()


class RoleMatrix(nn.Linear):
    """One projection matrix of `Projections`, grouped: weight (out, in / groups), no bias. An nn.Linear
    for its parameter, so that initialisation and the profiler's weight-matrix count see it as one;
    `forward` applies it as a grouped linear map (vspec.ops.grouped_linear)."""

    def __init__(self, in_features: int, out_features: int, groups: int = 1, grouping: str = "interleaved"):
        super().__init__(in_features // groups, out_features, bias=False)
        self.groups, self.grouping = groups, grouping

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x through the role's grouped weight (`grouped_linear`)."""
        return grouped_linear(x, self.weight, self.groups, self.grouping)

    def dense(self) -> torch.Tensor:
        """The (out, in) matrix, zeros where an output does not read a group."""
        return structured(self.weight, self.groups, self.grouping)

    def extra_repr(self) -> str:
        """nn.Linear's, and the grouping."""
        return super().extra_repr() + (f", groups={self.groups}, grouping={self.grouping}" if self.groups > 1 else "")


class RoleProjections(nn.Module):
    """An attention's projections (spec: `Projections`): `roles` names its roles in order (QKVW or
    QKVPW), the last one WEIGHT. One RoleMatrix per distinct matrix (`matrices`, keyed by letter);
    `forward(x)` returns the input roles' projections (a shared matrix is applied once), `output(z)`
    applies WEIGHT (a tied WEIGHT: the transpose of its matrix, densified when grouped). Biases, per
    role and never shared: one vector over the input roles (`in_bias`), one for WEIGHT (`out_bias`)."""

    def __init__(self, spec: Projections | None, roles: str, dim: int, inner: int, in_bias: bool, out_bias: bool,
                 probe: int | None = None):
        super().__init__()
        spec = spec or Projections()
        self.roles, self.letters = roles, spec.letters(roles)
        self.matrices = nn.ModuleDict({
            letter: RoleMatrix(i * (1 if letter == "W" else spec.groups), o, 1 if letter == "W" else spec.groups,
                               spec.grouping)
            for letter, (o, i) in spec.matrices(roles, dim, inner, probe).items()})
        self.widths = list(role_widths(roles, inner, probe).values())
        self.in_bias = nn.Parameter(torch.zeros(sum(self.widths))) if in_bias else None
        self.out_bias = nn.Parameter(torch.zeros(dim)) if out_bias else None

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each input role's projection of x (WEIGHT's aside), in the order of the roles."""
        done: dict[str, torch.Tensor] = {}
        for letter in self.letters[:-1]:
            if letter not in done:
                done[letter] = self.matrices[letter](x)
        outs = [done[letter] for letter in self.letters[:-1]]
        if self.in_bias is not None:
            outs = [y + b for y, b in zip(outs, self.in_bias.split(self.widths))]
        return outs

    def output(self, z: torch.Tensor) -> torch.Tensor:
        """The heads' output z mapped back to the token width by the WEIGHT role."""
        letter = self.letters[-1]
        if letter == "W":  # through the module, so that the profiler finds its MACs in a linear layer
            y = self.matrices["W"](z)
            return y if self.out_bias is None else y + self.out_bias
        return linear(z, self.matrices[letter].dense().t().contiguous(), self.out_bias)


class ProjectedAttention(Component):
    """What the attention modules share: their projections. Without `projections` in the spec, the
    fused `qkv` Linear and the output `proj` (timm's names and layout); with it, RoleProjections."""

    def init_projections(self, spec, dim: int, inner: int) -> None:
        """The projections of `spec`: the fused `qkv` and `proj` (timm's), or its `projections`."""
        self.projections = None
        if spec.projections is None:
            self.qkv = Linear(dim, 3 * inner, bias=spec.qkv_bias)
            self.proj = Linear(inner, dim, bias=spec.proj_bias)
        else:
            self.projections = RoleProjections(spec.projections, spec.roles, dim, inner, spec.qkv_bias,
                                               spec.proj_bias, spec.probe_width(dim))

    @property
    def projection_roles(self) -> str:
        """Its roles by letter, WEIGHT last: QKVW for the fused layout, else its RoleProjections'."""
        return "QKVW" if self.projections is None else self.projections.roles

    def role_matrix(self, role: str) -> torch.Tensor:
        """The dense (out, in) matrix of a role (a letter of `projection_roles`): an input role's rows (grouped:
        zeros where an output reads no group), WEIGHT's (dim, inner), a tied WEIGHT the transpose of its matrix."""
        if self.projections is None:
            return self.proj.weight if role == "W" else self.qkv.weight.chunk(3)["QKV".index(role)]
        letter = self.projections.letters[self.projections.roles.index(role)]
        matrix = self.projections.matrices[letter]
        if role != "W":
            return matrix.dense()
        return matrix.weight if letter == "W" else matrix.dense().T

    def project(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The input roles' projections of x, (B, N, inner) each: q, k, v, then any further input role."""
        return list(self.qkv(x).chunk(3, dim=-1)) if self.projections is None else self.projections(x)

    def output(self, z: torch.Tensor) -> torch.Tensor:
        """The heads' output z mapped back to the token width (`proj`, or the projections')."""
        return self.proj(z) if self.projections is None else self.projections.output(z)

    def finish(self, z: torch.Tensor, extra: list[torch.Tensor]) -> torch.Tensor:
        """The heads' merged output z (B, N, inner) -> the attention's output (B, N, dim): WEIGHT. `extra`: the
        projections of the input roles after q, k, v (`project`; a probe, `vspec.spec.vit.PROJECTION_ROLES`), which
        a kind that has such roles reads by overriding this hook; ignored by default."""
        return self.output(z)


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
