"""Channel mixers (feed-forward networks)."""

from typing import ClassVar, Literal

from attrs import field, frozen

from .core import SpecError, check

ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")


@frozen
class MLP:
    """fc1 -> activation -> fc2. The hidden width is `hidden` if set, else int(dim * ratio)."""

    kind: ClassVar[str] = "mlp"
    hidden: int | None = field(default=None, validator=check(int, ge=1, optional=True))
    ratio: float = field(default=4.0, validator=check(float, gt=0))
    act: Literal["gelu", "gelu_tanh", "relu", "silu"] = field(default="gelu", validator=check(str, choices=ACTIVATIONS))
    bias: bool = field(default=True, validator=check(bool))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

    def hidden_dim(self, dim: int) -> int:
        return self.hidden or int(dim * self.ratio)


@frozen
class DAFF:
    """DHVT's dynamic aggregation feed-forward (Eq. 4-5, Fig. 2, appendix A.1), on the token grid.

    Patch tokens: 1x1 conv + norm + GELU, then x + GELU(norm(spatial(x))) (the shortcut), then 1x1
    conv + norm. spatial: dwconv (k x k depthwise) | avgpool (k x k, stride 1, Table 8) | none.
    Class token (`cls`): reweight, times W = Linear(GELU(Linear(mean of output patch tokens))), no
    sigmoid (Eq. 4-5) | identity (passed through, Table 8's "Split CLS") | all (W re-weights every
    token, Table 9). `split_cls = false` sends the class token through the same per-token layers as
    the patches (Table 8's plain "ViT" row), which needs spatial = none and cls = identity.
    norm: batchnorm (released) | layernorm (Table 11) | none. Convolutions have bias (released)."""

    kind: ClassVar[str] = "daff"
    hidden: int | None = field(default=None, validator=check(int, ge=1, optional=True))
    ratio: float = field(default=4.0, validator=check(float, gt=0))
    kernel: int = field(default=3, validator=check(int, ge=1))
    spatial: Literal["dwconv", "avgpool", "none"] = field(
        default="dwconv", validator=check(str, choices=("dwconv", "avgpool", "none"))
    )
    shortcut: bool = field(default=True, validator=check(bool))
    cls: Literal["reweight", "identity", "all"] = field(
        default="reweight", validator=check(str, choices=("reweight", "identity", "all"))
    )
    split_cls: bool = field(default=True, validator=check(bool))
    norm: Literal["batchnorm", "layernorm", "none"] = field(
        default="batchnorm", validator=check(str, choices=("batchnorm", "layernorm", "none"))
    )
    se_reduction: int = field(default=4, validator=check(int, ge=1))

    def __attrs_post_init__(self):
        if self.kernel % 2 == 0:
            raise SpecError("DAFF.kernel", f"must be odd (same padding), got {self.kernel}")
        if not self.split_cls and (self.spatial != "none" or self.cls != "identity"):
            raise SpecError(
                "DAFF.split_cls",
                "false needs spatial = none and cls = identity (the class token has no place on the grid)",
            )

    def hidden_dim(self, dim: int) -> int:
        return self.hidden or int(dim * self.ratio)


FFN = MLP | DAFF
