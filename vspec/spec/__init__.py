"""The spec language: frozen attrs classes that describe a vision transformer as data.

`kinds.py` declares what each role's kinds may have (their bases); one file per paper (`vit.py` holds the
generic parts, then `sot.py`, `dhvt.py`, `swin.py`, `msf.py`, `refiner.py`, `t2t.py`, `irpe.py`; `text.py` the
language bodies') defines kinds; `model.py` assembles them into stages and a model; `layout.py` works out the
shapes. Importing this package does not import torch.
"""

from . import budget  # noqa: F401 - the size guard, vspec.spec.budget
from .blocks import PostNormBlock
from .budget import MemoryBudgetError
from .conformer import ConformerHead, ConformerStem, ConvBranch, CoupledBlock
from .core import SpecError
from .dhvt import DAFF, SOPE, HeadTokenBlock, HeadTokens
from .irpe import IRPEAttention
from .kinds import AttentionKind, BlockKind, EmbedderKind, EntryKind, FFNKind, HeadKind, Kind
from .layout import ConvMap, StageLayout, Tokens, conv_layout, embedded, layout
from .load import load_spec, override, parse_assignment
from .migrate import VERSION
from .model import KINDS, ROLES, Block, Model, Stage
from .msf import MeanShiftAttention, WindowMeanShiftAttention
from .refiner import AdjustedBlock, ConvStem, Refine, RefinerAttention
from .serialize import from_dict, from_json, from_toml, to_dict, to_json, to_toml
from .sot import (
    EPN,
    GCP,
    GAPPool,
    LearnableScale,
    MGCrP,
    NoNorm,
    ReprLayerNorm,
    SecondOrderHead,
    SoTEmbed,
    SvPN,
    language_head,
)
from .swin import PatchMerging, WindowMHSA
from .t2t import T2TEmbed
from .text import FirstTokenHead, LastTokenHead, TokenEmbed
from .vit import MHSA, MLP, ClassTokenHead, DenseAux, GAPHead, Norm, Output, PatchEmbed, Projections, SimplePatchEmbed

__all__ = [
    # generic parts (vit.py)
    "ClassTokenHead", "DenseAux", "GAPHead", "MHSA", "MLP", "Norm", "Output", "PatchEmbed", "PostNormBlock",
    "Projections", "SimplePatchEmbed",
    # SoT
    "EPN", "GCP", "GAPPool", "LearnableScale", "MGCrP", "NoNorm", "ReprLayerNorm", "SecondOrderHead", "SoTEmbed",
    "SvPN", "language_head",
    # DHVT
    "DAFF", "HeadTokenBlock", "HeadTokens", "SOPE",
    # Swin
    "PatchMerging", "WindowMHSA",
    # iRPE
    "IRPEAttention",
    # MSF
    "MeanShiftAttention", "WindowMeanShiftAttention",
    # Refiner
    "AdjustedBlock", "ConvStem", "Refine", "RefinerAttention",
    # T2T-ViT
    "T2TEmbed",
    # Conformer
    "ConformerHead", "ConformerStem", "ConvBranch", "ConvMap", "CoupledBlock", "conv_layout",
    # language bodies
    "FirstTokenHead", "LastTokenHead", "TokenEmbed",
    # the role protocol
    "AttentionKind", "BlockKind", "EmbedderKind", "EntryKind", "FFNKind", "HeadKind", "Kind",
    # assembly, shapes, files
    "KINDS", "ROLES", "VERSION", "Block", "MemoryBudgetError", "Model", "Stage", "StageLayout", "Tokens", "SpecError",
    "embedded", "layout",
    "from_dict", "from_json", "from_toml", "load_spec", "override", "parse_assignment", "to_dict", "to_json",
    "to_toml",
]
