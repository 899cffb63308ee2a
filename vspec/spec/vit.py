"""The generic parts (ViT, DeiT, SimpleViT): norm, patch embeddings, multi-head self-attention, MLP,
class-token (with the dense auxiliary head) and average-pooling heads. What each role's kinds may declare
is in `kinds.py`."""

from typing import ClassVar, Literal

from attrs import field, frozen

from .errors import MAX_SIZE, SpecError, check, check_eps, check_size, show
from .kinds import LOGITS, AttentionKind, EmbedderKind, FFNKind, HeadKind, Output  # noqa: F401 - Output, re-exported
from .layout import Tokens

__all__ = [
    "ClassTokenHead", "DenseAux", "GAPHead", "MHSA", "MLP", "MultiHead", "Norm", "Output", "PROJECTION_ROLES",
    "PatchEmbed", "Patchify", "Projections", "SimplePatchEmbed", "UNPROBED_ROLES", "ZERO_GRADIENTS", "check_hidden",
    "role_widths",
]
_NORM_KINDS = ("layernorm", "batchnorm", "none")
_ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")


@frozen
class Norm:
    """A normalisation over the channel axis: layernorm (per token) | batchnorm (per channel, over the
    batch and all positions) | none (the identity). Used by every component that normalises."""

    kind: Literal["layernorm", "batchnorm", "none"] = field(default="layernorm",
                                                           validator=check(str, choices=_NORM_KINDS))
    eps: float = field(default=1e-6, validator=check_eps)


class Patchify(EmbedderKind):
    """What the patch embedders share: a `patch_size` stride that must divide the image."""

    __slots__ = ()

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """The rules that tie the embedder to the image it reads and the width `dim` it writes."""
        for axis, size in zip(("height", "width"), img_size):
            if size % self.patch_size:
                raise SpecError("patch_size", f"{self.patch_size} does not divide the image {axis} {size}")


@frozen
class PatchEmbed(Patchify):
    """ViT's linear patch embedding: a p x p convolution with stride p, then `norm` (Swin) if set."""

    kind: ClassVar[str] = "patch"
    any_grid: ClassVar[bool] = True
    patch_size: int = field(default=16, validator=check(int, ge=1))
    bias: bool = field(default=True, validator=check(bool))
    norm: Norm | None = field(default=None, validator=check(Norm, optional=True))


@frozen
class SimplePatchEmbed(Patchify):
    """SimpleViT's (MSF's backbone) embedding: patchify -> norm(patch_dim) -> Linear -> norm(dim)."""

    kind: ClassVar[str] = "simple_patch"
    any_grid: ClassVar[bool] = True
    patch_size: int = field(default=16, validator=check(int, ge=1))
    norm: Norm = field(default=Norm(eps=1e-5), validator=check(Norm))

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """SpecError where the image does not fit (`Patchify`) or a patch's values are too many."""
        Patchify.check_input(self, img_size, in_chans, dim)
        check_size("patch_size", in_chans * self.patch_size**2, f"a patch's {in_chans} x {self.patch_size}^2 values")


# An attention's projection roles, by letter, in the order Projections.roles spells them (MSF's notation):
# QUERY, KEY, VALUE and PROBE project x, WEIGHT projects the heads' output back. PROBE is MSF's own.
PROJECTION_ROLES = "QKVPW"
UNPROBED_ROLES = PROJECTION_ROLES.replace("P", "")  # QKVW: the original attention's
_ROLE_NAMES = dict(zip(PROJECTION_ROLES, ("QUERY", "KEY", "VALUE", "PROBE", "WEIGHT")))
_GROUPINGS = ("interleaved", "block")


@frozen
class Projections:
    """How an attention projects x into its roles (MSF, Tables 1, 2 and 4): which roles share a matrix,
    and grouping.

    `roles` spells, in the order QUERY KEY VALUE [PROBE] WEIGHT, the matrix each role uses, in the MSF
    paper's notation: equal letters are one shared matrix, e.g. "QKKQW" (Table 1i: VALUE uses KEY's
    matrix, PROBE uses QUERY's) or "QKVW" (the original attention, untied). A role uses its own letter
    or that of an earlier role; WEIGHT tied to an input role uses that matrix's transpose. None: every
    role its own matrix.

    `groups` G splits the input of the input roles (QUERY, KEY, VALUE, PROBE) into G channel groups:
    each output channel reads one group, parameters / G (Sec. 2.3). `grouping`: interleaved (output
    channel o reads group o mod G; the released code's only mode) | block (output channels in G
    contiguous blocks, block j reads group j). WEIGHT stays dense, as in the released code (Table 4:
    "Q, K, V, P grouped"). Biases (the attention's qkv_bias / proj_bias) belong to roles, never shared."""

    roles: str | None = field(default=None, validator=check(str, optional=True))
    groups: int = field(default=1, validator=check(int, ge=1))
    grouping: Literal["interleaved", "block"] = field(default="interleaved", validator=check(str, choices=_GROUPINGS))

    def __attrs_post_init__(self):
        roles = self.roles
        if roles is None:
            return
        if len(roles) not in (4, 5):
            raise SpecError("Projections.roles", f"spells 4 (QKVW) or 5 (QKVPW) roles, got {show(roles)}")
        names = PROJECTION_ROLES if len(roles) == len(PROJECTION_ROLES) else UNPROBED_ROLES
        for i, (name, letter) in enumerate(zip(names, roles)):
            if letter != name and letter not in roles[:i]:
                raise SpecError("Projections.roles", f"{_ROLE_NAMES[name]} (letter {i + 1} of {roles!r}) uses "
                                f"{letter!r}: a role uses its own letter {name!r} or an earlier role's")

    def letters(self, names: str) -> str:
        """The matrix letter of each role in `names` (QKVW or QKVPW)."""
        return self.roles if self.roles is not None else names

    def matrices(self, names: str, dim: int, inner: int, probe: int | None = None) -> dict[str, tuple[int, int]]:
        """The (out, in) shape of each distinct matrix, by letter: an input role's (inner, dim / groups)
        (PROBE's out `probe` if given: eq14's P~; `role_widths`), WEIGHT's (dim, inner)."""
        rows = role_widths(names, inner, probe)
        return {name: (dim, inner) if name == "W" else (rows[name], dim // self.groups)
                for name, letter in zip(names, self.letters(names)) if letter == name}

    def check(self, names: str, dim: int, inner: int) -> None:
        """The rules tying the projections to their attention: as many roles as it has, and groups
        that divide the input width and the inner width."""
        if self.roles is not None and len(self.roles) != len(names):
            raise SpecError("roles", f"this attention has {len(names)} roles ({names}), got {self.roles!r}")
        for width, what in ((dim, "the input width"), (inner, "the inner width heads x head_dim")):
            if width % self.groups:
                raise SpecError("groups", f"{self.groups} does not divide {what} {width}")


def role_widths(roles: str, inner: int, probe: int | None = None) -> dict[str, int]:
    """The width of each input role of `roles` (all but the last, WEIGHT), by letter: the inner width
    heads x head_dim, PROBE's `probe` if given (MSF Eq. 14's P~ is dim x dim). WEIGHT maps inner back.

    Args:
        roles: the projection roles, by letter (WEIGHT last).
        inner: the inner width, heads x head_dim.
        probe: PROBE's width (None: the inner width).
    """
    return {name: probe if name == "P" and probe else inner for name in roles[:-1]}


ZERO_GRADIENTS = "the query and key weights would only ever get zero gradients"


def _check_heads(heads: int, head_dim: int | None, dim: int) -> None:
    if head_dim is None and dim % heads:
        raise SpecError("heads", f"{heads} does not divide dim {dim} "
                                 "(set attention.head_dim to use an inner width other than dim)")


@frozen
class MultiHead(AttentionKind):
    """What the attention kinds share: `heads` heads of `head_dim` channels (default dim / heads), q, k, v
    from one Linear (`qkv_bias`), the output projection (`proj_bias`), `scale` (default head_dim ** -0.5),
    dropout on the attention and on the output.

    `projections`: None (default) projects q, k, v with one fused Linear (`qkv`, timm's layout) and the
    output with `proj`; a Projections value ties or groups the roles QUERY KEY VALUE WEIGHT (MSF Table 2,
    Table 4).

    Every query attends to at least 2 tokens (`check_keys`): over one token the attention is constant
    and its query and key weights could not learn, so a 1x1 grid without class token (or head tokens)
    is refused, and so is a window of 1 token."""

    roles: ClassVar[str] = UNPROBED_ROLES

    heads: int = field(default=12, validator=check(int, ge=1))
    head_dim: int | None = field(default=None, validator=check(int, ge=1, optional=True))
    qkv_bias: bool = field(default=True, validator=check(bool))
    proj_bias: bool = field(default=True, validator=check(bool))
    scale: float | None = field(default=None, validator=check(float, gt=0, optional=True))
    attn_drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    proj_drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    projections: Projections | None = field(default=None, validator=check(Projections, optional=True))

    def inner_dim(self, dim: int) -> int:
        """The attention's inner width at token width `dim`: heads x head_dim (head_dim: dim / heads)."""
        return self.heads * (self.head_dim or dim // self.heads)

    def probe_width(self, dim: int) -> int | None:
        """The width of a PROBE role of its own (MSF Eq. 14's P~), None where PROBE, if any, is inner wide
        like the other input roles: the default."""
        return None

    def role_widths(self, dim: int) -> dict[str, int]:
        """The width of each input role this attention projects x to, by letter (the module's layout)."""
        return role_widths(self.roles, self.inner_dim(dim), self.probe_width(dim))

    def check(self, tokens: Tokens) -> None:
        """SpecError where the heads do not divide the width or the projections do not fit it."""
        _check_heads(self.heads, self.head_dim, tokens.dim)
        check_size("head_dim" if self.head_dim else "heads", self.inner_dim(tokens.dim),
                   f"the inner width heads x head_dim = {self.heads} x {self.head_dim or tokens.dim // self.heads}")
        if self.projections is not None:
            try:
                self.projections.check(self.roles, tokens.dim, self.inner_dim(tokens.dim))
            except SpecError as e:
                raise e.under("projections") from None
        self.check_keys(tokens)

    def scores(self, tokens: Tokens) -> int:
        """Elements of its attention scores: heads x queries x keys."""
        return self.heads * tokens.length**2

    def working_set(self, tokens: Tokens) -> int:
        """The elements it holds at once: q, k, v and output, and the scores twice."""
        return 4 * tokens.length * self.inner_dim(tokens.dim) + 2 * self.scores(tokens)

    def check_keys(self, tokens: Tokens) -> None:
        """Each query must see at least 2 keys: a softmax over one key is 1 whatever the scores, so the
        query and key weights (and any score bias) would only ever get zero gradients."""
        if tokens.length == 1:
            raise SpecError("", f"1 token ({tokens.grid[0]}x{tokens.grid[1]} grid, no class token): nothing to attend, "
                                f"{ZERO_GRADIENTS} (a larger image, a class token or head tokens give it more)")


@frozen
class MHSA(MultiHead):
    """Multi-head self-attention over all tokens: softmax(q k^T * scale) v per head."""

    kind: ClassVar[str] = "mhsa"
    any_grid: ClassVar[bool] = True
    attends_all: ClassVar[bool] = True  # any token set: extra tokens (head tokens) may join
    masks: ClassVar[bool] = True  # through SDPA's mask
    causal: ClassVar[bool] = True


def check_hidden(ffn, dim: int) -> None:
    """An FFN's hidden width, `hidden` or int(dim x ratio), is a real layer's (no float overflow in int()).

    Args:
        ffn: the FFN spec (its `hidden` and `ratio`).
        dim: the token width it runs at.
    """
    if ffn.hidden is None:
        wide = dim * ffn.ratio
        check_size("ratio", int(wide) if wide <= MAX_SIZE else wide, f"the hidden width int({ffn.ratio} x dim {dim})")


@frozen
class MLP(FFNKind):
    """fc1 -> activation -> fc2. The hidden width is `hidden` if set, else int(dim * ratio). Dropout `drop`
    after fc2 and, at `hidden_drop` (None: `drop`, timm's), after the activation (BERT, GPT: 0).
    `layer_scale`, when set, is the initial value of a learnable per-channel scale on the output
    (Refined-ViT's `scale_channel`, 1e-5)."""

    kind: ClassVar[str] = "mlp"
    any_grid: ClassVar[bool] = True
    hidden: int | None = field(default=None, validator=check(int, ge=1, optional=True))
    ratio: float = field(default=4.0, validator=check(float, gt=0))
    act: Literal["gelu", "gelu_tanh", "relu", "silu"] = field(default="gelu",
                                                               validator=check(str, choices=_ACTIVATIONS))
    bias: bool = field(default=True, validator=check(bool))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    layer_scale: float | None = field(default=None, validator=check(float, gt=0, optional=True))
    hidden_drop: float | None = field(default=None, validator=check(float, ge=0, lt=1, optional=True))

    def hidden_dim(self, dim: int) -> int:
        """The hidden width at token width `dim`: `hidden`, else int(dim x ratio)."""
        return self.hidden or int(dim * self.ratio)

    def check(self, tokens: Tokens) -> None:
        """SpecError where the hidden width is no real layer's."""
        check_hidden(self, tokens.dim)




@frozen
class DenseAux:
    """The dense auxiliary head of Refined-ViT (Refiner released code: `aux_head`, from LV-ViT's token
    labelling): a Linear classifier on every patch token (prefix tokens excluded) beside the class-token
    classifier. Training: its logits (B, N, C) take `loss_weight` x the loss against the image label at
    every token, or against each token's own label with a token-labelling target (vspec.nn.head_outputs.head_loss;
    the class token's weight is 1; 0.5 is the released training's dense weight). Eval: class logits +
    `eval_weight` x the max over patch tokens of its logits (the released 0.5). Both weights are > 0: at 0 the
    classifier would go untrained, or unread at eval.

    `mix_token`: MixToken (LV-ViT; Refiner's released training) in the training forward that asks for the head's
    outputs (`set_training_outputs(True)`: vspec train's; a plain `model(x)` never mixes): a box of the
    embedder's token grid is swapped with the batch-flipped sample's before the class token and position
    embedding (vspec.nn.mix_token), the head swaps its token logits back, and the class target is mixed by the
    box's share (head_loss). It needs an image body whose token grid runs unchanged from the embedder to the head.
    Eval: nothing is mixed."""

    loss_weight: float = field(default=0.5, validator=check(float, gt=0))
    eval_weight: float = field(default=0.5, validator=check(float, gt=0))
    mix_token: bool = field(default=False, validator=check(bool))


@frozen
class ClassTokenHead(HeadKind):
    """Classify from the class token (ViT / DeiT); `dense` adds the dense auxiliary head (Refined-ViT)."""

    kind: ClassVar[str] = "class_token"
    any_grid: ClassVar[bool] = True
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    dense: DenseAux | None = field(default=None, validator=check(DenseAux, optional=True))

    def check(self, tokens: Tokens) -> None:
        """A class token is needed; the dense head always has patch tokens (at least one)."""
        if not tokens.prefix:
            raise SpecError("", "the class_token head needs class_token = true")

    @property
    def mixes_tokens(self) -> bool:
        """Whether its dense head mixes tokens in training (MixToken)."""
        return self.dense is not None and self.dense.mix_token

    def working_set(self, tokens: Tokens, classes: int) -> int:
        """With the dense head, the logits of every patch token too."""
        dense = tokens.patches * (tokens.dim + classes) if self.dense is not None else 0
        return tokens.dim + classes + dense

    def outputs(self) -> tuple[Output, ...]:
        """What the head returns in training and the loss each output takes."""
        if self.dense is None:
            return LOGITS
        return Output("cls"), Output("aux", "tokens", self.dense.loss_weight)


@frozen
class GAPHead(HeadKind):
    """Classify from the mean of the patch tokens (class / prefix tokens excluded; with a padding mask, of the
    real tokens), optionally normalised (SimpleViT: mean -> LayerNorm -> Linear; Swin: mean -> Linear)."""

    kind: ClassVar[str] = "gap"
    any_grid: ClassVar[bool] = True
    reads_prefix: ClassVar[bool] = False
    masks: ClassVar[bool] = True  # the mean over real tokens
    norm: Norm | None = field(default=None, validator=check(Norm, optional=True))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

