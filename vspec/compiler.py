"""The compiler: spec -> torch module, through one visible table."""

from contextlib import nullcontext

import torch
from torch import nn

from . import nn as N
from . import spec as S

# spec class -> module class. Every module takes (spec, ctx).
MODULES: dict[type, type[nn.Module]] = {
    # generic (vit)
    S.PatchEmbed: N.PatchEmbed,
    S.SimplePatchEmbed: N.SimplePatchEmbed,
    S.MHSA: N.MHSA,
    S.MLP: N.MLP,
    S.ClassTokenHead: N.ClassTokenHead,
    S.GAPHead: N.GAPHead,
    # SoT
    S.SoTEmbed: N.SoTEmbed,
    S.SecondOrderHead: N.SecondOrderHead,
    S.GAPPool: N.GAPPool,
    S.GCP: N.GCP,
    S.MGCrP: N.MGCrP,
    S.SvPN: N.SvPN,
    S.EPN: N.EPN,
    S.LearnableScale: N.LearnableScale,
    S.ReprLayerNorm: N.ReprLayerNorm,
    S.NoNorm: N.NoNorm,
    # DHVT
    S.SOPE: N.SOPE,
    S.DAFF: N.DAFF,
    S.HeadTokens: N.HeadTokens,
    # Swin
    S.WindowMHSA: N.WindowMHSA,
    S.PatchMerging: N.PatchMerging,
    # MSF
    S.MeanShiftAttention: N.MeanShiftAttention,
    S.WindowMeanShiftAttention: N.WindowMeanShiftAttention,
    # Refiner
    S.ConvStem: N.ConvStem,
    S.RefinerAttention: N.RefinerAttention,
    # assembly
    S.Block: N.Block,
    S.Model: N.VisionTransformer,
}


def build_component(spec: object, ctx: N.BuildContext) -> nn.Module:
    module_cls = MODULES.get(type(spec))
    if module_cls is None:
        raise TypeError(f"no module for spec {type(spec).__name__}; known: {', '.join(c.__name__ for c in MODULES)}")
    return module_cls(spec, ctx)


def context(spec: S.Model, tie_repeats: bool = False) -> N.BuildContext:
    """The root context: the tokens the embedder produces (the layout's first stage input)."""
    return N.BuildContext(tokens=S.embedded(spec), in_chans=spec.in_chans, num_classes=spec.num_classes,
                          build=build_component, tie_repeats=tie_repeats)


def build(spec: S.Model, device: torch.device | str | None = None, *, tie_repeats: bool = False,
          check_memory: bool = True) -> N.VisionTransformer:
    """Compile a Model spec into a module (on `device`; `"meta"` allocates no weights). `tie_repeats`
    builds one module per distinct block (one spec on one token shape, one variant) and repeats it
    wherever it recurs, in its stage or another, weights tied: the profiler's model, not one to train.

    `check_memory` compares the weights' size and the modules' host memory, estimated from the spec
    (`vspec.spec.budget`), with the memory free (CPU and meta: `budget.available()`, the smallest of
    MemAvailable, ulimits and cgroup limits; CUDA: the device's) and raises
    `MemoryBudgetError` (a SpecError and a MemoryError) instead of allocating what does not fit. A
    model with a tensor beyond torch's size limit is refused on any device."""
    if not isinstance(spec, S.Model):
        raise TypeError(f"build() takes a vspec Model spec, got {type(spec).__name__}")
    target = torch.device(device) if device is not None else torch.get_default_device()
    free = None
    if check_memory:
        free = torch.cuda.mem_get_info(target)[0] if target.type == "cuda" else S.budget.available()
    weights = None if target.type == "meta" else "distinct" if tie_repeats else "all"
    S.budget.check(spec, batch=0, weights=weights, free=free, what=f"building it on {target.type}")
    with torch.device(device) if device is not None else nullcontext():
        return build_component(spec, context(spec, tie_repeats))
