"""The generic modules, one per generic component kind, each taking its spec and a BuildContext: `vit.py` (ViT's
parts), `swin.py` (window attention, patch merging), `stems.py` (the CNN patch stem), `text.py` (the language
bodies' embedder and heads); `blocks.py` holds the blocks (the pre-norm and post-norm ones) and the stage,
`model.py` the model; `inputs.py` what a model reads; `layers.py` the shared layers and the one norm factory;
`head_outputs.py` the contract between heads and training (HeadOutput, head_loss). The families' modules (the papers')
are in their folders (`vspec/models/<family>/modules.py`)."""

from .._moved import moved as _moved
from .blocks import Block, PostNormBlock, Stage
from .context import BuildContext
from .head_outputs import HeadOutput, head_loss
from .layers import make_norm
from .model import Part, Transformer
from .stems import ConvStem
from .swin import PatchMerging, WindowMHSA
from .text import FirstTokenHead, LastTokenHead, TokenEmbed
from .vit import MHSA, MLP, ClassTokenHead, GAPHead, PatchEmbed, SimplePatchEmbed

__all__ = [
    "Block", "BuildContext", "ClassTokenHead", "ConvStem", "FirstTokenHead", "GAPHead", "HeadOutput", "LastTokenHead",
    "MHSA", "MLP", "Part", "PatchEmbed", "PatchMerging", "PostNormBlock", "SimplePatchEmbed", "Stage", "TokenEmbed",
    "Transformer", "WindowMHSA", "head_loss", "make_norm",
]


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
