"""No host read in the training step (issue 55): a few steps of the real loop (`vspec train`, workers 0) for each
training path, counted under a TorchFunctionMode and a TorchDispatchMode (`HostReads`); the loss is read once per
`--loss-every` batches and nothing else is. Also the checkpoint's checksum (one read per run of tensors) and the
validation metrics (once per evaluation, whatever the batches).

Under a dispatch mode vspec's CPU fast paths stand aside (vspec/ops/fast.py), so the step runs the plain ops, those
that run on CUDA. What is not counted, and why:
- the loader's fetch (its workers' work on a real run: decoding, transforms, collation, its seed: host tensors,
  read on the host);
- `.to(device)` with a torch.device (the run's or a tensor's: the batches' copy to the device, a copy there or
  none), which on the CPU cannot be told from a copy to the host: `.to("cpu")` and `.cpu()` are counted;
- the unfused AdamW's step count: torch keeps it on the host (`state["step"]`, a CPU tensor unless the optimizer is
  fused or capturable) and reads it there each step, no device sync;
- Python's and numpy's draws (timm's Mixup, RelabelMix, MixToken's box): no tensor is read.
"""

import sys
import traceback
from collections import defaultdict
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils.data import dataloader

import vspec
from tests.helpers import ROOT
from tests.helpers.text_runs import cola_folder
from vspec.cli import main
from vspec.train import engine

READS = {Tensor.item, Tensor.tolist, Tensor.numpy, Tensor.cpu, Tensor.__bool__, Tensor.is_nonzero, Tensor.__int__,
         Tensor.__float__, Tensor.__index__, Tensor.__complex__, Tensor.__array__, Tensor.__format__}
# aten ops that read a value back (item / bool inside other ops: one_hot's bounds, allclose) or whose output's shape
# depends on the values (the host must read a count before it can allocate)
DATA_DEPENDENT = {"_local_scalar_dense", "is_nonzero", "equal", "nonzero", "argwhere", "masked_select", "unique",
                  "_unique", "_unique2", "unique_dim", "unique_consecutive", "unique_dim_consecutive", "bincount"}


def _to_host(args, kwargs) -> bool:
    """`.to("cpu")`: the host named as such. (`.to(device)` with a torch.device is the code's own device, the run's
    or a tensor's: on a device a copy there or none, here on the CPU not told apart from the host.)"""
    return any(isinstance(a, str) and a.split(":")[0] == "cpu" for a in (*args[1:], kwargs.get("device")))


def _reads(func, args, kwargs) -> bool:
    """Whether an aten op reads back: one of DATA_DEPENDENT, indexing by a boolean mask, repeats given as a tensor
    without the output's size."""
    name = func.overloadpacket.__name__
    if name in ("index", "index_put", "index_put_"):
        return any(isinstance(i, Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1] if i is not None)
    if func is torch.ops.aten.repeat_interleave.Tensor:
        return kwargs.get("output_size") is None
    return name in DATA_DEPENDENT


class HostReads:
    """Counts the host reads made while active, by the step they happen in (`step`, set by the test; None: not
    counted): each a (kind, short stack). `host_owned(t)` says a tensor is read on the host by design (the
    optimizer's step count); `paused_in(fetch)` runs the loader's fetch without the count."""

    def __init__(self):
        self.reads: dict = defaultdict(list)
        self.step, self.epoch = None, 0
        self.inside = 0  # within a counted Python-level read: its aten ops are the same read
        self.host_owned = lambda t: False
        counter = self

        class Functions(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                kind = None
                if func in READS:
                    kind = func.__name__
                elif func is Tensor.to and _to_host(args, kwargs):
                    kind = "to(cpu)"
                if kind is None or (args and isinstance(args[0], Tensor) and counter.host_owned(args[0])):
                    return func(*args, **kwargs)
                counter.record(kind)
                counter.inside += 1
                try:
                    return func(*args, **kwargs)
                finally:
                    counter.inside -= 1

        class Ops(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if not counter.inside and _reads(func, args, kwargs) and not counter.host_owned(args[0]):
                    counter.record(f"aten.{func.overloadpacket.__name__}")
                return func(*args, **kwargs)

        self.modes = (Functions(), Ops())

    def paused_in(self, fetch):
        """`fetch` (the loader's) run without the modes: nothing counted."""

        def paused(*args):
            with torch._C.DisableTorchFunction(), _disable_current_modes():
                return fetch(*args)
        return paused

    def record(self, kind: str) -> None:
        if self.step is None:
            return
        frames = [f for f in traceback.extract_stack() if f.filename != __file__ and "torch/_" not in f.filename]
        where = [f"{f.filename.split('site-packages/')[-1]}:{f.lineno} {f.name}" for f in frames
                 if "/vspec/" in f.filename or "site-packages" in f.filename][-6:]
        self.reads[self.step].append((kind, where))

    def __enter__(self):
        for m in self.modes:
            m.__enter__()
        return self

    def __exit__(self, *exc):
        for m in reversed(self.modes):
            m.__exit__(*exc)

    def counts(self) -> dict:
        return {step: len(r) for step, r in self.reads.items() if r}

    def show(self) -> str:
        return "\n".join(f"{step}: {kind} at {' <- '.join(reversed(where))}"
                         for step, reads in self.reads.items() for kind, where in reads)


@pytest.fixture
def counted(monkeypatch):
    """The loop's epochs under a HostReads, each read attributed to (epoch, batch) of the step it happens in:
    reads before an epoch's first step go to (epoch, -1)."""
    counter = HostReads()
    step, epoch = engine.Training.train_step, engine.Training.train_epoch

    def counted_step(self, i, *args):
        counter.step = (counter.epoch, i)
        return step(self, i, *args)

    def counted_epoch(self, e, stop):
        optimizer = self.optim.optimizer  # torch keeps an unfused, uncapturable AdamW's step count on the host
        on_host = not any(g.get("fused") or g.get("capturable") for g in optimizer.param_groups)
        counter.host_owned = lambda t: on_host and any(t is s.get("step") for s in optimizer.state.values())
        counter.epoch, counter.step = e, (e, -1)
        with counter:
            try:
                return epoch(self, e, stop)
            finally:
                counter.step = None

    for cls, name in ((dataloader.DataLoader, "__iter__"), (dataloader._BaseDataLoaderIter, "__next__")):
        monkeypatch.setattr(cls, name, counter.paused_in(getattr(cls, name)))
    monkeypatch.setattr(engine.Training, "train_step", counted_step)
    monkeypatch.setattr(engine.Training, "train_epoch", counted_epoch)
    return counter


def loss_reads(batches: int, every: int, epochs: int = 1) -> dict:
    """Where the loop reads the loss: after every `every` batches and after an epoch's last."""
    return {(e, i): 1 for e in range(epochs) for i in range(batches) if (i + 1) % every == 0 or i == batches - 1}


IMAGE = ["--data", "synthetic", "--synthetic-size", "64", "--device", "cpu", "--seed", "3", "--workers", "0",
         "--epochs", "1", "--loss-every", "3"]
TINY = {"depth": 1, "dim": 32, "block.attention.heads": 2, "img_size": 16, "embedder.patch_size": 4, "num_classes": 4}


def _spec(tmp_path_factory, name, changes):
    path = tmp_path_factory.mktemp("spec") / f"{name}.json"
    path.write_text(vspec.to_json(vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"), changes)))
    return path


@pytest.fixture(scope="module")
def plain_spec(tmp_path_factory):
    """A one-block ViT: fp16 on the CPU stays fast without convolutions (tiny_spec's DHVT has them)."""
    return _spec(tmp_path_factory, "plain", TINY)


@pytest.fixture(scope="module")
def dense_spec(tmp_path_factory):
    """A 4 x 4 token grid under a dense auxiliary head."""
    return _spec(tmp_path_factory, "dense", {**TINY, "head.dense": {}})


def _run(counter, argv, out):
    assert main(["train", *argv, "--out", str(out)]) == 0, counter.show()
    return counter.counts()


@pytest.mark.parametrize("spec, extra", [
    # DeiT's recipe (mixup / cutmix with smoothing, RandAugment, random erasing on the device) on DHVT (BatchNorm);
    # EMA, clipping, two micro-batches a step (8 batches)
    ("tiny_spec", ["--accum-steps", "2", "--clip-grad", "1.0", "--ema-decay", "0.9", "--normalise-on", "device"]),
    # fp16: the grad scaler (unscaled for the clipping) skips steps on inf gradients without a read (fused AdamW)
    ("plain_spec", ["--precision", "fp16", "--clip-grad", "1.0"]),
], ids=["deit", "fp16"])
def test_the_image_step_reads_only_the_loss(request, tmp_path, counted, spec, extra):
    batches = 8 if "--accum-steps" in extra else 4
    argv = [str(request.getfixturevalue(spec)), *IMAGE, "--batch-size", "16", "--recipe", "deit", *extra]
    assert _run(counted, argv, tmp_path) == loss_reads(batches, 3), counted.show()
    assert all(kind == "tolist" and "read_losses" in where[-1] for reads in counted.reads.values()
               for kind, where in reads)


def test_the_text_step_reads_only_the_loss(text_spec, tmp_path, counted):
    data = cola_folder(tmp_path / "cola")
    argv = [str(text_spec), "--data", "glue", "--task", "cola", "--data-dir", str(data), "--recipe", "glue",
            "--smoothing", "0.1", "--batch-size", "16", "--device", "cpu", "--seed", "2", "--workers", "0",
            "--epochs", "1", "--loss-every", "3"]
    assert _run(counted, argv, tmp_path / "run") == loss_reads(4, 3), counted.show()


@pytest.fixture(scope="module")
def labels(dense_spec, tmp_path_factory):
    out = tmp_path_factory.mktemp("labels")
    assert main(["label", str(dense_spec), *IMAGE[:8], "--out", str(out), "--grid", "6", "--top-k", "2"]) == 0
    return out


def test_the_token_label_step_reads_only_the_loss(dense_spec, labels, tmp_path, counted):
    """Relabel targets from the batch's label maps (mixup / cutmix as released), MixToken, the relabel loss, EMA."""
    argv = [str(dense_spec), *IMAGE, "--token-labels", str(labels), "--recipe", "refiner_advanced", "--batch-size",
            "16", "--ema-decay", "0.9"]
    assert _run(counted, argv, tmp_path) == loss_reads(4, 3), counted.show()


def test_the_mix_token_step_on_hard_labels_reads_only_the_loss(dense_spec, tmp_path, counted):
    """MixToken without mixup: the class target is the label mixed by the box's share, smoothed one-hot rows."""
    argv = [str(dense_spec), *IMAGE, "--recipe", "refiner_advanced", "--mixup", "0", "--cutmix", "0",
            "--smoothing", "0.1", "--batch-size", "16"]
    assert _run(counted, argv, tmp_path) == loss_reads(4, 3), counted.show()


def test_a_read_in_the_step_is_counted(plain_spec, tmp_path, counted, monkeypatch):
    """The count can fail: a loss that reads its value, a data-dependent shape and a copy to the host each step."""
    real = engine.head_loss

    def reading(criterion, out, target, **options):
        loss = real(criterion, out, target, **options)
        loss.item(), target.nonzero(), loss.detach().cpu(), loss.detach().to("cpu")
        return loss

    monkeypatch.setattr(engine, "head_loss", reading)
    counts = _run(counted, [str(plain_spec), *IMAGE, "--batch-size", "16", "--recipe", "none"], tmp_path)
    assert counts == {(0, i): 4 + n for i, n in enumerate([0, 0, 1, 1])}, counted.show()
    assert [kind for kind, _ in counted.reads[0, 0]] == ["item", "aten.nonzero", "cpu", "to(cpu)"]


# ---------------------------------------------------------------- off the step: the checksum, the metrics
def test_the_checksum_reads_device_tensors_together(monkeypatch):
    """Device tensors (here the CPU's, taken as a device's) are read in one copy per CHUNK bytes, not one each; the
    digests are those the per-tensor reads gave (written down from the code before: old checkpoints must verify)."""
    from vspec.weights import checksum

    g = torch.Generator().manual_seed(0)
    w = torch.randn(3, 4, generator=g)
    shared = torch.arange(5, dtype=torch.int64)
    state = {"w": w, "wT": w.t(), "half": torch.randn(6, generator=g).to(torch.bfloat16),
             "h16": torch.randn(2, 2, generator=g).half(), "mask": torch.tensor([True, False, True]),
             "step": torch.tensor(7.0), "empty": torch.zeros(0, 3), "ids": shared, "again": [shared, (1, 2.5, "x")],
             "u8": torch.arange(10, dtype=torch.uint8)[::3], "f64": torch.linspace(0, 1, 4, dtype=torch.float64),
             "none": None}
    digest = "b26a914a9f9f48b91dfd33806330a544f88fe03c44664776ec4208c7eead4407"
    tensor_digest = "ac3ae40800e8ec95bc874c40c873b59b1ecec85496b97cb8d3068aa35c34cbff"
    assert (checksum.checksum(state), checksum.tensor_checksum(state)) == (digest, tensor_digest)
    monkeypatch.setattr(checksum, "_on_host", lambda t: False)
    for chunk, reads in ((2**28, 1), (64, 4)):
        monkeypatch.setattr(checksum, "CHUNK", chunk)
        counter = HostReads()
        counter.step = "checksum"
        with counter:
            assert checksum.checksum(state) == digest
        assert [kind for kind, _ in counter.reads["checksum"]] == ["cpu", "numpy"] * reads


def _evaluation_reads(monkeypatch, batches: int, text: bool) -> int:
    from vspec.train import evaluate

    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    inputs = [(torch.randn(4, 6), torch.randint(3, (4,))) for _ in range(batches)]
    one, cpu = SimpleNamespace(world=1), torch.device("cpu")
    counter = HostReads()
    counter.step = "evaluation"
    if text:  # a text batch: a dict of inputs, the model called with them
        monkeypatch.setattr(evaluate, "forward", lambda m, batch: m(batch["x"]))
        with counter:
            evaluate.evaluate_text(model, [({"x": x}, y) for x, y in inputs], cpu, nullcontext, one, "cola")
    else:
        with counter:
            evaluate.evaluate(model, inputs, cpu, nullcontext, one)
    return len(counter.reads["evaluation"])


@pytest.mark.parametrize("text", [False, True], ids=["image", "text"])
def test_the_validation_reads_once_per_evaluation(monkeypatch, text):
    assert _evaluation_reads(monkeypatch, 2, text) == _evaluation_reads(monkeypatch, 5, text) > 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
