"""Refined-ViT-S (specs/refined_vit_s.py, built by vspec) against the released formulation, same
weights, on the CPU.

The reference (`Reference` below) is written here from the released model's description (Refiner
paper and docs/families/refiner.md, The released Refined-ViT) with the released parameter names: CNN
patch stem (conv 7x7 s2 ->
3x3 -> 3x3, each + BN + ReLU, then a patch / 2 projection), class token, learned position embedding;
blocks x + 2 attn(LN(x / 2)), x + 2 mlp(LN(x / 2)), LayerNorm eps 1e-6, MLP ratio 3 with a per-channel
output scale; compute blocks (even): q, k each scaled by sqrt(scale), A = softmax(q k^T) (+ scale x
the incoming map), A handed on; shared blocks (odd): values only, A' = adapt_bn(A_in + DLA(A_in)) x
scale with DLA = 1x1 conv H -> 3H + BN + ReLU6, depthwise 3x3 + BN + ReLU6, 1x1 conv 3H -> H + BN, the
incoming map handed on. Maps are materialised and every BatchNorm runs as its own op. vspec's model
is `vspec.convert.from_official("refiner", reference.state_dict(), config)`, so the weights are the
reference's by construction.

Checks first (one image): both models in float64 agree to 1e-9 (eval logits, train-mode logits with
BatchNorm on batch statistics, gradients of parameters of the stem, a compute and a shared block, the
MLP scale and the head), and in float32 vspec is no further from the float64 answer than the
reference is (within 3x, plus 1e-6 of the largest value; through 16 blocks of BatchNorm on attention
maps float32 gradients are ~1e-2 relative off in either model). Then images/s for forward (eval, no
grad) and forward+backward (train mode): the two models run back to back in every round (order
alternating); images/s are medians over rounds, the ratio vspec/reference (> 1: vspec is faster) is
the median of the rounds' ratios, with their range. The defaults (batch 8, 224 px, 7 rounds) take
about 5 minutes on a 2-core CPU.

    python -m benchmarks.refiner [--batch 8] [--rounds 7] [--img 224] [--threads N]
"""

import argparse
import copy
import math
import statistics

import attrs
import torch
import torch.nn.functional as F
from torch import nn

import vspec
from vspec.convert import from_official

from .common import ROOT, forward, forward_backward, header, race

# Refined-ViT-S as the released factory builds it (apply_transform off: every shared block's DLA has expansion 3),
# with the class-token head alone (return_dense and MixToken off)
CONFIG = dict(img_size=224, patch_size=16, embed_dim=384, depth=[False, True] * 8, apply_transform=[False] * 16,
              num_heads=12, mlp_ratio=3, qkv_bias=True, norm_layer="LayerNorm(eps=1e-6)", share_atten=True,
              head_expand=6, num_classes=1000, return_dense=False, mix_token=False)


class PatchStem(nn.Module):
    def __init__(self, dim: int, patch: int, width: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.conv3 = nn.Conv2d(2 * width, 4 * width, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * width)
        self.proj = nn.Conv2d(4 * width, dim, patch // 2, stride=patch // 2)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        return self.proj(x).flatten(2).transpose(1, 2)


class DLA(nn.Module):
    """The released "conv_exapnd": expansion, depthwise 3x3, projection, each conv followed by its BN."""

    def __init__(self, heads: int, expansion: int = 3):
        super().__init__()
        wide = heads * expansion
        self.conv_exp = nn.Conv2d(heads, wide, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(wide)
        self.depth_sep_conv = nn.Conv2d(wide, wide, 3, padding=1, groups=wide, bias=False)
        self.bn2 = nn.BatchNorm2d(wide)
        self.conv_pro = nn.Conv2d(wide, heads, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(heads)

    def forward(self, a):
        x = F.relu6(self.bn1(self.conv_exp(a)))
        x = F.relu6(self.bn2(self.depth_sep_conv(x)))
        return a + self.bn3(self.conv_pro(x))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, shared: bool, qkv_bias: bool):
        super().__init__()
        self.heads, self.shared, self.scale = heads, shared, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim if shared else 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        if shared:
            self.DLA = DLA(heads)
            self.adapt_bn = nn.BatchNorm2d(heads)

    def forward(self, x, maps):
        b, n, c = x.shape
        if self.shared:
            v = self.qkv(x).reshape(b, n, self.heads, c // self.heads).transpose(1, 2)
            a = self.adapt_bn(self.DLA(maps)) * self.scale
            out = maps  # the unrefined map goes on
        else:
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            s = math.sqrt(self.scale)
            a = ((q * s) @ (k * s).transpose(-2, -1)).softmax(dim=-1)
            if maps is not None:
                a = a + self.scale * maps
            out = a
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, c)), out


class Mlp(nn.Module):
    def __init__(self, dim: int, ratio: float):
        super().__init__()
        self.fc1 = nn.Linear(dim, int(dim * ratio))
        self.fc2 = nn.Linear(int(dim * ratio), dim)
        self.scale_channel = nn.Parameter(torch.full((dim,), 1e-5))

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x))) * self.scale_channel


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float, shared: bool, qkv_bias: bool):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads, shared, qkv_bias)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, mlp_ratio)

    def forward(self, x, maps):
        h, maps = self.attn(self.norm1(x * 0.5), maps)
        x = x + h / 0.5
        return x + self.mlp(self.norm2(x * 0.5)) / 0.5, maps


class Reference(nn.Module):
    """Refined-ViT (class-token head) in the released formulation, from `config` (CONFIG's keys)."""

    def __init__(self, config: dict):
        super().__init__()
        dim, grid = config["embed_dim"], config["img_size"] // config["patch_size"]
        self.patch_embed = PatchStem(dim, config["patch_size"])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, grid * grid + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, config["num_heads"], config["mlp_ratio"], shared, config["qkv_bias"])
                                    for shared in config["depth"])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, config["num_classes"])

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        maps = None
        for block in self.blocks:
            x, maps = block(x, maps)
        return self.head(self.norm(x)[:, 0])


def randomise_norms(model: nn.Module, generator: torch.Generator) -> None:
    """Non-trivial BatchNorm statistics and affines, so that eval exercises them."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                for t in (m.running_mean, m.weight, m.bias):
                    t.copy_(torch.randn(t.shape, generator=generator) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=generator) + 0.5)
                m.weight.add_(1)


def pair(config: dict, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """(reference, vspec) with the same weights."""
    torch.manual_seed(seed)
    ref = Reference(config)
    randomise_norms(ref, torch.Generator().manual_seed(seed))
    return ref, from_official("refiner", ref.state_dict(), config)


# released name -> vspec name, for the gradient check: the stem, a compute and a shared block, the head
GRADIENTS = {"patch_embed.conv1.weight": "embedder.conv1.weight",
             "blocks.0.attn.qkv.weight": "stages.0.blocks.0.attn.qkv.weight",
             "blocks.1.attn.DLA.conv_exp.weight": "stages.0.blocks.1.attn.core.refine.conv_exp.weight",
             "blocks.1.attn.DLA.depth_sep_conv.weight": "stages.0.blocks.1.attn.core.refine.depth_sep_conv.weight",
             "blocks.1.attn.adapt_bn.weight": "stages.0.blocks.1.attn.core.refine.adapt_bn.weight",
             "blocks.1.mlp.scale_channel": "stages.0.blocks.1.ffn.ls.gamma",
             "head.weight": "head.fc.weight"}


def outputs(model: nn.Module, x: torch.Tensor, vspec_names: bool) -> dict[str, torch.Tensor]:
    """A copy of `model` in x's dtype: its eval logits, train-mode logits (BatchNorm on batch
    statistics) and the gradients of GRADIENTS' parameters for a fixed upstream gradient, in float64."""
    model = copy.deepcopy(model).to(x.dtype)
    with torch.no_grad():
        out = {"eval logits": model.eval()(x).double()}
    y = model.train()(x)
    y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.dtype))
    params = dict(model.named_parameters())
    out["train logits"] = y.detach().double()
    out |= {f"grad {k}": params[v if vspec_names else k].grad.double() for k, v in GRADIENTS.items()}
    return out


def check(ref: nn.Module, ours: nn.Module, x: torch.Tensor) -> list[tuple[str, float, float, float, float]]:
    """Both models on x in float64 and float32, against the reference in float64: per quantity, its
    largest |value|, |reference32 - reference64|, |vspec32 - reference64|, |vspec64 - reference64| (max).
    Asserts that vspec in float64 agrees to 1e-9 of the largest value (the same function), and in
    float32 is no further from the float64 answer than 3 x the reference's own float32 error plus 1e-6
    of the largest value (equal up to float32 rounding)."""
    ref64, ref32 = outputs(ref, x.double(), False), outputs(ref, x.float(), False)
    ours64, ours32 = outputs(ours, x.double(), True), outputs(ours, x.float(), True)
    rows = []
    for k, exact in ref64.items():
        big = exact.abs().max().item()
        errs = [(t[k] - exact).abs().max().item() for t in (ref32, ours32, ours64)]
        assert errs[2] <= 1e-9 * big, f"{k}: vspec and the reference differ in float64 by {errs[2]:.2e}"
        assert errs[1] <= 3 * errs[0] + 1e-6 * big, f"{k}: vspec float32 off by {errs[1]:.2e} (reference {errs[0]:.2e})"
        rows.append((k, big, *errs))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--img", type=int, default=224, help="image size (px)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = dict(CONFIG, img_size=args.img)
    ref, ours = pair(config)
    preset = vspec.load_spec(ROOT / "specs/refined_vit_s.py")
    assert ours.spec == attrs.evolve(preset, img_size=args.img), "CONFIG is not specs/refined_vit_s.py"
    x = torch.randn(args.batch, 3, args.img, args.img, generator=torch.Generator().manual_seed(0))
    header({})
    print("same weights; max |difference| from the reference in float64 (batch 1):")
    print(f"  {'':42s} {'largest':>9s} {'ref fp32':>9s} {'vspec fp32':>10s} {'vspec fp64':>10s}")
    for name, big, *errs in check(ref, ours, x[:1]):
        print(f"  {name:42s} {big:9.2e} {errs[0]:9.2e} {errs[1]:10.2e} {errs[2]:10.2e}")
    print(f"batch {args.batch}, {args.img} px, {args.rounds} rounds")
    for label, step, train in (("forward", forward, False), ("forward+backward", forward_backward, True)):
        ref.train(train), ours.train(train)
        t = race({"reference": ref, "vspec": ours}, step, x, args.rounds)
        ips = {k: args.batch / statistics.median(v) for k, v in t.items()}
        ratios = sorted(a / b for a, b in zip(t["reference"], t["vspec"]))
        print(f"  {label:17s} reference {ips['reference']:6.2f} img/s  vspec {ips['vspec']:6.2f} img/s  "
              f"ratio vspec/reference {statistics.median(ratios):.3f} "
              f"(median of rounds; range {ratios[0]:.3f}-{ratios[-1]:.3f})")


if __name__ == "__main__":
    main()
