"""Modules, one per component kind; each takes its spec and a BuildContext."""

from .attention import MHSA
from .block import Block
from .context import BuildContext
from .dhvt import DAFF, SOPE, HeadTokens
from .embedder import PatchEmbed, SimplePatchEmbed
from .ffn import MLP
from .head import ClassTokenHead, GAPHead
from .model import VisionTransformer
from .second_order import EPN, GCP, MGCrP, GAPPool, LearnableScale, NoNorm, ReprLayerNorm, SecondOrderHead, SvPN
from .sot_embed import SoTEmbed

__all__ = [
    "DAFF",
    "SOPE",
    "HeadTokens",
    "EPN",
    "GCP",
    "GAPPool",
    "LearnableScale",
    "MGCrP",
    "NoNorm",
    "ReprLayerNorm",
    "SecondOrderHead",
    "SoTEmbed",
    "SvPN",
    "MHSA",
    "MLP",
    "Block",
    "BuildContext",
    "ClassTokenHead",
    "GAPHead",
    "PatchEmbed",
    "SimplePatchEmbed",
    "VisionTransformer",
]
