"""Parameters and MACs of a spec, per component and per op kind, before any training.

Convention: MACs, one multiply-add = 1 (fvcore's "flops" are MACs; FLOPs = 2 x MACs, which is what
torch's FlopCounterMode reports). Attention matmuls are counted (q k^T and attn v: B H N M (d + dv)),
LayerNorm / BatchNorm count 5 (4 without affine) per element as in fvcore; elementwise ops,
activations, softmax and reductions count 0.

Two counters share one table of formulas (`MAC_FORMULAS`):
- fvcore (default): traces the module on real tensors; handles are registered for every op vspec
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

from .compiler import build
from .spec import Model

Shape = Sequence[int]


def _prod(shape: Shape) -> int:
    return math.prod(int(s) for s in shape)


def sdpa_macs(q: Shape, k: Shape, v: Shape) -> int:
    """softmax(q k^T) v: q k^T is (..., N, d) x (..., d, M); attn v is (..., N, M) x (..., M, dv)."""
    n_queries = _prod(q[:-1])
    return n_queries * int(k[-2]) * (int(q[-1]) + int(v[-1]))


def norm_macs(x: Shape, affine: bool, training: bool = True) -> int:
    """fvcore's norm convention: 5 per element (4 without affine) when statistics are computed; an
    eval-mode BatchNorm is a per-channel scale and shift, 2 per element (1 without affine)."""
    if training:
        return _prod(x) * (5 if affine else 4)
    return _prod(x) * (2 if affine else 1)


# ---------------------------------------------------------------- fvcore (JIT trace) handles
def _shape(value: Any) -> list[int] | None:
    from fvcore.nn.jit_handles import get_shape

    return get_shape(value)


def _fv_sdpa(inputs: list[Any], outputs: list[Any]) -> int:
    return sdpa_macs(_shape(inputs[0]), _shape(inputs[1]), _shape(inputs[2]))


def _fv_zero(inputs: list[Any], outputs: list[Any]) -> int:
    return 0


def _fv_svpn_exact(inputs: list[Any], outputs: list[Any]) -> int:
    """vspec.ops.svpn_exact: the SVD counts 0 (as fvcore's linalg_svd), U f(S) V^T is counted."""
    *batch, m, n = _shape(inputs[0])
    return _prod(batch) * m * min(m, n) * n


# ops that cost 0 MACs by convention (elementwise, activations, softmax, reductions, data movement)
ZERO_COST_OPS = (
    "aten::add", "aten::add_", "aten::sub", "aten::rsub", "aten::mul", "aten::mul_", "aten::div", "aten::div_",
    "aten::neg", "aten::pow", "aten::sqrt", "aten::rsqrt", "aten::exp", "aten::log", "aten::sin", "aten::cos",
    "aten::abs", "aten::sign", "aten::reciprocal", "aten::gelu", "aten::silu", "aten::relu", "aten::relu6",
    "aten::hardtanh", "aten::sigmoid", "aten::tanh", "aten::softmax", "aten::log_softmax", "aten::mean",
    "aten::sum", "aten::amax", "aten::max_pool2d", "aten::expand_as", "aten::repeat", "aten::bernoulli_",
    "aten::dropout_", "aten::feature_dropout", "aten::empty_like", "aten::clone", "aten::fill_",
    "aten::linalg_vector_norm", "aten::norm", "aten::clamp_min", "aten::sort", "aten::topk", "aten::avg_pool2d",
    "aten::le", "aten::lt", "aten::ge", "aten::gt", "aten::where", "aten::mT", "aten::mH", "aten::erf",
    "aten::abs_", "aten::max_pool2d_with_indices", "aten::triu", "aten::diag_embed", "aten::eye",
    "aten::diagonal", "aten::linalg_svd",
)

FVCORE_HANDLES: dict[str, Callable[[list[Any], list[Any]], int]] = {
    "aten::scaled_dot_product_attention": _fv_sdpa,
    "prim::PythonOp._SvPN": _fv_svpn_exact,
    **{op: _fv_zero for op in ZERO_COST_OPS},
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
    params: int
    macs: int


@attrs.frozen
class Profile:
    """Counts for one spec at one input size (batch 1).

    params_weights counts parameters with ndim >= 2 (weight matrices and kernels; no biases or norm
    affines). `components` maps `embedder` (with class token and position embedding), `blocks.i`,
    `norm` and `head` to their counts; `by_op` maps op kinds to MACs. `crosscheck_macs` is the
    other counter's total (FlopCounterMode next to fvcore), None when only one ran. `conventions`
    gives the MACs under the papers' counting conventions (fvcore counter only; see CONVENTIONS).
    """

    params: int
    params_trainable: int
    params_weights: int
    macs: int
    components: dict[str, ComponentProfile]
    by_op: dict[str, int]
    unsupported_ops: list[str]
    counter: str
    input_size: tuple[int, int]
    crosscheck_macs: int | None = None
    conventions: dict[str, int] = attrs.field(factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["input_size"] = list(self.input_size)
        return out


# Papers' counting conventions, from fvcore's per-op MACs: name -> (description, op kinds counted or,
# with a leading "-", op kinds left out of the total).
CONVENTIONS = {
    "conv_linear": ("conv and linear layers only (SoT paper, thop)", ("conv", "linear")),
    "no_attention_matmuls": ("all but the attention matmuls (DHVT paper)", ("-scaled_dot_product_attention",)),
}


def conventions(macs: int, by_op: dict[str, int]) -> dict[str, int]:
    out = {}
    for name, (_, ops) in CONVENTIONS.items():
        if ops[0].startswith("-"):
            out[name] = macs - sum(by_op.get(op[1:], 0) for op in ops)
        else:
            out[name] = sum(by_op.get(op, 0) for op in ops)
    return out


def _component(name: str, top: set[str]) -> str:
    parts = name.split(".")
    if parts[0] == "blocks" and len(parts) > 1:
        return f"blocks.{parts[1]}"
    return parts[0] if parts[0] in top else "embedder"  # root parameters: class token, position embedding


def component_names(model: nn.Module) -> list[str]:
    names = []
    for name, child in model.named_children():
        if name == "blocks":
            names += [f"blocks.{i}" for i in range(len(child))]
        elif any(True for _ in child.parameters()) or name in ("embedder", "head"):
            names.append(name)
    return names


def count_params(model: nn.Module) -> tuple[int, int, int, dict[str, int]]:
    """(total, trainable, in weight matrices (ndim >= 2), per component)."""
    top = {name for name, _ in model.named_children()}
    per: Counter[str] = Counter()
    total = trainable = weights = 0
    for name, p in model.named_parameters():
        n = p.numel()
        total += n
        trainable += n if p.requires_grad else 0
        weights += n if p.ndim >= 2 else 0
        per[_component(name, top)] += n
    return total, trainable, weights, per


def _count_fvcore(model: nn.Module, x: torch.Tensor) -> tuple[int, dict[str, int], dict[str, int], list[str]]:
    with warnings.catch_warnings():  # fvcore imports torch.jit.script, which warns of its deprecation
        warnings.simplefilter("ignore", FutureWarning)
        from fvcore.nn import FlopCountAnalysis

    analysis = FlopCountAnalysis(model, x).set_op_handle(**FVCORE_HANDLES)
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    total = int(analysis.total())
    by_module = {k: int(v) for k, v in analysis.by_module().items()}
    by_op = {k: int(v) for k, v in analysis.by_operator().items() if v}
    return total, by_module, by_op, sorted(analysis.unsupported_ops())


def _count_torch(model: nn.Module, x: torch.Tensor) -> tuple[int, dict[str, int], dict[str, int]]:
    from torch.utils.flop_counter import FlopCounterMode

    mode = FlopCounterMode(display=False, custom_mapping=_flop_counter_mapping())
    with mode, torch.no_grad():
        model(x)
    counts = mode.get_flop_counts()
    root = type(model).__name__
    by_module: dict[str, int] = {}
    for name, ops in counts.items():
        key = "" if name in ("Global", root) else name.removeprefix(f"{root}.")
        by_module[key] = sum(ops.values()) // 2
    by_op = {str(op).split(".")[1] if "." in str(op) else str(op): v // 2
             for op, v in counts.get("Global", {}).items() if v}
    return mode.get_total_flops() // 2, by_module, by_op


def profile(spec: Model, input_size: int | tuple[int, int] | None = None, *, meta: bool | None = None,
            crosscheck: bool = True, meta_above: int = 300_000_000) -> Profile:
    """Profile `spec` on one (1, C, H, W) image (`input_size` defaults to the spec's image size).

    meta: True counts with FlopCounterMode on the meta device (no weights allocated); False
    instantiates and counts with fvcore; None (default) picks meta above `meta_above` parameters.
    crosscheck: with fvcore, also run FlopCounterMode and report its total as `crosscheck_macs`.
    """
    if input_size is not None and input_size != spec.img_size:
        spec = attrs.evolve(spec, img_size=input_size)  # re-validated: the patch must divide it
    if meta is not False:  # the meta build costs no memory and decides the path
        model = build(spec, device="meta")
        meta = meta or count_params(model)[0] > meta_above
    if not meta:
        torch.manual_seed(0)
        model = build(spec)
    total, trainable, weights, per_params = count_params(model)
    model.eval()
    x_shape = (1, spec.in_chans, *spec.img_size)
    if meta:
        macs, by_module, by_op = _count_torch(model, torch.empty(x_shape, device="meta"))
        unsupported: list[str] = []
        counter, cross = "torch.utils.flop_counter.FlopCounterMode (meta device)", None
    else:
        x = torch.randn(x_shape)
        macs, by_module, by_op, unsupported = _count_fvcore(model, x)
        counter = "fvcore.nn.FlopCountAnalysis"
        cross = _count_torch(model, x)[0] if crosscheck else None
    components = {name: ComponentProfile(per_params.get(name, 0), by_module.get(name, 0))
                  for name in component_names(model)}
    rest = macs - sum(c.macs for c in components.values())
    if rest:  # ops called on the root module itself (none today), kept visible rather than lost
        components["(model)"] = ComponentProfile(0, rest)
    return Profile(params=total, params_trainable=trainable, params_weights=weights, macs=macs,
                   components=components, by_op=by_op, unsupported_ops=unsupported, counter=counter,
                   input_size=tuple(spec.img_size), crosscheck_macs=cross,
                   conventions={} if meta else conventions(macs, by_op))
