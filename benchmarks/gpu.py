"""vspec against timm, the released formulations and Hugging Face on one device (a GPU where there is one),
inference and the training step, eager and under torch.compile, with the same weights.

Cases: deit_small, vit_base and swin_tiny against timm; t2t_vit_14 against the released T2T-ViT
(benchmarks/released.py); refined_vit_s against the released Refined-ViT (benchmarks/refiner.py); sot_small and
msf_vit_s alone (no reference formulation of the whole model exists: their figures are vspec's rate and MFU);
bert_base and gpt2 against Hugging Face's BertModel / GPT2Model with SDPA attention on a right-padded batch (B x L,
random lengths, the attention mask given). Modes: inference (batch 256, no grad, eval; bf16 autocast and
channels-last images on CUDA) and the training step (batch 128, AdamW, bf16 autocast on CUDA; cross-entropy on
random labels for images, the mean square of the last hidden states for text bodies), each eager and compiled
(`torch.compile`, inductor; `--compile-backend eager` traces without code generation, as `--quick` does on a CPU).

Timing: the two models of a case run back to back in every round, order alternating (benchmarks/common.py's
race; a round is `--repeat` steps, synchronised after the last on CUDA); rates are medians over rounds, the
ratio vspec / reference (> 1: vspec is faster) is the median of the rounds' ratios, with their range. Peak
memory: what one step allocates on CUDA beyond what was resident before it (the weights). MFU: the
model's FLOPs (2 x MACs per sample forward, 6 x training, MACs from vspec.profile) per second over the device's
dense bf16 peak, read from the device name (`PEAKS`; the peak used is written beside it; on a CPU or a device
not in the table, no MFU, the reason written instead: `mfu_omitted`). Then
MSF's attention alone at 3136 tokens (56 x 56, batch 2), vspec's against the released formulation
(benchmarks/msf.py): speed-up and peak memory. Order: every case eager, MSF's attention, then the compiled runs
(compiling takes the longest); OUT/gpu.json is rewritten after each row, so a run cut short keeps what it measured.

    python -m benchmarks.gpu [--quick] [--device cuda|cpu] [--cases deit_small,...] [--rounds 7]
                             [--modes infer,train] [--no-compile | --compile-cases A,B] [--compile-modes train]
                             [--repeat 4] [--out DIR]
                                                          # writes DIR/gpu.json ($OUT, else runs/benchmarks/)
    python -m benchmarks.gpu --table FILE.json                                     # the table of docs/speed.md

`--quick`: every case at depth 1 (one block per stage), batch 2 (text: 2 x 16), 1 round, compiled only deit_small
and bert_base, on whatever device: a check that every path runs (tests/test_gpu_bench.py runs it on the CPU), not a
measurement.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import vspec
from vspec.nn.head_outputs import head_loss  # the loss of a head's training outputs (tensors too)
from vspec.spec import override

from . import msf, refiner, released  # MSF's attention race, the released Refined-ViT, the released T2T-ViT
from .common import ROOT, mfu, out_dir, race, sync, write_json

# dense bf16 tensor-core peak FLOP/s by a part of the device name, the first that matches (NVIDIA's data sheets
# give bf16 "with sparsity": the dense peak is half of it)
PEAKS = {
    "H200": 989e12,  # NVIDIA H200 Tensor Core GPU data sheet: BF16 1,979 TFLOPS with sparsity (SXM)
    "H100 SXM": 989e12,  # NVIDIA H100 Tensor Core GPU data sheet: BF16 1,979 TFLOPS with sparsity (SXM)
    "H100 PCIe": 756e12,  # the same data sheet: 1,513 TFLOPS with sparsity (PCIe)
    "H100 NVL": 835e12,  # the same data sheet: 1,671 TFLOPS with sparsity (NVL)
    "H100": 989e12,  # "NVIDIA H100 80GB HBM3": the SXM part
    "A100": 312e12,  # NVIDIA A100 Tensor Core GPU data sheet: BF16 312 TFLOPS (624 with sparsity)
    "L40S": 362e12,  # NVIDIA L40S data sheet: BF16 362.05 TFLOPS (733 with sparsity)
    "L4": 121e12,  # NVIDIA L4 Tensor Core GPU data sheet: BF16 242 TFLOPS with sparsity
    "A10": 125e12,  # NVIDIA A10 Tensor Core GPU data sheet: BF16 125 TFLOPS (250 with sparsity)
}
IMAGE_CASES = ("deit_small", "vit_base", "swin_tiny", "t2t_vit_14", "refined_vit_s", "sot_small", "msf_vit_s")
TEXT_CASES = ("bert_base", "gpt2")


class TextBody(nn.Module):
    """A text body's last hidden states from (input_ids, attention_mask): Hugging Face's model or vspec's."""

    def __init__(self, model: nn.Module, hf: bool):
        super().__init__()
        self.model, self.hf = model, hf

    def forward(self, ids, mask):
        if self.hf:
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.model.forward_features(ids, attention_mask=mask)


def _shallow(spec, quick: bool):
    """The preset, at depth 1 per stage under --quick."""
    if not quick:
        return spec
    if spec.isotropic:
        return override(spec, {"depth": 1})
    return override(spec, {f"stages.{i}.depth": 1 for i in range(len(spec.stages))})


def image_pair(name: str, quick: bool) -> tuple[nn.Module, nn.Module | None, str | None, object]:
    """(vspec model, reference or None, the reference's name, vspec's spec) with the same weights."""
    import timm

    from vspec.convert import from_official, from_timm

    if name == "refined_vit_s":  # its block pattern is the released one: --quick keeps one compute, one shared
        config = dict(refiner.CONFIG, depth=[False, True] if quick else refiner.CONFIG["depth"],
                      apply_transform=[False] * (2 if quick else 16))
        ref, ours = refiner.pair(config)
        return ours, ref, "released Refined-ViT", ours.spec
    spec = _shallow(vspec.load_spec(ROOT / f"specs/{name}.py"), quick)
    if name == "deit_small":
        ref = timm.create_model("deit_small_patch16_224", depth=spec.stages[0].depth)
        return from_timm(ref, spec), ref, "timm deit_small_patch16_224", spec
    if name == "vit_base":
        ref = timm.create_model("vit_base_patch16_224", depth=spec.stages[0].depth)
        return from_timm(ref, spec), ref, "timm vit_base_patch16_224", spec
    if name == "swin_tiny":
        ref = timm.create_model("swin_tiny_patch4_window7_224", depths=tuple(s.depth for s in spec.stages))
        return from_timm(ref, spec), ref, "timm swin_tiny_patch4_window7_224", spec
    if name == "t2t_vit_14":
        config = dict(img_size=224, tokens_type="performer", in_chans=3, num_classes=1000, embed_dim=384,
                      depth=spec.stages[0].depth, num_heads=6, mlp_ratio=3.0, qkv_bias=False, qk_scale=None,
                      token_dim=64)
        ref = released.T2TViT(config)
        return from_official("t2t", ref.state_dict(), config), ref, "released T2T-ViT", spec
    return vspec.build(spec), None, None, spec  # sot_small, msf_vit_s


def text_pair(name: str, quick: bool) -> tuple[nn.Module, nn.Module, str, object]:
    import transformers

    from vspec.convert import from_hf

    layers = {"num_hidden_layers": 1} if quick and name == "bert_base" else {"n_layer": 1} if quick else {}
    config = (transformers.BertConfig if name == "bert_base" else transformers.GPT2Config)(**layers)
    config._attn_implementation = "sdpa"
    ref = (transformers.BertModel if name == "bert_base" else transformers.GPT2Model)(config)
    ours = from_hf(ref)
    return TextBody(ours, hf=False), TextBody(ref, hf=True), f"Hugging Face {type(ref).__name__} (SDPA)", ours.spec


def inputs(kind: str, batch: int, seq: int, device: torch.device, classes: int = 1000):
    g = torch.Generator().manual_seed(0)
    if kind == "image":
        x = torch.randn(batch, 3, 224, 224, generator=g).to(device)
        if device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        return (x,), torch.randint(classes, (batch,), generator=g).to(device)
    lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=g)
    lengths[0] = seq
    mask = (torch.arange(seq)[None] < lengths[:, None]).long()
    ids = torch.randint(1, 30000, (batch, seq), generator=g) * mask
    return (ids.to(device), mask.to(device)), None


def stepper(model: nn.Module, mode: str, args, labels, device: torch.device, repeat: int = 1):
    """`repeat` inference or training steps of `model` (AdamW; bf16 autocast on CUDA), synchronised after the
    last."""
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(
        "cpu", enabled=False)
    if mode == "infer":
        def step():
            for _ in range(repeat):
                with torch.no_grad(), autocast:
                    model(*args)
            sync(device)
        return step
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if hasattr(model, "set_training_outputs"):  # a vspec model trains on its head's declared outputs, as vspec train
        model.set_training_outputs(True)

    def step():
        for _ in range(repeat):
            optimizer.zero_grad(set_to_none=True)
            with autocast:
                out = model(*args)
                loss = head_loss(F.cross_entropy, out, labels) if labels is not None else \
                    out.float().square().mean()
            loss.backward()
            optimizer.step()
        sync(device)
    return step


def peak_bytes(model: nn.Module, mode: str, args, labels, device: torch.device) -> int | None:
    """CUDA memory that one step needs beyond what is resident before it (the weights): activations, and in
    training the gradients and a fresh AdamW state."""
    if device.type != "cuda":
        return None
    for p in model.parameters():
        p.grad = None
    sync(device)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    stepper(model, mode, args, labels, device)()
    return torch.cuda.max_memory_allocated() - base


def device_peak(device: torch.device) -> tuple[str, float | None, str | None]:
    """(the device's name, its dense bf16 peak FLOP/s or None, why there is none)."""
    if device.type != "cuda":
        return "cpu", None, "a CPU (no dense bf16 peak in the table)"
    name = torch.cuda.get_device_name(device)
    peak = peak_for(name)
    return name, peak, None if peak else f"{name} is not in benchmarks/gpu.py's table of dense bf16 peaks"


def peak_for(name: str) -> float | None:
    """The dense bf16 peak FLOP/s of a CUDA device by its name (`PEAKS`), or None."""
    return next((peak for key, peak in PEAKS.items() if key in name), None)


def run_case(name: str, args, device: torch.device, peak: float | None, compiled: bool, report) -> None:
    """Races the case in each mode, eager or compiled; hands each row to `report`."""
    kind = "text" if name in TEXT_CASES else "image"
    torch.manual_seed(0)
    ours, ref, ref_name, spec = (text_pair if kind == "text" else image_pair)(name, args.quick)
    seq = 16 if args.quick else 128
    profiled = spec if kind == "image" else override(spec, {"embedder.seq_len": seq})
    macs = vspec.profile(profiled, crosscheck=False).macs
    for mode in args.modes if not compiled else args.compile_modes:
        batch = 2 if args.quick else (32 if kind == "text" else 256 if mode == "infer" else 128)
        x, labels = inputs(kind, batch, seq, device)
        models = {"vspec": ours, **({"reference": ref} if ref is not None else {})}
        steps, compiled_or_eager = {}, {}
        for who, model in models.items():
            model = model.to(device).train(mode == "train")
            if kind == "image" and device.type == "cuda":
                model = model.to(memory_format=torch.channels_last)
            if compiled:
                torch._dynamo.reset()
                model = torch.compile(model, backend=args.compile_backend)
            compiled_or_eager[who] = model
            steps[who] = stepper(model, mode, x, labels, device, args.repeat)
        times = race(steps, lambda step, _: step(), None, args.rounds)  # benchmarks/common.py's
        rate = {who: batch * args.repeat / statistics.median(t) for who, t in times.items()}
        flops = (2 if mode == "infer" else 6) * macs
        row = {"case": name, "kind": kind, "mode": mode, "compiled": compiled, "batch": batch,
               "seq_len": seq if kind == "text" else None, "reference": ref_name, "macs_per_sample": macs,
               "rate": rate,
               "peak_bytes": {who: peak_bytes(m, mode, x, labels, device) for who, m in compiled_or_eager.items()},
               "mfu": {who: mfu(r, flops, peak) for who, r in rate.items()}}
        if "reference" in times:
            ratios = sorted(a / b for a, b in zip(times["reference"], times["vspec"]))
            row["ratio"] = {"median": statistics.median(ratios), "range": [ratios[0], ratios[-1]]}
        report(row)


def _line(row: dict) -> str:
    unit = "seq/s" if row["kind"] == "text" else "img/s"
    text = (f"{row['case']:14s} {row['mode']:5s} {'compiled' if row['compiled'] else 'eager':8s} "
            f"batch {row['batch']:3d}  vspec {row['rate']['vspec']:9.1f} {unit}")
    if "ratio" in row:
        r = row["ratio"]
        text += (f"  {row['reference']} {row['rate']['reference']:9.1f}  ratio {r['median']:.3f} "
                 f"[{r['range'][0]:.3f}-{r['range'][1]:.3f}]")
    if row["mfu"]["vspec"] is not None:
        text += f"  MFU {100 * row['mfu']['vspec']:.1f} %"
    if row["peak_bytes"]["vspec"] is not None:
        text += f"  peak {row['peak_bytes']['vspec'] / 2**30:.2f} GiB"
    return text


def table(result: dict) -> str:
    """The table (docs/speed.md) of one device's JSON."""
    peak = result["peak_flops"]
    lines = [f"{result['device']} ("
             + (f"dense bf16 peak used for MFU: {peak / 1e12:.0f} TFLOP/s" if peak else
                f"MFU omitted: {result.get('mfu_omitted', 'no dense bf16 peak known')}") + "), "
             f"torch {result['torch']}"
             + ("" if result.get("complete", True) else " (cut short: the rows it measured)") + ":", "",
             "| case | mode | graph | batch | vspec / s | reference / s | ratio (range) | MFU vspec "
             "| peak vspec / ref |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in result["cases"]:
        ref = row["rate"].get("reference")
        ratio = row.get("ratio")
        peaks = row["peak_bytes"]
        lines.append(
            f"| {row['case']} | {row['mode']} | {'compiled' if row['compiled'] else 'eager'} | {row['batch']} | "
            f"{row['rate']['vspec']:.1f} | {'-' if ref is None else f'{ref:.1f}'} | "
            + ("-" if ratio is None else f"{ratio['median']:.3f} ({ratio['range'][0]:.3f}-{ratio['range'][1]:.3f})")
            + f" | {'-' if row['mfu']['vspec'] is None else '%.1f %%' % (100 * row['mfu']['vspec'])} | "
            + ("-" if peaks["vspec"] is None else f"{peaks['vspec'] / 2**30:.2f}"
               + ("" if peaks.get("reference") is None else f" / {peaks['reference'] / 2**30:.2f}") + " GiB")
            + " |")
    msf = result.get("msf_attention")
    if msf:
        v = msf["cores"]["vspec"]
        lines += ["", f"MSF attention alone, batch {msf['batch']} x {msf['tokens']} tokens: vspec x{v['speedup']:.2f} "
                      f"({v['speedup_range'][0]:.2f}-{v['speedup_range'][1]:.2f}) the speed of the released "
                      f"formulation, at x{v['memory_ratio']:.3f} its peak memory."]
    loops = result.get("train_loop")  # benchmarks/train_overhead.py's runs, added to a device's JSON
    if loops:
        def cell(part, key):
            return f"{part[key]:.0f}" if part else "-"
        lines += ["", f"tools/train.py's whole loop against the bare training step (deit_tiny, batch "
                      f"{loops[0]['batch']}, {loops[0]['img_size']} px, img/s; run: one machine start):", "",
                  "| run | normalised on | bare step | loop, synthetic | its data path | loop, JPEGs | its data path |",
                  "|---|---|---|---|---|---|---|"]
        for r in loops:
            syn, jpg = r.get("synthetic"), r.get("imagefolder")
            lines.append(f"| {r['run']} | {r['normalise_on']} | {r['bare']:.0f} | {cell(syn, 'loop')} | "
                         f"{cell(syn, 'data_path') if syn and 'data_path' in syn else '-'} | {cell(jpg, 'loop')} | "
                         f"{cell(jpg, 'data_path') if jpg and 'data_path' in jpg else '-'} |")
    checks = result.get("checks")  # benchmarks/gpu_checks.py's
    if checks:
        ok = [r["preset"] for r in checks["results"] if r["ok"]]
        lines += ["", f"CUDA against float64 on the CPU (benchmarks/gpu_checks.py): {len(ok)} of "
                      f"{len(checks['results'])} families within tolerance (forward fp32 <= "
                      f"{checks['tolerances']['fp32']}, bf16 autocast <= {checks['tolerances']['bf16']}, "
                      f"the training step's update within "
                      f"max({checks['tolerances']['fp32']}, 4 x the CPU's own float32 error))."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--quick", action="store_true", help="every case small, 1 round: a check that it runs")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", default=",".join(IMAGE_CASES + TEXT_CASES))
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--rounds", type=int, default=None, help="default 7 (1 with --quick)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--compile-cases", default=None,
                    help="the cases also run compiled (default: every one; with --quick deit_small and bert_base, "
                         "whose tracing is the check)")
    ap.add_argument("--compile-backend", default=None, help="default inductor (eager with --quick on a CPU)")
    ap.add_argument("--msf-tokens", type=int, default=None, help="MSF's attention race: tokens (default 3136; "
                                                                   "196 with --quick)")
    ap.add_argument("--compile-modes", default=None, help="the modes also run compiled (default: --modes)")
    ap.add_argument("--repeat", type=int, default=None, help="steps per timed round (default 4 on CUDA, else 1)")
    ap.add_argument("--out", type=Path, default=out_dir(), help="writes OUT/gpu.json (default: $OUT, else "
                                                               "runs/benchmarks/)")
    ap.add_argument("--table", type=Path, metavar="FILE.json",
                    help="print the docs/speed.md table of a result and stop")
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    args.cases, args.modes = args.cases.split(","), args.modes.split(",")
    args.compile_modes = args.modes if args.compile_modes is None else args.compile_modes.split(",")
    unknown = [c for c in args.cases if c not in IMAGE_CASES + TEXT_CASES] + \
              [m for m in args.modes + args.compile_modes if m not in ("infer", "train")]
    if unknown:
        ap.error(f"unknown case or mode: {', '.join(unknown)}")
    args.rounds = args.rounds or (1 if args.quick else 7)
    if args.quick and args.compile_cases is None:
        args.compile_cases = "deit_small,bert_base"  # dynamo's tracing takes seconds a model: one of each kind
    device = torch.device(args.device)
    args.repeat = args.repeat or (4 if device.type == "cuda" and not args.quick else 1)
    if args.repeat < 1 or args.rounds < 1:
        ap.error("--repeat and --rounds must be >= 1")
    if args.compile_backend is None:
        args.compile_backend = "eager" if args.quick and device.type == "cpu" else "inductor"
    name, peak, omitted = device_peak(device)
    print(f"device: {name}; " + (f"dense bf16 peak for MFU: {peak / 1e12:.0f} TFLOP/s" if peak else
                                 f"MFU omitted: {omitted}")
          + f"; torch {torch.__version__}; {args.rounds} rounds of {args.repeat} steps", flush=True)
    result = {"device": name, "peak_flops": peak, "mfu_omitted": omitted, "torch": torch.__version__,
              "quick": args.quick,
              "rounds": args.rounds, "repeat": args.repeat, "complete": False, "cases": []}
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every row: a run cut short keeps what it measured
        write_json(args.out / "gpu.json", result)

    def report(row: dict) -> None:
        result["cases"].append(row)
        print(_line(row), flush=True)
        save()

    for case in args.cases:
        run_case(case, args, device, peak, False, report)
    tokens = args.msf_tokens or (196 if args.quick else 3136)
    result["msf_attention"] = {"batch": 2, "tokens": tokens,
                               "cores": msf.race_cores(2, tokens, args.rounds, device.type)}
    save()
    compiled = [] if args.no_compile else args.cases if args.compile_cases is None else \
        [c for c in args.cases if c in args.compile_cases.split(",")]
    for case in compiled:
        run_case(case, args, device, peak, True, report)
    result["complete"] = True
    save()
    print(f"written: {args.out / 'gpu.json'}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
