"""The presets shrunk: the same component kinds at a fraction of the work (`small`), and one built for dynamo
(`shrunk`). benchmarks/compile.py compiles them; the tests (tests/helpers/shrunk.py) run them in every mode."""

import itertools
import math

import attrs
import torch

import vspec
from vspec.spec import SpecError, WindowMHSA

from .common import ROOT


def small(spec: vspec.Model) -> vspec.Model:
    """The preset at 4 channels per attention head (where its rules allow), with at most two blocks per
    stage (a shifted window block stays), windows of 2, the smallest image it allows and 3 classes: the
    same component kinds, a fraction of the work."""
    def block(b):
        return attrs.evolve(b, attention=attrs.evolve(b.attention, window=2)) \
            if isinstance(b.attention, WindowMHSA) else b

    def stage(s, narrow):
        blocks = tuple(map(block, s.block[:2])) if isinstance(s.block, tuple) else block(s.block)
        heads = math.lcm(*(b.attention.heads for b in (blocks if isinstance(blocks, tuple) else (blocks,))))
        return attrs.evolve(s, depth=min(s.depth, 2), block=blocks, dim=4 * heads if narrow else s.dim)

    for narrow, size in itertools.product((True, False), (8, 16, 32, 64, 128, 224)):
        try:
            return attrs.evolve(spec, stages=[stage(s, narrow) for s in spec.stages], img_size=size, num_classes=3)
        except SpecError:
            continue
    raise AssertionError(f"no image size up to 224 px fits the shrunk {spec}")


def shrunk(name: str) -> tuple[torch.nn.Module, torch.Tensor, int]:
    """The preset shrunk, built in eval mode (seed 0), a batch of 2 images, and dynamo's graph break count."""
    spec = small(vspec.load_spec(ROOT / "specs" / f"{name}.py"))
    torch.manual_seed(0)
    model = vspec.build(spec).eval()
    x = vspec.example_input(spec, 2)
    torch._dynamo.reset()
    with torch.no_grad():
        breaks = torch._dynamo.explain(model)(x).graph_break_count
    torch._dynamo.reset()
    return model, x, breaks
