"""The generic modules (ViT, DeiT, SimpleViT): patch embeddings, multi-head self-attention, MLP,
class-token (with the dense auxiliary head) and average-pooling heads, and the head a pruned model keeps.
Embedders map (B, C, H, W) -> tokens (B, N, dim); token mixers and heads take tokens."""

from abc import abstractmethod

import torch
from einops import rearrange
from torch import nn

from .. import spec as specs
from ..ops.dropout import Dropout
from .context import BuildContext
from .head_outputs import HeadOutput
from .layers import AttentionCore, LayerScale, Linear, ProjectedAttention, make_norm, masked_mean, maybe, sdpa_masks
from .mix_token import TokenBox, swap_box

__all__ = ["ClassTokenHead", "GAPHead", "MHSA", "MLP", "PatchEmbed", "PoolHead", "PrunedHead", "SimplePatchEmbed"]


class PatchEmbed(nn.Module):
    """ViT's patch embedding: a conv of kernel and stride `patch_size` (one linear map per patch), the patches in
    raster order as tokens, then the optional norm: (B, C, H, W) -> (B, N, dim)."""

    def __init__(self, spec: specs.PatchEmbed, ctx: BuildContext):
        super().__init__()
        p = spec.patch_size
        self.proj = nn.Conv2d(ctx.in_chans, ctx.dim, kernel_size=p, stride=p, bias=spec.bias)
        self.norm = make_norm(spec.norm, ctx.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, N, dim)."""
        return self.norm(rearrange(self.proj(x), "b d h w -> b (h w) d"))


class SimplePatchEmbed(nn.Module):
    """The simple ViT's patch embedding: each patch flattened (p1 p2 c), norm, linear, norm: (B, C, H, W) ->
    (B, N, dim)."""

    def __init__(self, spec: specs.SimplePatchEmbed, ctx: BuildContext):
        super().__init__()
        self.p = spec.patch_size
        patch_dim = ctx.in_chans * self.p * self.p
        self.norm_in = make_norm(spec.norm, patch_dim)
        self.proj = Linear(patch_dim, ctx.dim)
        self.norm_out = make_norm(spec.norm, ctx.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, N, dim)."""
        x = rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=self.p, p2=self.p)
        return self.norm_out(self.proj(self.norm_in(x)))


class MHSA(ProjectedAttention):
    """softmax(q k^T * scale) v per head over all tokens; q, k, v from the fused `qkv` (timm) or from
    tied / grouped `projections` (ProjectedAttention)."""

    def __init__(self, spec: specs.MHSA, ctx: BuildContext):
        super().__init__()
        self.heads = spec.heads
        self.init_projections(spec, ctx.dim, spec.inner_dim(ctx.dim))
        self.core = AttentionCore(spec.attn_drop, spec.scale)  # scale None: head_dim ** -0.5
        self.proj_drop = Dropout(spec.proj_drop) if spec.proj_drop else nn.Identity()

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """`mask` (B, N): True at real tokens; `causal`: token i attends to tokens <= i (Block's contract)."""
        q, k, v = (rearrange(y, "b n (h d) -> b h n d", h=self.heads) for y in self.project(x))
        x = rearrange(self.core(q, k, v, *sdpa_masks(mask, causal, x.shape[1])), "b h n d -> b n (h d)")
        return self.proj_drop(self.output(x))


class MLP(nn.Module):
    """The feed-forward branch: fc1 -> act -> dropout (`hidden_drop`) -> fc2 -> the optional layer scale -> dropout."""

    def __init__(self, spec: specs.MLP, ctx: BuildContext):
        super().__init__()
        hidden = spec.hidden_dim(ctx.dim)
        self.fc1 = Linear(ctx.dim, hidden, bias=spec.bias, act=spec.act)  # act(fc1(x)), fused
        self.fc2 = Linear(hidden, ctx.dim, bias=spec.bias)
        self.ls = maybe(LayerScale, spec.layer_scale is not None, ctx.dim, spec.layer_scale)
        self.drop = Dropout(spec.drop) if spec.drop else nn.Identity()
        hidden_drop = spec.drop if spec.hidden_drop is None else spec.hidden_drop
        self.hidden_drop = Dropout(hidden_drop) if hidden_drop else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, dim) -> (B, N, dim)."""
        return self.drop(self.ls(self.fc2(self.hidden_drop(self.fc1(x)))))


# ---------------------------------------------------------------- heads: tokens -> logits
class PoolHead(nn.Module):
    """pool -> dropout -> fc; `num_classes = 0` leaves the fc out (features only, as in timm). `mask` (B, N):
    True at real tokens (a padded text batch), None for none."""

    def __init__(self, ctx: BuildContext, drop: float):
        super().__init__()
        self.dim = ctx.dim
        self.drop = Dropout(drop) if drop else nn.Identity()
        self.reset(ctx.num_classes)

    def reset(self, num_classes: int) -> list[nn.Module]:
        """A new classifier for `num_classes` (an identity for 0); returns it."""
        self.fc = Linear(self.dim, num_classes) if num_classes > 0 else nn.Identity()
        return [self.fc]

    def classifier(self) -> nn.Module:
        """The module that maps `forward(x, pre_logits=True)` to the logits."""
        return self.fc

    @abstractmethod
    def pool(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, N, dim) -> (B, dim)."""

    def forward(self, x: torch.Tensor, pre_logits: bool = False, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The logits of the pooled tokens; with `pre_logits` the pooled features."""
        x = self.drop(self.pool(x) if mask is None else self.pool(x, mask))
        return x if pre_logits else self.fc(x)


class ClassTokenHead(PoolHead):
    """Class token -> dropout -> fc. With `dense` (Refined-ViT's auxiliary head), `aux` classifies every
    patch token (after the same dropout): asked for its `outputs` (the training loop's request,
    vspec/nn/head_outputs.py) it returns HeadOutputs cls (B, C) and aux (B, N, C) (with MixToken, cls carries the box);
    otherwise, in training as in eval, fc(class token) + eval_weight x the max over tokens of aux (timm's VOLO).
    As in timm's VOLO, `pre_logits` is the class token and `classifier()` is fc: the aux term reads the patch tokens.
    With num_classes 0 both classifiers are identities and the head returns the class token."""

    def __init__(self, spec: specs.ClassTokenHead, ctx: BuildContext):
        self.dense, self.outputs = spec.dense, spec.outputs()  # read by reset, which PoolHead calls
        super().__init__(ctx, spec.drop)
        self.num_prefix_tokens = ctx.num_prefix_tokens

    def reset(self, num_classes: int) -> list[nn.Module]:
        """New classifiers for `num_classes` (the dense head's too); returns them."""
        new = super().reset(num_classes)
        if self.dense is None:
            return new
        self.aux = Linear(self.dim, num_classes) if num_classes > 0 else nn.Identity()
        return new + [self.aux]

    def pool(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The class token."""
        return x[:, 0]

    def forward(self, x: torch.Tensor, pre_logits: bool = False, mask: torch.Tensor | None = None,
                box: TokenBox | None = None, outputs: bool = False):
        """`outputs`: return the declared HeadOutputs; `box`: the MixToken box the training forward mixed
        (`DenseAux.mix_token`): the aux logits in it are swapped back with the batch-flipped sample's, so that each
        token's logits are its own image's, and the cls output carries the box (its target is mixed:
        vspec/nn/head_outputs.py)."""
        features_only = pre_logits or isinstance(self.fc, nn.Identity)  # num_classes 0: the class token
        if self.dense is None or features_only:
            return super().forward(x, pre_logits=features_only)
        cls = self.fc(self.drop(self.pool(x)))
        aux = self.aux(self.drop(x[:, self.num_prefix_tokens:]))  # (B, N, C)
        if box is not None:
            aux = swap_box(aux, box)
        if outputs:
            d_cls, d_aux = self.outputs
            return HeadOutput.of(cls, d_cls)._replace(box=box), HeadOutput.of(aux, d_aux)
        return cls + self.dense.eval_weight * aux.amax(dim=1)


class GAPHead(PoolHead):
    """The mean of the tokens after the prefix tokens (the real ones under a padding mask), norm, dropout, fc."""

    def __init__(self, spec: specs.GAPHead, ctx: BuildContext):
        super().__init__(ctx, spec.drop)
        self.num_prefix_tokens = ctx.num_prefix_tokens
        self.norm = make_norm(spec.norm, ctx.dim)

    def pool(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The mean of the grid's tokens (the real ones under `mask`), normed."""
        p = self.num_prefix_tokens
        return self.norm(masked_mean(x[:, p:], None if mask is None else mask[:, p:]))


class PrunedHead(nn.Module):
    """What `prune_intermediate_layers(prune_head=True)` leaves of the head: the tokens, unchanged."""

    def forward(self, x: torch.Tensor, pre_logits: bool = False, mask=None, state=None) -> torch.Tensor:
        """`x`, unchanged (the other arguments are those of a head, ignored)."""
        return x

    def classifier(self) -> nn.Module:
        """No classifier: an identity."""
        return nn.Identity()

    def reset(self, num_classes: int) -> list[nn.Module]:
        """Refused: a pruned head has no classifier to replace."""
        raise ValueError("reset_classifier: the head was pruned (prune_intermediate_layers); build the model again")
