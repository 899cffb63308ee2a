"""The spec language: frozen attrs classes that describe a transformer (for images or text) as data.

`kinds.py` declares what each role's kinds may have (their bases); the generic kinds are `vit.py` (ViT's parts),
`swin.py` (window attention and patch merging, which MSF's window attention extends), `stems.py` (the CNN patch
stem of Refined-ViT and LV-ViT), `text.py` (the language bodies' embedder and heads, which SoT's language head runs
on) and `blocks.py` (the pre-norm and post-norm blocks);
the families' kinds (the papers') are in their folders
(`vspec/models/<family>/spec.py`, found by `families.py` and re-exported here by name); `model.py` assembles them
into stages and a model; `layout.py` works out the shapes.
Importing this package does not import torch.
"""

from .._moved import moved as _moved
from . import (
    budget,  # noqa: F401 - the size guard, vspec.spec.budget
    families,
)
from .blocks import Block, PostNormBlock
from .budget import MemoryBudgetError
from .catalogue import load_spec
from .errors import SpecError
from .kinds import AttentionKind, BlockKind, EmbedderKind, EntryKind, FFNKind, HeadKind, Kind
from .layout import Assembly, StageLayout, StateShape, Tokens, assemble, embedded, layout, state_layout
from .load import load_weights_table, override, parse_assignment
from .migrate import VERSION
from .model import KINDS, ROLES, Model, Stage
from .serialize import from_dict, from_json, from_toml, to_dict, to_json, to_toml
from .stems import ConvStem
from .swin import PatchMerging, WindowMHSA
from .text import FirstTokenHead, LastTokenHead, TokenEmbed
from .vit import MHSA, MLP, ClassTokenHead, DenseAux, GAPHead, Norm, Output, PatchEmbed, Projections, SimplePatchEmbed
from .weights import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    INCEPTION_MEAN,
    INCEPTION_STD,
    Hub,
    Manual,
    Preprocess,
    PublishedWeights,
    Url,
)

__all__ = [
    # generic parts
    "ClassTokenHead", "ConvStem", "DenseAux", "GAPHead", "MHSA", "MLP", "Norm", "Output", "PatchEmbed", "Projections",
    "SimplePatchEmbed", "Block", "PostNormBlock", "PatchMerging", "WindowMHSA", "FirstTokenHead", "LastTokenHead",
    "TokenEmbed",
    # the role protocol
    "AttentionKind", "BlockKind", "EmbedderKind", "EntryKind", "FFNKind", "HeadKind", "Kind",
    # assembly, shapes, files
    "KINDS", "ROLES", "VERSION", "Assembly", "MemoryBudgetError", "Model", "Stage", "StageLayout", "StateShape",
    "Tokens", "SpecError", "assemble", "embedded", "layout", "state_layout",
    "from_dict", "from_json", "from_toml", "load_spec", "load_weights_table", "override", "parse_assignment",
    "to_dict", "to_json",
    "to_toml",
    # published weights, declared beside a preset's SPEC
    "Hub", "Manual", "Url", "PublishedWeights", "Preprocess", "IMAGENET_MEAN", "IMAGENET_STD", "INCEPTION_MEAN",
    "INCEPTION_STD",
]
CORE = tuple(__all__)  # the core's names; the families' join them (`_export_families`)
_from_families: set[str] = set()


def _export_families() -> None:
    """The families' public names as this package's (`vspec.spec.SecondOrderHead`); called again when one is
    registered or forgotten."""
    global __all__
    names = families.exported()
    for name in _from_families - set(names):
        globals().pop(name, None)
    globals().update(names)
    _from_families.clear()
    _from_families.update(names)
    __all__ = [*CORE, *sorted(names)]


families.load()
_export_families()
families.on_change(_export_families)


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
