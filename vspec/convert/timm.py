"""timm <-> vspec: VisionTransformer (ViT / DeiT) and SwinTransformer. `from_timm` loads timm's weights into a spec;
`to_timm` writes a vspec model as a timm state-dict file and names the timm model that loads it strictly.

`to_timm` inverts `from_timm` by its rules rather than a second table: the weights take the names of timm's own
model (built on the meta device from the arguments `_timm_arguments` reads off the spec), each renamed by
`_timm_key` to the vspec weight it holds; and the spec of what timm builds from those arguments (`_timm_spec`) must be
the model's (`canonical`), else the first part that differs is refused by name before anything is written. timm is
imported when `to_timm` runs."""

import functools
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors.torch import save_file
from torch import nn

from .. import spec as specs
from ..compiler import build
from ..extras import needs
from ..spec import SpecError
from ..spec.weights import inputs_cfg
from .common import (
    ConversionError,
    canonical,
    exported_state,
    layer_norm_eps,
    load_mapped,
    refuse_difference,
    renamer,
    spec_and_state,
)

__all__ = ["RULES", "TimmModel", "from_timm", "timm_weights", "to_timm"]

# timm name -> vspec name (everything else keeps its name: cls_token, pos_embed, norm.*)
RULES = [
    (r"^patch_embed\.", "embedder."),
    (r"^blocks\.(\d+)\.mlp\.", r"stages.0.blocks.\1.ffn."),  # ViT: one stage
    (r"^blocks\.", "stages.0.blocks."),
    (r"^layers\.(\d+)\.downsample\.", r"stages.\1.entry."),  # Swin: a stage per layer
    (r"^layers\.(\d+)\.blocks\.(\d+)\.mlp\.", r"stages.\1.blocks.\2.ffn."),
    (r"^layers\.", "stages."),
    (r"^head\.fc\.", "head.fc."),
    (r"^head\.", "head.fc."),
    (r"^fc_norm\.", "head.norm."),
]


_timm_key = renamer(RULES)


def from_timm(model_or_state_dict: nn.Module | Mapping[str, torch.Tensor], spec: specs.Model) -> nn.Module:
    """Build `spec` and load a timm ViT's or Swin's weights (a timm model or its state_dict) into it; the model comes
    back in eval mode, as every loader's (`vspec.create_model` stays timm's: train mode).

    Raises ConversionError naming unmatched keys or shapes when the spec does not describe the
    checkpoint's architecture.

    Args:
        model_or_state_dict: a timm ViT / Swin, or its state dict.
        spec: the vspec spec that describes it.
    """
    state = model_or_state_dict.state_dict() if isinstance(model_or_state_dict, nn.Module) else model_or_state_dict
    return load_mapped(build(spec), state, _timm_key).eval()


# timm's names of the standard sizes: the model arguments each entrypoint sets (`vit_<size>_patch16_224`,
# `swin_<size>_patch4_window7_224`; the image size is the constructors' default, 224)
_SIZES = {
    "vit": {size: dict(patch_size=16, embed_dim=d, depth=n, num_heads=h) for size, (d, n, h) in
            {"tiny": (192, 12, 3), "small": (384, 12, 6), "base": (768, 12, 12), "large": (1024, 24, 16)}.items()},
    "swin": {size: dict(patch_size=4, window_size=7, embed_dim=d, depths=n, num_heads=h) for size, (d, n, h) in
             {"tiny": (96, (2, 2, 6, 2), (3, 6, 12, 24)), "small": (96, (2, 2, 18, 2), (3, 6, 12, 24)),
              "base": (128, (2, 2, 18, 2), (4, 8, 16, 32))}.items()},
}
_NAMES = {"vit": "vit_{}_patch16_224", "swin": "swin_{}_patch4_window7_224"}
VIT_EPS, SWIN_EPS = 1e-6, 1e-5  # their norm_layer's defaults: timm's LayerNorm, torch's
_PREPROCESSING = ("mean", "std", "crop_pct", "crop_mode", "interpolation")  # the pretrained_cfg keys the file carries


class TimmModel(NamedTuple):
    """What loads a file `to_timm` wrote: `timm.create_model(name, **kwargs)`. `kwargs`: the model's arguments
    where they differ from `name`'s, `pretrained=True` and the `pretrained_cfg_overlay` naming the file (with the
    classes, input size and preprocessing of the model)."""

    name: str
    kwargs: dict[str, Any]


def _norm_layer(eps: float, default: float, plain: Any) -> Any:
    return plain if eps == default else functools.partial(nn.LayerNorm, eps=eps)


def _ratio(ffn: Any, dim: int) -> float:
    return ffn.hidden_dim(dim) / dim if isinstance(ffn, specs.MLP) else 4.0


def _timm_arguments(spec: specs.Model) -> tuple[str, dict[str, Any]]:
    """(family, every constructor argument of timm's VisionTransformer ("vit") or SwinTransformer ("swin") that
    vspec's parts set) read off an image spec; what the arguments cannot say, `_timm_spec` shows."""
    if spec.embedder.text:
        raise ConversionError(f"embedder: {spec.embedder.kind} (a text model) has no timm equivalent; "
                              "vspec.convert.to_hf writes BERT, RoBERTa, ELECTRA and the GPTs")
    if spec.dynamic_img_size:
        raise ConversionError("dynamic_img_size: True has no timm equivalent: timm resamples the position table "
                              "antialiased, vspec as DeiT (not), so other image sizes give other outputs")
    first = spec.stages[0]
    b, head = first.blocks[0], spec.head
    a, f = b.attention, b.ffn
    size = spec.img_size[0] if spec.img_size[0] == spec.img_size[1] else tuple(spec.img_size)
    shared = dict(img_size=size, patch_size=getattr(spec.embedder, "patch_size", 16), in_chans=spec.in_chans,
                  num_classes=spec.num_classes, mlp_ratio=_ratio(f, first.dim), qkv_bias=getattr(a, "qkv_bias", True),
                  drop_rate=getattr(head, "drop", 0.0), proj_drop_rate=getattr(a, "proj_drop", 0.0),
                  attn_drop_rate=getattr(a, "attn_drop", 0.0), drop_path_rate=spec.drop_path)
    if len(spec.stages) > 1 or a.kind == "window_mhsa":
        windows = [getattr(s.blocks[0].attention, "window", 7) for s in spec.stages]
        return "swin", dict(shared, global_pool="avg", embed_dim=first.dim, depths=tuple(s.depth for s in spec.stages),
                            num_heads=tuple(getattr(s.blocks[0].attention, "heads", 1) for s in spec.stages),
                            head_dim=getattr(a, "head_dim", None),
                            window_size=windows[0] if len(set(windows)) == 1 else tuple((w, w) for w in windows),
                            norm_layer=_norm_layer(b.norm.eps, SWIN_EPS, nn.LayerNorm))
    gap = head.kind == "gap"
    fc_norm = gap and getattr(head, "norm", None) is not None
    return "vit", dict(shared, global_pool="avg" if gap else "token", embed_dim=first.dim, depth=first.depth,
                       num_heads=getattr(a, "heads", 1), proj_bias=getattr(a, "proj_bias", True),
                       init_values=b.layer_scale, class_token=spec.class_token,
                       pos_embed="learn" if spec.pos_embed == "learned" else "none",
                       final_norm=spec.final_norm or fc_norm, fc_norm=None if fc_norm == gap else fc_norm,
                       norm_layer=_norm_layer(b.norm.eps, VIT_EPS, None),
                       act_layer=None if getattr(f, "act", "gelu") == "gelu" else f.act)


def _windows(kw: Mapping[str, Any]) -> list[int]:
    """Swin's window of each stage: one for all, or one (square) per stage."""
    windows = kw["window_size"]
    return [w[0] for w in windows] if isinstance(windows, tuple) else [windows] * len(kw["depths"])


def _timm_spec(family: str, kw: Mapping[str, Any]) -> specs.Model:
    """The vspec spec of what timm builds from `_timm_arguments`' arguments (the facts of timm's two constructors:
    one norm_layer everywhere, proj_drop_rate after the attention's projection and in the MLP, the MLP's width
    int(dim * mlp_ratio), ViT's fc_norm after the pooling in place of the final norm, Swin's widths doubling at
    each patch merging)."""
    img = kw["img_size"]
    common = dict(num_classes=kw["num_classes"], img_size=img, in_chans=kw["in_chans"], drop_path=kw["drop_path_rate"])
    drops = dict(qkv_bias=kw["qkv_bias"], attn_drop=kw["attn_drop_rate"], proj_drop=kw["proj_drop_rate"])

    def mlp(dim: int, act: str = "gelu") -> specs.MLP:
        return specs.MLP(hidden=int(dim * kw["mlp_ratio"]), act=act, drop=kw["proj_drop_rate"])

    if family == "swin":
        norm = specs.Norm(eps=layer_norm_eps(kw["norm_layer"]) or SWIN_EPS)
        stages = []
        for i, (depth, heads, window) in enumerate(zip(kw["depths"], kw["num_heads"], _windows(kw))):
            dim = kw["embed_dim"] * 2**i
            attention = specs.WindowMHSA(heads=heads, head_dim=kw["head_dim"], window=window, **drops)
            stages.append(specs.Stage(depth=depth, dim=dim, entry=specs.PatchMerging(norm=norm) if i else None,
                                      block=specs.Block(attention=attention, ffn=mlp(dim), norm=norm)))
        return specs.Model(embedder=specs.PatchEmbed(patch_size=kw["patch_size"], norm=norm), stages=stages,
                           class_token=False, pos_embed="none", head=specs.GAPHead(drop=kw["drop_rate"]), **common)
    norm = specs.Norm(eps=VIT_EPS if kw["norm_layer"] is None else layer_norm_eps(kw["norm_layer"]))
    fc_norm = kw["global_pool"] == "avg" if kw["fc_norm"] is None else kw["fc_norm"]
    head = (specs.GAPHead(norm=norm if kw["final_norm"] and fc_norm else None, drop=kw["drop_rate"])
            if kw["global_pool"] == "avg" else specs.ClassTokenHead(drop=kw["drop_rate"]))
    block = specs.Block(attention=specs.MHSA(heads=kw["num_heads"], proj_bias=kw["proj_bias"], **drops),
                        ffn=mlp(kw["embed_dim"], kw["act_layer"] or "gelu"), norm=norm, layer_scale=kw["init_values"])
    return specs.Model(embedder=specs.PatchEmbed(patch_size=kw["patch_size"]), block=block, depth=kw["depth"],
                       dim=kw["embed_dim"], class_token=kw["class_token"],
                       pos_embed="learned" if kw["pos_embed"] == "learn" else "none",
                       final_norm=kw["final_norm"] and not fc_norm, head=head, **common)


def _named(family: str, kw: Mapping[str, Any], constructor: type) -> tuple[str, dict[str, Any]]:
    """timm's name of the standard size nearest `kw` (the most arguments in common) and the arguments that differ
    from what the name builds (the constructor's defaults and the entrypoint's own)."""
    size, named = max(_SIZES[family].items(), key=lambda item: sum(kw[k] == v for k, v in item[1].items()))
    defaults = {name: p.default for name, p in inspect.signature(constructor).parameters.items()} | named
    return _NAMES[family].format(size), {k: v for k, v in kw.items() if k not in defaults or defaults[k] != v}


def timm_weights(model: Any) -> tuple[TimmModel, dict[str, torch.Tensor]]:
    """What `to_timm` writes, checked, in memory: the timm model that loads it (the overlay without its file) and
    the state dict with timm's names (tensors on the meta device stay there).

    Args:
        model: a vspec ViT, DeiT or Swin, or a (spec, state_dict) pair.
    """
    spec, state, cfg = spec_and_state(model)
    family, kw = _timm_arguments(spec)
    try:
        theirs = _timm_spec(family, kw)
    except SpecError:  # not even timm's model fits the spec's shapes (a class token or a grid it lacks): compared at
        safe = ({"img_size": kw["patch_size"] * max(_windows(kw)) * 2 ** (len(kw["depths"]) - 1)}  # shapes that do
                if family == "swin" else {"class_token": True})
        theirs = _timm_spec(family, {**kw, **safe})
    refuse_difference("timm", canonical(spec), canonical(theirs), family)
    with needs("vspec.convert.to_timm"):
        import timm  # extra
        from timm.models.swin_transformer import SwinTransformer  # extra
        from timm.models.vision_transformer import VisionTransformer  # extra
    name, kwargs = _named(family, kw, SwinTransformer if family == "swin" else VisionTransformer)
    with torch.device("meta"):
        net = timm.create_model(name, **kwargs)
    weights = exported_state(net.state_dict(), state, lambda key: (_timm_key(key), lambda t: t), f"timm's {name}")
    cfg = cfg or inputs_cfg(spec)  # the model's preprocessing, else vspec's default for it
    overlay = {k: cfg[k] for k in _PREPROCESSING if k in cfg}
    overlay.update(custom_load=False, num_classes=spec.num_classes, input_size=(spec.in_chans, *spec.img_size))
    return TimmModel(name, {**kwargs, "pretrained": True, "pretrained_cfg_overlay": overlay}), weights


def to_timm(model: Any, file_or_folder: str | Path) -> TimmModel:
    """Write a vspec ViT, DeiT or Swin (a model, or a (spec, state_dict) pair) as a timm state-dict file with timm's
    names: `file_or_folder` a .safetensors file, or a folder that gets model.safetensors. Returns the `TimmModel`
    whose `timm.create_model(name, **kwargs)` loads it strictly (no missing or unexpected keys) with the same
    outputs. A spec timm's VisionTransformer / SwinTransformer cannot express (a family's part, a field value
    timm lacks) is refused in one line naming the part, before anything is written.

    Args:
        model: a vspec ViT, DeiT or Swin, or a (spec, state_dict) pair.
        file_or_folder: a .safetensors file, or a folder (model.safetensors inside).
    """
    made, weights = timm_weights(model)
    if any(v.is_meta for v in weights.values()):
        raise ConversionError("the model's weights are on the meta device (no data): build it on a real one")
    path = Path(file_or_folder)
    path = path if path.suffix == ".safetensors" else path / "model.safetensors"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(weights, path, metadata={"format": "pt"})
    except OSError as e:
        raise ConversionError(f"{path}: cannot be written ({e.strerror or type(e).__name__})") from None
    made.kwargs["pretrained_cfg_overlay"]["file"] = str(path)
    return made
