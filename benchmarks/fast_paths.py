"""Each CPU fast path (vspec/ops/fast.py) against its plain path, in one process.

Per path, the same step runs with the switch on (fast) and inside `vspec.fast_paths(False)` (plain), back to
back in every round (order alternating); printed: the plain/fast time ratio (> 1: the fast path wins), the
median of the rounds' ratios with their range, under benchmarks/common.py's header (the CPU, its flags, the
fast-path choices in effect, the CPU capability torch's kernels use: `ATEN_CPU_CAPABILITY=avx2` gives the AVX2
kernels on an AVX-512 machine). Shapes are those of deit_tiny, msf_vit_ti, swin_tiny and refined_vit_s at 224 px
(swin_tiny's stage 1 for stochastic depth), and bert_base's for dropout; the bf16 paths are taken only on a CPU
that computes bf16 natively (elsewhere both sides are the plain path).

    python -m benchmarks.fast_paths [--rounds 11] [--seconds 0.3] [--paths ...] [--threads N]
"""

import argparse
import statistics
import time

import torch

import vspec
from vspec import ops
from vspec.models.msf.ops import gaussian_attention
from vspec.models.refiner.modules import ConvExpandDLA, ConvStem
from vspec.nn.layers import DropPath, residual
from vspec.nn.swin import BiasedAttentionCore
from vspec.ops import vit
from vspec.ops.dropout import dropout

from .common import ROOT, header


def linear_steps(train: bool):
    """deit_tiny's fc1 (192 -> 768, GELU) on a batch of 16 x 197 tokens: oneDNN's fused linear (measured here on any
    CPU; vspec takes it at every size on AVX-512 ones, up to `vit.SHORT_K` input features on others)."""
    vit.ONEDNN_WINS = True
    x = torch.randn(16, 197, 192, requires_grad=train)
    w, b = (0.05 * torch.randn(768, 192)).requires_grad_(train), torch.zeros(768, requires_grad=train)

    def step():
        if train:
            ops.linear(x, w, b, "gelu").sum().backward()
        else:
            with torch.no_grad():
                ops.linear(x, w, b, "gelu")
    return step


def gaussian_step():
    """msf_vit_ti's Gaussian attention (8 images, 3 heads, 197 tokens, 64 channels), forward + backward."""
    q, k, v = (torch.randn(8, 3, 197, 64, requires_grad=True) for _ in range(3))
    return lambda: gaussian_attention(q, k, v).sum().backward()


def swin_step():
    """swin_tiny's first-stage window attention in training (16 images x 64 windows, 3 heads, 49 tokens),
    its relative position bias a parameter: forward + backward."""
    core = BiasedAttentionCore(0.0, None).train()
    q, k, v = (torch.randn(16 * 64, 3, 49, 32, requires_grad=True) for _ in range(3))
    bias = torch.zeros(3, 49, 49, requires_grad=True)
    return lambda: core(q, k, v, bias).sum().backward()


def refiner_modules():
    model = vspec.build(vspec.load_spec(ROOT / "specs/refined_vit_s.py"))
    dla = next(m for m in model.modules() if isinstance(m, ConvExpandDLA))
    stem = next(m for m in model.modules() if isinstance(m, ConvStem))
    return dla, stem


def dla_step():
    """refined_vit_s's released DLA in eval on 4 images' maps (12 heads, 197 x 197; BatchNorms folded)."""
    dla = refiner_modules()[0].eval()
    a = torch.rand(4, 12, 197, 197)

    def step():
        with torch.no_grad():
            dla(a)
    return step


def stem_step():
    """refined_vit_s's convolution stem in eval on 8 images of 224 px (channels-last, BatchNorms folded)."""
    stem = refiner_modules()[1].eval()
    x = torch.randn(8, 3, 224, 224)

    def step():
        with torch.no_grad():
            stem(x)
    return step


def dropout_step(dtype: torch.dtype = torch.float32):
    """bert_base's hidden dropout (p 0.1) on 16 x 128 tokens in `dtype`, forward + backward: the keep mask drawn as
    16-bit uniforms (vspec.ops.dropout), in x's dtype, against torch's per-element Bernoulli draw."""
    x = torch.randn(16, 128, 768, dtype=dtype, requires_grad=True)
    return lambda: dropout(x, 0.1).sum().backward()


def drop_path_step():
    """swin_tiny's stage-1 stream (16 x 3136 x 96) plus a branch through stochastic depth (p 0.1), forward +
    backward, in bf16: one addcmul (vspec.nn.layers.residual) against the product and the sum."""
    x, b = (torch.randn(16, 3136, 96, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    dp = DropPath(0.1).train()
    return lambda: residual(x, b, dp).sum().backward()


def bf16_linear_step():
    """deit_tiny's fc1 (192 -> 768, GELU) on 32 x 197 tokens in a bf16-autocast training step: oneDNN's kernel with
    the bias fused against autocast's addmm (taken where the CPU computes bf16 natively)."""
    x = torch.randn(32, 197, 192, requires_grad=True)
    w, b = (0.05 * torch.randn(768, 192)).requires_grad_(), torch.zeros(768, requires_grad=True)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = ops.linear(x, w, b, "gelu")
        y.float().sum().backward()
    return step


def bf16_inference_step():
    """deit_tiny's forward on 16 images under bf16 autocast, no autograd: the bf16 token stream and the fused bf16
    linear (taken where the CPU computes bf16 natively) against autocast's own."""
    model = vspec.build(vspec.load_spec(ROOT / "specs/deit_tiny.py")).eval()
    x = torch.randn(16, 3, 224, 224)

    def step():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
    return step


PATHS = {
    "vit.linear oneDNN, inference": lambda: linear_steps(False),
    "vit.linear oneDNN, training": lambda: linear_steps(True),
    "msf Gaussian attention, CPU flash (training)": gaussian_step,
    "swin biased attention written out (training)": swin_step,
    "refiner DLA folded (eval)": dla_step,
    "refiner conv stem folded (eval)": stem_step,
    "dropout keep mask (training)": dropout_step,
    "dropout keep mask, bf16 (training)": lambda: dropout_step(torch.bfloat16),
    "drop-path residual, one pass (training)": drop_path_step,
    "bf16 linear, bias fused (training)": bf16_linear_step,
    "bf16 stream and linear (deit_tiny inference)": bf16_inference_step,
}


def ratio(step, rounds: int, seconds: float) -> list[float]:
    """plain / fast seconds per step, round after round (order alternating; each side repeats the step for
    about `seconds`), sorted."""
    def timed(on: bool, reps: int = 1) -> float:
        with vspec.fast_paths(on):
            t0 = time.perf_counter()
            for _ in range(reps):
                step()
            return time.perf_counter() - t0
    reps = max(1, round(seconds / min(timed(True), timed(False))))  # warm-up and calibration
    out = []
    for r in range(rounds):
        first = r % 2 == 0
        a = timed(first, reps)
        b = timed(not first, reps)
        fast_t, plain_t = (a, b) if first else (b, a)
        out.append(plain_t / fast_t)
    return sorted(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--seconds", type=float, default=0.3, help="about this long per side and round")
    ap.add_argument("--paths", nargs="+", choices=sorted(PATHS), default=list(PATHS))
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    header({})
    print(f"{args.rounds} rounds")
    for name in args.paths:
        r = ratio(PATHS[name](), args.rounds, args.seconds)
        print(f"  {name:46s} plain/fast {statistics.median(r):.3f} (range {r[0]:.3f}-{r[-1]:.3f})")


if __name__ == "__main__":
    main()
