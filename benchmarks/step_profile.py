"""Where a step's time goes, vspec and its reference side by side (benchmarks/models.py's pairs: the same weights):
torch.profiler's self CPU time per class of op (matrix products, GELU, LayerNorm, softmax, copies and casts, other
elementwise ops, reductions, random draws, the rest), in ms per step, over `--steps` profiled steps of each after
two warm-up steps, the two models alternating `--rounds` times, under the kept heap a CPU run of `vspec train` has
(vspec/train/heap.py; otherwise the page faults of freshly mapped activations land on whichever op first writes
them). `--gemms` adds the bf16 (or fp32) matrix-product rate of each orientation a linear layer's step runs, at the
layer shapes the model's steps ran: forward x W^T, the input's gradient g W and the weight's gradient g^T x (one
operand transposed). The profiler's own cost per op inflates steps of many small ops: the wall-clock ratio is
benchmarks/models.py's, this one's only says where each step's time goes.

Last, the ceiling the matrix products set: the reference's profiled step over vspec's products alone (the ratio vspec
would reach if all its other work took no time), and for a goal ratio (`--goal`, the issue's 1.25 by default) the
time vspec's other work may take a step against what it takes now (or, where the products alone exceed the goal's
step, by how much).

    python -m benchmarks.step_profile [--model swin_tiny] [--precision bf16] [--mode train] [--batch-size N]
                                      [--steps 2] [--rounds 2] [--gemms] [--goal 1.25] [--threads N]
"""

import argparse
import collections
import time

import torch
from torch.profiler import ProfilerActivity, profile

import vspec
from vspec.train.heap import set_heap

from .common import ROOT, autocast, forward, forward_backward, header
from .models import PAIRS, pair

# op class -> the aten ops in it (self time; everything else is "the rest": autograd, allocation, views)
CLASSES = {
    "matrix products": ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "mkldnn::_linear_pointwise",
                        "aten::mkldnn_convolution", "aten::convolution_backward",
                        "aten::_scaled_dot_product_flash_attention_for_cpu",
                        "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    "GELU": ("aten::gelu", "aten::gelu_backward"),
    "LayerNorm": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
    "softmax": ("aten::_softmax", "aten::_softmax_backward_data"),
    "copies and casts": ("aten::copy_", "aten::cat", "aten::index_select", "aten::index", "aten::_index_put_impl_",
                         "aten::roll", "aten::stack"),
    "other elementwise": ("aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::addcmul", "aten::div",
                          "aten::div_", "aten::sub", "aten::masked_fill_", "aten::where", "aten::fill_",
                          "aten::zero_"),
    "reductions": ("aten::sum", "aten::mean", "aten::amax"),
    "random draws": ("aten::bernoulli_", "aten::random_", "aten::uniform_"),
}
LINEAR_OPS = ("aten::addmm", "mkldnn::_linear_pointwise")


def classify(name: str) -> str:
    return next((c for c, ops in CLASSES.items() if name in ops), "the rest")


def profiled(model, step, x, precision: str, steps: int, shapes: set) -> collections.Counter:
    """Self CPU ms per op class, summed over `steps` steps (after two unprofiled ones); the (tokens, in, out) shapes
    of the linear layers that ran are added to `shapes`."""
    with autocast(precision):
        step(model, x), step(model, x)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(steps):
                step(model, x)
    out = collections.Counter()
    for e in prof.key_averages(group_by_input_shape=True):
        out[classify(e.key)] += e.self_cpu_time_total / 1000
        dims = [s for s in e.input_shapes if s]
        if e.key in LINEAR_OPS and len(dims) >= 2 and len(dims[1]) == 2:
            tokens = 1
            for d in dims[1 if e.key == "aten::addmm" else 0][:-1]:
                tokens *= d
            w = dims[1] if e.key == "mkldnn::_linear_pointwise" else dims[2][::-1]  # (out, in)
            shapes.add((tokens, w[1], w[0]))
    return out


def ceiling(reference: float, products: float, rest: float, goal: float) -> str:
    """The line on what vspec's matrix products allow (all in ms per step): `reference`'s step over `products`, and
    the time vspec's other work (`rest` now) may take for vspec / reference = `goal`."""
    line = f"  matrix products' ceiling: reference step / vspec's products {reference / products:.3f}"
    budget = reference / goal - products
    if budget <= 0:
        return line + f"; for {goal:g}x the products alone are {-budget:.1f} ms too slow"
    return line + (f"; for {goal:g}x vspec's other work may take {budget:.1f} ms a step, now {rest:.1f} "
                   f"({rest / budget:.2f}x that)")


def gemm_rates(shapes: set, dtype: torch.dtype, reps: int = 10) -> None:
    """GFLOP/s of x W^T, g W and g^T x at each (tokens, in, out), the fastest of `reps`."""
    print(f"\nmatrix products of the linear layers, {dtype}, GFLOP/s (fastest of {reps}):")
    print(f"  {'tokens x in -> out':24s} {'x W^T':>8s} {'g W':>8s} {'g^T x':>8s}")
    for m, k, n in sorted(shapes, key=lambda s: -s[0] * s[1] * s[2]):
        x, w, g = (torch.randn(*s).to(dtype) for s in ((m, k), (n, k), (m, n)))
        rates = []
        for f in (lambda: torch.mm(x, w.t()), lambda: torch.mm(g, w), lambda: torch.mm(g.t(), x)):
            f()
            best = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                f()
                best = min(best, time.perf_counter() - t)
            rates.append(2 * m * n * k / best / 1e9)
        print(f"  {f'{m} x {k} -> {n}':24s} " + " ".join(f"{r:8.0f}" for r in rates))


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--model", choices=sorted(PAIRS), default="swin_tiny")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    ap.add_argument("--mode", choices=("train", "infer"), default="train")
    ap.add_argument("--batch-size", type=int, default=0, help="default: benchmarks/models.py's for the model")
    ap.add_argument("--steps", type=int, default=2, help="profiled steps per round and model")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, the two models alternating")
    ap.add_argument("--gemms", action="store_true", help="also the linear layers' matrix-product rates")
    ap.add_argument("--goal", type=float, default=1.25, help="vspec / reference ratio the ceiling line aims at")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    header({}, [args.precision])
    print(f"heap kept (vspec.train.heap): {set_heap(True)}")
    torch.manual_seed(0)
    spec = vspec.load_spec(ROOT / f"specs/{args.model}.py")
    ref, ours = pair(args.model, spec)
    batch = args.batch_size or PAIRS[args.model][1]
    x = torch.randn(batch, 3, 224, 224)
    train = args.mode == "train"
    step = forward_backward if train else forward
    totals, shapes = {"reference": collections.Counter(), "vspec": collections.Counter()}, set()
    for r in range(args.rounds):
        for who, m in (("reference", ref), ("vspec", ours))[:: 1 if r % 2 == 0 else -1]:
            totals[who] += profiled(m.train(train), step, x, args.precision, args.steps, shapes)
    n = args.rounds * args.steps
    ref_name = PAIRS[args.model][0]
    print(f"{args.model} against {ref_name}, {args.mode}, {args.precision}, batch {batch}: self CPU ms per step "
          f"(torch.profiler, {n} steps each)")
    print(f"  {'class':18s} {'reference':>18s} {'vspec':>18s}")
    sums = {who: sum(c.values()) for who, c in totals.items()}
    for c in (*CLASSES, "the rest"):
        cells = [f"{totals[who][c] / n:8.1f} ({100 * totals[who][c] / sums[who]:4.1f} %)" for who in totals]
        print(f"  {c:18s} " + " ".join(f"{s:>18s}" for s in cells))
    print(f"  {'step':18s} " + " ".join(f"{sums[who] / n:8.1f}{'':10s}" for who in totals)
          + f"   profiled reference / vspec {sums['reference'] / sums['vspec']:.3f}")
    products = totals["vspec"]["matrix products"] / n
    print(ceiling(sums["reference"] / n, products, sums["vspec"] / n - products, args.goal))
    if args.gemms:
        gemm_rates(shapes, torch.bfloat16 if args.precision == "bf16" else torch.float32)


if __name__ == "__main__":
    main()
