"""vspec.train.data.pipelines: the input path a run chooses once (host, normalised on the device, decoded on the
device by the training process or by the loader's workers): its way from the run's configuration alone, its path
for the splits built for that way."""

import inspect

import pytest
import torch
from torch.utils.data import IterableDataset

from vspec import load_spec, override
from vspec.train import RunConfig
from vspec.train.data import pipelines
from vspec.train.data.device_decode import Indexed, WorkerPipeline, collate_encoded
from vspec.train.data.registry import DataError
from vspec.train.recipes import resolve

CPU = torch.device("cpu")
SPEC = override(load_spec("deit_tiny"), {"depth": 1, "img_size": [16, 16], "num_classes": 3})


def _run(tmp_path, **run):
    return RunConfig(out=tmp_path, device="cpu", **run)


def _chosen(tmp_path, train=(), **run):
    """(path, train, collate) for the training split `train`."""
    return pipelines.input_path(_run(tmp_path, **run), resolve("deit"), SPEC, {}, 0, CPU, train, "shards")


def _path(tmp_path, **run):
    return _chosen(tmp_path, **run)[0]


def assert_input_path(path) -> None:
    """`path` is an `InputPath`: its declarations, and methods that take the calls the image task makes (the
    protocol's parameters, positionally)."""
    assert isinstance(path, pipelines.InputPath), f"{type(path).__name__}: not an InputPath"
    for name in ("prepare", "transfer", "batches"):
        wanted = list(inspect.signature(getattr(pipelines.InputPath, name)).parameters)[1:]  # less self
        try:
            inspect.signature(getattr(path, name)).bind(*wanted)
        except TypeError as e:
            raise AssertionError(f"{type(path).__name__}.{name} does not take ({', '.join(wanted)}): {e}") from None


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(())


@pytest.mark.parametrize(("run", "kind"), [
    ({}, pipelines.HostPath),  # auto: the workers normalise on the CPU
    ({"normalise_on": "device"}, pipelines.NormalisedPath),
    ({"decode_on": "device"}, pipelines.DecodedPath),
    ({"decode_on": "device", "normalise_on": "device"}, pipelines.DecodedPath),  # decoding takes the normalisation
])
def test_the_run_chooses_its_path(tmp_path, run, kind):
    way = {pipelines.HostPath: "host", pipelines.NormalisedPath: "normalised", pipelines.DecodedPath: "decoded"}
    assert pipelines.input_way(_run(tmp_path, **run), CPU) == way[kind]
    path = _path(tmp_path, **run)
    assert type(path) is kind
    assert_input_path(path)
    assert path.encoded == (kind is pipelines.DecodedPath) and not path.in_workers
    assert path.on_device == (kind is not pipelines.HostPath)


def test_decoding_is_in_the_workers_only_where_asked_and_possible(tmp_path):
    images = [(torch.zeros(4, dtype=torch.uint8), 0)]
    assert pipelines.AHEAD == "main"  # --decode-in auto
    for asked in ("auto", "main"):
        path, train, collate = _chosen(tmp_path, images, decode_on="device", decode_in=asked)
        assert type(path) is pipelines.DecodedPath and train is images and collate is collate_encoded
    path, train, collate = _chosen(tmp_path, images, decode_on="device", decode_in="workers")
    assert type(path) is pipelines.WorkerDecodedPath and path.in_workers
    assert_input_path(path)
    ready = [(torch.rand(2, 3, 16, 16), torch.tensor([i, 1])) for i in range(3)]  # the workers made them ready
    assert all(torch.equal(x, a) and torch.equal(t, b) for (x, t), (a, b) in zip(path.batches(ready, True), ready))
    assert len(list(path.batches(ready, True))) == 3
    assert isinstance(train, Indexed) and train.dataset is images and isinstance(collate, WorkerPipeline)
    stream = _Stream()
    path, train, _ = _chosen(tmp_path, stream, decode_on="device")
    assert type(path) is pipelines.DecodedPath and train is stream
    with pytest.raises(DataError, match=r"^--decode-in workers: for --data imagefolder \(shards's workers"):
        _chosen(tmp_path, stream, decode_on="device", decode_in="workers")
    for run in ({}, {"normalise_on": "device"}):  # the workers' transforms: the loader's default collate
        assert _chosen(tmp_path, images, **run)[1:] == (images, None)


def test_the_host_path_moves_the_batches_as_they_are(tmp_path):
    path = _path(tmp_path)
    batch = (torch.rand(2, 3, 16, 16), torch.tensor([0, 1]))
    (images, target), = list(path.batches([batch], True))
    assert torch.equal(images, batch[0]) and torch.equal(target, batch[1])
    assert all(torch.equal(a, b) for a, b in zip(path.transfer(batch), batch))
    normalised = _path(tmp_path, normalise_on="device").prepare((batch[0] * 255).to(torch.uint8), False)
    assert normalised.dtype == torch.float32 and normalised.shape == batch[0].shape


class _NoResume(pipelines.HostPath):  # its batches take no start: a resumed run's batch index is lost
    def batches(self, loader, train, epoch=0):
        return super().batches(loader, train, epoch)


class _Undeclared:  # the three methods, but not what its loader hands over
    prepare, transfer, batches = pipelines.HostPath.prepare, pipelines.HostPath.transfer, pipelines.HostPath.batches


def test_a_path_that_breaks_the_contract_fails_the_check():
    assert not isinstance(object(), pipelines.InputPath)
    with pytest.raises(AssertionError, match=r"^_NoResume.batches does not take \(loader, train, epoch, start\)"):
        assert_input_path(_NoResume(CPU))
    with pytest.raises(AssertionError, match="^_Undeclared: not an InputPath"):
        assert_input_path(_Undeclared())
