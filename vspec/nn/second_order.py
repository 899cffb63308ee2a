"""SoT's second-order head: pool (GAP | GCP | MGCrP) -> normalisation -> fusion with the class token."""

import math

import torch
from einops import rearrange
from torch import nn

from .. import spec as S
from ..ops import cross_covariance, epn, isqrt_cov, svpn_approx, svpn_exact
from .context import BuildContext
from .layers import Linear


# ---------------------------------------------------------------- pools: (B, N, dim) -> representation
class GAPPool(nn.Module):
    def __init__(self, spec: S.GAPPool, ctx: BuildContext):
        super().__init__()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z.mean(dim=1)


class GCP(nn.Module):
    """Covariance of the reduced tokens, square-rooted by iSQRT, upper triangle (row-major)."""

    def __init__(self, spec: S.GCP, ctx: BuildContext):
        super().__init__()
        self.reduce = Linear(ctx.dim, spec.dim, bias=False)
        self.iters = spec.iters
        self.register_buffer("triu", torch.triu_indices(spec.dim, spec.dim), persistent=False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.reduce(z)
        root = isqrt_cov(cross_covariance(x, x, centering="channel"), iters=self.iters)
        return root[:, self.triu[0], self.triu[1]]


class MGCrP(nn.Module):
    """Eq. 2-3: per head, Q_i = (1/N) (W_i Z)(R_i Z)^T; `wr` stacks every W_i, then every R_i."""

    def __init__(self, spec: S.MGCrP, ctx: BuildContext):
        super().__init__()
        self.heads, self.m, self.n, self.centering = spec.heads, spec.m, spec.n, spec.centering
        self.wr = Linear(ctx.dim, spec.heads * (spec.m + spec.n), bias=False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x, y = self.wr(z).split((self.heads * self.m, self.heads * self.n), dim=-1)
        x = rearrange(x, "b t (h m) -> b h t m", h=self.heads)
        y = rearrange(y, "b t (h n) -> b h t n", h=self.heads)
        return cross_covariance(x, y, centering=self.centering)  # (B, heads, m, n)


# ---------------------------------------------------------------- normalisations of the representation
class SvPN(nn.Module):
    """Eq. 5 (exact) or Eq. 6-8 (approximate) per head; `v0` is the power iteration's start vector."""

    def __init__(self, spec: S.SvPN, ctx: BuildContext):
        super().__init__()
        self.spec = spec
        n = ctx.in_shape[-1]
        if spec.method == "approx" and spec.start == "learnable":
            self.v0 = nn.Parameter(torch.ones(n))
        else:
            self.register_buffer("v0", torch.ones(n), persistent=False)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        s = self.spec
        if s.method == "exact":
            return svpn_exact(q, alpha=s.alpha)
        # the released form: the top directions keep s^alpha exactly, eps damps only the residual
        # (Eq. 8 itself when eps = 0)
        return svpn_approx(q, alpha=s.alpha, num_sv=s.num_sv, iters=s.iters, v0=self.v0, eps=s.eps,
                           released_form=True)


class EPN(nn.Module):
    def __init__(self, spec: S.EPN, ctx: BuildContext):
        super().__init__()

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return epn(r.flatten(1))


class LearnableScale(nn.Module):
    def __init__(self, spec: S.LearnableScale, ctx: BuildContext):
        super().__init__()
        self.inv_tau = nn.Parameter(torch.tensor(float(spec.init)))

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return r * self.inv_tau


class ReprLayerNorm(nn.LayerNorm):
    def __init__(self, spec: S.ReprLayerNorm, ctx: BuildContext):
        super().__init__(math.prod(ctx.in_shape), eps=spec.eps)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return super().forward(r.flatten(1))


class NoNorm(nn.Identity):
    def __init__(self, spec: S.NoNorm, ctx: BuildContext):
        super().__init__()


# ---------------------------------------------------------------- the head
class SecondOrderHead(nn.Module):
    """Eq. 1. Classifiers: `cls_fc` (class token) and `word_fc` (representation) for sum and late
    fusion; `fc` for concat ([z0, r]) and aggr_all. Late fusion returns (cls, word) logits in
    training and their sum in eval; `branches(x)` gives the pair in either mode."""

    def __init__(self, spec: S.SecondOrderHead, ctx: BuildContext):
        super().__init__()
        self.fusion = spec.fusion
        self.num_prefix_tokens = ctx.num_prefix_tokens
        self.pool = ctx.child(spec.pool)
        self.repr_dim = spec.repr_dim(ctx.dim)
        self.norm = ctx.child(spec.norm, in_shape=spec.repr_shape(ctx.dim))
        self.drop = nn.Dropout(spec.drop) if spec.drop else nn.Identity()
        self.dim = ctx.dim
        self.num_features = self.repr_dim + (ctx.dim if spec.fusion == "concat" else 0)
        self.reset(ctx.num_classes)

    def reset(self, num_classes: int) -> list[nn.Module]:
        """New classifiers for `num_classes` (identities for 0); returns them."""
        def fc(width):
            return Linear(width, num_classes) if num_classes > 0 else nn.Identity()

        if self.fusion in ("sum", "late"):
            self.cls_fc, self.word_fc = fc(self.dim), fc(self.repr_dim)
            return [self.cls_fc, self.word_fc]
        self.fc = fc(self.num_features)
        return [self.fc]

    def representation(self, x: torch.Tensor) -> torch.Tensor:
        """norm(pool(tokens)) flattened; aggr_all pools every token, the others the word tokens."""
        tokens = x if self.fusion == "aggr_all" else x[:, self.num_prefix_tokens:]
        return self.drop(self.norm(self.pool(tokens)).flatten(1))

    def branches(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(class-token logits, word-token logits) for sum and late fusion."""
        return self.cls_fc(x[:, 0]), self.word_fc(self.representation(x))

    def forward(self, x: torch.Tensor, pre_logits: bool = False):
        if self.fusion in ("sum", "late"):
            if pre_logits:
                return torch.cat((x[:, 0], self.representation(x)), dim=1)
            cls, word = self.branches(x)
            return (cls, word) if self.fusion == "late" and self.training else cls + word
        r = self.representation(x)
        features = torch.cat((x[:, 0], r), dim=1) if self.fusion == "concat" else r
        return features if pre_logits else self.fc(features)
