"""The protocol of each role, declared once: what an embedder, an attention, an FFN, an entry, a block or a head
may declare, with its default. A component kind is a frozen attrs class that subclasses its role's base and sets
`kind`, its tag in JSON / TOML; defining it registers it (`KINDS`, `ROLES`), so that the spec language, the files
and the validators know it. Its module is one line in `vspec.compiler.MODULES` (a family's: in its `family.py`). A
family may declare a role of its own, for a part only its kinds fill: a subclass of `Kind` that sets `role` and no
`kind` is that role's base, registered when defined (`ROLE_BASES`).

A capability is a class attribute or a method of the base, never probed with a default: a kind that does not
override it has the base's, written here. The model's validator only composes these rules.

The carried state (`vspec.nn.blocks.Carry(x, state)`): tensors beside the tokens, by key, that no core file names.
An embedder may start keys (`writes`, their shapes `state(img_size)`), a block reads and writes keys (`reads`,
`writes`, the shapes it writes `state_out`, its rule on what it receives `check_state`), the head reads keys;
`layout.state_layout` derives each key's shape at each block and drops a key after its last reader.

`working_set(...)`: the elements per sample live while the component runs (the size guard's activation figure,
`budget.py`; float32). The bases' defaults assume a plain component (an MLP 4x wide, attention over all tokens);
a kind whose working set is larger overrides it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

from .._moved import moved as _moved
from .errors import SpecError

if TYPE_CHECKING:
    from .layout import Tokens

__all__ = [
    "AttentionKind", "BlockKind", "EmbedderKind", "EntryKind", "FFNKind", "HeadKind", "KINDS", "Kind", "LOGITS",
    "Output", "ROLES", "ROLE_BASES", "of_role", "register", "unregister",
]

KINDS: dict[str, type] = {}  # kind tag -> class, every role
ROLES: dict[str, tuple[type, ...]] = {}  # role -> its kinds, in the order they were defined
ROLE_BASES: dict[str, type] = {}  # role -> its base, the core's first, then the families' own roles


class Kind:
    """What every component kind has: its `kind` tag, its `role`, and `check(tokens)`: the rules that concern
    it given the tokens it will see, raising SpecError with a path relative to itself."""

    __slots__ = ()
    kind: ClassVar[str]
    role: ClassVar[str]
    needs_grid: ClassVar[bool] = False  # its tokens must lie on an image's grid: a text body refuses it
    any_grid: ClassVar[bool] = False  # runs unchanged on any token grid at run time: Model.dynamic_img_size allows it

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            register(cls)
        elif "role" in cls.__dict__:
            known = ROLE_BASES.get(cls.role)
            if known is not None and not _same(known, cls):
                raise TypeError(f"{cls.__name__}: role {cls.role!r} is {known.__module__}.{known.__qualname__}'s "
                                "already")
            ROLE_BASES[cls.role] = cls

    def check(self, tokens: Tokens) -> None:
        """No rule beyond the fields' own."""


def _same(a: type, b: type) -> bool:
    """One definition: attrs rebuilds a slotted class, and a test may define a kind again."""
    return (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def register(cls: type) -> None:
    """Record a kind under its tag and role (defining a subclass with `kind` calls this).

    Args:
        cls: the kind's class (it sets `kind`, its role's base sets `role`).
    """
    tag, role = cls.__dict__["kind"], getattr(cls, "role", None)
    if not isinstance(tag, str) or not tag or role not in ROLE_BASES:
        raise TypeError(f"{cls.__name__}: a kind subclasses one role's base ({', '.join(ROLE_BASES)}) and sets a "
                        f"non-empty str kind, got kind {tag!r}")
    base = ROLE_BASES[role]
    for name, value in vars(cls).items():  # a flag the role does not declare is a misspelt capability
        if isinstance(value, bool) and not hasattr(base, name):
            flags = ", ".join(n for n in dir(base) if isinstance(getattr(base, n), bool))
            raise TypeError(f"{cls.__name__}.{name}: not a capability of the {role} role (it has: {flags or 'none'})")
    known = KINDS.get(tag)
    if known is not None and not _same(known, cls):
        raise TypeError(f"{cls.__name__}: kind {tag!r} is {known.__module__}.{known.__qualname__}'s already")
    KINDS[tag] = cls
    ROLES[role] = tuple(c for c in ROLES.get(role, ()) if not _same(c, cls)) + (cls,)


def of_role(base: type):
    """An attrs validator for a field that holds a kind of `base`'s role.

    Args:
        base: the role's base class (`AttentionKind`, ...).
    """

    def validate(inst, attribute, value) -> None:
        if not isinstance(value, base):
            allowed = ", ".join(f"{c.__name__} (kind {c.kind!r})" for c in ROLES.get(base.role, ()))
            raise SpecError(f"{type(inst).__name__}.{attribute.name}",
                            f"must be one of {allowed}; got {type(value).__name__}")

    return validate


def unregister(cls: type) -> None:
    """Forget a kind (a test's own, when the test ends).

    Args:
        cls: the kind's class.
    """
    if KINDS.get(cls.kind) is cls:
        del KINDS[cls.kind]
        ROLES[cls.role] = tuple(c for c in ROLES[cls.role] if c is not cls)


class EmbedderKind(Kind):
    """Image -> tokens on a grid. `patch_size`: pixels per token side (the first stage's reduction).
    `text`: it reads token ids instead (`vspec.spec.text`): its tokens are a sequence, grid (1, L), that may
    be padded, so that every attention and the head must honour a key-padding mask. `writes`: the state keys it
    starts beside the tokens (its module returns (tokens, {key: tensor})), their shapes `state(img_size)`;
    `check_head(head)`: its rule on the head (a second branch must reach a head that reads it)."""

    __slots__ = ()
    role: ClassVar[str] = "embedder"
    patch_size: int
    text: ClassVar[bool] = False
    writes: ClassVar[tuple[str, ...]] = ()

    def state(self, img_size: tuple[int, int]) -> dict[str, Any]:
        """The shape of each state key it writes."""
        return {}

    def check_head(self, head: HeadKind) -> None:
        """A rule about the head (raise SpecError with the path relative to the head)."""

    def grid(self, img_size: tuple[int, int]) -> tuple[int, int]:
        """The token grid of an image of `img_size`: (H / patch_size, W / patch_size)."""
        return (img_size[0] // self.patch_size, img_size[1] // self.patch_size)

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """The rules that tie the embedder to the image it reads and the width `dim` it writes."""

    def working_set(self, img_size: tuple[int, int], in_chans: int, tokens: Tokens) -> int:
        """Its widest map (default: twice the image's) and the tokens it writes, 3 copies."""
        return self.map_elements(img_size, in_chans, tokens) + 3 * tokens.length * tokens.dim

    def map_elements(self, img_size: tuple[int, int], in_chans: int, tokens: Tokens) -> int:
        """The elements of its widest map (`working_set`); default: the image's, twice."""
        return 2 * in_chans * img_size[0] * img_size[1]


class AttentionKind(Kind):
    """Token mixing inside a block. `heads` is its number of heads (head tokens join one per head).

    Capabilities, each False unless a kind declares it:
    - `attends_all`: attends over any token set, so extra tokens (DHVT's head tokens) may join;
    - `masks`: honours a key-padding mask (B, N); `causal`: honours a causal mask.
    `roles`: its projection roles by letter (`vit.PROJECTION_ROLES`), "" for none. `reads` / `writes`: the state
    keys it takes and returns (its module: forward(x, state, ...) -> (out, {key: tensor})), `state_out` their
    shapes, `check_state` its rule on what it receives. `maps_key`: the key of `writes` under which it hands on
    attention maps (B, H, N, N), what `Model.attention_maps` returns from every block; None: it hands none on."""

    __slots__ = ()
    role: ClassVar[str] = "attention"
    heads: int
    roles: ClassVar[str] = ""
    attends_all: ClassVar[bool] = False
    masks: ClassVar[bool] = False
    causal: ClassVar[bool] = False
    reads: ClassVar[tuple[str, ...]] = ()
    writes: ClassVar[tuple[str, ...]] = ()
    maps_key: ClassVar[str | None] = None

    def state_out(self, state: Mapping[str, Any], tokens: Tokens) -> dict[str, Any]:
        """The shape of each state key it writes, given the `state` it receives."""
        return {}

    def check_state(self, state: Mapping[str, Any], tokens: Tokens, before: AttentionKind | None,
                    index: int) -> None:
        """The rule for the `state` it receives (shapes by key) from the attention `before` it in its stage (None:
        it is the first, `index` 0)."""

    def variant(self, tokens: Tokens, index_in_stage: int) -> Hashable | None:
        """What distinguishes the blocks of one stage built from this spec (Swin's shift), or None."""
        return None

    def working_set(self, tokens: Tokens) -> int:
        """q, k, v and the output (4 x n x dim) and the scores, twice (heads x n x n)."""
        return 4 * tokens.length * tokens.dim + 2 * self.heads * tokens.length**2

    def mask_refusal(self, padding: bool, causal: bool) -> str:
        """Why this kind cannot take the masks asked (a key-padding mask, a causal one), by what it declares (`masks`,
        `causal`); "" when it can. The one refusal: the validator's (`check_masks`), the block module's at run time."""
        for wanted, able, what in ((padding, self.masks, "a key-padding mask"), (causal, self.causal, "a causal mask")):
            if wanted and not able:
                return f"{self.kind} attention cannot honour {what}"
        return ""

    def check_masks(self, padding: bool, causal: bool) -> None:
        """Refuse a mask this kind cannot honour (a body whose tokens are padded, or causal)."""
        refusal = self.mask_refusal(padding, causal)
        if refusal:
            raise SpecError("", refusal)


class FFNKind(Kind):
    """The per-token (or grid) feed-forward of a block."""

    __slots__ = ()
    role: ClassVar[str] = "ffn"

    def check_before_head(self, head: HeadKind) -> None:
        """A rule about the head that reads the last block's output (only called with prefix tokens)."""

    def hidden_dim(self, dim: int) -> int:
        """Its hidden width (default 4 x dim)."""
        return 4 * dim

    def working_set(self, tokens: Tokens) -> int:
        """The hidden units, twice (before and after the activation)."""
        return 2 * tokens.length * self.hidden_dim(tokens.dim)


class EntryKind(Kind):
    """What starts a later stage: it changes the grid and the width (`output`), by `stride` per side."""

    __slots__ = ()
    role: ClassVar[str] = "entry"
    stride: ClassVar[int] = 1

    def output(self, tokens: Tokens, dim: int) -> Tokens:
        """The tokens after the entry, at the stage's width `dim`."""
        raise NotImplementedError

    def working_set(self, before: Tokens, after: Tokens) -> int:
        """Its input twice and 4 tensors as wide as input and output together."""
        return 2 * before.length * before.dim + 4 * after.length * (before.dim + after.dim)


class Output(NamedTuple):
    """What a head declares about one of its training outputs (the contract with the training engine,
    `vspec/nn/head_outputs.py`): its `name`, its `target` (sample: logits (B, C) against the sample's label;
    tokens: logits (B, N, C), the sample's label at every token) and its loss `weight`."""

    name: str
    target: Literal["sample", "tokens"] = "sample"
    weight: float = 1.0


LOGITS = (Output("logits"),)  # a one-output head: its logits against the label, weight 1


class HeadKind(Kind):
    """Tokens -> logits. `reads_prefix`: whether it reads the prefix (class) token; `masks`: it honours a
    padding mask (reads real tokens only), which a text body needs; `outputs()`: what it returns in training when
    the loop asks (vit.Output; a module of a head that declares other than LOGITS takes `forward(..., outputs=True)`
    then and returns a tuple of HeadOutput, one logits tensor otherwise), by default its logits against the image
    label; `reads`: the state keys it also takes
    (`forward(x, ..., state={key: tensor})`), `check_state` its rule on them; `pad_id`: a token id that marks
    padding (its module reads only the other tokens, Hugging Face's rule), None for none."""

    __slots__ = ()
    role: ClassVar[str] = "head"
    reads_prefix: ClassVar[bool] = True
    masks: ClassVar[bool] = False
    reads: ClassVar[tuple[str, ...]] = ()
    pad_id: ClassVar[int | None] = None

    def check_state(self, state: Mapping[str, Any]) -> None:
        """The rule for the `state` (shapes by key) it receives."""

    @property
    def mixes_tokens(self) -> bool:
        """MixToken: the training forward mixes the embedder's token grid between samples and hands the head the
        box (`forward(x, ..., box=...)`), whose token outputs it swaps back (vspec.nn.mix_token)."""
        return False

    def outputs(self) -> tuple[Output, ...]:
        """What the head returns in training (`Output`s): the sample logits, unless it declares more."""
        return LOGITS

    def working_set(self, tokens: Tokens, classes: int) -> int:
        """The pooled features and the logits."""
        return tokens.dim + classes


class BlockKind(Kind):
    """A block of a stage: an attention and an FFN around the residual stream (`attention`, `ffn`, `norm`,
    `layer_scale`: `vspec.spec.blocks.Block`'s fields, which every block kind has). Kinds differ in where the norms
    sit (pre-norm, post-norm), in what joins the attention (DHVT's head tokens) and in what they carry beside the
    tokens (Conformer's CNN branch).

    - `attended(tokens)`: what its attention sees (extra tokens joined);
    - `check_masks(padding, causal)`: the masks a body asks of it (by default its attention's rule);
    - `reads` / `writes`: the state keys it takes and returns (by default its attention's), `state_out(state,
      tokens)` the shapes it writes, `check_state(state, tokens, before, index)` its rule on what it receives;
      any key it does not write it hands on as it came; `maps_key`: its attention's."""

    __slots__ = ()
    role: ClassVar[str] = "block"

    @property
    def reads(self) -> tuple[str, ...]:
        """The state keys the block reads (its attention's)."""
        return self.attention.reads

    @property
    def writes(self) -> tuple[str, ...]:
        """The state keys the block writes (its attention's)."""
        return self.attention.writes

    @property
    def maps_key(self) -> str | None:
        """The state key of the attention maps it keeps for training (its attention's; None: none)."""
        return self.attention.maps_key

    def attended(self, tokens: Tokens) -> Tokens:
        """The tokens its attention sees (the block's own tokens unless it adds some)."""
        return tokens

    def check(self, tokens: Tokens) -> None:
        """SpecError where its attention or FFN cannot run on `tokens` (the path under `attention` / `ffn`)."""
        seen = {"attention": self.attended(tokens), "ffn": tokens}
        for name in ("attention", "ffn"):
            try:
                getattr(self, name).check(seen[name])
            except SpecError as e:
                raise e.under(name) from None

    def check_masks(self, padding: bool, causal: bool) -> None:
        """SpecError where its attention refuses a padding mask or causal masking."""
        try:
            self.attention.check_masks(padding=padding, causal=causal)
        except SpecError as e:
            raise e.under("attention") from None

    def working_set(self, tokens: Tokens) -> int:
        """Elements per sample live while the block runs: its input, the residual and the norms' outputs, and its
        attention's and FFN's working sets, on the tokens the attention sees."""
        seen = self.attended(tokens)
        return 4 * seen.length * seen.dim + self.attention.working_set(seen) + self.ffn.working_set(seen)

    def variant(self, tokens: Tokens, index_in_stage: int) -> Hashable | None:
        """What distinguishes the blocks of one stage built from this spec (Swin's shift), or None."""
        return self.attention.variant(tokens, index_in_stage)

    def state_out(self, state: Mapping[str, Any], tokens: Tokens) -> dict[str, Any]:
        """The state after the block: what its attention writes, from the state it received."""
        return self.attention.state_out(state, self.attended(tokens))

    def check_state(self, state: Mapping[str, Any], tokens: Tokens, before: BlockKind | None, index: int) -> None:
        """SpecError where the state it receives is not what its attention reads."""
        try:
            self.attention.check_state(state, self.attended(tokens), None if before is None else before.attention,
                                       index)
        except SpecError as e:
            raise e.under("attention") from None


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
