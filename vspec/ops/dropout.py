"""Dropout (Srivastava et al. 2014): y = x * keep / (1 - p), keep ~ Bernoulli(1 - p), with the keep mask drawn faster
on the CPU. torch's CPU dropout draws one Bernoulli variate per element, the cost of a bf16 matrix product of the same
tensor (a fifth of a bf16 BERT-base training step, torch.profiler). `keep_mask` cuts each 64-bit word of the
generator into four 16-bit uniforms instead, and compares them with p rounded to a multiple of 2^-16 (0.1 keeps with
probability 1 - 6554 / 65536); the scale is 1 / that keep probability, so E[y] = x exactly (benchmarks/fast_paths.py
times both draws). A p that rounds to 1 is torch's draw.
Taken where the fast paths run (`fast.enabled`: eager CPU tensors, VSPEC_FAST_PATHS); F.dropout elsewhere. Both draw
from torch's generator: a seeded run repeats, and a resumed one continues, bit for bit."""

import torch
import torch.nn.functional as F
from torch import nn

from . import fast

__all__ = ["Dropout", "dropout", "keep_mask", "keep_probability"]
_LEVELS = 1 << 16  # the uniforms' resolution


def keep_probability(p: float) -> float:
    """The keep probability `keep_mask` draws with: 1 - p rounded to a multiple of 2^-16.

    Args:
        p: the drop probability, in [0, 1].
    """
    return 1 - round(p * _LEVELS) / _LEVELS


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu",
              dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """A mask of `shape`, True (1) with probability `keep_probability(p)`, each element independent: element i is
    the (i mod 4)-th 16-bit slice of word i // 4 from torch's generator (full 64-bit words; which slice is which
    follows the CPU's byte order). A p below 2^-17 rounds to keeping everything.

    Args:
        shape: the mask's shape.
        p: the drop probability, in [0, 1].
        device: where the mask is drawn.
        dtype: the mask's dtype: bool, or 1 and 0 in a tensor's dtype, cast once as it is drawn (x times a bool
            mask casts all of it to x's dtype at every product).
    """
    n = torch.Size(shape).numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)
    uniform = words.view(torch.int16)[:n].view(shape)  # uniform over [-2^15, 2^15)
    out = torch.empty(shape, dtype=dtype, device=device)  # written in dtype, not a bool cast after
    return torch.ge(uniform, round(p * _LEVELS) - _LEVELS // 2, out=out)


def dropout(x: torch.Tensor, p: float = 0.5, training: bool = True) -> torch.Tensor:
    """F.dropout(x, p, training), with `keep_mask`'s draw where the fast paths run (the module's docstring).

    Args:
        x: the input.
        p: the drop probability, in [0, 1] (else ValueError, as F.dropout).
        training: False (or p == 0): x itself.
    """
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return x
    if keep_probability(p) == 0 or not fast.enabled(x) or not x.is_floating_point():
        return F.dropout(x, p, training)
    # autograd keeps the mask, in x's dtype (2 or 4 bytes an element, not a bool's 1), for dx = dy * keep * scale
    return x.mul(keep_mask(x.shape, p, x.device, x.dtype)).mul_(1 / keep_probability(p))


class Dropout(nn.Dropout):
    """nn.Dropout computed by `dropout` (in place or not, it returns a new tensor)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`dropout(x, self.p, self.training)`.

        Args:
            x: the input.
        """
        return dropout(x, self.p, self.training)
