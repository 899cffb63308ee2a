"""bf16 attention on the CPU, forward and backward (or, --inference, the forward without autograd), per shape:
SDPA's own kernel against ShortAttention (vspec/ops/attention.py), at the shapes of the presets (DeiT-Ti / DeiT-S at
197 tokens, Swin's 7 x 7 windows, BERT at GLUE lengths) and beyond SHORT_KEYS / MAP_ELEMENTS. Prints, per shape, the
milliseconds of each and their ratio (> 1: ShortAttention faster), the path `vspec.ops.attention.sdpa` takes there,
and whether the measurement agrees with that choice.

The two run back to back in every round (order alternating); times are medians over rounds, the ratio the median
of the rounds' ratios.

    python -m benchmarks.attention [--rounds 7] [--threads N] [--inference] [--json FILE]
    python -m benchmarks.attention --table FILE.json    # the table of docs/speed.md
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

from vspec.compare import cpu_name
from vspec.ops import attention
from vspec.ops.precision import native_bf16

from .common import machine, race, race_options, table_or_threads, write_json

# (what it is, (batch, heads, tokens, head dim))
SHAPES = [("DeiT-Ti, batch 32", (32, 3, 197, 64)), ("DeiT-S, batch 32", (32, 6, 197, 64)),
          ("Swin-T stage 1 windows, batch 16", (16 * 64, 3, 49, 32)), ("BERT-base, 128 tokens", (8, 12, 128, 64)),
          ("BERT-base, 256 tokens", (4, 12, 256, 64)), ("BERT-base, 384 tokens", (2, 12, 384, 64)),
          ("BERT-base, 512 tokens", (2, 12, 512, 64)), ("BERT-base, 512 tokens, batch 8", (8, 12, 512, 64)),
          ("1024 tokens", (1, 12, 1024, 64))]
MODES = {False: "forward+backward", True: "forward, autograd off"}


def _step(path: str, inference: bool):
    def step(inputs, grad):
        q, k, v = inputs
        for t in inputs:
            t.grad = None
        with torch.set_grad_enabled(not inference):
            if path == "sdpa":
                out = F.scaled_dot_product_attention(q, k, v)
            elif inference:  # what `sdpa` runs there: the forward in slices of the map
                out = attention._short_inference(q, k, v, None, q.shape[-1] ** -0.5, 0.0)
            else:
                out = attention.ShortAttention.apply(q, k, v, None, q.shape[-1] ** -0.5, 0.0)
        if not inference:
            out.backward(grad)
    return step


def measure(shape: tuple[int, ...], rounds: int, inference: bool = False) -> dict:
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(shape, generator=g).bfloat16().requires_grad_() for _ in range(3)]
    grad = torch.randn(shape, generator=g).bfloat16()
    paths = {"sdpa": _step("sdpa", inference), "short": _step("short", inference)}
    times = race(paths, lambda step, x: step(x, grad), inputs, rounds)
    ratios = sorted(a / b for a, b in zip(times["sdpa"], times["short"]))
    with torch.set_grad_enabled(not inference):
        chosen = "short" if attention.short_path(*inputs) else "sdpa"
    ratio = statistics.median(ratios)
    return {"shape": list(shape), "sdpa_ms": 1e3 * statistics.median(times["sdpa"]),
            "short_ms": 1e3 * statistics.median(times["short"]), "ratio": ratio, "ratio_min": ratios[0],
            "ratio_max": ratios[-1], "chosen": chosen, "agrees": (ratio > 1) == (chosen == "short")}


def table(result: dict) -> str:
    """docs/speed.md's table of one --json result."""
    lines = ["| shape | (batch, heads, tokens, head dim) | SDPA | ShortAttention | ratio, median [range] | chosen |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['what']} | {tuple(r['shape'])} | {r['sdpa_ms']:.1f} ms | {r['short_ms']:.1f} ms | "
                     f"{r['ratio']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] | {r['chosen']}"
                     f"{'' if r['agrees'] else ' (the measurement disagrees)'} |")
    m = result["machine"]
    lines += ["", f"{m['machine']}, {m['threads']} torch threads, CPU capability {m['cpu_capability']}, torch "
              f"{m['torch']}; bf16 {MODES[result.get('inference', False)]}, {result.get('rounds', '?')} paired rounds."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    race_options(ap, rounds=7)
    ap.add_argument("--inference", action="store_true", help="the forward alone, autograd off (where SDPA's flash "
                    "forward holds no map), instead of forward+backward")
    args = ap.parse_args()
    if table_or_threads(args, table):
        return
    print(f"machine: {cpu_name()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}; native bf16: {native_bf16() or 'no'}; "
          f"ShortAttention up to {attention.SHORT_KEYS} keys and {attention.MAP_ELEMENTS / 1e6:.1f} M map elements; "
          f"bf16 {MODES[args.inference]}, {args.rounds} rounds")
    rows = []
    for label, shape in SHAPES:
        r = measure(shape, args.rounds, args.inference)
        rows.append({"what": label, **r})
        print(f"  {label:34s} {str(tuple(shape)):20s} SDPA {r['sdpa_ms']:8.1f} ms  "
              f"ShortAttention {r['short_ms']:8.1f} ms"
              f"  ratio {r['ratio']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}]  chosen: {r['chosen']}"
              f"{'' if r['agrees'] else '  (the measurement disagrees)'}")
    if args.json:
        write_json(args.json, {"machine": machine({}), "rounds": args.rounds, "inference": args.inference,
                               "rows": rows})


if __name__ == "__main__":
    main()
