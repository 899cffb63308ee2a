"""Mean-shift (Gaussian-kernel) attention: vspec's fused construction against the released
formulation, forward + backward, at ViT-S width (6 heads of 64 channels).

Three ways to compute softmax_i((q.k_i - 1/2 |k_i|^2) * d^-1/2) v (MSF Eq. 12's attention, footnote 2):
- reference: the released code's formulation, written here from the equation: the n x n map
  q k^T - 1/2 |k|^2, softmax, matmul (autograd holds the map and its softmax for backward);
- mask: F.scaled_dot_product_attention with the per-key bias -1/2 |k|^2 as a float mask (it needs a
  gradient, so SDPA takes its math fallback, which holds the map too);
- channel (vspec.ops.gaussian_attention, what MeanShiftAttention uses): one extra q / k channel
  carrying -1/2 and |k|^2, no mask, so the fused flash kernel runs forward and backward and keeps no
  n x n map.
Then the whole MeanShiftAttention module (projections included) against the same module with the
reference attention in its place. Outputs and gradients are checked equal first. Timing: variants
alternate round after round; each figure is the median over rounds. Peak memory: the largest sum of
live allocations during one step, from the torch profiler's memory events (inputs excluded).

    python benchmarks/msf.py [--rounds 5] [--threads N] [--cases 32x197,2x3136]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import vspec
from vspec.compiler import build_component, context
from vspec.ops import gaussian_attention

HEADS, HEAD_DIM = 6, 64


def reference(q, k, v):
    """The released formulation: the explicit map (q.k - 1/2 |k|^2) * d^-1/2, softmax, matmul."""
    scores = (q @ k.transpose(-2, -1) - 0.5 * k.square().sum(-1)[..., None, :]) * q.shape[-1] ** -0.5
    return scores.softmax(-1) @ v


def mask(q, k, v):
    bias = -0.5 * k.square().sum(-1)[..., None, :]  # (b, h, 1, n), broadcast over the queries
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias * q.shape[-1] ** -0.5)


class ReferenceCore(torch.nn.Module):
    def forward(self, q, k, v):
        return reference(q, k, v)


CORES = {"reference": reference, "mask": mask, "channel": gaussian_attention}


def step(fn, inputs, grad):
    out = fn(*inputs)
    out.backward(grad)
    return out


def peak_bytes(fn) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:  # every allocation (+) and free (-), in time order
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def timed(fns: dict, rounds: int) -> dict[str, float]:
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def race_cores(batch: int, tokens: int, rounds: int) -> None:
    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(batch, HEADS, tokens, HEAD_DIM, generator=g).requires_grad_() for _ in range(3)]
    grad = torch.randn(batch, HEADS, tokens, HEAD_DIM, generator=g)
    results = {}
    for name, fn in CORES.items():
        for t in leaves:
            t.grad = None
        out = step(fn, leaves, grad)
        results[name] = (out.detach(), [t.grad.clone() for t in leaves])
    ref_out, ref_grads = results["reference"]
    for name, (out, grads) in results.items():
        err = max([(out - ref_out).abs().max().item()] + [(a - b).abs().max().item() for a, b in zip(grads, ref_grads)])
        assert err < 1e-3, (name, err)
    fns = {name: (lambda fn=fn: step(fn, leaves, grad)) for name, fn in CORES.items()}
    times = timed(fns, rounds)
    peaks = {name: peak_bytes(fn) for name, fn in fns.items()}
    print(f"attention core, batch {batch} x {tokens} tokens (outputs and gradients equal to the reference):")
    for name in CORES:
        print(f"  {name:9s} {times[name] * 1e3:9.1f} ms  peak {peaks[name] / 2**20:8.1f} MiB  "
              f"speed-up x{times['reference'] / times[name]:.2f}  memory x{peaks[name] / peaks['reference']:.3f}")


def race_module(batch: int, tokens: int, rounds: int) -> None:
    """vspec's MeanShiftAttention (ViT-S width) against itself with the reference attention core."""
    spec = vspec.load_spec("specs/msf_vit_s.py")
    attn = spec.block.attention
    ctx = context(spec)
    torch.manual_seed(0)
    module = build_component(attn, ctx)
    x = torch.randn(batch, tokens, spec.dim, requires_grad=True)
    grad = torch.randn(batch, tokens, spec.dim)
    cores = {False: module.core, True: ReferenceCore()}

    def run(ref: bool):
        module.core = cores[ref]
        out = module(x)
        out.backward(grad)
        return out

    outs = [run(False).detach(), run(True).detach()]
    assert (outs[0] - outs[1]).abs().max().item() < 1e-3
    fns = {"reference": lambda: run(True), "vspec": lambda: run(False)}
    times = timed(fns, rounds)
    peaks = {name: peak_bytes(fn) for name, fn in fns.items()}
    print(f"MeanShiftAttention module, batch {batch} x {tokens} tokens: vspec {times['vspec'] * 1e3:.1f} ms vs "
          f"reference {times['reference'] * 1e3:.1f} ms, speed-up x{times['reference'] / times['vspec']:.2f}; "
          f"peak memory x{peaks['vspec'] / peaks['reference']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cases", default="32x197,2x3136", help="batch x tokens, comma-separated")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, ViT-S width: {HEADS} heads x {HEAD_DIM}")
    for case in args.cases.split(","):
        batch, tokens = map(int, case.split("x"))
        race_cores(batch, tokens, args.rounds)
        race_module(batch, tokens, args.rounds)


if __name__ == "__main__":
    main()
