"""Modules, one per component kind; each takes its spec and a BuildContext."""

from .attention import MHSA
from .block import Block
from .context import BuildContext
from .embedder import PatchEmbed, SimplePatchEmbed
from .ffn import MLP
from .head import ClassTokenHead, GAPHead
from .model import VisionTransformer

__all__ = ["MHSA", "MLP", "Block", "BuildContext", "ClassTokenHead", "GAPHead", "PatchEmbed",
           "SimplePatchEmbed", "VisionTransformer"]
