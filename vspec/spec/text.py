"""Language bodies (BERT, RoBERTa, ELECTRA, OpenAI GPT, GPT-2): the text embedder and the heads that read a
padded token sequence. The blocks are the generic ones (`PostNormBlock` for BERT's layout); a text
body's tokens are a sequence, so image-only kinds refuse it (`Kind.needs_grid`).

The text body is core, not a family, as Swin's windows are: SoT's language head sits on it and its converter extends
Hugging Face's (`vspec.convert.hf`), and a family never imports another family; the core reads token ids already
(`EmbedderKind.text`, `vspec.nn.inputs`)."""

from typing import ClassVar, Literal

from attrs import field, frozen

from .errors import SpecError, check, check_size
from .kinds import EmbedderKind, HeadKind
from .layout import Tokens
from .vit import Norm

__all__ = ["FirstTokenHead", "LastTokenHead", "TokenEmbed", "TokenHead"]
_POOLER_ACTS = ("tanh", "gelu")


@frozen
class TokenEmbed(EmbedderKind):
    """Text -> tokens: word embeddings + learned absolute positions [+ token types (segments)] -> [norm] ->
    dropout [-> a Linear from the embedding `width` to the model's (ELECTRA: 128 -> 256)].

    Inputs are `input_ids` (B, L) with optional `attention_mask` and `token_type_ids`, by keyword as Hugging
    Face models take them; L may be anything from 1 to the positions the table holds. `seq_len` is the length
    that shapes, `vspec profile` and the size guard assume (`--seq-len`). `padding_id`: the padding token,
    whose embedding gets no gradient (None: the vocabulary has none, GPT). `pad_positions`: RoBERTa's
    positions, which count the real tokens from padding_id + 1 (padding takes row padding_id)."""

    kind: ClassVar[str] = "tokens"
    text: ClassVar[bool] = True
    patch_size: ClassVar[int] = 1
    vocab_size: int = field(default=30522, validator=check(int, ge=1))
    max_positions: int = field(default=512, validator=check(int, ge=1))
    seq_len: int = field(default=128, validator=check(int, ge=1))
    type_vocab_size: int = field(default=2, validator=check(int, ge=0))
    padding_id: int | None = field(default=None, validator=check(int, ge=0, optional=True))
    pad_positions: bool = field(default=False, validator=check(bool))
    norm: Norm | None = field(default=None, validator=check(Norm, optional=True))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    width: int | None = field(default=None, validator=check(int, ge=1, optional=True))

    @property
    def first_position(self) -> int:
        """The row of the position table that the first token takes."""
        return self.padding_id + 1 if self.pad_positions else 0

    def grid(self, img_size: tuple[int, int]) -> tuple[int, int]:
        """The token "grid" of a text: one row of `seq_len` tokens."""
        return (1, self.seq_len)

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """SpecError where the padding id, the padded positions or the sequence length do not fit."""
        if self.padding_id is not None and self.padding_id >= self.vocab_size:
            raise SpecError("padding_id", f"{self.padding_id} is not a token of the {self.vocab_size}-word vocabulary")
        if self.pad_positions and self.padding_id is None:
            raise SpecError("pad_positions", "RoBERTa's positions start after the padding id: set padding_id")
        if self.first_position + self.seq_len > self.max_positions:
            raise SpecError("seq_len", f"{self.seq_len} tokens need {self.first_position + self.seq_len} position "
                                       f"rows, the table has max_positions = {self.max_positions}")
        width = self.width or dim
        for rows, what in ((self.vocab_size, "word"), (self.max_positions, "position")):
            check_size("width", rows * width, f"the {what} table's {rows} x {width} entries")

    def working_set(self, img_size: tuple[int, int], in_chans: int, tokens: Tokens) -> int:
        """The sum of the tables' rows and its normalised copy, at the embedding width, and the tokens."""
        return 3 * tokens.length * (tokens.dim + (self.width or 0))


class TokenHead(HeadKind):
    """What the text heads share: they honour the padding mask and read no class token of the model's."""

    __slots__ = ()
    reads_prefix: ClassVar[bool] = False
    masks: ClassVar[bool] = True


@frozen
class FirstTokenHead(TokenHead):
    """Classify from the first token ([CLS], `<s>`): dropout `drop_in` -> [pooler: dense -> `pooler_act`] ->
    dropout `drop` -> fc. BERT: pooler tanh, drop_in 0 (BertPooler, then the classifier); RoBERTa: tanh with
    drop_in = drop (its classification head); ELECTRA: gelu with drop_in = drop. `pooler` None: no dense.
    With num_classes 0 it returns the pooled token (BERT's `pooler_output`)."""

    kind: ClassVar[str] = "first_token"
    pooler: Literal["tanh", "gelu"] | None = field(default=None,
                                                    validator=check(str, choices=_POOLER_ACTS, optional=True))
    drop_in: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

    def working_set(self, tokens: Tokens, classes: int) -> int:
        """The elements the head holds at once: its pooled token twice, and the logits."""
        return 2 * tokens.dim + classes


@frozen
class LastTokenHead(TokenHead):
    """Classify from the last real token of each sequence: the GPT / GPT-2 sequence-classification head (`score`,
    no bias). Which token is the last real one: `pad_id` None (a new spec's default), the last position the
    attention mask keeps (the last position without a mask): the mask is what says which tokens are real, and a
    real token whose id equals the padding id (GPT-2's pad = eos) still counts; `pad_id` an id, Hugging Face's
    rule, the rightmost token whose id is not `pad_id` whatever the mask says (`from_hf` sets the config's
    pad_token_id, so that a converted model classifies as the original does)."""

    kind: ClassVar[str] = "last_token"
    bias: bool = field(default=False, validator=check(bool))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    pad_id: int | None = field(default=None, validator=check(int, ge=0, optional=True))
