"""The released token-labeling losses (Refiner_ViT @ b3e8cb0, `loss/cross_entropy.py`, as the fixtures' README
describes them, "Losses" and "cos_reg"): the soft cross-entropy, Refiner's cos_reg term, the relabel cross-entropy
and its pooled variant. The heads' contract (vspec/nn/head_outputs.py) computes a training forward's loss with them;
vspec/train/token_labels/maps.py builds the targets they take."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "N_COMN", "cos_reg_term", "relabel_cross_entropy", "relabel_pooled_cross_entropy", "soft_cross_entropy",
    "soft_target_ce_cos_reg",
]
# the released yamls' cos_reg_component: the cos term compares maps i and i + 1 for i < n_comn
N_COMN = 12


def soft_cross_entropy(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows of Σ_c −t·log_softmax(x); a target with fewer rows than x, a divisor of them, is tiled
    whole (`repeat`: rows t0..tB, t0..tB, ...) as released.

    Args:
        x: the logits (N, C).
        target: the soft targets (N, C), or fewer rows tiled.
    """
    if x.dim() != 2 or target.dim() != 2 or x.shape[1] != target.shape[1]:
        raise ValueError(f"soft cross-entropy wants (N, C) logits and targets, got {tuple(x.shape)} and "
                         f"{tuple(target.shape)}")
    if x.shape[0] != target.shape[0]:
        if x.shape[0] % target.shape[0]:
            raise ValueError(f"soft cross-entropy: {x.shape[0]} rows of logits against {target.shape[0]} rows of "
                             f"targets (not a multiple)")
        target = target.repeat(x.shape[0] // target.shape[0], 1)
    return (-target * F.log_softmax(x, dim=-1)).sum(dim=-1).mean()


def cos_reg_term(atten, n_comn: int = N_COMN) -> torch.Tensor:
    """Refiner's cos_reg: 0.1 · mean(Σ_{i < n_comn} cos(atten[i], atten[i + 1])) / n_comn, the cosine taken across
    the heads axis of the (B, heads, N + 1, N + 1) maps (eps 1e-8), the mean over (batch, query, key).

    Args:
        atten: the blocks' attention maps, in order (B, heads, N + 1, N + 1) each.
        n_comn: the pairs of consecutive maps.
    """
    if atten is None or len(atten) < n_comn + 1 or n_comn < 1:
        got = "none" if atten is None else len(atten)
        raise ValueError(f"cos_reg with n_comn={n_comn} needs n_comn + 1 attention maps (n_comn >= 1), got {got}")
    total = sum(F.cosine_similarity(atten[i], atten[i + 1], dim=1, eps=1e-8) for i in range(n_comn))
    return 0.1 * total.mean() / n_comn


def _box_lam(box, tokens: int) -> float:
    """MixToken's share of the image's own tokens: 1 − (r2 − r1)(c2 − c1) / N; no box (None) -> 1."""
    if box is None:
        return 1.0
    r1, c1, r2, c2 = (int(v) for v in box)
    return 1.0 - (r2 - r1) * (c2 - c1) / tokens


def _mixed(target: torch.Tensor, lam: float) -> torch.Tensor:
    return lam * target + (1.0 - lam) * target.flip(0) if lam < 1.0 else target


def _check_logits(cls: torch.Tensor, aux: torch.Tensor) -> None:
    if cls.dim() != 2 or aux.dim() != 3 or aux.shape[0] != cls.shape[0] or aux.shape[2] != cls.shape[1]:
        raise ValueError(f"relabel losses want class logits (B, C) and token logits (B, N, C), got "
                         f"{tuple(cls.shape)} and {tuple(aux.shape)}")


def relabel_cross_entropy(cls: torch.Tensor, aux: torch.Tensor, box, target: torch.Tensor, *,
                          dense_weight: float = 0.5, cls_weight: float = 1.0, atten=None,
                          n_comn: int = N_COMN) -> torch.Tensor:
    """The released RelabelCrossEntropy on the model's (cls (B, C), aux (B, N, C), MixToken box (r1, c1, r2, c2)
    or None): cls_weight·CE(cls, class target mixed by the box's lam) + dense_weight·CE(tokens, token targets)
    (+ cos_reg_term(atten, n_comn) when atten is given). `target`: (B, C, 2 + N) from relabel_target (column 1
    the class target, columns 2.. the tokens; column 0 unused), or (B, C), every token taking its image's row.
    The token targets are never box-mixed: the model un-mixes its token logits.

    Args:
        cls: the class-token logits (B, C).
        aux: the token logits (B, N, C).
        box: the MixToken box (None: none).
        target: (B, C, 2 + N) token labels, or (B, C).
        dense_weight: the tokens term's weight.
        cls_weight: the class term's weight.
        atten: the attention maps of the cos_reg term (None: no term).
        n_comn: the cos_reg term's pairs of maps.
    """
    _check_logits(cls, aux)
    b, n, c = aux.shape
    if target.dim() == 3:
        if target.shape[:2] != (b, c) or target.shape[2] != 2 + n:
            raise ValueError(f"relabel target {tuple(target.shape)} does not fit {n} tokens of {c} classes "
                             f"(want ({b}, {c}, {2 + n}): label_size² must equal the token count)")
        t_cls, t_tokens = target[:, :, 1], target[:, :, 2:].transpose(1, 2)
    elif target.dim() == 2 and target.shape == (b, c):
        t_cls, t_tokens = target, target[:, None, :].expand(b, n, c)
    else:
        raise ValueError(f"relabel target {tuple(target.shape)}: want ({b}, {c}, {2 + n}) or ({b}, {c})")
    loss = cls_weight * soft_cross_entropy(cls, _mixed(t_cls, _box_lam(box, n)))
    loss = loss + dense_weight * soft_cross_entropy(aux.reshape(b * n, c), t_tokens.reshape(b * n, c))
    return loss if atten is None else loss + cos_reg_term(atten, n_comn)


def relabel_pooled_cross_entropy(cls: torch.Tensor, aux: torch.Tensor, box, target: torch.Tensor, *,
                                 dense_weight: float = 0.5, cls_weight: float = 1.0) -> torch.Tensor:
    """The released RelabelPooledCrossEntropy (label_size 1, --dense-avg-pool): cls_weight·CE(cls, target mixed
    by the box's lam) + dense_weight·CE(mean of the token logits, target unmixed); target (B, C) only.

    Args:
        cls: the class-token logits (B, C).
        aux: the token logits (B, N, C).
        box: the MixToken box (None: none).
        target: the soft targets (B, C).
        dense_weight: the pooled term's weight.
        cls_weight: the class term's weight.
    """
    _check_logits(cls, aux)
    if target.shape != cls.shape:
        raise ValueError(f"the pooled relabel loss wants a (B, C) target, got {tuple(target.shape)} "
                         f"(a token-label target needs relabel_cross_entropy)")
    loss = cls_weight * soft_cross_entropy(cls, _mixed(target, _box_lam(box, aux.shape[1])))
    return loss + dense_weight * soft_cross_entropy(aux.mean(dim=1), target)


def soft_target_ce_cos_reg(x: torch.Tensor, target: torch.Tensor, atten, n_comn: int = 2) -> torch.Tensor:
    """The released SoftTargetCrossEntropyCosReg (cos_reg without token labels): CE(x, target) + the cos term;
    n_comn 2, the released constructor's default, whatever cos_reg_component is.

    Args:
        x: the logits (B, C).
        target: the soft targets (B, C).
        atten: the blocks' attention maps, in order.
        n_comn: the pairs of consecutive maps.
    """
    return soft_cross_entropy(x, target) + cos_reg_term(atten, n_comn)
