"""bf16 inference on packed weights (`vspec.ops.vit.packed`: each Parameter cast to bf16 and reordered into oneDNN's
blocked layout once) against oneDNN's linear on the bf16 cast made at every call (vit.PACK off), on the CPU: every
linear layer shape of the models' forward (their rows at the batch, input and output features, the activation fused
in; found by hooks on the models' linear layers), then each model's whole forward. Prints, per row, the milliseconds
of each, their ratio (> 1: packed faster) and its range.

The two run back to back in every round (order alternating); times are medians over rounds, the ratio the median of
the rounds' ratios. The C allocator keeps freed blocks (`common.apply_heap`, as `vspec train` does). Only a
CPU with native bf16 (AMX, AVX-512 BF16) takes the path; elsewhere there is nothing to measure and it says so.

    python -m benchmarks.packed [--models swin_tiny deit_tiny] [--rounds 7] [--threads N] [--json FILE]
    python -m benchmarks.packed --table FILE.json    # the table of docs/speed.md
"""

import argparse
import statistics
from collections import Counter

import torch

import vspec
from vspec.ops import vit

from .common import apply_heap, autocast, header, race, race_options, table_or_threads, write_json

BATCH = {"swin_tiny": 16, "deit_tiny": 32}  # benchmarks/models.py's


def _paired(step, x, rounds: int) -> dict:
    """Milliseconds with PACK off (plain) and on (packed), their ratio per round: median and range."""
    def timed(pack, x):
        before, vit.PACK = vit.PACK, pack
        try:
            with autocast("bf16"), torch.no_grad():
                step(x)
        finally:
            vit.PACK = before

    times = race({"plain": False, "packed": True}, timed, x, rounds)
    ratios = sorted(a / b for a, b in zip(times["plain"], times["packed"]))
    return {"plain_ms": 1e3 * statistics.median(times["plain"]), "packed_ms": 1e3 * statistics.median(times["packed"]),
            "ratio": statistics.median(ratios), "ratio_min": ratios[0], "ratio_max": ratios[-1]}


def layer_shapes(model: torch.nn.Module, x: torch.Tensor) -> Counter:
    """(rows, in, out, act) of each linear layer call in one bf16 forward of `model` on x, with their counts."""
    shapes, hooks = Counter(), []
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            hooks.append(m.register_forward_hook(lambda m, a, y: shapes.update(
                [(a[0].numel() // a[0].shape[-1], m.in_features, m.out_features, getattr(m, "act", None))])))
    with autocast("bf16"), torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return shapes


def measure_layer(rows: int, d_in: int, d_out: int, act: str | None, rounds: int) -> dict:
    """One linear layer's packed and plain bf16 inference on a (rows, d_in) input."""
    g = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.randn(d_out, d_in, generator=g) * d_in**-0.5)
    b = torch.nn.Parameter(torch.zeros(d_out))
    x = torch.randn(rows, d_in, generator=g).bfloat16()
    return _paired(lambda x: vit.linear(x, w, b, act), x, rounds)


def measure_model(name: str, batch: int, rounds: int) -> list[dict]:
    """The rows of one model: each linear layer shape of its forward, then the whole forward."""
    model = vspec.create_model(name).eval()
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    rows = []
    order = sorted(layer_shapes(model, x).items(), key=lambda kv: (*kv[0][:3], str(kv[0][3])))  # by shape, then act
    for (n, d_in, d_out, act), calls in order:
        r = {"model": name, "shape": [n, d_in, d_out], "act": act, "calls": calls,
             **measure_layer(n, d_in, d_out, act, rounds)}
        rows.append(r)
        print(f"  {name} linear {str(tuple(r['shape'])):20s} {act or '':5s} x{calls:<3d} {_line(r)}", flush=True)
    r = {"model": name, "shape": None, "batch": batch, **_paired(model, x, rounds)}
    print(f"  {name} forward, batch {batch}: {_line(r)}", flush=True)
    return rows + [r]


def _line(r: dict) -> str:
    return (f"plain {r['plain_ms']:7.2f} ms  packed {r['packed_ms']:7.2f} ms  ratio {r['ratio']:.3f} "
            f"[{r['ratio_min']:.3f}-{r['ratio_max']:.3f}]")


def table(result: dict) -> str:
    """The table of one --json result."""
    lines = ["| model | linear layer (rows, in, out) | plain | packed | ratio, median [range] |",
             "|---|---|---|---|---|"]
    for r in result["rows"]:
        what = (f"({', '.join(map(str, r['shape']))}){' ' + r['act'] if r['act'] else ''} x{r['calls']}"
                if r["shape"] else f"**whole forward**, batch {r['batch']}")
        lines.append(f"| {r['model']} | {what} | {r['plain_ms']:.2f} ms | {r['packed_ms']:.2f} ms | "
                     f"{r['ratio']:.3f} [{r['ratio_min']:.3f}-{r['ratio_max']:.3f}] |")
    m = result["machine"]
    lines += ["", f"{m['machine']}, {m['threads']} torch threads, CPU capability {m['cpu_capability']}, torch "
              f"{m['torch']}, heap {m['heap']}; {result['rounds']} paired rounds."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    race_options(ap, rounds=7)
    ap.add_argument("--models", nargs="+", choices=sorted(BATCH), default=list(BATCH))
    args = ap.parse_args()
    if table_or_threads(args, table):
        return
    machine = header(apply_heap("kept"))
    if not machine["choices"]["bf16_packed_weights"]:  # common.choices: native bf16, oneDNN's linear and reorder
        print("no packed path here (no native bf16, oneDNN's linear or its weight reorder): nothing to measure")
        return
    rows = [r for name in args.models for r in measure_model(name, BATCH[name], args.rounds)]
    if args.json:
        write_json(args.json, {"machine": machine, "rounds": args.rounds, "rows": rows})


if __name__ == "__main__":
    main()
