"""A "released" gated transformer -> vspec: `config` holds its constructor's arguments (dim, depth, heads, hidden,
num_classes, img_size, patch), each honoured or refused by name; its keys (`patch.*`, `layers.i.{qkv,proj,w,v,out,
gates,n1,n2}`, `norm.*`, `fc.*`) map one by one, every key used. One `Released` record."""

from collections.abc import Mapping
from typing import Any

from vspec import spec as specs
from vspec.convert import Released

from . import spec as family_spec


def _spec(a: dict[str, Any], weights: Mapping | None = None) -> specs.Model:
    block = family_spec.GatedBlock(attention=specs.MHSA(heads=a["heads"]), ffn=family_spec.GLUFFN(hidden=a["hidden"]))
    return specs.Model(embedder=specs.PatchEmbed(patch_size=a["patch"]), block=block, depth=a["depth"], dim=a["dim"],
                   num_classes=a["num_classes"], img_size=a["img_size"], pos_embed="learned")


TOY = Released(
    name="Toy",
    arguments={"dim": 32, "depth": 2, "heads": 2, "hidden": None, "num_classes": 10, "img_size": 16, "patch": 4},
    to_spec=_spec,
    refusals=lambda a: [(a["dim"] % a["heads"] != 0, f"heads {a['heads']}: does not divide dim {a['dim']}")],
    rules=[
        (r"^patch\.", "embedder.proj."),
        (r"^layers\.(\d+)\.qkv\.", r"stages.0.blocks.\1.attn.qkv."),
        (r"^layers\.(\d+)\.proj\.", r"stages.0.blocks.\1.attn.proj."),
        (r"^layers\.(\d+)\.n1\.", r"stages.0.blocks.\1.norm1."),
        (r"^layers\.(\d+)\.n2\.", r"stages.0.blocks.\1.norm2."),
        (r"^layers\.(\d+)\.(w|v|out)\.", r"stages.0.blocks.\1.ffn.\2."),
        (r"^layers\.(\d+)\.gates$", r"stages.0.blocks.\1.gates"),
        (r"^fc\.", "head.fc."),
    ],
)
