"""Mean-shift (Gaussian-kernel) attention: vspec's fused construction against the released
formulation, forward + backward, at ViT-S width (6 heads of 64 channels).

Four ways to compute softmax_i((q.k_i - 1/2 |k_i|^2) * d^-1/2) v (MSF Eq. 12's attention, footnote 2):
- reference: the released code's formulation, written here from the equation: the n x n map
  q k^T - 1/2 |k|^2, softmax, matmul (autograd holds the map and its softmax for backward);
- mask: F.scaled_dot_product_attention with the per-key bias -1/2 |k|^2 as a float mask (it needs a
  gradient, so SDPA takes its math fallback, which holds the map too);
- channel (vspec.models.msf.ops.gaussian_attention_sdpa, vspec's path off the eager CPU): one extra q / k channel
  carrying -1/2 and |k|^2, no mask, so SDPA's fused flash kernel runs forward and backward and keeps no
  n x n map; the widening under autograd;
- vspec (vspec.models.msf.ops.gaussian_attention, what MeanShiftAttention uses): the same channels, the CPU flash
  kernel called directly with a hand-written backward (no autograd nodes for the widening).
A fifth line, kernel, times SDPA's flash kernel alone on leaves that are already q', k', v' (width 65):
the floor of any construction through SDPA on this machine, so the ceiling of its speed-up.
Then the whole MeanShiftAttention module (projections included) against the same module with the
reference attention in its place. Outputs and gradients are checked equal first. Timing: paired rounds
(benchmarks/models.py's race: the variants back to back, order alternating); times are medians over
rounds, a speed-up is the median of the rounds' ratios (range in brackets). Peak memory: the largest sum
of live allocations during one step, inputs excluded (CPU: the torch profiler's memory events; CUDA: the
caching allocator's peak statistics). On CUDA q', k', v' are padded to width 72 (gaussian_channels) and SDPA
picks its fused kernel; the CPU path calls the CPU flash kernel directly.

    python -m benchmarks.msf [--rounds 9] [--threads N] [--cases 32x197,2x3136] [--device cpu|cuda]
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

import vspec
from vspec.compiler import build_component, context
from vspec.models.msf.ops import gaussian_attention, gaussian_attention_sdpa, gaussian_channels

from .common import race

HEADS, HEAD_DIM = 6, 64


def reference(q, k, v):
    """The released formulation: the explicit map (q.k - 1/2 |k|^2) * d^-1/2, softmax, matmul."""
    scores = (q @ k.transpose(-2, -1) - 0.5 * k.square().sum(-1)[..., None, :]) * q.shape[-1] ** -0.5
    return scores.softmax(-1) @ v


def mask(q, k, v):
    bias = -0.5 * k.square().sum(-1)[..., None, :]  # (b, h, 1, n), broadcast over the queries
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias * q.shape[-1] ** -0.5)


class ReferenceCore(torch.nn.Module):
    def forward(self, q, k, v, mask=None, causal=False):  # an attention core's contract; no masks on images
        assert mask is None and not causal
        return reference(q, k, v)


CORES = {"reference": reference, "mask": mask,
         "channel": lambda q, k, v: gaussian_attention_sdpa(q, k, v, HEAD_DIM ** -0.5), "vspec": gaussian_attention}


def step(fn, inputs, grad):
    out = fn(*inputs)
    out.backward(grad)
    if out.is_cuda:
        torch.cuda.synchronize()  # the race times the kernels, not their launch
    return out


def peak_bytes(fn, device: str) -> int:
    """The largest sum of live allocations during one call of fn, beyond what was live before it."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        return torch.cuda.max_memory_allocated() - base
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:  # every allocation (+) and free (-), in time order
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def summary(fns: dict, rounds: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Median seconds per step of each variant, and each one's sorted per-round speed-ups over the
    reference (paired rounds)."""
    times = race(fns, lambda fn, _: fn(), None, rounds)
    ratios = {name: sorted(r / t for r, t in zip(times["reference"], ts)) for name, ts in times.items()}
    return {name: statistics.median(ts) for name, ts in times.items()}, ratios


def speedup(ratios: list[float]) -> str:
    return f"x{statistics.median(ratios):.2f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]"


def race_cores(batch: int, tokens: int, rounds: int, device: str) -> dict[str, dict]:
    """Prints the race of the attention cores; returns, per core, its median ms, peak MiB and speed-up over the
    reference (median of the rounds, with their range)."""
    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(batch, HEADS, tokens, HEAD_DIM, generator=g).to(device).requires_grad_() for _ in range(3)]
    grad = torch.randn(batch, HEADS, tokens, HEAD_DIM, generator=g).to(device)
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
    # the floor of any construction through SDPA: its flash kernel alone, forward + backward, on leaves that
    # are already the widened q', k', v' (no widening, no |k|^2 chain rule)
    wide = [t.detach().requires_grad_() for t in gaussian_channels(*leaves)]
    fns["kernel"] = lambda: step(lambda *t: F.scaled_dot_product_attention(*t, scale=HEAD_DIM ** -0.5), wide,
                                 F.pad(grad, (0, wide[0].shape[-1] - HEAD_DIM)))
    times, ratios = summary(fns, rounds)
    peaks = {name: peak_bytes(fn, device) for name, fn in fns.items()}
    print(f"attention core, batch {batch} x {tokens} tokens, {rounds} rounds (outputs and gradients equal to "
          f"the reference):")
    for name in fns:
        print(f"  {name:9s} {times[name] * 1e3:9.1f} ms  peak {peaks[name] / 2**20:8.1f} MiB  "
              f"speed-up {speedup(ratios[name])}  memory x{peaks[name] / peaks['reference']:.3f}"
              + ("  (flash kernel alone on widened leaves: the floor)" if name == "kernel" else ""))
    return {name: {"ms": times[name] * 1e3, "peak_mib": peaks[name] / 2**20,
                   "speedup": statistics.median(ratios[name]), "speedup_range": [ratios[name][0], ratios[name][-1]],
                   "memory_ratio": peaks[name] / peaks["reference"]} for name in fns}


def race_module(batch: int, tokens: int, rounds: int, device: str) -> None:
    """vspec's MeanShiftAttention (ViT-S width) against itself with the reference attention core."""
    spec = vspec.load_spec("specs/msf_vit_s.py")
    attn = spec.block.attention
    ctx = context(spec)
    torch.manual_seed(0)
    module = build_component(attn, ctx).to(device)
    x = torch.randn(batch, tokens, spec.dim, device=device, requires_grad=True)
    grad = torch.randn(batch, tokens, spec.dim, device=device)
    cores = {False: module.core, True: ReferenceCore()}

    def run(ref: bool):
        module.core = cores[ref]
        return step(module, [x], grad)

    outs = [run(False).detach(), run(True).detach()]
    assert (outs[0] - outs[1]).abs().max().item() < 1e-3
    fns = {"reference": lambda: run(True), "vspec": lambda: run(False)}
    times, ratios = summary(fns, rounds)
    peaks = {name: peak_bytes(fn, device) for name, fn in fns.items()}
    print(f"MeanShiftAttention module, batch {batch} x {tokens} tokens: vspec {times['vspec'] * 1e3:.1f} ms vs "
          f"reference {times['reference'] * 1e3:.1f} ms, speed-up {speedup(ratios['vspec'])}; "
          f"peak memory x{peaks['vspec'] / peaks['reference']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cases", default="32x197,2x3136", help="batch x tokens, comma-separated")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="cuda: times with synchronisation, peak memory from torch.cuda's allocator statistics")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{torch.get_num_threads()} CPU threads"
    print(f"torch {torch.__version__}, {where}, ViT-S width: {HEADS} heads x {HEAD_DIM}")
    for case in args.cases.split(","):
        batch, tokens = map(int, case.split("x"))
        race_cores(batch, tokens, args.rounds, args.device)
        race_module(batch, tokens, args.rounds, args.device)


if __name__ == "__main__":
    main()
