"""Parameters and MACs of a spec, per component and per op kind, before any training.

Convention: MACs, one multiply-add = 1 (fvcore's "flops" are MACs; FLOPs = 2 x MACs, which is what
torch's FlopCounterMode reports). Attention matmuls are counted (q k^T and attn v: B H N M (d + dv)),
LayerNorm / BatchNorm count 5 (4 without affine) per element as in fvcore; elementwise ops,
activations, softmax and reductions count 0.

The profiler reads the model's own layout: `Transformer.parts()` lists the steps of the forward
pass (embedder, each stage's entry and blocks, final norm, head) with the shape each receives. It
builds the model with repeated blocks tied, within a stage and across stages (`build(...,
tie_repeats=True)`: one module per spec, token shape and variant), counts each distinct part once on a
batch of one, and multiplies by its repeats, so its time grows with the distinct blocks, not with the
depth or the number of stages. The papers' conventions are read by where MACs sit: inside conv / linear layers (SoT),
inside an attention core (`AttentionCoreBase`: SDPA, or Refiner's materialised maps with their
refiner; DHVT leaves those out).

Two counters share the formulas (`sdpa_macs`, `norm_macs`):
- fvcore (default): traces each part on real tensors; handles are registered for every op vspec
  emits, so `unsupported_ops` lists anything new that slipped through.
- torch's FlopCounterMode on the meta device: for specs too large to instantiate; the weights are
  never allocated. It is also run beside fvcore as a cross-check.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from .compiler import build
from .nn.layers import AttentionCoreBase
from .ops.fast import fast_paths
from .spec import Model, SpecError, families

__all__ = [
    "CONVENTIONS", "ComponentProfile", "FVCORE_HANDLES", "Profile", "Shape", "StageProfile", "norm_macs", "part_params",
    "profile", "sdpa_macs",
]
with warnings.catch_warnings():  # fvcore imports torch.jit.script, which warns of its deprecation
    warnings.simplefilter("ignore", FutureWarning)
    from fvcore.nn import FlopCountAnalysis

Shape = Sequence[int]


def _prod(shape: Shape) -> int:
    return math.prod(int(s) for s in shape)


def sdpa_macs(q: Shape, k: Shape, v: Shape) -> int:
    """softmax(q k^T) v: q k^T is (..., N, d) x (..., d, M); attn v is (..., N, M) x (..., M, dv).

    Args:
        q: the queries' shape (..., N, d).
        k: the keys' (..., M, d).
        v: the values' (..., M, dv).
    """
    n_queries = _prod(q[:-1])
    return n_queries * int(k[-2]) * (int(q[-1]) + int(v[-1]))


def norm_macs(x: Shape, affine: bool, training: bool = True) -> int:
    """fvcore's norm convention: 5 per element (4 without affine) when statistics are computed; an
    eval-mode BatchNorm is a per-channel scale and shift, 2 per element (1 without affine).

    Args:
        x: the normalised tensor's shape.
        affine: the norm has a learnt scale and shift.
        training: the statistics are computed (False: an eval-mode BatchNorm).
    """
    if training:
        return _prod(x) * (5 if affine else 4)
    return _prod(x) * (2 if affine else 1)


# ---------------------------------------------------------------- fvcore (JIT trace) handles
def _jit_shape(value: Any) -> list[int] | None:
    """The sizes of a traced graph's tensor value, None where the trace does not know them all (a handle's input)."""
    return value.type().sizes() if value.isCompleteTensor() else None


def _fv_sdpa(inputs: list[Any], outputs: list[Any]) -> int:
    return sdpa_macs(_jit_shape(inputs[0]), _jit_shape(inputs[1]), _jit_shape(inputs[2]))


def _fv_zero(inputs: list[Any], outputs: list[Any]) -> int:
    return 0


# ops that cost 0 MACs by convention (elementwise, activations, softmax, reductions, data movement)
_ZERO_COST_OPS = (
    "aten::add", "aten::add_", "aten::sub", "aten::rsub", "aten::mul", "aten::mul_", "aten::div", "aten::div_",
    "aten::neg", "aten::pow", "aten::sqrt", "aten::rsqrt", "aten::exp", "aten::log", "aten::sin", "aten::cos",
    "aten::abs", "aten::sign", "aten::reciprocal", "aten::gelu", "aten::silu", "aten::relu", "aten::relu6",
    "aten::hardtanh", "aten::sigmoid", "aten::tanh", "aten::softmax", "aten::log_softmax", "aten::mean",
    "aten::sum", "aten::amax", "aten::max_pool2d", "aten::expand_as", "aten::repeat", "aten::bernoulli_",
    "aten::dropout_", "aten::feature_dropout", "aten::empty_like", "aten::clone", "aten::fill_",
    "aten::linalg_vector_norm", "aten::norm", "aten::clamp_min", "aten::sort", "aten::topk", "aten::avg_pool2d",
    "aten::le", "aten::lt", "aten::ge", "aten::gt", "aten::where", "aten::mT", "aten::mH", "aten::erf",
    "aten::abs_", "aten::max_pool2d_with_indices", "aten::triu", "aten::diag_embed", "aten::eye",
    "aten::diagonal", "aten::linalg_svd", "aten::index_select", "aten::square", "aten::pad", "aten::unflatten",
    "aten::repeat_interleave", "aten::eq", "aten::embedding", "aten::ne", "aten::cumsum", "aten::im2col",
    "aten::gather", "aten::scatter_add", "aten::new_zeros",
    "aten::upsample_nearest2d",
)

# the generic ops' handles; a family adds its own ops' (`family.FVCORE_HANDLES`, vspec/spec/families.py)
FVCORE_HANDLES: dict[str, Callable[[list[Any], list[Any]], int]] = {
    "aten::scaled_dot_product_attention": _fv_sdpa,
    **{op: _fv_zero for op in _ZERO_COST_OPS},
}


# ---------------------------------------------------------------- FlopCounterMode formulas (2 x MACs)
def _flop_counter_mapping() -> dict[Any, Callable[..., int]]:
    aten = torch.ops.aten

    def sdpa(q, k, v, *args, out_shape=None, **kwargs):
        return 2 * sdpa_macs(q, k, v)

    def layer_norm(x, normalized_shape, weight=None, bias=None, *args, out_shape=None, **kwargs):
        return 2 * norm_macs(x, weight is not None)

    def batch_norm(x, weight=None, bias=None, running_mean=None, running_var=None, training=True, *args,
                   out_shape=None, **kwargs):
        return 2 * norm_macs(x, weight is not None, training)

    def batch_norm_eval(x, weight=None, *args, out_shape=None, **kwargs):
        return 2 * norm_macs(x, weight is not None, training=False)

    def onednn_linear(x, weight, *args, out_shape=None, **kwargs):  # vspec.ops.linear's CPU kernel
        return 2 * _prod(x[:-1]) * int(weight[0]) * int(weight[1])

    return {
        torch.ops.mkldnn._linear_pointwise: onednn_linear,
        aten._scaled_dot_product_flash_attention_for_cpu: sdpa,
        aten.native_layer_norm: layer_norm,
        aten.native_batch_norm: batch_norm,
        aten._native_batch_norm_legit_no_training: batch_norm_eval,
        aten._native_batch_norm_legit: batch_norm,
    }


# ---------------------------------------------------------------- results
@attrs.frozen
class ComponentProfile:
    """One part of the forward pass: its role (embedder | entry | block | norm | head), stage and (for
    a block) index in the stage."""

    params: int
    macs: int
    role: str
    stage: int | None
    index: int | None


@attrs.frozen
class StageProfile:
    """One stage: its tokens (width, grid, prefix tokens), depth, and the sums of its entry and blocks."""

    index: int
    dim: int
    grid: tuple[int, int]
    prefix: int
    depth: int
    params: int
    macs: int


@attrs.frozen
class Profile:
    """Counts for one spec at one input size (batch 1).

    params_weights counts the weights of linear and convolution layers (MSF's convention: no biases,
    norms, position embeddings, tokens or other parameters). `components` maps each part of the
    forward pass (`embedder` with class token and position embedding, `stages.i.entry`,
    `stages.i.blocks.j`, `norm`, `head`) to its counts; `stages` sums them per stage; `by_op` maps op
    kinds to MACs. `crosscheck_macs` is the other counter's total (FlopCounterMode next to fvcore),
    None when only one ran. `conventions` gives the MACs under the papers' counting conventions (see
    CONVENTIONS). `distinct_parts` is how many parts were counted (the others repeat one of them).
    """

    params: int
    params_trainable: int
    params_weights: int
    macs: int
    components: dict[str, ComponentProfile]
    stages: list[StageProfile]
    by_op: dict[str, int]
    unsupported_ops: list[str]
    counter: str
    input_size: tuple[int, int]
    crosscheck_macs: int | None = None
    conventions: dict[str, int] = attrs.field(factory=dict)
    distinct_parts: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain data (tuples as lists), for JSON."""
        out = attrs.asdict(self)
        out["input_size"] = list(self.input_size)
        for stage in out["stages"]:
            stage["grid"] = list(stage["grid"])
        return out


# Papers' counting conventions: name -> description. Attributed by where the MACs sit (module types).
CONVENTIONS = {
    "conv_linear": "conv and linear layers only (SoT paper, thop)",
    "no_attention_matmuls": "all but the attention matmuls (DHVT paper)",
    "no_norms": "all but the normalisation layers (MSF paper, Table 6)",
}
_WEIGHT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
_NORM_LAYERS = (nn.LayerNorm, nn.modules.batchnorm._BatchNorm)


@attrs.frozen
class _Count:
    macs: int
    by_op: dict[str, int]
    conv_linear: int
    attention: int
    norms: int
    unsupported: tuple[str, ...] = ()


def _located(module: nn.Module, by_module: dict[str, int]) -> tuple[int, int, int]:
    """(MACs inside conv / linear layers, inside attention cores, inside norms) from per-module counts."""
    conv_linear = attention = norms = 0
    for name, m in module.named_modules():
        if isinstance(m, _WEIGHT_LAYERS):
            conv_linear += by_module.get(name, 0)
        elif isinstance(m, AttentionCoreBase):
            attention += by_module.get(name, 0)
        elif isinstance(m, _NORM_LAYERS):
            norms += by_module.get(name, 0)
    return conv_linear, attention, norms


def _count_fvcore(module: nn.Module, x: tuple[torch.Tensor, ...]) -> _Count:
    analysis = FlopCountAnalysis(module, x).set_op_handle(**FVCORE_HANDLES, **families.tables("FVCORE_HANDLES"))
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    with fast_paths(False):  # the plain ops, counted as written
        analysis.total()
    by_module = {k: int(v) for k, v in analysis.by_module().items()}
    by_op = {k: int(v) for k, v in analysis.by_operator().items() if v}
    return _Count(int(analysis.total()), by_op, *_located(module, by_module), tuple(analysis.unsupported_ops()))


def _count_torch(module: nn.Module, x: tuple[torch.Tensor, ...]) -> _Count:
    mode = FlopCounterMode(display=False, custom_mapping=_flop_counter_mapping())
    with fast_paths(False), mode, torch.no_grad():
        module(*x)
    counts = mode.get_flop_counts()
    root = type(module).__name__
    by_module = {("" if name in ("Global", root) else name.removeprefix(f"{root}.")): sum(ops.values()) // 2
                 for name, ops in counts.items()}
    by_op = {str(op).split(".")[1] if "." in str(op) else str(op): v // 2
             for op, v in counts.get("Global", {}).items() if v}
    return _Count(mode.get_total_flops() // 2, by_op, *_located(module, by_module))


class _WithState(nn.Module):
    """A part that reads carried state (a block, the head) called with the state's tensors after its input and
    positionally, as the tracers pass inputs (the block contract and the heads take it by keyword, `state`)."""

    def __init__(self, part: nn.Module, keys: Sequence[str]):
        super().__init__()
        self.part, self.keys = part, tuple(keys)

    def forward(self, x: torch.Tensor, *values: torch.Tensor):
        return self.part(x, state=dict(zip(self.keys, values)))


def part_params(part) -> tuple[int, int, int]:
    """(total, trainable, in linear / conv weights) of a part, its extra parameters included.

    Args:
        part: a model part (`Transformer.parts()`).
    """
    params = [*part.module.parameters(), *part.extra]
    weights = sum(m.weight.numel() for m in part.module.modules() if isinstance(m, _WEIGHT_LAYERS))
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad), weights


def _sizes(parts: Sequence[Any]) -> list[tuple[int, int, int]]:
    """part_params of each part, computed once per distinct part (equal keys: one module, one size)."""
    sizes: dict[Any, tuple[int, int, int]] = {}
    for p in parts:
        if p.key not in sizes:
            sizes[p.key] = part_params(p)
    return [sizes[p.key] for p in parts]


def _context(spec: Model) -> Model:
    """What a part's counts depend on beyond its own key (its block, tokens, variant, input shapes): the spec with
    every stage at depth 1, since a depth changes how many parts there are, not what one computes. A stage whose
    blocks are listed one per depth keeps the spec as it is (no sharing across depths there)."""
    try:
        return attrs.evolve(spec, stages=tuple(attrs.evolve(s, depth=1) for s in spec.stages))
    except (SpecError, ValueError, TypeError):
        return spec


def _count_parts(parts: Sequence[Any], repeats: Counter, meta: bool, crosscheck: bool, cache: dict | None,
                 context: Model | None) -> tuple[dict[Any, _Count], int]:
    """Each distinct part's counts, by its key (taken from `cache` where it holds them, and stored there), and the
    crosscheck's MACs in all (FlopCounterMode's, each part times its `repeats`; 0 unless `crosscheck` with fvcore)."""
    counts: dict[Any, _Count] = {}
    cross = 0
    for part in parts:
        if part.key in counts:
            continue
        shared = (meta, crosscheck, context, part.key, part.in_shape, part.state_in)
        if cache is not None and shared in cache:
            counts[part.key], part_cross = cache[shared]
            cross += part_cross * repeats[part.key]
            continue
        device = "meta" if meta else None
        x = (part.example(1, device), *(torch.rand(1, *shape, device=device) for _, shape in part.state_in))
        module = _WithState(part.module, [k for k, _ in part.state_in]) if part.state_in else part.module
        counts[part.key] = _count_torch(module, x) if meta else _count_fvcore(module, x)
        part_cross = _count_torch(module, x).macs if crosscheck and not meta else 0
        cross += part_cross * repeats[part.key]
        if cache is not None:
            cache[shared] = counts[part.key], part_cross
    return counts, cross


def _stages(layout: Sequence[Any], components: dict[str, ComponentProfile]) -> list[StageProfile]:
    """Each stage of `layout` (`StageLayout`s): its shapes and depth, and its components' parameters and MACs."""
    per_stage: dict[int, list[int]] = {s.index: [0, 0] for s in layout}
    for c in components.values():
        if c.stage is not None:
            per_stage[c.stage][0] += c.params
            per_stage[c.stage][1] += c.macs
    return [StageProfile(s.index, s.tokens.dim, s.tokens.grid, s.tokens.prefix, s.depth, *per_stage[s.index])
            for s in layout]


def profile(spec: Model, input_size: int | tuple[int, int] | None = None, *, meta: bool | None = None,
            crosscheck: bool = True, meta_above: int = 300_000_000, check_memory: bool = True,
            cache: dict | None = None) -> Profile:
    """Profile `spec` on one (1, C, H, W) image: its parameters and MACs, in all and by part (`Profile`).

    The meta path counts with FlopCounterMode on the meta device (no weights allocated); the other instantiates the
    model and counts with fvcore. A `cache` kept across calls (`vspec.fit`'s search) counts each distinct part once
    for all the specs profiled with it, keyed by the part, its input shapes, the counter and the spec but its
    depths (`_context`).

    Args:
        spec: the Model spec to profile.
        input_size: the image size (default: the spec's `img_size`).
        meta: True counts on the meta device, False with fvcore on real weights; None picks meta above `meta_above`.
        crosscheck: with fvcore, also run FlopCounterMode and report its total as `crosscheck_macs`.
        meta_above: the parameter count above which `meta=None` counts on the meta device.
        check_memory: refuse to instantiate weights that do not fit in free memory (`build`'s guard).
        cache: a dict kept across calls, each distinct part counted once for every spec profiled with it.
    """
    if input_size is not None and input_size != spec.img_size:
        spec = attrs.evolve(spec, img_size=input_size)  # re-validated: the patch must divide it
    if meta is not False:  # the meta build costs no memory and decides the path
        model = build(spec, device="meta", tie_repeats=True)
        meta = meta or sum(n[0] for n in _sizes(model.parts())) > meta_above
    if not meta:
        torch.manual_seed(0)
        model = build(spec, tie_repeats=True, check_memory=check_memory)
    parts = model.eval().parts()
    repeats = Counter(p.key for p in parts)  # equal keys compute the same thing: counted once
    counts, cross = _count_parts(parts, repeats, meta, crosscheck, cache, _context(spec) if cache is not None else None)
    totals = _sizes(parts)
    components = {p.name: ComponentProfile(n[0], counts[p.key].macs, p.role, p.stage, p.index)
                  for p, n in zip(parts, totals)}
    by_op: Counter[str] = Counter()
    for key, n in repeats.items():
        by_op.update({op: v * n for op, v in counts[key].by_op.items()})
    macs = sum(c.macs for c in components.values())

    def located(field: str) -> int:
        return sum(getattr(counts[key], field) * n for key, n in repeats.items())

    conventions = {"conv_linear": located("conv_linear"), "no_attention_matmuls": macs - located("attention"),
                   "no_norms": macs - located("norms")}
    return Profile(
        params=sum(t[0] for t in totals), params_trainable=sum(t[1] for t in totals),
        params_weights=sum(t[2] for t in totals), macs=macs, components=components,
        stages=_stages(model.layout, components),
        by_op=dict(by_op), unsupported_ops=sorted({op for c in counts.values() for op in c.unsupported}),
        counter="torch.utils.flop_counter.FlopCounterMode (meta device)" if meta else "fvcore.nn.FlopCountAnalysis",
        input_size=tuple(spec.img_size), crosscheck_macs=cross if crosscheck and not meta else None,
        conventions=conventions, distinct_parts=len(counts))
