"""Exact svPN (SVD, Eq. 5) against approximate svPN (one power iteration, one singular value, Eq. 8)
at SoT-Tiny's head size: batch 64, 6 heads, 14 x 14 cross-covariance matrices.

Times forward + backward of (1) SoT-Tiny's whole head (`specs/sot_tiny.py`'s SecondOrderHead:
MGCrP projection and cross-covariance, svPN, both classifiers) on 64 x 197 tokens of width 240,
and (2) each normalisation alone on Q made by `cross_covariance` from random tokens (Q a leaf that
requires grad). Exact and approximate alternate round after round; each figure is the median over
rounds of the mean over `--reps` steps. The paper's Table 4c / 4d report whole-network training
speed, 110 Hz (svPN) vs 2226 Hz
(approximate svPN) on GPUs, i.e. ~20x; an op-level ratio is not the same number.

    python -m benchmarks.svpn [--rounds 15] [--reps 10] [--threads N] [--device cpu|cuda] [--dtype float32]
"""

import argparse
import statistics
import time

import torch

import vspec
from vspec.compare import cpu_name
from vspec.compiler import build_component, context
from vspec.models.sot.ops import cross_covariance, svpn_approx, svpn_exact

from .common import ROOT

BATCH, TOKENS, HEADS, DIM = 64, 196, 6, 14


def make_q(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, TOKENS, HEADS * DIM, generator=g, dtype=dtype)
    y = torch.randn(BATCH, TOKENS, HEADS * DIM, generator=g, dtype=dtype)
    # (b, N, h*d) -> (b, h, N, d)
    x, y = (t.view(BATCH, TOKENS, HEADS, DIM).transpose(1, 2) for t in (x, y))
    q = cross_covariance(x, y, centering="scalar")  # (b, h, d, d)
    return q.to(device).requires_grad_()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    q = make_q(device, dtype)
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=dtype).to(device)
    spec = vspec.load_spec(ROOT / "specs/sot_tiny.py")
    heads = {
        method: build_component(s.head, context(s)).to(device, dtype)
        for method, s in (("approx", spec), ("exact", vspec.override(spec, {"head.norm.method": "exact"})))
    }
    tokens = torch.randn(BATCH, 197, spec.dim, generator=torch.Generator().manual_seed(2), dtype=dtype).to(device)

    def op_step(fn):
        def step() -> None:
            q.grad = None
            fn().backward(grad_out)

        return step

    def head_step(head):
        def step() -> None:
            head.zero_grad(set_to_none=True)
            head(tokens).sum().backward()

        return step

    groups = {
        "SoT-Tiny head, forward+backward": {"exact": head_step(heads["exact"]), "approx": head_step(heads["approx"])},
        "svPN alone, forward+backward": {
            "exact": op_step(lambda: svpn_exact(q, 0.5)),
            "approx": op_step(lambda: svpn_approx(q, 0.5, num_sv=1, iters=1)),
        },
    }
    medians = {group: race(steps, args.rounds, args.reps, sync) for group, steps in groups.items()}

    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{cpu_name()}, torch threads {torch.get_num_threads()}"
    )
    print(f"torch {torch.__version__}, {where}, {args.dtype}")
    print(
        f"batch {BATCH}, {HEADS} heads, 14 x 14; median of {args.rounds} rounds x {args.reps} steps; "
        "exact = SVD (Eq. 5), approx = 1 singular value, 1 iteration (Eq. 8, released form)"
    )
    for group, ms in medians.items():
        print(
            f"  {group:34s} exact {ms['exact']:8.3f} ms  approx {ms['approx']:8.3f} ms  "
            f"ratio {ms['exact'] / ms['approx']:5.1f}x"
        )
    print("  (paper, whole-network training speed on GPUs, Table 4c: 2226 / 110 Hz ~ 20x)")


def race(steps: dict, rounds: int, reps: int, sync) -> dict[str, float]:
    """Median milliseconds per step of each entry, the entries alternating round after round."""
    for step in steps.values():  # warm-up
        for _ in range(3):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        order = list(steps.items()) if r % 2 == 0 else list(reversed(steps.items()))
        for name, step in order:
            sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                step()
            sync()
            times[name].append((time.perf_counter() - t0) / reps)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


if __name__ == "__main__":
    main()
