"""vspec presets against their twins with the same weights, on the CPU: deit_tiny against timm's
vit_tiny_patch16_224, swin_tiny against timm's swin_tiny_patch4_window7_224, and (no timm model exists) t2t_vit_14
and deit_tiny_irpe_k against the released formulations written in benchmarks/released.py (T2T_ViT's performer
with its einsums in float32; DeiT-with-iRPE's attention with the map materialised and the bias gathered).

Prints images/s for forward (eval, no grad) and forward+backward (train mode), the vspec/reference ratio
(> 1 means vspec is faster), the CPU capability torch's kernels use (ATEN_CPU_CAPABILITY=avx2 picks the AVX2
ones on an AVX-512 machine), the machine's measured fp32 matmul GFLOP/s and each model's achieved
GFLOP/s (forward = 2 x MACs per image from vspec.profile; forward+backward = 3 x that).

The two models run back to back in every round (order alternating), so that drifts in the machine's
speed hit both; images/s are medians over rounds, the ratio is the median of the rounds' ratios.

    python -m benchmarks.models [--models deit_tiny swin_tiny t2t_vit_14 deit_tiny_irpe_k] [--batch-size N]
                                [--rounds 15] [--threads N] [--json FILE]
    python -m benchmarks.models --table FILE.json    # the table of docs/speed.md (benchmarks/text.py's too)
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import timm
import torch

import vspec
from vspec.compare import cpu_name
from vspec.convert import from_official, from_timm

from . import released
from .common import ROOT, forward, forward_backward, machine, race, write_json

# vspec preset -> (the reference's name, default batch size)
PAIRS = {"deit_tiny": ("timm vit_tiny_patch16_224", 32), "swin_tiny": ("timm swin_tiny_patch4_window7_224", 16),
         "t2t_vit_14": ("released T2T_ViT", 16), "deit_tiny_irpe_k": ("released DeiT-with-iRPE", 32)}
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


def matmul_gflops(n: int = 2048, reps: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9


def compare(name: str, batch_size: int, rounds: int) -> list[dict]:
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
          f"max |logit diff| {diff:.1e}; batch {batch}, 224 px, {rounds} rounds")
    rows = []
    for label, step, train, flop_factor in (
        ("forward", forward, False, 2),
        ("forward+backward", forward_backward, True, 6),
    ):
        for m in (ref, ours):
            m.train(train)
        t = race({"ref": ref, "vspec": ours}, step, x, rounds)
        ips = {k: batch / statistics.median(v) for k, v in t.items()}
        gf = {k: v * macs * flop_factor / 1e9 for k, v in ips.items()}
        ratios = sorted(a / b for a, b in zip(t["ref"], t["vspec"]))  # per round: vspec img/s / reference img/s
        short = ref_name.split()[0]
        print(
            f"  {label:17s} {short} {ips['ref']:7.1f} img/s ({gf['ref']:5.1f} GFLOP/s)  "
            f"vspec {ips['vspec']:7.1f} img/s ({gf['vspec']:5.1f} GFLOP/s)  "
            f"ratio vspec/{short} {statistics.median(ratios):.3f} "
            f"(median of rounds; range {ratios[0]:.3f}-{ratios[-1]:.3f})"
        )
        rows.append(row(name, ref_name, f"batch {batch}, 224 px", label, "img/s", ips["ref"], ips["vspec"], ratios))
    return rows


def row(model, reference, inputs, mode, unit, ref_rate, vspec_rate, ratios) -> dict:
    """One line of the JSON and of the table: a model against its reference in one mode."""
    return {"model": model, "reference": reference, "inputs": inputs, "mode": mode, "unit": unit,
            "reference_rate": ref_rate, "vspec_rate": vspec_rate, "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "rounds": len(ratios)}


def table(result: dict) -> str:
    """docs/speed.md's table of one result (benchmarks/models.py's or benchmarks/text.py's --json)."""
    lines = ["| model | against | inputs | mode | reference | vspec | vspec / reference, median [range] |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['model']} | {r['reference']} | {r['inputs']} | {r['mode']} | "
                     f"{r['reference_rate']:.1f} {r['unit']} | {r['vspec_rate']:.1f} {r['unit']} | "
                     f"{r['ratio']:.3f} [{r['ratio_min']:.3f}-{r['ratio_max']:.3f}] |")
    m = result["machine"]
    lines.append("")
    lines.append(f"{m['machine']}, {m['threads']} torch threads, CPU capability {m['cpu_capability']}, torch "
                 f"{m['torch']}" + "".join(f", {k} {v}" for k, v in m.items()
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
    ap.add_argument("--batch-size", type=int, default=0,
                    help="default: 32 for deit_tiny and deit_tiny_irpe_k, 16 for swin_tiny and t2t_vit_14")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON (docs/cpu/)")
    ap.add_argument("--table", type=Path, metavar="FILE.json", help="print the docs/speed.md table of a result; stop")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"machine: {cpu_name()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}, timm {timm.__version__}, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )
    gflops = matmul_gflops()
    print(f"fp32 matmul (2048^3): {gflops:.1f} GFLOP/s")
    rows = [r for name in args.models for r in compare(name, args.batch_size, args.rounds)]
    write(args.json, {"machine": machine({"timm": timm.__version__, "fp32 matmul GFLOP/s": round(gflops, 1)}),
                      "rows": rows})


if __name__ == "__main__":
    main()
