"""The spec language: frozen attrs classes that describe a transformer (for images or text) as data.

`kinds.py` declares what each role's kinds may have (their bases); the generic kinds are `vit.py` (ViT's parts),
`swin.py` (window attention and patch merging, which MSF's window attention extends), `stems.py` (the CNN patch
stem of Refined-ViT and LV-ViT), `text.py` (the language bodies' embedder and heads, which SoT's language head runs
on) and `blocks.py` (the pre-norm and post-norm blocks);
the families' kinds (the papers') are in their folders
(`vspec/models/<family>/spec.py`, found by `families.py` and served here by name, `__getattr__`); `model.py`
assembles them into stages and a model; `layout.py` works out the shapes.
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
    "Assembly", "AttentionKind", "Block", "BlockKind", "ClassTokenHead", "ConvStem", "DenseAux", "EmbedderKind",
    "EntryKind", "FFNKind", "FirstTokenHead", "GAPHead", "HeadKind", "Hub", "IMAGENET_MEAN", "IMAGENET_STD",
    "INCEPTION_MEAN", "INCEPTION_STD", "KINDS", "Kind", "LastTokenHead", "MHSA", "MLP", "Manual", "MemoryBudgetError",
    "Model", "Norm", "Output", "PatchEmbed", "PatchMerging", "PostNormBlock", "Preprocess", "Projections",
    "PublishedWeights", "ROLES", "SimplePatchEmbed", "SpecError", "Stage", "StageLayout", "StateShape", "TokenEmbed",
    "Tokens", "Url", "VERSION", "WindowMHSA", "assemble", "embedded", "from_dict", "from_json", "from_toml", "layout",
    "load_spec", "load_weights_table", "override", "parse_assignment", "state_layout", "to_dict", "to_json", "to_toml",
]

families.load()  # the families' kinds register (vspec.spec.KINDS); a clash of their names fails the import
families.exported()


def __getattr__(name: str):
    """The families' kinds (their spec module's `__all__`, `families.exported()`: `vspec.spec.SecondOrderHead`,
    and a family registered later), else the previous release's names (vspec/_moved.py)."""
    found = families.exported()
    if name in found:
        return found[name]
    return _moved(__name__, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *families.exported()})
