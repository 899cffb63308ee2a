"""Language bodies' modules: the text embedder and the heads that read a padded sequence. `mask` (B, L) is True
at real tokens (Hugging Face's attention_mask as bool); None: no padding."""

import torch
from torch import nn

from .. import spec as specs
from .._moved import moved as _moved
from ..ops.dropout import Dropout
from .context import BuildContext
from .head_outputs import last_real_token
from .layers import Linear, make_norm, maybe
from .vit import PoolHead

__all__ = ["FirstTokenHead", "LastTokenHead", "TokenEmbed"]


class TokenEmbed(nn.Module):
    """input_ids (B, L) [, token_type_ids, position_ids (B, L)] -> tokens (B, L, dim): word + position [+ token
    type] -> norm -> dropout [-> proj to the model width]. Tables are initialised N(0, 0.02), the padding row zero."""

    def __init__(self, spec: specs.TokenEmbed, ctx: BuildContext):
        super().__init__()
        width = spec.width or ctx.dim
        self.padding_id, self.pad_positions, self.first = spec.padding_id, spec.pad_positions, spec.first_position
        self.word = nn.Embedding(spec.vocab_size, width, padding_idx=spec.padding_id)
        self.position = nn.Embedding(spec.max_positions, width)
        self.token_type = nn.Embedding(spec.type_vocab_size, width) if spec.type_vocab_size else None
        self.norm = make_norm(spec.norm, width)
        self.drop = Dropout(spec.drop) if spec.drop else nn.Identity()
        self.proj = maybe(Linear, width != ctx.dim, width, ctx.dim)
        with torch.no_grad():
            for table in (self.word, self.position, self.token_type):
                if table is not None:
                    nn.init.normal_(table.weight, std=0.02)
            if spec.padding_id is not None:
                self.word.weight[spec.padding_id].zero_()

    def positions(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The position of each token: `position_ids` where given (Hugging Face's, checked by the model's inputs,
        vspec.nn.inputs), else 0, 1, ... (B broadcast); RoBERTa's counts real tokens from padding_id + 1, padding at
        padding_id."""
        if position_ids is not None:
            return position_ids
        if not self.pad_positions:
            return torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        real = input_ids.ne(self.padding_id)
        return real.cumsum(1) * real + self.padding_id

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids (B, N) -> tokens (B, N, dim): the embeddings summed, norm, dropout (and the projection)."""
        n = input_ids.shape[1]
        if self.first + n > self.position.num_embeddings:
            raise ValueError(f"{n} tokens: the position table holds {self.position.num_embeddings - self.first} "
                             f"(the spec's embedder.max_positions)")
        x = self.word(input_ids) + self.position(self.positions(input_ids, position_ids))
        if self.token_type is not None:
            types = token_type_ids if token_type_ids is not None else input_ids.new_zeros(())
            x = x + self.token_type(types)
        elif token_type_ids is not None:
            raise ValueError("token_type_ids given, but the spec's embedder has no token types (type_vocab_size 0)")
        return self.proj(self.drop(self.norm(x)))


class FirstTokenHead(PoolHead):
    """First token -> dropout drop_in -> [pooler dense -> tanh | gelu] -> dropout -> fc (BERT's pooler and
    classifier, RoBERTa's and ELECTRA's classification heads). `pre_logits` is the pooled token."""

    def __init__(self, spec: specs.FirstTokenHead, ctx: BuildContext):
        super().__init__(ctx, spec.drop)
        self.drop_in = Dropout(spec.drop_in) if spec.drop_in else nn.Identity()
        self.pooler = Linear(ctx.dim, ctx.dim, act=spec.pooler) if spec.pooler else nn.Identity()

    def pool(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The first token, through the pooler."""
        return self.pooler(self.drop_in(x[:, 0]))


class LastTokenHead(PoolHead):
    """The last real token (the last position `mask` keeps; the last position without a mask) -> dropout ->
    fc: GPT's and GPT-2's sequence classification (`score`, no bias)."""

    def __init__(self, spec: specs.LastTokenHead, ctx: BuildContext):
        self.bias = spec.bias  # read by reset, which PoolHead calls
        super().__init__(ctx, spec.drop)

    def reset(self, num_classes: int) -> list[nn.Module]:
        """A new classifier for `num_classes` (an identity for 0); returns it."""
        self.fc = Linear(self.dim, num_classes, bias=self.bias) if num_classes > 0 else nn.Identity()
        return [self.fc]

    def pool(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Each sequence's last real token."""
        return last_real_token(x, mask)



def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
