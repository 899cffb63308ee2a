"""The spec language: frozen attrs classes that describe a vision transformer as data.

Importing this package does not import torch.
"""

from .attention import MHSA, HeadTokens
from .core import SpecError
from .embedder import SOPE, PatchEmbed, SimplePatchEmbed, SoTEmbed
from .ffn import DAFF, MLP
from .head import ClassTokenHead, GAPHead
from .load import load_spec, override, parse_assignment
from .model import KINDS, ROLES, Block, Model
from .norm import Norm
from .second_order import EPN, GCP, MGCrP, GAPPool, LearnableScale, NoNorm, ReprLayerNorm, SecondOrderHead, SvPN
from .serialize import from_dict, from_json, from_toml, to_dict, to_json, to_toml

__all__ = [
    "DAFF",
    "HeadTokens",
    "SOPE",
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
    "KINDS",
    "ROLES",
    "Block",
    "ClassTokenHead",
    "GAPHead",
    "Model",
    "Norm",
    "PatchEmbed",
    "SimplePatchEmbed",
    "SpecError",
    "from_dict",
    "from_json",
    "from_toml",
    "load_spec",
    "override",
    "parse_assignment",
    "to_dict",
    "to_json",
    "to_toml",
]
