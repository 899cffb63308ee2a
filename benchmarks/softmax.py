"""bf16 softmax over the last axis on the CPU, per row length: torch's bf16 kernel against the float32 route
(`vspec.ops.attention.float32_softmax_`: in slices, a cast to float32, float32's softmax and a cast back to bf16), the
choice ShortAttention's forward makes per row length (`vspec.ops.attention.float_softmax`). The maps hold about 4 M
elements (batch 16, as many rows of `keys` x `keys` as that takes), the size of Swin-T's stage-1 attention at batch 8.
Prints, per row length, the milliseconds of each, their ratio (> 1: the float32 route faster), the route the rule
picks there and whether the measurement agrees.

The two run back to back in every round (order alternating); times are medians over rounds, the ratio the median of
the rounds' ratios. The C allocator keeps freed blocks (`vspec.train.heap.set_heap`, as `vspec train` does), so that
the float32 route's buffers are not mapped and faulted in afresh at every call: the kernels are timed, not glibc. The
rule follows torch's CPU kernels (`ATEN_CPU_CAPABILITY=avx2` runs the AVX2 ones).

    python -m benchmarks.softmax [--keys 16 49 64 ...] [--rounds 7] [--threads N] [--json FILE]
    python -m benchmarks.softmax --table FILE.json    # the table of docs/speed.md
"""

import argparse
import statistics

import torch

from vspec.compare import cpu_name
from vspec.ops import attention
from vspec.train.heap import set_heap

from .common import machine, race, race_options, table_or_threads, write_json

# row lengths: the remainders mod 32 and 16 of 0 to 28, Swin's 7 x 7 windows (49), BERT's GLUE lengths, DeiT's 197
KEYS = [12, 16, 24, 32, 36, 40, 48, 49, 56, 64, 72, 80, 96, 100, 104, 120, 128, 136, 168, 197, 256]
ELEMENTS = 4 << 20


ROUTES = {"bf16": lambda s: torch.softmax(s, -1), "float32": attention.float32_softmax_}  # the latter in place


def measure(keys: int, rounds: int) -> dict:
    """Milliseconds of each route on a bf16 map of rows of `keys`, their ratio and the rule's choice."""
    rows = max(1, ELEMENTS // (16 * keys * keys))
    s = torch.randn(16, rows, keys, keys, generator=torch.Generator().manual_seed(0)).bfloat16()
    times = race(ROUTES, lambda route, x: route(x), s, rounds)
    ratios = sorted(a / b for a, b in zip(times["bf16"], times["float32"]))
    ratio, chosen = statistics.median(ratios), "float32" if attention.float_softmax(keys) else "bf16"
    return {"keys": keys, "shape": list(s.shape), "bf16_ms": 1e3 * statistics.median(times["bf16"]),
            "float32_ms": 1e3 * statistics.median(times["float32"]), "ratio": ratio, "ratio_min": ratios[0],
            "ratio_max": ratios[-1], "chosen": chosen, "agrees": (ratio > 1) == (chosen == "float32")}


def table(result: dict) -> str:
    """The table of one --json result."""
    lines = ["| keys | map | bf16 | float32 route | ratio, median [range] | chosen |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['keys']} | {tuple(r['shape'])} | {r['bf16_ms']:.2f} ms | {r['float32_ms']:.2f} ms | "
                     f"{r['ratio']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] | {r['chosen']}"
                     f"{'' if r['agrees'] else ' (the measurement disagrees)'} |")
    m = result["machine"]
    lines += ["", f"{m['machine']}, {m['threads']} torch threads, CPU capability {m['cpu_capability']}, torch "
              f"{m['torch']}; {result.get('rounds', '?')} paired rounds."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    race_options(ap, rounds=7)
    ap.add_argument("--keys", type=int, nargs="+", default=KEYS, help="the row lengths (default: %(default)s)")
    args = ap.parse_args()
    if table_or_threads(args, table):
        return
    set_heap(True)
    lanes = attention._BF16_LANES
    print(f"machine: {cpu_name()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()} (bf16 lanes {lanes or 'none'}); the float32 route up to "
          f"{attention.FLOAT_SOFTMAX_VECTORS * lanes} keys; {args.rounds} rounds")
    rows = []
    for keys in args.keys:
        r = measure(keys, args.rounds)
        rows.append(r)
        print(f"  {keys:4d} keys {str(tuple(r['shape'])):20s} bf16 {r['bf16_ms']:7.2f} ms  float32 route "
              f"{r['float32_ms']:7.2f} ms  ratio {r['ratio']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}]  "
              f"chosen: {r['chosen']}{'' if r['agrees'] else '  (the measurement disagrees)'}")
    if args.json:
        write_json(args.json, {"machine": machine({}), "rounds": args.rounds, "rows": rows})


if __name__ == "__main__":
    main()
