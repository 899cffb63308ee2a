"""What several benchmarks share: the repository's root and their default output folder (runs/benchmarks/, or
$OUT), the JSON they write, the device synchronisation and the paired-round race their timings use, what the
figures were measured on, and the generated ImageNet-shaped JPEG of the loader benchmarks."""

import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from vspec.compare import cpu_name

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


def machine(extra: dict) -> dict:
    """What the CPU figures were measured on."""
    return {"machine": f"{cpu_name()}, {os.cpu_count()} cores", "threads": torch.get_num_threads(),
            "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(), **extra}


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
