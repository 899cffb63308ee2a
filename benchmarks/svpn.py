"""Exact svPN (SVD, Eq. 5) against approximate svPN (one power iteration, one singular value, Eq. 8)
at SoT-Tiny's head size: batch 64, 6 heads, 14 x 14 cross-covariance matrices made by
`cross_covariance` from random tokens (64 x 196 tokens, 6 heads x 14 channels for X and for Y).

Times forward + backward of each normalisation alone (Q is a leaf that requires grad), the two
alternating round after round; each figure is the median over rounds of the mean over `--reps`
steps. The paper's Table 4c / 4d report whole-network training speed, 110 Hz (svPN) vs 2226 Hz
(approximate svPN) on GPUs, i.e. ~20x; an op-level ratio is not the same number.

    python benchmarks/svpn.py [--rounds 15] [--reps 10] [--threads N] [--device cpu|cuda] [--dtype float32]
"""

import argparse
import platform
import statistics
import time

import torch

from vspec.ops import cross_covariance, svpn_approx, svpn_exact

BATCH, TOKENS, HEADS, DIM = 64, 196, 6, 14


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
    ops = {
        "svPN exact (SVD)": lambda: svpn_exact(q, 0.5),
        "svPN approx (1 sv, 1 iter)": lambda: svpn_approx(q, 0.5, num_sv=1, iters=1),
    }

    def step(op) -> None:
        q.grad = None
        op().backward(grad_out)

    for op in ops.values():  # warm-up
        for _ in range(3):
            step(op)
    sync()
    times: dict[str, list[float]] = {name: [] for name in ops}
    for r in range(args.rounds):
        order = list(ops.items()) if r % 2 == 0 else list(reversed(ops.items()))
        for name, op in order:
            sync()
            t0 = time.perf_counter()
            for _ in range(args.reps):
                step(op)
            sync()
            times[name].append((time.perf_counter() - t0) / args.reps)

    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"{cpu_name()}, torch threads {torch.get_num_threads()}")
    print(f"torch {torch.__version__}, {where}, {args.dtype}")
    print(f"Q: {tuple(q.shape)} (batch, heads, m, n); forward+backward, median of {args.rounds} rounds "
          f"x {args.reps} steps")
    medians = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    for name, ms in medians.items():
        print(f"  {name:28s} {ms:9.3f} ms")
    exact, approx = medians.values()
    print(f"  ratio exact / approx        {exact / approx:9.1f}x   (paper, whole network on GPU: 2226 / 110 Hz ~ 20x)")


if __name__ == "__main__":
    main()
