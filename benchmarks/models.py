"""vspec presets against their twins with the same weights, on the CPU: deit_tiny and deit_small against timm's
vit_tiny_patch16_224 and vit_small_patch16_224, swin_tiny against timm's swin_tiny_patch4_window7_224, and (no timm
model exists) t2t_vit_14 and deit_tiny_irpe_k against the released formulations written in benchmarks/released.py
(T2T_ViT's performer with its einsums in float32; DeiT-with-iRPE's attention with the map materialised and the bias
gathered).

Prints images/s for forward (eval, no grad) and forward+backward (train mode), the vspec/reference ratio (> 1 means
vspec is faster), in each precision (`--precision`: fp32, and bf16 = both models under
`torch.autocast("cpu", dtype=torch.bfloat16)`; default both where the CPU computes bf16 natively, AMX or AVX-512 BF16,
fp32 alone elsewhere), and with both, vspec's bf16 against its own fp32. The header names the CPU, its flags, torch's
CPU capability (ATEN_CPU_CAPABILITY=avx2 picks the AVX2 kernels on an AVX-512 machine), the fast-path choices in
effect (benchmarks/common.py's `choices`) and the CPU's own matmul rate (2048^3) in each precision run. Beside each
images/s: MFU, the model's FLOP/s (forward = 2 x fvcore's MACs per image, forward+backward = 6 x) over the matmul
rate of the row's precision.

All the models of a mode (reference and vspec, in each precision) run back to back in every round (order
alternating), so that drifts in the machine's speed hit them all; images/s are medians over rounds, a ratio is the
median of the rounds' ratios. The C allocator keeps freed blocks for both sides (`--heap kept`, as `vspec train`
runs; `vspec.train.heap`): with glibc's default, timm's Swin-T bf16 forward ran at 36-51 img/s in different
processes of one machine (its stage-1 blocks of 32 MB and more are mapped and faulted in afresh at every step).

    python -m benchmarks.models [--models deit_tiny deit_small swin_tiny t2t_vit_14 deit_tiny_irpe_k]
                                [--precision fp32 bf16] [--batch-size N] [--rounds 15] [--threads N] [--json FILE]
                                [--heap kept|glibc]
    python -m benchmarks.models --table FILE.json    # the table of docs/speed.md (benchmarks/text.py's too)
"""

import argparse
import statistics
from pathlib import Path

import timm
import torch

import vspec
from vspec.convert import from_official, from_timm

from . import released
from .common import (
    DTYPES,
    ROOT,
    apply_heap,
    autocast,
    forward,
    forward_backward,
    header,
    heap_option,
    mfu,
    precisions,
    race,
    race_options,
    table_or_threads,
    write_json,
)

# vspec preset -> (the reference's name, default batch size)
PAIRS = {"deit_tiny": ("timm vit_tiny_patch16_224", 32), "deit_small": ("timm vit_small_patch16_224", 32),
         "swin_tiny": ("timm swin_tiny_patch4_window7_224", 16), "t2t_vit_14": ("released T2T_ViT", 16),
         "deit_tiny_irpe_k": ("released DeiT-with-iRPE", 32)}
# (mode, step, train mode, model FLOPs per MAC: a backward costs two forwards)
MODES = (("forward", forward, False, 2), ("forward+backward", forward_backward, True, 6))
# the released constructors' arguments of the presets without a timm twin
T2T_VIT_14 = dict(img_size=224, tokens_type="performer", in_chans=3, num_classes=1000, embed_dim=384, depth=14,
                  num_heads=6, mlp_ratio=3.0, qkv_bias=False, qk_scale=None, token_dim=64)
DEIT_TINY_IRPE_K = dict(img_size=224, patch_size=16, in_chans=3, num_classes=1000, embed_dim=192, depth=12,
                        num_heads=3, mlp_ratio=4.0, qkv_bias=True)


def pair(name: str, spec) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(reference, vspec model) with the same weights: the reference drawn, vspec's converted from it."""
    if name == "t2t_vit_14":
        ref = released.T2TViT(T2T_VIT_14)
        return ref, from_official("t2t", ref.state_dict(), T2T_VIT_14)
    if name == "deit_tiny_irpe_k":
        ref = released.IRPEDeiT(DEIT_TINY_IRPE_K, "k")
        with torch.no_grad():  # zero-initialised in the release: drawn, so that the bias matters
            for p in ref.parameters():
                p.add_(torch.randn_like(p) * 0.02)
        return ref, from_official("irpe", ref.state_dict(), released.irpe_config(DEIT_TINY_IRPE_K, "k"))
    ref = timm.create_model(PAIRS[name][0].split()[1], pretrained=False, drop_path_rate=spec.drop_path)
    return ref, from_timm(ref, spec)


def race_precisions(ref: torch.nn.Module, ours: torch.nn.Module, step, x, rounds: int, run: list[str]) -> dict:
    """Seconds per step of the reference and of vspec in each precision of `run` (bf16: under CPU bf16 autocast), all
    of them in the same rounds (`race`: back to back, order alternating), keyed (who, precision)."""
    contestants = {(who, p): (m, p) for p in run for who, m in (("reference", ref), ("vspec", ours))}

    def timed(entry, x):
        model, precision = entry
        with autocast(precision):
            step(model, x)

    return race(contestants, timed, x, rounds)


def report(model: str, reference: str, inputs: str, mode: str, unit: str, batch: int, times: dict,
           flops: float | None = None, rates: dict | None = None) -> list[dict]:
    """Prints and returns the rows of one mode's `race_precisions`: vspec against the reference in each precision,
    then vspec bf16 against vspec fp32 where both ran. `flops` per sample and the measured matmul `rates` (GFLOP/s
    per precision) give each side's MFU."""
    run = [p for p in DTYPES if ("vspec", p) in times]
    duels = [(("reference", p), ("vspec", p), reference) for p in run]
    if len(run) > 1:
        duels.append((("vspec", "fp32"), ("vspec", "bf16"), "vspec fp32"))
    rows = []
    for (who_a, pa), (_, pb), against in duels:
        ratios = sorted(a / b for a, b in zip(times[who_a, pa], times["vspec", pb]))  # per round: vspec / other
        r = row(model, against, inputs, mode, unit, batch / statistics.median(times[who_a, pa]),
                batch / statistics.median(times["vspec", pb]), ratios, precision=pb, reference_precision=pa,
                flops=flops, rates=rates)
        short = f"vspec-{pa}" if who_a == "vspec" else reference.split()[0]
        side = {k: f"{r[k + '_rate']:7.1f} {unit}" + (f" (MFU {100 * r[k + '_mfu']:4.1f} %)" if k + "_mfu" in r else "")
                for k in ("reference", "vspec")}
        print(f"  {mode:17s} {precision_label(r):12s} {short} {side['reference']}  vspec {side['vspec']}  ratio "
              f"vspec/{short} {r['ratio']:.3f} (median of rounds; range {ratios[0]:.3f}-{ratios[-1]:.3f})")
        rows.append(r)
    return rows


def compare(name: str, batch_size: int, rounds: int, run=("fp32",), rates: dict | None = None) -> list[dict]:
    """The rows of preset `name` against its reference (PAIRS), forward and forward+backward, in each precision of
    `run`; MFU where the matmul `rates` (GFLOP/s per precision) are given."""
    ref_name, default_batch = PAIRS[name]
    batch = batch_size or default_batch
    torch.manual_seed(0)
    spec = vspec.load_spec(ROOT / f"specs/{name}.py")
    ref, ours = pair(name, spec)
    macs = vspec.profile(spec, crosscheck=False).macs
    x = torch.randn(batch, 3, 224, 224)
    with torch.no_grad():
        diff = (ref.eval()(x[:2]) - ours.eval()(x[:2])).abs().max().item()
    print(f"{name} vs {ref_name}: {macs / 1e9:.4f} GMACs per image (fvcore); same weights, "
          f"max |logit diff| {diff:.1e}; batch {batch}, 224 px, {rounds} rounds, {' and '.join(run)}")
    rows = []
    for label, step, train, flops_per_mac in MODES:
        for m in (ref, ours):
            m.train(train)
        times = race_precisions(ref, ours, step, x, rounds, list(run))
        rows += report(name, ref_name, f"batch {batch}, 224 px", label, "img/s", batch, times, flops_per_mac * macs,
                       rates)
    return rows


def row(model, reference, inputs, mode, unit, ref_rate, vspec_rate, ratios, *, precision="fp32",
        reference_precision=None, flops=None, rates=None) -> dict:
    """One line of the JSON and of the table: a model against its reference in one mode, vspec at `precision`, the
    reference at `reference_precision` (default the same); with `flops` per sample and the matmul `rates` (GFLOP/s
    per precision), each side's MFU: its model FLOP/s over the matmul rate of its precision."""
    out = {"model": model, "reference": reference, "inputs": inputs, "mode": mode, "unit": unit,
           "reference_rate": ref_rate, "vspec_rate": vspec_rate, "ratio": statistics.median(ratios),
           "ratio_min": min(ratios), "ratio_max": max(ratios), "rounds": len(ratios), "precision": precision,
           "reference_precision": reference_precision or precision}
    if flops is not None and rates:
        out["flops_per_sample"] = flops
        for side, rate, p in (("reference", ref_rate, out["reference_precision"]), ("vspec", vspec_rate, precision)):
            out[side + "_mfu"] = mfu(rate, flops, rates[p] * 1e9)
    return out


def precision_label(r: dict) -> str:
    """A row's precision: vspec's, "bf16 vs fp32" where the reference ran in another; fp32 for rows without one."""
    p = r.get("precision", "fp32")
    return p if r.get("reference_precision", p) == p else f"{p} vs {r['reference_precision']}"


def _footnote(key: str, value) -> str:
    if isinstance(value, dict) and all(isinstance(v, bool) for v in value.values()):  # CPU flags
        off = [k for k, v in value.items() if not v]
        return f"{key} " + " ".join(k for k, v in value.items() if v) + (f" (not {' '.join(off)})" if off else "")
    if isinstance(value, dict):
        return f"{key} " + ", ".join(f"{k} {v}" for k, v in value.items())
    return f"{key} {value}"


def table(result: dict) -> str:
    """docs/speed.md's table of one result (benchmarks/models.py's or benchmarks/text.py's --json); rows written before
    the precision and MFU were recorded read as fp32, MFU blank."""
    lines = ["| model | against | inputs | mode | precision | reference | vspec | vspec / reference, median [range] | "
             "MFU reference | MFU vspec |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        mfus = " | ".join("" if r.get(k) is None else f"{100 * r[k]:.1f} %" for k in ("reference_mfu", "vspec_mfu"))
        lines.append(f"| {r['model']} | {r['reference']} | {r['inputs']} | {r['mode']} | {precision_label(r)} | "
                     f"{r['reference_rate']:.1f} {r['unit']} | {r['vspec_rate']:.1f} {r['unit']} | "
                     f"{r['ratio']:.3f} [{r['ratio_min']:.3f}-{r['ratio_max']:.3f}] | {mfus} |")
    m = result["machine"]
    lines.append("")
    lines.append(f"{m['machine']}, {m['threads']} torch threads, CPU capability {m['cpu_capability']}, torch "
                 f"{m['torch']}" + "".join(", " + _footnote(k, v) for k, v in m.items()
                                           if k not in ("machine", "threads", "cpu_capability", "torch"))
                 + f"; {result['rows'][0]['rounds']} paired rounds.")
    return "\n".join(lines)


def write(path: Path | None, result: dict) -> None:
    if path is not None:
        write_json(path, result)
        print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--models", nargs="+", choices=sorted(PAIRS), default=list(PAIRS))
    ap.add_argument("--precision", nargs="+", choices=list(DTYPES), default=None,
                    help="default: fp32 and bf16 where the CPU computes bf16 natively (AMX, AVX-512 BF16), else fp32")
    ap.add_argument("--batch-size", type=int, default=0,
                    help="default: 32 for deit_tiny, deit_small and deit_tiny_irpe_k, 16 for swin_tiny and t2t_vit_14")
    race_options(ap, rounds=15)
    heap_option(ap)
    args = ap.parse_args()
    if table_or_threads(args, table):
        return
    run = precisions(args.precision)
    info = header({"timm": timm.__version__, **apply_heap(args.heap)}, run)
    rows = [r for name in args.models for r in compare(name, args.batch_size, args.rounds, run, info["matmul GFLOP/s"])]
    write(args.json, {"machine": info, "rows": rows})


if __name__ == "__main__":
    main()
