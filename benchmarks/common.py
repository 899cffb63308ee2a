"""What several benchmarks share: the repository's root and their default output folder (runs/benchmarks/, or
$OUT), the JSON they write, the device synchronisation and the paired-round race their timings use, what the
figures were measured on (the CPU, its flags, the fast-path choices in effect, its own matmul rate per precision),
MFU, and the generated ImageNet-shaped JPEG of the loader benchmarks."""

import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from vspec.compare import cpu_name
from vspec.ops.precision import native_bf16
from vspec.train.heap import set_heap

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs" / "benchmarks"  # git-ignored (runs/)


def out_dir() -> Path:
    """The default of a benchmark's --out: $OUT where set (benchmarks/gpu_check.sh), else runs/benchmarks/."""
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else RUNS


def write_json(path: Path, result: dict, atomic: bool = False) -> None:
    """`result` as indented JSON at `path` (its folder made); atomic: through a temporary file beside it, so that a
    run killed while writing keeps the previous figures."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target = path.with_name(path.name + ".tmp") if atomic else path
    target.write_text(json.dumps(result, indent=1) + "\n")
    if atomic:
        os.replace(target, path)


def sync(device: torch.device | str) -> None:
    """Waits for a CUDA device's queued work (a timing must not stop at the launches); nothing on a CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def forward(model: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        model(x)


def forward_backward(model: torch.nn.Module, x: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()


def bare_step(spec, batch: int, device: str, optimizer=None, compile_model=None):
    """The bare training step of `spec` on one fixed batch (seeded), as a call: forward + cross-entropy + backward +
    the optimizer's step, bf16 autocast and channels-last on CUDA. `optimizer(model)` (default: AdamW, lr 1e-3, wd
    0.05) and `compile_model(model)` (default: none) choose the kernels."""
    import vspec

    torch.manual_seed(0)
    cuda = device == "cuda"
    model = vspec.build(spec).train().to(device)
    x = torch.randn(batch, spec.in_chans, *spec.img_size, device=device)
    y = torch.randint(0, spec.num_classes, (batch,), device=device)
    if cuda:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    opt = optimizer(model) if optimizer else torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    run = compile_model(model) if compile_model else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(run(x), y)
        loss.backward()
        opt.step()

    return step


def race(models: dict, step, x, rounds: int) -> dict[str, list[float]]:
    """Seconds per step of each model, round after round; within a round the models run back to back
    (order alternating), so a round's ratio compares them under the same machine conditions."""
    for m in models.values():
        step(m, x)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in models}
    for r in range(rounds):
        order = list(models.items()) if r % 2 == 0 else list(reversed(models.items()))
        for name, m in order:
            t0 = time.perf_counter()
            step(m, x)
            times[name].append(time.perf_counter() - t0)
    return times


# the CPU flags that decide the kernels: AVX2 / AVX-512 for fp32, AVX-512 BF16 / AMX for bf16
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
# where /proc/cpuinfo is missing: torch's own checks (private; a missing one says no)
_TORCH_CHECKS = {"avx2": "_is_avx2_supported", "avx512f": "_is_avx512_supported",
                 "avx512_bf16": "_is_avx512_bf16_supported", "amx_bf16": "_is_amx_tile_supported",
                 "amx_tile": "_is_amx_tile_supported"}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # --precision's names


def cpu_flags() -> dict[str, bool]:
    """Which of FLAGS the CPU has: /proc/cpuinfo's flags on Linux, else torch's checks."""
    try:
        line = next(v for v in Path("/proc/cpuinfo").read_text().splitlines() if v.startswith("flags"))
    except (OSError, StopIteration):
        return {f: bool(getattr(torch.cpu, _TORCH_CHECKS[f], lambda: False)()) for f in FLAGS}
    have = set(line.split(":", 1)[1].split())
    return {f: f in have for f in FLAGS}


def precisions(asked: list[str] | None) -> list[str]:
    """The precisions a benchmark runs: those asked, else fp32 and bf16 where the CPU computes bf16 natively, fp32
    alone elsewhere (emulated bf16 is slower than fp32: nothing to measure unless asked)."""
    return list(asked) if asked else ["fp32", "bf16"] if native_bf16() else ["fp32"]


@contextmanager
def autocast(precision: str) -> Iterator[None]:
    """The context a CPU step runs in at `precision`: bf16 autocast, or nothing for fp32. Where torch's CPU flash
    attention cannot run bf16 (AVX2 kernels on an AMX CPU, vspec/ops/attention.py), SDPA's math backend as well, for
    the reference as vspec takes it itself (`choices()`'s sdpa_bf16_math)."""
    from vspec.ops import attention

    with ExitStack() as stack:
        if precision == "bf16":
            stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
            if attention._FLASH_PACKS_WITHOUT_AVX512:
                stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        yield


def choices() -> dict:
    """The CPU fast-path choices in effect (vspec/ops/fast.py's switch and what each path decided on this CPU),
    name -> value: printed by the benchmarks and stored in their JSON."""
    from vspec.ops import attention, fast, precision, vit

    return {"fast_paths": fast.is_on(), "onednn_linear": vit._ONEDNN is not None, "ONEDNN_WINS": vit.ONEDNN_WINS,
            "SHORT_K": vit.SHORT_K, "sdpa_bf16_math": attention._FLASH_PACKS_WITHOUT_AVX512,
            "bf16_short_attention": attention._NATIVE_BF16, "SHORT_KEYS": attention.SHORT_KEYS,
            "MAP_ELEMENTS": attention.MAP_ELEMENTS, "SHORT_INFERENCE": attention.SHORT_INFERENCE,
            "bf16_fused_linear": vit._NATIVE_BF16 and vit._ONEDNN is not None,
            "bf16_packed_weights": (vit._NATIVE_BF16 and vit._ONEDNN is not None and vit._REORDER is not None
                                    and vit.PACK),
            "bf16_stream": precision._NATIVE_BF16}  # the dropout draw follows fast_paths


def race_options(ap, rounds: int) -> None:
    """The options of the CPU races (benchmarks/models.py, benchmarks/attention.py): --rounds, --threads, --json,
    --table."""
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON (docs/cpu/)")
    ap.add_argument("--table", type=Path, metavar="FILE.json", help="print the docs/speed.md table of a result; stop")


def heap_option(ap) -> None:
    """--heap: the C allocator of a race between vspec and a reference (benchmarks/models.py, benchmarks/text.py)."""
    ap.add_argument("--heap", choices=("kept", "glibc"), default="kept",
                    help="kept (default): freed blocks stay in the heap for both sides (vspec.train.heap, as `vspec "
                         "train` runs), so that neither pays the page faults of blocks glibc maps afresh at each step, "
                         "which made one side's figure vary by a third between processes; glibc: its own default")


def apply_heap(heap: str) -> dict:
    """Sets the allocator `heap` names (--heap's choices; glibc: left as it is); the header's entry, {"heap": "kept"}
    where glibc took it, else {"heap": "glibc"}.

    Args:
        heap: "kept" or "glibc".
    """
    return {"heap": "kept" if heap == "kept" and set_heap(True) else "glibc"}


def table_or_threads(args, table) -> bool:
    """With --table: prints `table` of that result and says True (stop); else sets --threads and says False."""
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return True
    if args.threads:
        torch.set_num_threads(args.threads)
    return False


def matmul_rate(precision: str, n: int = 2048, reps: int = 15) -> float:
    """The CPU's own matmul rate in `precision` (FLOP/s): an n x n by n x n product, both operands in that dtype (what
    autocast gives a linear layer), on torch's current threads, by each GEMM engine torch has (`torch.mm`, MKL's on
    x86, and oneDNN's linear, which vspec's linear layers may take); the fastest product of `reps` per engine after a
    warm-up (what the CPU reaches: another process's load only slows a product), the fastest engine's. One engine's
    rate alone reads low where another is faster (MKL's fp32 GEMM on an AMD EPYC: ~210 against oneDNN's ~450 GFLOP/s)
    and puts MFU above 100 %."""
    from vspec.ops import vit  # its oneDNN op: the one vspec's linear layers take, None without oneDNN

    a, b = (torch.randn(n, n).to(DTYPES[precision]) for _ in range(2))
    engines = [lambda: a @ b]
    if vit._ONEDNN is not None:
        bt = b.t().contiguous()  # a linear layer's weight, (out, in): a @ b
        engines.append(lambda: vit._ONEDNN(a, bt, None, "none", [], ""))
    return max(_fastest(product, reps) for product in engines) * 2 * n**3


def _fastest(product, reps: int) -> float:
    """1 / the fastest of `reps` timed calls of `product`, after one untimed."""
    product()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        product()
        times.append(time.perf_counter() - t0)
    return 1 / min(times)


def mfu(rate: float, flops_per_sample: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: samples/s x the model's FLOPs per sample / the peak FLOP/s (a device's table value, or
    the CPU's measured matmul rate); None without a peak."""
    return rate * flops_per_sample / peak if peak else None


def machine(extra: dict) -> dict:
    """What the CPU figures were measured on: the CPU, its flags, the fast-path choices (`choices`), torch."""
    return {"machine": f"{cpu_name()}, {os.cpu_count()} cores", "threads": torch.get_num_threads(),
            "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "flags": cpu_flags(), "choices": choices(), **extra}


def header(versions: dict, run: list[str] = ()) -> dict:
    """Prints what a CPU benchmark runs on (the CPU, torch's threads and capability, `versions`, the flags, the
    fast-path choices) and, for each precision in `run`, the CPU's measured matmul rate; returns `machine` of it all
    for the JSON (rates under "matmul GFLOP/s")."""
    flags = cpu_flags()
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch "
          f"{torch.__version__}" + "".join(f", {k} {v}" for k, v in versions.items())
          + f", CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print("CPU flags: " + ", ".join(f"{f} {'yes' if on else 'no'}" for f, on in flags.items())
          + f"; native bf16: {native_bf16() or 'no'}")
    print("fast-path choices: " + ", ".join(f"{k} {v}" for k, v in choices().items()))
    rates = {p: round(matmul_rate(p) / 1e9, 1) for p in run}
    if rates:
        print(f"matmul rate (2048^3, {torch.get_num_threads()} threads): "
              + ", ".join(f"{p} {r:.1f} GFLOP/s" for p, r in rates.items()))
    return machine({**versions, **({"matmul GFLOP/s": rates} if rates else {})})


def jpeg(job: tuple[Path, int]) -> None:
    """Writes one generated ImageNet-shaped JPEG, job = (path, seed): about 500 x 375 (a fifth portraits), quality
    90, noise-textured so that it weighs about what ImageNet's do."""
    path, seed = job
    from PIL import Image

    rng = np.random.default_rng(seed)
    w, h = int(rng.integers(400, 601)), int(rng.integers(300, 451))
    if rng.random() < 0.2:  # some portraits
        w, h = h, w
    base = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((w, h), Image.BICUBIC)
    pixels = np.asarray(base, dtype=np.int16) + rng.normal(0, 16, (h, w, 3)).astype(np.int16)
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=90)
