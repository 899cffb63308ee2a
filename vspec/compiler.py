"""The compiler: spec -> torch module, through one visible table."""

from contextlib import nullcontext

import torch
from torch import nn

from . import nn as N
from . import spec as S

# spec class -> module class. Every module takes (spec, ctx).
MODULES: dict[type, type[nn.Module]] = {
    S.PatchEmbed: N.PatchEmbed,
    S.SimplePatchEmbed: N.SimplePatchEmbed,
    S.SoTEmbed: N.SoTEmbed,
    S.SOPE: N.SOPE,
    S.MHSA: N.MHSA,
    S.MLP: N.MLP,
    S.DAFF: N.DAFF,
    S.ClassTokenHead: N.ClassTokenHead,
    S.GAPHead: N.GAPHead,
    S.SecondOrderHead: N.SecondOrderHead,
    S.GAPPool: N.GAPPool,
    S.GCP: N.GCP,
    S.MGCrP: N.MGCrP,
    S.SvPN: N.SvPN,
    S.EPN: N.EPN,
    S.LearnableScale: N.LearnableScale,
    S.ReprLayerNorm: N.ReprLayerNorm,
    S.NoNorm: N.NoNorm,
    S.Block: N.Block,
    S.Model: N.VisionTransformer,
}


def build_component(spec: object, ctx: N.BuildContext) -> nn.Module:
    module_cls = MODULES.get(type(spec))
    if module_cls is None:
        raise TypeError(f"no module for spec {type(spec).__name__}; known: {', '.join(c.__name__ for c in MODULES)}")
    return module_cls(spec, ctx)


def context(spec: S.Model) -> N.BuildContext:
    return N.BuildContext(dim=spec.dim, grid=spec.grid, num_prefix_tokens=spec.num_prefix_tokens,
                          depth=spec.depth, num_classes=spec.num_classes, in_chans=spec.in_chans,
                          build=build_component)


def build(spec: S.Model, device: torch.device | str | None = None) -> N.VisionTransformer:
    """Compile a Model spec into a module (on `device`; `"meta"` allocates no weights)."""
    if not isinstance(spec, S.Model):
        raise TypeError(f"build() takes a vspec Model spec, got {type(spec).__name__}")
    with torch.device(device) if device is not None else nullcontext():
        return build_component(spec, context(spec))
