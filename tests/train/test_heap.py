"""The allocator during a CPU run (`vspec.train.heap`): within `kept_heap` a large block comes from glibc's heap (not a
fresh mapping), outside it glibc's steady state maps it; a CPU training run enters it and leaves the steady state.
Measured in a fresh process (the suite's own heap may hold free chunks bigger than any block asked for) through
mallinfo2's count of mmap-ed bytes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.image_runs import args
from vspec.cli.train import main as train_main
from vspec.train import heap

pytestmark = pytest.mark.skipif(heap._glibc() is None, reason="glibc's allocator only (Linux)")
ROOT = Path(__file__).resolve().parents[2]

MEASURE = """
import ctypes, json
import torch
import vspec
from vspec.train import heap

class MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2 (malloc.h), every field a size_t
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                                 "uordblks", "fordblks", "keepcost")]

info = ctypes.CDLL(None).mallinfo2
info.restype = MallInfo2

def mapped_while_held():
    # bytes mmap-ed while a tensor is held that no free chunk of the heap holds: 40 MiB beyond what they hold
    before = info()
    block = torch.empty(before.fordblks + (40 << 20), dtype=torch.uint8)
    grew = info().hblkhd - before.hblkhd
    del block
    return grew

out = {"steady": (heap.set_heap(False), mapped_while_held())}
out["kept"] = (heap.set_heap(True), mapped_while_held(), mapped_while_held())
out["steady_again"] = (heap.set_heap(False), mapped_while_held())
with heap.kept_heap(torch.device("cpu")) as kept:
    out["kept_heap_cpu"] = (kept, mapped_while_held())
out["after_kept_heap"] = mapped_while_held()
with heap.kept_heap(torch.device("meta")) as kept:
    out["kept_heap_meta"] = (kept, mapped_while_held())
with vspec.fast_paths(False), heap.kept_heap(torch.device("cpu")) as kept:
    out["kept_heap_fast_off"] = (kept, mapped_while_held())
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def measured() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", MEASURE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def kept_here(measured) -> dict:
    """`measured`, where this glibc took the 1 GiB mmap threshold (older releases refuse one above HEAP_MAX_SIZE / 2,
    32 MiB: there `set_heap(True)` says False and the heap is not kept)."""
    if not measured["kept"][0]:
        pytest.skip("this glibc refuses an mmap threshold of 1 GiB")
    return measured


def test_a_large_block_comes_from_the_heap_only_while_it_is_kept(kept_here):
    measured, block = kept_here, 40 << 20
    assert measured["steady"][0] and measured["steady"][1] >= block
    assert measured["kept"] == [True, 0, 0]
    assert measured["steady_again"][0] and measured["steady_again"][1] >= block


def test_kept_heap_on_the_cpu_only_with_the_fast_paths(kept_here):
    measured, block = kept_here, 40 << 20
    assert measured["kept_heap_cpu"] == [True, 0]
    assert measured["after_kept_heap"] >= block  # glibc's steady state after it
    assert measured["kept_heap_meta"][0] is False and measured["kept_heap_meta"][1] >= block
    assert measured["kept_heap_fast_off"][0] is False and measured["kept_heap_fast_off"][1] >= block


def test_without_glibc_nothing_is_set(monkeypatch):
    import torch
    monkeypatch.setattr(heap, "_glibc", lambda: None)  # another C library
    assert not heap.set_heap(True)
    with heap.kept_heap(torch.device("cpu")) as kept:
        assert not kept


def test_a_cpu_run_keeps_the_heap_while_it_trains(tiny_spec, tmp_path, monkeypatch):
    """`vspec train` on the CPU: the heap kept from its setup to its end, then glibc's steady state."""
    modes = []
    real = heap.set_heap
    monkeypatch.setattr(heap, "set_heap", lambda kept: modes.append(kept) or real(kept))
    assert train_main(args(tiny_spec, tmp_path / "run", "--epochs", "1")) == 0
    assert modes == [True, False]
