"""The compiler: spec -> torch module, through one visible table (the generic kinds' here, each family's in its
`family.py`)."""

from contextlib import contextmanager, nullcontext

import torch
from torch import nn

from . import nn as vspec_nn
from . import spec as specs
from .spec.budget import nbytes
from .spec.errors import one_line

__all__ = ["MODULES", "build", "build_component", "check_fit", "context", "modules", "weights"]
# spec class -> module class, the generic kinds'; every module takes (spec, ctx). The families' entries (their
# `family.MODULES`, merged by vspec/spec/families.py, which reads them again when the families change) join them in
# `modules()`; a kind defined by a user's code joins with one line, `MODULES[Kind] = Module`, which also replaces a
# family's module for that kind.
MODULES: dict[type, type[nn.Module]] = {
    specs.PatchEmbed: vspec_nn.PatchEmbed,
    specs.SimplePatchEmbed: vspec_nn.SimplePatchEmbed,
    specs.ConvStem: vspec_nn.ConvStem,
    specs.MHSA: vspec_nn.MHSA,
    specs.MLP: vspec_nn.MLP,
    specs.ClassTokenHead: vspec_nn.ClassTokenHead,
    specs.GAPHead: vspec_nn.GAPHead,
    specs.WindowMHSA: vspec_nn.WindowMHSA,
    specs.PatchMerging: vspec_nn.PatchMerging,
    specs.TokenEmbed: vspec_nn.TokenEmbed,
    specs.FirstTokenHead: vspec_nn.FirstTokenHead,
    specs.LastTokenHead: vspec_nn.LastTokenHead,
    specs.Block: vspec_nn.Block,
    specs.PostNormBlock: vspec_nn.PostNormBlock,
    specs.Model: vspec_nn.Transformer,
}


def modules() -> dict[type, type[nn.Module]]:
    """The whole table, the one merge: MODULES (as it is now), then every family's entries for the kinds it does not
    hold (a user's entry replaces a family's)."""
    families = specs.families.tables("MODULES")
    return {**MODULES, **{kind: module for kind, module in families.items() if kind not in MODULES}}


def build_component(spec: object, ctx: vspec_nn.BuildContext) -> nn.Module:
    """The module of `spec` (its class's entry in `modules()`), built in `ctx`.

    Args:
        spec: a component's spec.
        ctx: the context it is built in (its input tokens, ...).
    """
    table = modules()
    module_cls = table.get(type(spec))
    if module_cls is None:
        raise TypeError(f"no module for spec {type(spec).__name__}; known: {', '.join(c.__name__ for c in table)}")
    return module_cls(spec, ctx)


def context(spec: specs.Model) -> vspec_nn.BuildContext:
    """The root context: the tokens the embedder produces (the layout's first stage input).

    Args:
        spec: the model spec.
    """
    return vspec_nn.BuildContext(tokens=specs.embedded(spec), in_chans=spec.in_chans, num_classes=spec.num_classes,
                                 build=build_component)


def build(spec: specs.Model, device: torch.device | str | None = None, *, tie_repeats: bool = False,
          check_memory: bool = True) -> vspec_nn.Transformer:
    """Compile a Model spec into a module, a `vspec.nn.model.Transformer`.

    `tie_repeats` builds one module per distinct block (one spec on one token shape, one variant) and repeats it
    wherever it recurs, in its stage or another, weights tied: the profiler's model, not one to train.
    `check_memory` compares the weights' size (`weights`: counted on the meta device) and the blocks' host memory
    (`vspec.spec.budget`) with the memory free (CPU and meta: `budget.available()`, the smallest of MemAvailable,
    ulimits and cgroup limits; CUDA: the device's) and raises `MemoryBudgetError` (a SpecError and a MemoryError)
    instead of allocating what does not fit. A model with a tensor beyond torch's size limit is refused on any
    device.

    Args:
        spec: the Model spec to build.
        device: where the weights go (default: torch's default device); `"meta"` allocates none.
        tie_repeats: one module per distinct block, repeated with its weights tied (the profiler's model).
        check_memory: refuse, before allocating, what does not fit in the memory free (`MemoryBudgetError`).
    """
    if not isinstance(spec, specs.Model):
        raise TypeError(f"build() takes a vspec Model spec, got {type(spec).__name__}")
    target = torch.device(device) if device is not None else torch.get_default_device()
    free = None
    if check_memory:
        free = torch.cuda.mem_get_info(target)[0] if target.type == "cuda" else specs.budget.available()
    what = f"building it on {target.type}"
    specs.budget.check(spec, batch=0, tied=tie_repeats, free=free, what=what)  # before torch builds anything
    if check_memory and target.type != "meta":
        # a second build, on purpose: the weights are counted on the tied model built on the meta device (`weights`),
        # since a kind's module is the only statement of its weights (no per-kind formula, a user's kind included),
        # and the guard must refuse before the build below allocates them; each distinct part once, no memory, no init
        specs.budget.check(spec, batch=0, weights=weights(spec), tied=tie_repeats, free=free, what=what)
    with torch.device(device) if device is not None else nullcontext(), _torch_limit():
        return modules()[type(spec)](spec, context(spec), tie_repeats=tie_repeats)  # the model's module, Transformer


@contextmanager
def _torch_limit():
    """torch's refusal of a tensor beyond its size limit, as the size guard's one-line error."""
    try:
        yield
    except RuntimeError as e:
        if "overflow" not in str(e):
            raise
        raise specs.MemoryBudgetError("", f"too large for torch, even on the meta device: a tensor beyond its limit of "
                                      f"{specs.budget.size(specs.budget.TORCH_LIMIT)} ({one_line(e)})") from None


def check_fit(spec: specs.Model, batch: int, what: str) -> None:
    """The size guard before building and running `spec` on `batch` inputs (0: building only): the torch-free
    figures first (the blocks' objects, the forward pass), then with the weights counted on the meta device.

    Args:
        spec: the model spec.
        batch: the inputs of the forward pass counted (0: building only).
        what: what needs the memory, as the message says it ("building it").
    """
    specs.budget.check(spec, batch, what=what)
    specs.budget.check(spec, batch, weights=weights(spec), what=what)


def weights(spec: specs.Model) -> specs.budget.WeightBytes:
    """The bytes of the weights and buffers `build(spec)` allocates, counted on the model built on the meta device
    with repeated blocks tied (a repeat counted again for `params`, once for `distinct`), and the largest tensor.

    Args:
        spec: the model spec.
    """
    model = build(spec, "meta", tie_repeats=True, check_memory=False)
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}.values()
    own = nbytes((*model.parameters(recurse=False), *model.buffers(recurse=False)))
    every = own + sum(nbytes((*p.module.parameters(), *p.module.buffers())) for p in model.parts())
    return specs.budget.WeightBytes(every, nbytes(tensors), max((nbytes((t,)) for t in tensors), default=0))

