"""vspec.train.data.pipelines: the input path a run chooses once (host, normalised on the device, decoded on the
device by the training process or by the loader's workers), from the run's configuration alone."""


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


def _path(tmp_path, **run):
    return pipelines.input_path(RunConfig(out=tmp_path, device="cpu", **run), resolve("deit"), SPEC, {}, 0, CPU)


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
    path = _path(tmp_path, **run)
    assert type(path) is kind
    assert path.encoded == (kind is pipelines.DecodedPath) and not path.in_workers
    assert path.on_device == (kind is not pipelines.HostPath)


def test_decoding_settles_in_the_workers_only_where_asked_and_possible(tmp_path):
    images = [(torch.zeros(4, dtype=torch.uint8), 0)]
    assert pipelines.AHEAD == "main"  # --decode-in auto
    for asked in ("auto", "main"):
        path, train, val, collate = _path(tmp_path, decode_on="device", decode_in=asked).settle(images, images, "x")
        assert type(path) is pipelines.DecodedPath and train is images and collate is collate_encoded
    path, train, val, collate = _path(tmp_path, decode_on="device", decode_in="workers").settle(images, images, "x")
    assert type(path) is pipelines.WorkerDecodedPath and path.in_workers and val is images
    assert isinstance(train, Indexed) and isinstance(collate, WorkerPipeline)
    stream = _Stream()
    path, *_ = _path(tmp_path, decode_on="device").settle(stream, stream, "shards")
    assert type(path) is pipelines.DecodedPath
    with pytest.raises(DataError, match=r"^--decode-in workers: for --data imagefolder \(shards's workers"):
        _path(tmp_path, decode_on="device", decode_in="workers").settle(stream, stream, "shards")


def test_the_host_path_moves_the_batches_as_they_are(tmp_path):
    path = _path(tmp_path)
    batch = (torch.rand(2, 3, 16, 16), torch.tensor([0, 1]))
    (images, target), = list(path.batches([batch], True))
    assert torch.equal(images, batch[0]) and torch.equal(target, batch[1])
    assert all(torch.equal(a, b) for a, b in zip(path.transfer(batch), batch))
    normalised = _path(tmp_path, normalise_on="device").prepare((batch[0] * 255).to(torch.uint8), False)
    assert normalised.dtype == torch.float32 and normalised.shape == batch[0].shape
