"""Export a built model: a `torch.export` program (.pt2) or an ONNX graph (.onnx, torch.onnx's dynamo exporter),
each checked against the eager model on a fresh random batch (`check`).

Inputs, in the order of the model's forward: images `pixel_values` (B, C, H, W) float32, or a text body's
`input_ids` (B, L) int64 and `attention_mask` (B, L) int64 (1 at real tokens); one output, `logits` (B, classes)
(the eval logits: SoT's and Conformer's two classifiers summed). The batch axis is dynamic unless
`dynamic_batch=False`; every other size is the spec's (img_size, seq_len).

What tracing needs, set only while tracing: eval mode (dropout, BatchNorm's running statistics), vspec's fast paths
off (`fast_paths(False)`: the exporters get the plain ops, not oneDNN's private ones), and SDPA's math backend,
so that the traced graph's strides are those of the math attention that torch.onnx decomposes SDPA into: with the
CPU flash kernel's strides, a float attention mask (Swin's relative position bias, iRPE's contextual bias) left
a `view` after the attention that the decomposed graph cannot take ("Cannot view a tensor ...").

ONNX needs the `export` extra: `pip install 'vspec[export]'` (onnx, onnxscript; onnxruntime for `check`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .ops.fast import fast_paths

__all__ = [
    "Checked", "ExportError", "TOLERANCE", "check", "example_inputs", "export", "export_onnx", "export_program",
    "input_names", "run_onnx", "target", "tracing",
]
TOLERANCE = 1e-4  # max |exported - eager| that `vspec export --check` accepts (float32 logits)
_EXTRA = "pip install 'vspec[export]'"


class ExportError(RuntimeError):
    """A model that cannot be exported, a missing package, or a check that failed: one line."""


@dataclass(frozen=True)
class Checked:
    """The result of `check`: the max |exported - eager| over the logits of a batch of `batch` drawn by `seed`."""

    max_abs_diff: float
    batch: int
    runtime: str  # what ran the exported model: "onnxruntime <version>" or "torch.export"


def input_names(model: nn.Module) -> list[str]:
    """The exported graph's input names: `pixel_values`, or `input_ids` and `attention_mask`.

    Args:
        model: the vspec model exported.
    """
    return list(model.inputs.names)


def example_inputs(model: nn.Module, batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A random batch in the exported graph's input order: images; or token ids with an attention_mask whose
    samples after the first are right-padded to random lengths >= 1 (the first is full).

    Args:
        model: the vspec model exported.
        batch: the samples of the batch.
        seed: the random generator's seed.
    """
    g = torch.Generator().manual_seed(seed)
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    x = model.example_input(batch, generator=g, dtype=dtype)
    if not model.text:
        return (x,)
    length = x.shape[1]
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    lengths[0] = length
    return x, (torch.arange(length)[None] < lengths[:, None]).long()


@contextlib.contextmanager
def tracing(model: nn.Module) -> Iterator[None]:
    """Eval mode, fast paths off, SDPA's math backend (module docstring); the model's mode is restored after.

    Args:
        model: the vspec model traced.
    """
    was_training = model.training
    model.eval()
    try:
        with fast_paths(False), sdpa_kernel(SDPBackend.MATH), torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _check_batch(batch: int, dynamic_batch: bool) -> None:
    if dynamic_batch and batch < 2:
        raise ExportError(f"batch {batch}: a dynamic batch is traced at a batch of 2 or more (torch.export "
                          "specialises a size of 1); trace at 2 or more, or fix the batch (--static-batch)")


def export_program(model: nn.Module, path: str | Path | None = None, *, batch: int = 2,
                   dynamic_batch: bool = True) -> torch.export.ExportedProgram:
    """The model's eval forward as a `torch.export` program traced on a random batch of `batch` (>= 2 with a dynamic
    batch: torch.export specialises a size of 1); saved to `path` (.pt2, `torch.export.load`) when given.

    Args:
        model: the vspec model exported.
        path: where the program is saved (.pt2); None: not saved.
        batch: the samples of the batch it is traced on.
        dynamic_batch: the batch axis stays dynamic.
    """
    _check_batch(batch, dynamic_batch)
    args = example_inputs(model, batch)
    shapes = None
    if dynamic_batch:
        b = torch.export.Dim("batch", min=1)
        shapes = tuple({0: b} for _ in args)
    with tracing(model):
        program = torch.export.export(model, args, dynamic_shapes=shapes, strict=False)
    if path is not None:
        torch.export.save(program, Path(path))
    return program


def _onnx_packages(runtime: bool) -> None:
    """ImportError -> one ExportError naming the extra."""
    names = ("onnx", "onnxscript") + (("onnxruntime",) if runtime else ())
    for name in names:
        try:
            __import__(name)
        except ImportError as e:
            raise ExportError(f"ONNX export needs {name} ({e}); {_EXTRA}") from None


def export_onnx(model: nn.Module, path: str | Path, *, batch: int = 2, dynamic_batch: bool = True,
                opset: int | None = None, program: torch.export.ExportedProgram | None = None) -> Path:
    """The model as an ONNX graph at `path` (torch.onnx's dynamo exporter on `export_program`'s program, or on
    `program` when given; `opset`: the ONNX opset, None for torch.onnx's default). Weights beyond ONNX's 2 GB
    protobuf limit go to a file beside it. Returns the path.

    Args:
        model: the vspec model exported.
        path: the .onnx file written.
        batch: the samples of the batch traced on.
        dynamic_batch: the batch axis stays dynamic.
        opset: the ONNX opset (None: torch.onnx's default).
        program: a program `export_program` made already (None: made here).
    """
    _onnx_packages(runtime=False)
    if program is None:
        program = export_program(model, batch=batch, dynamic_batch=dynamic_batch)
    _refuse_decompositions(program)
    names = input_names(model)
    with tracing(model):
        onnx_program = torch.onnx.export(program, dynamo=True, input_names=names, output_names=["logits"],
                                         opset_version=opset, verbose=False)
    if onnx_program is None:  # the exporter's own failures raise; this is a guard
        raise ExportError("torch.onnx.export returned no program")
    path = Path(path)
    onnx_program.save(str(path))
    return path


_NO_ONNX = ("linalg_svd", "_linalg_svd", "linalg_eig", "linalg_eigh", "_linalg_eigh")  # no ONNX operator


def _refuse_decompositions(program: torch.export.ExportedProgram) -> None:
    """A matrix decomposition that ONNX has no operator for (SoT's exact svPN, head.norm.method=exact, is an
    SVD) is named with the module that calls it, instead of torch.onnx's conversion failure."""
    for node in program.graph.nodes:
        name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        if node.op == "call_function" and name in _NO_ONNX:
            stack = node.meta.get("nn_module_stack") or {}
            where = next(reversed(stack.values()), ("the model", None))[0] if stack else "the model"
            raise ExportError(f"{where} calls {name.strip('_')} (torch.linalg), which ONNX has no operator for "
                              "(SoT's exact svPN is an SVD: use head.norm.method=approx); a .pt2 program takes it")


def run_onnx(path: str | Path, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The graph at `path` run by onnxruntime on the CPU: its first output.

    Args:
        path: the .onnx file.
        inputs: the graph's inputs, in its input order (`example_inputs`).
    """
    _onnx_packages(runtime=True)
    import onnxruntime as ort  # extra

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    return torch.from_numpy(session.run(None, feeds)[0])


def check(model: nn.Module, exported: str | Path | torch.export.ExportedProgram, batch: int = 3,
          seed: int = 1) -> Checked:
    """Run the exported model (an .onnx path in onnxruntime, a .pt2 path or an ExportedProgram in torch) and the
    eager model (eval, fast paths as they are) on one random batch; the max |difference| of their logits.

    Args:
        model: the eager vspec model.
        exported: an .onnx or .pt2 path, or an ExportedProgram.
        batch: the samples of the random batch.
        seed: the batch's seed.
    """
    inputs = example_inputs(model, batch, seed)
    if isinstance(exported, (str, Path)) and Path(exported).suffix.lower() == ".onnx":
        import onnxruntime as ort  # extra

        got, runtime = run_onnx(exported, inputs), f"onnxruntime {ort.__version__}"
    else:
        program = torch.export.load(Path(exported)) if isinstance(exported, (str, Path)) else exported
        with torch.no_grad():
            got, runtime = program.module()(*inputs), "torch.export"
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            want = model(*inputs)
    finally:
        model.train(was_training)
    if got.shape != want.shape:
        raise ExportError(f"the exported model gave logits of shape {tuple(got.shape)}, the eager model "
                          f"{tuple(want.shape)}")
    return Checked(float((got.float() - want.float()).abs().max()), batch, runtime)


def target(out: Path, opset: int | None = None, verify: bool = False, batch: int = 2,
           dynamic_batch: bool = True) -> str:
    """The format `out`'s suffix names ("onnx" or "pt2"), once the packages it needs import and the batch fits the
    dynamic axis; else ExportError.

    Args:
        out: the output file.
        opset: the ONNX opset asked for (None: the default; refused for .pt2).
        verify: the export is checked after (onnxruntime is needed too for .onnx).
        batch: the samples of the batch traced on.
        dynamic_batch: the batch axis stays dynamic.
    """
    _check_batch(batch, dynamic_batch)
    suffix = out.suffix.lower()
    if suffix not in (".onnx", ".pt2"):
        raise ExportError(f"--out {out}: the suffix says the format: .onnx (ONNX) or .pt2 (torch.export)")
    if suffix == ".pt2" and opset is not None:
        raise ExportError("--opset applies to .onnx, not to a torch.export program (.pt2)")
    if suffix == ".onnx":
        _onnx_packages(runtime=verify)
    return suffix[1:]


def export(model: nn.Module, out: Path, *, batch: int = 2, dynamic_batch: bool = True, opset: int | None = None,
           verify: bool = False) -> tuple[float, Checked | None]:
    """What `vspec export` does: write `out` (.onnx or .pt2, by its suffix); with `verify`, check it on a batch
    of batch + 1 (the dynamic batch) or batch. Returns (seconds to export, the check or None). Whatever stops an
    exporter is an ExportError naming it; so is a check above TOLERANCE (after the file is written).

    Args:
        model: the vspec model exported.
        out: the file written (.onnx or .pt2).
        batch: the samples of the batch traced on.
        dynamic_batch: the batch axis stays dynamic.
        opset: the ONNX opset (None: torch.onnx's default).
        verify: check the exported model against the eager one after writing it.
    """
    fmt = target(out, opset, verify, batch, dynamic_batch)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        if fmt == "onnx":
            export_onnx(model, out, batch=batch, dynamic_batch=dynamic_batch, opset=opset)
        else:
            export_program(model, out, batch=batch, dynamic_batch=dynamic_batch)
    except (ExportError, OSError):
        raise
    except Exception as e:  # the exporters' own errors (unsupported op, guard failure): their first line
        first = next((line for line in str(e).splitlines() if line.strip()), "")
        raise ExportError(f"{'torch.onnx' if fmt == 'onnx' else 'torch.export'} failed: {type(e).__name__}: "
                          f"{first}") from None
    seconds = time.perf_counter() - t0
    if not verify:
        return seconds, None
    result = check(model, out, batch=batch + 1 if dynamic_batch else batch)
    if not result.max_abs_diff <= TOLERANCE:
        raise ExportError(f"--check: max |exported - eager| = {result.max_abs_diff:.3g} over the logits of a batch "
                          f"of {result.batch} ({result.runtime}), above {TOLERANCE:g}; {out} was written")
    return seconds, result
