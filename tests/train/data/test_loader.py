"""vspec.train.data.loader's seeded draws: each training sample's random draws are its own, whichever process reads
it. (The sampler and the loaders' order and arguments: tests/train/data/test_data.py.)"""

import random

import numpy as np
import torch
from torch.utils.data import Dataset

from vspec.train.data.loader import build_loaders, set_epoch


class Draws(Dataset):
    """Item i: a draw from each of Python's, numpy's and torch's global streams (those timm's transforms draw from)."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int):
        return torch.tensor([random.random(), np.random.random_sample(), torch.rand(()).item()], dtype=torch.float64), i


def test_each_training_samples_draws_are_its_own_whoever_reads_it():
    """A training sample's draws depend on (seed, epoch, index) alone: the same with 0 or 2 workers (persistent, read
    ahead over two epochs) and after a skip (a mid-epoch resume with fresh workers); others in another epoch or for
    another sample; the main process's own streams as they were where it reads the data (--workers 0)."""
    def epochs(workers, skip=0):
        train, _ = build_loaders(Draws(), Draws(), batch_size=4, workers=workers, seed=7)
        out = []
        for epoch, skipped in ((1, skip), (2, 0)):
            set_epoch(train, epoch, skip=skipped * 4)
            out.append({int(i): x for xs, index in train for x, i in zip(xs, index)})
        return out

    states = random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state()
    alone = epochs(0)
    assert random.getstate() == states[0] and np.array_equal(np.random.get_state()[1], states[1])
    assert torch.equal(torch.get_rng_state(), states[2])
    for got in (epochs(2), epochs(2, skip=3)):
        for mine, theirs in zip(got, alone):
            assert mine.keys() <= theirs.keys() and all(torch.equal(x, theirs[i]) for i, x in mine.items())
    assert len(alone[1]) == 24 and len({tuple(x.tolist()) for x in alone[1].values()}) == 24
    assert all((alone[0][i] != alone[1][i]).all() for i in alone[0])
