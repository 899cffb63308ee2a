"""Modules, one per component kind, each taking its spec and a BuildContext. One file per paper:
`vit.py` (the generic parts), `sot.py`, `dhvt.py`, `swin.py`, `msf.py`, `refiner.py`, `t2t.py`, `irpe.py`, and
`text.py` (language bodies); `model.py` assembles blocks, stages and the model; `layers.py` holds the shared layers
and the one norm factory; `heads.py` the contract between heads and training (HeadOutput, head_loss)."""

from .conformer import ConformerHead, ConformerStem, ConvBranch, CoupledBlock
from .context import BuildContext
from .dhvt import DAFF, SOPE, HeadTokenBlock, HeadTokens
from .heads import HeadOutput, head_loss
from .irpe import IRPEAttention
from .layers import make_norm
from .model import Block, Part, PostNormBlock, Stage, Transformer, VisionTransformer
from .msf import MeanShiftAttention, WindowMeanShiftAttention
from .refiner import AdjustedBlock, ConvStem, RefinerAttention
from .sot import EPN, GCP, GAPPool, LearnableScale, MGCrP, NoNorm, ReprLayerNorm, SecondOrderHead, SoTEmbed, SvPN
from .swin import PatchMerging, WindowMHSA
from .t2t import T2TEmbed
from .text import FirstTokenHead, LastTokenHead, TokenEmbed
from .vit import MHSA, MLP, ClassTokenHead, GAPHead, PatchEmbed, SimplePatchEmbed

__all__ = [
    "ClassTokenHead", "GAPHead", "MHSA", "MLP", "PatchEmbed", "SimplePatchEmbed",
    "EPN", "GCP", "GAPPool", "LearnableScale", "MGCrP", "NoNorm", "ReprLayerNorm", "SecondOrderHead", "SoTEmbed",
    "SvPN",
    "DAFF", "HeadTokenBlock", "HeadTokens", "SOPE",
    "PatchMerging", "WindowMHSA",
    "IRPEAttention",
    "MeanShiftAttention", "WindowMeanShiftAttention",
    "AdjustedBlock", "ConvStem", "RefinerAttention",
    "T2TEmbed",
    "ConformerHead", "ConformerStem", "ConvBranch", "CoupledBlock",
    "FirstTokenHead", "LastTokenHead", "TokenEmbed",
    "HeadOutput", "head_loss",
    "Block", "BuildContext", "Part", "PostNormBlock", "Stage", "Transformer", "VisionTransformer", "make_norm",
]
