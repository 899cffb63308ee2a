"""The shapes a model's parts see, worked out from the spec alone (vspec/spec/layout.py): the one walk of the carried
state that the validator and the builder share, and the `Assembly` a build reads."""

import subprocess
import sys

from vspec.spec import Block, Model, PatchEmbed, RefinerAttention, assemble, layout, load_spec
from vspec.spec.layout import received


def refiner(depth: int) -> Model:
    attention = RefinerAttention(heads=2)
    return Model(embedder=PatchEmbed(patch_size=8), img_size=32, dim=32, depth=depth, block=Block(attention=attention),
                 num_classes=3)


def test_the_validators_walk_stops_where_a_repeated_block_adds_nothing():
    """Block 0 writes the maps (heads, N, N) with N = 16 patches + the class token; block 1 receives them and writes
    the same shape again: the walk stops there, however deep the stage (the full walk visits every block)."""
    maps = {"maps": (2, 17, 17)}
    seen = []
    deep = refiner(2**31 - 1)
    walked = received(deep, layout(deep), lambda shape, j, block, state: seen.append((shape.index, j)), every=False)
    assert seen == [(0, 0), (0, 1)]
    assert [{k: tuple(v.shape) for k, v in s.items()} for s in walked] == [{}, maps, maps]
    shallow = refiner(4)
    assert [{k: tuple(v.shape) for k, v in s.items()} for s in received(shallow, layout(shallow))] == [{}] + [maps] * 4


def test_the_assembly_keys_follow_swins_shift_without_torch():
    """Swin-T: stages of 2, 2, 6, 2 blocks on 56, 28, 14 and 7-token grids with 7-token windows. A block is shifted
    at odd positions where the grid holds more than one window: two distinct blocks in each of the first three
    stages, one in the last (one window, no shift); three entries, each of its own width. Worked out from the spec
    alone (torch is not imported)."""
    code = ("import sys; from vspec.spec import assemble, load_spec; a = assemble(load_spec('swin_tiny')); "
            "print(len(set(a.keys)), len({k for k in a.entry_keys if k}), [len(set(a.keys[s.first:s.first + s.depth])) "
            "for s in a.stages], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")[0]
    assert out == "7 3 [2, 2, 2, 1] False"
    a = assemble(load_spec("swin_tiny"))
    assert a.entry_keys[0] is None and len(a.keys) == 12 and a.state == ({},) * 13
