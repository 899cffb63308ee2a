"""Small layers shared by the component modules."""

import torch
from torch import nn

from ..ops import linear
from ..spec import Norm



class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) with an optional activation, computed by
    `vspec.ops.linear`: bias and activation fused into the matmul on the CPU."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, act: str | None = None):
        super().__init__(in_features, out_features, bias=bias)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.act)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", act={self.act}" if self.act else "")


def make_norm(spec: Norm | None, dim: int) -> nn.Module:
    if spec is None or spec.kind == "none":
        return nn.Identity()
    return nn.LayerNorm(dim, eps=spec.eps)


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of a (B, C, H, W) map, at every position."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class LayerScale(nn.Module):
    """Per-channel learnable scale (CaiT), initialised to `init`."""

    def __init__(self, dim: int, init: float):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class DropPath(nn.Module):
    """Stochastic depth: zero a sample's residual branch with probability p in training, scaling the
    kept ones by 1 / (1 - p)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1 - self.p)
        return x * keep / (1 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def maybe(module_cls, enabled: bool, *args, **kwargs) -> nn.Module:
    """`module_cls(*args)` when enabled, else an identity (keeps forward code branch-free)."""
    return module_cls(*args, **kwargs) if enabled else nn.Identity()
