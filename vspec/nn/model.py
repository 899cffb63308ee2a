"""The vision transformer assembled from a Model spec, with timm's model API."""

import attrs
import torch
from torch import nn

from .. import spec as S
from ..ops import sincos_1d, sincos_2d
from .context import BuildContext
from .layers import make_norm


class VisionTransformer(nn.Module):
    """embedder -> [class token] -> + position embedding -> blocks -> final norm -> head.

    timm conventions: `forward_features`, `forward_head(x, pre_logits=False)`, `num_classes`,
    `num_features`, `reset_classifier`, `get_classifier`, `no_weight_decay`. `.spec` is the spec it
    was built from (kept in step by `reset_classifier`).
    """

    def __init__(self, spec: S.Model, ctx: BuildContext):
        super().__init__()
        self.spec = spec
        self.num_classes = spec.num_classes
        self.num_features = self.embed_dim = spec.dim
        self.num_prefix_tokens = spec.num_prefix_tokens
        grid, d = spec.grid, spec.dim
        self.embedder = ctx.child(spec.embedder)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d)) if spec.class_token else None
        n_tokens = grid[0] * grid[1] + self.num_prefix_tokens
        if spec.pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.zeros(1, n_tokens, d))
        elif spec.pos_embed == "sincos1d":
            self.register_buffer("pos_embed", sincos_1d(n_tokens, d)[None], persistent=False)
        elif spec.pos_embed == "sincos2d":  # patch tokens only; prefix tokens get zeros
            table = torch.cat((torch.zeros(self.num_prefix_tokens, d), sincos_2d(*grid, d)))
            self.register_buffer("pos_embed", table[None], persistent=False)
        else:
            self.pos_embed = None
        rates = [spec.drop_path * i / max(spec.depth - 1, 1) for i in range(spec.depth)]
        self.blocks = nn.Sequential(*(ctx.child(b, index=i, drop_path=rates[i]) for i, b in enumerate(spec.blocks)))
        self.norm = make_norm(spec.blocks[-1].norm, d) if spec.final_norm else nn.Identity()
        self.head = ctx.child(spec.head)
        if spec.init == "timm":
            self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """timm's ViT init: Linear weights trunc-normal(0.02) with zero bias, learned position
        embedding trunc-normal(0.02), class token normal(1e-6); other layers keep torch defaults."""
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        for m in self.modules():
            _init_linear(m)

    def no_weight_decay(self) -> set[str]:
        return {name for name in ("pos_embed", "cls_token") if isinstance(getattr(self, name), nn.Parameter)}

    def get_classifier(self) -> nn.Module:
        """The classifier layer (a ModuleDict of the two for heads with a class-token and a word-token
        classifier)."""
        if hasattr(self.head, "fc"):
            return self.head.fc
        return nn.ModuleDict(dict(cls_fc=self.head.cls_fc, word_fc=self.head.word_fc))

    def reset_classifier(self, num_classes: int) -> None:
        new = self.head.reset(num_classes)
        self.num_classes = num_classes
        self.spec = attrs.evolve(self.spec, num_classes=num_classes)
        if self.spec.init == "timm":
            for fc in new:
                _init_linear(fc)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embedder(x)
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        return self.norm(self.blocks(x))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


@torch.no_grad()
def _init_linear(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
