"""Image training runs from the command line (tools/train.py): the tiny spec, the arguments, the environment of a
subprocess, the weights of a checkpoint."""

import os

import torch

from tests.helpers import ROOT
from vspec.train import checkpoints


def args(spec, out, *extra):
    return [str(spec), "--data", "synthetic", "--synthetic-size", "64", "--out", str(out), "--batch-size", "16",
            "--device", "cpu", "--seed", "3", *extra]


def env():
    e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return e


def weights(path):
    return checkpoints.load(path)["state_dict"]


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
