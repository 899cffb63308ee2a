"""The CUDA paths checked against the CPU, small: every family's forward pass and training step on `--device`
against the same model in float64 on the CPU (METHOD: a higher-precision reference). Forward in float32 (TF32
off) within 1e-4 of the largest logit, and under bf16 autocast within 5e-2 (bf16 keeps 8 bits of mantissa). The
training step (one SGD step, train mode, dropout off) as the relative error of the whole update,
||d_dev - d_64|| / ||d_64|| over all parameters, within max(1e-4, 4 x the CPU's own float32 error): batch-2
BatchNorm (Conformer, Refiner's DLA, SoT's DenseNet stem) makes some updates ill-conditioned in float32 on any
device, so the device must be as accurate as the CPU is. The training forward is the loop's
(`set_training_outputs(True)`): LV-ViT's MixToken mixes a fixed box (`fixed_box`: the same on every device), and a
head with a sample and a tokens output (the dense head) also takes the token-labeling step, the released relabel loss
against a (B, C, 2 + N) target (`vspec.train.token_labels.maps.relabel_target`'s shape, random soft labels), checked
the same way. Prints one line per model and writes OUT/gpu_checks.json;
exits 1 when a check fails. benchmarks/gpu_check.sh runs it first on a GPU machine; tests/test_gpu_bench.py runs
it with --device cpu (the CPU against itself: the paths run).

    python -m benchmarks.gpu_checks [--device cuda] [--out DIR]
"""

import argparse
import copy
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import vspec
from vspec.nn.head_outputs import head_loss
from vspec.nn.mix_token import TokenBox
from vspec.spec import override

from .common import ROOT, out_dir, write_json

# one preset of each family, shrunk to one block per stage (text: 32 tokens)
PRESETS = ("deit_tiny", "swin_tiny", "sot_tiny", "msf_vit_ti", "refined_vit_s", "dhvt_tiny_cifar_p4", "t2t_vit_7",
           "deit_tiny_irpe_k", "conformer_ti", "lvvit_s", "bert_base", "gpt2")
FP32_TOL, BF16_TOL = 1e-4, 5e-2
DROPS = ("drop", "drop_in", "attn_drop", "proj_drop", "hidden_drop", "drop_path")


def small(name: str):
    spec = vspec.load_spec(ROOT / f"specs/{name}.py")
    patterned = any(isinstance(s.block, (list, tuple)) for s in spec.stages)  # Refiner's, Conformer's: as they are
    changes = {} if patterned else {"depth": 1} if spec.isotropic else {
        f"stages.{i}.depth": 1 for i in range(len(spec.stages))}
    if spec.embedder.text:
        changes["embedder.seq_len"] = 32
    return without_dropout(override(spec, changes) if changes else spec)


def without_dropout(spec):
    """The spec with every dropout and stochastic-depth rate 0: the training step is then deterministic."""
    def zero(tree):
        if isinstance(tree, dict):
            return {k: 0.0 if k in DROPS and isinstance(v, float) else zero(v) for k, v in tree.items()}
        return [zero(v) for v in tree] if isinstance(tree, list) else tree

    return vspec.spec.from_dict(zero(vspec.spec.to_dict(spec)))


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()


def fixed_box(grid: tuple[int, int]) -> TokenBox:
    """MixToken's box, the same on every device and every call (the loop draws it from Python's `random`): rows
    from a quarter down, half the grid's height, columns from a quarter in, a third of its width."""
    hp, wp = grid
    return TokenBox(hp // 4, wp // 4, hp // 4 + max(hp // 2, 1), wp // 4 + max(wp // 3, 1), grid)


def token_labeled(spec) -> bool:
    """Whether the head has one sample and one tokens output: the token-labeling loss applies (LV-ViT's)."""
    return sorted(o.target for o in spec.head.outputs()) == ["sample", "tokens"]


def sgd_update(model, x, target) -> dict[str, torch.Tensor]:
    """The change of each parameter after one SGD step (lr 0.1) in train mode: the loss of `head_loss`, whose
    target is labels (B,) or a token-labeling target (B, C, 2 + N)."""
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    model.train().set_training_outputs(True, draw=fixed_box)  # the head's declared outputs, as vspec train
    head_loss(F.cross_entropy, model(x), target).backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.sub_(0.1 * p.grad)
    return {k: (p.detach() - before[k]).cpu().double() for k, p in model.named_parameters()}


def update_error(update: dict, reference: dict) -> float:
    num = sum((update[k] - r).square().sum() for k, r in reference.items())
    return (num / sum(r.square().sum() for r in reference.values()).clamp_min(1e-30)).sqrt().item()


def check(name: str, device: torch.device) -> dict:
    spec = small(name)
    torch.manual_seed(0)
    cpu = vspec.build(spec).eval()
    dev, ref = copy.deepcopy(cpu).to(device), copy.deepcopy(cpu).double()
    x = cpu.example_input(2)
    x64 = x.double() if x.is_floating_point() else x
    labels = torch.randint(max(spec.num_classes, 1), (2,))
    out = {"preset": name, "params": sum(p.numel() for p in cpu.parameters())}
    with torch.no_grad():
        want = ref(x64)
        out["forward_fp32"] = relative(dev(x.to(device)).cpu(), want)
        out["forward_fp32_cpu"] = relative(cpu(x), want)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out["forward_bf16"] = relative(dev(x.to(device)).cpu(), want)
    steps = {"train_step": (labels, labels)}
    if token_labeled(spec):  # soft labels for the class token (column 1) and each of the N tokens (2..)
        hp, wp = cpu.input_grid(x)
        soft = torch.rand(2, spec.num_classes, 2 + hp * wp, generator=torch.Generator().manual_seed(1),
                          dtype=torch.float64).softmax(dim=1)
        steps["token_labels"] = (soft.float(), soft)
    if spec.head.mixes_tokens:
        out["mix_token_box"] = list(fixed_box(cpu.input_grid(x)).corners)
    for name, (target, target64) in steps.items():
        reference = sgd_update(copy.deepcopy(ref), x64, target64)
        out[f"{name}_fp32"] = update_error(sgd_update(copy.deepcopy(dev), x.to(device), target.to(device)), reference)
        out[f"{name}_fp32_cpu"] = update_error(sgd_update(copy.deepcopy(cpu), x, target), reference)
    out["ok"] = out["forward_fp32"] <= FP32_TOL and out["forward_bf16"] <= BF16_TOL and all(
        out[f"{name}_fp32"] <= max(FP32_TOL, 4 * out[f"{name}_fp32_cpu"]) for name in steps)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--out", type=Path, default=out_dir(), help="writes OUT/gpu_checks.json (default: $OUT, else "
                                                               "runs/benchmarks/)")
    args = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 here
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device(args.device)
    results = []
    for name in args.presets.split(","):
        r = check(name, device)
        results.append(r)
        labels = (f"  token labels fp32 {r['token_labels_fp32']:.1e} (CPU {r['token_labels_fp32_cpu']:.1e})"
                  if "token_labels_fp32" in r else "")
        print(f"{name:20s} forward fp32 {r['forward_fp32']:.1e}  bf16 {r['forward_bf16']:.1e}  "
              f"train step fp32 {r['train_step_fp32']:.1e} (CPU {r['train_step_fp32_cpu']:.1e}){labels}  "
              f"{'ok' if r['ok'] else 'FAILED'}", flush=True)
    write_json(args.out / "gpu_checks.json", {"device": str(device), "tolerances": {
        "fp32": FP32_TOL, "bf16": BF16_TOL}, "results": results})
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
