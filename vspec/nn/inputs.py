"""What a model takes, chosen by its embedder: images (B, C, H, W), or a text body's token ids (B, L) with Hugging
Face's `attention_mask` and `token_type_ids`. The model (`vspec.nn.model.Transformer`) asks its `inputs` to check
an input, to turn an attention mask into the blocks' padding mask, to run the embedder on it, to make an example
batch and to say how its intermediate features are laid out; it has no branch of its own on what it reads."""

from __future__ import annotations

import torch

from .. import spec as specs

__all__ = ["ImageInputs", "TokenInputs", "inputs_of"]


class ImageInputs:
    """Images (B, in_chans, H, W) at the spec's img_size, or with `dynamic_img_size` at any size the patch
    divides; no padding, no token types. Features as maps (NCHW)."""

    names = ("pixel_values",)
    feature_format = "NCHW"
    formats = ("NCHW", "NLC")

    def __init__(self, spec: specs.Model):
        self.spec = spec
        self.expected, self.built = (spec.in_chans, *spec.img_size), spec.grid  # once: not traced by torch.compile

    def grid(self, x: torch.Tensor) -> tuple[int, int]:
        """The token grid of images `x`: the spec's, or with `spec.dynamic_img_size` that of any size the patch
        divides; another shape is a ValueError."""
        spec, expected = self.spec, self.expected
        if tuple(x.shape[1:]) == expected:
            return self.built
        p = spec.embedder.patch_size
        if spec.dynamic_img_size and x.ndim == 4 and x.shape[1] == spec.in_chans and x.shape[2] % p == 0 and \
                x.shape[3] % p == 0 and x.shape[2] * x.shape[3]:
            return spec.embedder.grid(tuple(x.shape[2:]))
        if spec.dynamic_img_size:
            raise ValueError(f"input of shape {tuple(x.shape)}: this model takes (B, {spec.in_chans}, H, W) with H and "
                             f"W positive multiples of its patch size {p} (dynamic_img_size)")
        raise ValueError(f"input of shape {tuple(x.shape)}: this model was built for (B, "
                         f"{', '.join(map(str, expected))}) (its spec's in_chans and img_size; rebuild the "
                         "spec at another size, e.g. --set img_size=[H, W], or set dynamic_img_size)")

    def padding(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
        """No padding mask for images: None; an attention_mask given is a ValueError."""
        if attention_mask is not None:
            raise ValueError("attention_mask: an image model has no padding (only a text body takes one)")
        return None

    def head_padding(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
        """The mask the head reads: the one given."""
        return mask

    def embed(self, embedder, x: torch.Tensor, token_type_ids: torch.Tensor | None,
              position_ids: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        """(the embedder's output, the token grid of `x`)."""
        if token_type_ids is not None:
            raise ValueError("token_type_ids: an image model has no token types (only a text body takes them)")
        if position_ids is not None:
            raise ValueError("position_ids: an image model takes none (only a text body's positions are ids)")
        grid = self.grid(x)
        return embedder(x), grid

    def part(self) -> tuple[tuple[int, ...], int | None]:
        """(the embedder part's per-sample input shape, None: a float input)."""
        return (self.spec.in_chans, *self.spec.img_size), None

    def example(self, batch: int, *, dtype=None, generator=None, device=None) -> torch.Tensor:
        """N(0, 1) images (B, C, H, W) at the spec's size."""
        return torch.randn(batch, self.spec.in_chans, *self.spec.img_size, dtype=dtype, generator=generator,
                           device=device)


class TokenInputs:
    """A text body's token ids (B, L), any length its position table holds, with Hugging Face's attention_mask (1
    at real tokens, 0 at padding) and token_type_ids. Features as token sequences (NLC)."""

    names = ("input_ids", "attention_mask")
    feature_format = "NLC"
    formats = ("NLC",)

    def __init__(self, spec: specs.Model):
        self.spec = spec

    def padding(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """Hugging Face's attention_mask (B, L), 1 / True at real tokens, as the blocks' bool mask."""
        if attention_mask is None:
            return None
        if tuple(attention_mask.shape) != tuple(x.shape[:2]):
            raise ValueError(f"attention_mask of shape {tuple(attention_mask.shape)} for input_ids of shape "
                             f"{tuple(x.shape)}: they must be equal")
        return attention_mask.bool()

    def head_padding(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
        """The real tokens as the head reads them: the padding mask, or where the head names a padding id
        (its kind's `pad_id`, e.g. `LastTokenHead`'s: Hugging Face's rule), the tokens whose id is not that one."""
        pad_id = self.spec.head.pad_id
        return mask if pad_id is None else x.ne(pad_id)

    def embed(self, embedder, x: torch.Tensor, token_type_ids: torch.Tensor | None,
              position_ids: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        """(the embedder's output at `positions(...)`, None: no grid)."""
        if x.ndim != 2 or x.is_floating_point() or x.is_complex():
            raise ValueError(f"input of shape {tuple(x.shape)} and dtype {x.dtype}: a text body takes integer "
                             "input_ids (B, L)")
        return embedder(x, token_type_ids, self.positions(x, position_ids, mask)), None

    def positions(self, x: torch.Tensor, position_ids: torch.Tensor | None,
                  mask: torch.Tensor | None) -> torch.Tensor | None:
        """Each token's row of the position table: Hugging Face's `position_ids` (B, L) or (1, L) as given; without
        them, in a causal body with padding, the real tokens counted from 0 (padding at 0 before the first), so that
        a left-padded sequence equals itself alone (HF's GPT-2 counts 0..L-1 unless given position_ids); else None,
        the embedder's own (0..L-1, or RoBERTa's `pad_positions`)."""
        if position_ids is None:
            if mask is None or not self.spec.causal or self.spec.embedder.pad_positions:
                return None
            return (mask.cumsum(1) - 1).clamp(min=0)
        table = self.spec.embedder.max_positions
        if position_ids.ndim != 2 or position_ids.shape[0] not in (1, x.shape[0]) or \
                position_ids.shape[1] != x.shape[1] or position_ids.is_floating_point() or position_ids.is_complex():
            raise ValueError(f"position_ids of shape {tuple(position_ids.shape)} and dtype {position_ids.dtype}: "
                             f"give integer positions (B, L) or (1, L) for input_ids of shape {tuple(x.shape)}")
        if position_ids.numel() and not 0 <= int(position_ids.min()) <= int(position_ids.max()) < table:
            raise ValueError(f"position_ids: each must be in [0, {table}) (the position table; the spec's "
                             "embedder.max_positions)")
        return position_ids.long()

    def part(self) -> tuple[tuple[int, ...], int | None]:
        """(one sequence of the spec's seq_len, token ids below the vocabulary size)."""
        return (self.spec.embedder.seq_len,), self.spec.embedder.vocab_size

    def example(self, batch: int, *, dtype=None, generator=None, device=None) -> torch.Tensor:
        """Token ids (B, seq_len), int64 whatever `dtype` says."""
        e = self.spec.embedder
        return torch.randint(e.vocab_size, (batch, e.seq_len), generator=generator, device=device)


def inputs_of(spec: specs.Model) -> ImageInputs | TokenInputs:
    """What the model of `spec` takes: token ids when its embedder reads them (`EmbedderKind.text`), else images.

    Args:
        spec: the model spec.
    """
    return TokenInputs(spec) if spec.embedder.text else ImageInputs(spec)
