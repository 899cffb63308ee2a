"""A checkpoint's weights at another image size: the parameters whose shape follows the token grid, resampled.

Two kinds of parameter follow the grid:
- the learned absolute position table `pos_embed` (1, prefix + h w, d): its h x w patch part is resampled
  bicubic over the grid (align_corners=False, no antialiasing), the prefix (class) token's rows kept as they
  are: the rule of DeiT's released fine-tuning at 384 px (facebookresearch/deit, main.py), equal to timm's
  `resample_abs_pos_embed(..., antialias=False)` (timm >= 0.9 antialiases by default, a different cubic);
- Swin's relative position bias tables ((2 wh - 1)(2 ww - 1), heads), when the window changes (a window
  larger than the grid is clamped to it, `WindowMHSA.window_size`): bicubic over the (2 wh - 1) x (2 ww - 1)
  table, as Swin's released `load_pretrained` (microsoft/Swin-Transformer, utils.py) and timm's
  `resize_rel_pos_bias_table_simple` do. The relative position index and the shift masks are buffers the
  model rebuilds, never loaded.

Every other parameter of every kind keeps its shape at another grid (DHVT's, iRPE's tables, T2T's, Conformer's,
Refiner's convolutions, SoT's heads: their grids are buffers or run-time shapes); `resample_state` still refuses,
by key, any weight whose shape it cannot explain. The tensor functions are in vspec/ops/resample.py.
"""

import torch

from ..compiler import build
from ..ops.resample import resample_bias_table, resample_pos_embed
from ..spec import Model

__all__ = ["resample_state"]


def resample_state(state_dict: dict[str, torch.Tensor], old_spec: Model,
                   new_spec: Model) -> dict[str, torch.Tensor]:
    """`state_dict` of `old_spec`'s model, adapted to `new_spec` (the spec at another img_size): a new dict whose
    position table and window tables are resampled (module doc); the other tensors are the same objects. Both
    specs' models are built on the meta device to read their grids and windows. A weight whose shape still
    differs from the new model's is a ValueError naming it.

    Args:
        state_dict: the weights of `old_spec`'s model.
        old_spec: the spec they were saved with.
        new_spec: the same spec at another img_size.
    """
    old_model, new_model = build(old_spec, device="meta"), build(new_spec, device="meta")
    out = dict(state_dict)
    if "pos_embed" in out and new_spec.pos_embed == "learned":
        out["pos_embed"] = resample_pos_embed(out["pos_embed"], old_spec.grid, new_spec.grid,
                                              new_spec.num_prefix_tokens)
    old_modules = dict(old_model.named_modules())
    for name, module in new_model.named_modules():
        key = f"{name}.relative_position_bias_table"
        if key in out and name in old_modules:
            out[key] = resample_bias_table(out[key], old_modules[name].window, module.window)
    own = new_model.state_dict()
    for key, value in out.items():
        if key in own and tuple(own[key].shape) != tuple(value.shape):
            raise ValueError(f"{key}: shape {list(value.shape)} at img_size {list(old_spec.img_size)}, "
                             f"{list(own[key].shape)} at {list(new_spec.img_size)}; vspec.weights.resample has no rule "
                             "for it")
    return out
