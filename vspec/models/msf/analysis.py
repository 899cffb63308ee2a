"""MSF's figures (Sec. 3.1), `vspec analyze --what msf`: the subspace similarity of the projection matrices per
layer and role pair (Eq. 13, Fig. 3) and the mean feature L2 norm per layer (Fig. 4). The model is read through
`forward_intermediates` and its attention modules' `role_matrix`; nothing is edited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...analysis import AnalysisError, Figure, Inputs, nonfinite_result, pyplot
from ...nn.layers import ProjectedAttention
from ...spec.vit import PROJECTION_ROLES

__all__ = ["analyze", "attention_modules", "feature_norms", "head_matrices", "msf_figure", "msf_problem", "plot",
           "similarities", "subspace_similarity"]


def head_matrices(attn: nn.Module) -> dict[str, list[torch.Tensor]]:
    """The d x d_head matrix of each role and head of one attention module, in the paper's notation
    (q = Q_h^T x, ..., the output W_h z): QUERY, KEY, VALUE (PROBE) from the rows of their projections,
    WEIGHT from the columns of the output projection. Tied roles give the same matrix; grouped ones their
    dense (zero-filled) form (`ProjectedAttention.role_matrix`). Eq. 14's P~ (one d x d matrix, no heads) is
    left out.

    Args:
        attn: a ProjectedAttention.
    """
    heads, roles = attn.heads, attn.projection_roles
    w = attn.role_matrix("W")
    rows = {name: attn.role_matrix(name) for name in roles[:-1]}
    rows = {name: m for name, m in rows.items() if m.shape[0] == w.shape[1]}  # not P~
    dh = w.shape[1] // heads
    out = {r: [m[h * dh:(h + 1) * dh].T for h in range(heads)] for r, m in rows.items()}
    out["W"] = [w[:, h * dh:(h + 1) * dh] for h in range(heads)]
    return {r: out[r] for r in PROJECTION_ROLES if r in out}


def subspace_similarity(x: torch.Tensor, y: torch.Tensor) -> float:
    """Eq. 13: (1 / d_hat) trace(U_X U_X^T U_Y U_Y^T) = mean of cos^2 of the canonical angles, U the left
    singular vectors of the d x d_hat matrices X, Y; in [0, 1].

    Args:
        x: a d x d_hat matrix.
        y: another, of the same shape.
    """
    ux = torch.linalg.svd(x.detach().double(), full_matrices=False).U
    uy = torch.linalg.svd(y.detach().double(), full_matrices=False).U
    return float((ux.T @ uy).square().sum() / x.shape[1])


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """Each block's attention, in forward order.

    Args:
        model: a vspec model (its `stages`); a block without `attn` gives None.
    """
    return [getattr(block, "attn", None) for stage in model.stages for block in stage.blocks]


def msf_problem(model: nn.Module) -> str | None:
    """Why the projection analysis does not apply (a block's attention that gives no role matrices: not a
    ProjectedAttention), or None.

    Args:
        model: a vspec model.
    """
    for i, attn in enumerate(attention_modules(model)):
        if not isinstance(attn, ProjectedAttention):
            return f"block {i}'s attention ({type(attn).__name__}) gives no role matrices (role_matrix)"
    return None


def similarities(model: nn.Module) -> list[dict[str, Any]]:
    """Per layer: the roles and the matrix of their subspace similarities, averaged over the heads.

    Args:
        model: a vspec model whose attentions are ProjectedAttentions.
    """
    problem = msf_problem(model)
    if problem is not None:
        raise AnalysisError(problem)
    layers = []
    for attn in attention_modules(model):
        mats = head_matrices(attn)
        roles = list(mats)
        table = [[sum(subspace_similarity(x, y) for x, y in zip(mats[a], mats[b])) / len(mats[a]) for b in roles]
                 for a in roles]
        layers.append({"roles": "".join(roles), "similarity": table})
    return layers


@torch.no_grad()
def feature_norms(model: nn.Module, x: torch.Tensor) -> list[float]:
    """Fig. 4: (1/m) sum_i |x_i|_2 over the tokens (and the batch) after the embedding (class token and
    position embedding included) and after each `feature_info` entry (each block of a one-stage model,
    each stage otherwise; read through forward_intermediates).

    Args:
        model: a vspec model.
        x: a batch of inputs.
    """
    model.eval()
    feats = [model.forward_tokens(x)[0]] + model.forward_intermediates(x, output_fmt="NLC", intermediates_only=True)
    return [float(f.norm(dim=-1).mean()) for f in feats]


def analyze(model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """MSF's analyses of a model on a batch `x`: the projection roles' subspace similarity per layer (Eq. 13)
    and the feature norms per layer.

    Args:
        model: a vspec model whose attentions are ProjectedAttentions.
        x: a batch of inputs.
    """
    return {"layers": similarities(model), "feature_norms": feature_norms(model, x)}


def plot(result: dict[str, Any], path: Path, title: str) -> None:
    """Fig. 3 (the similarity of every role pair, averaged over layers, as a heatmap) beside Fig. 4 (the
    mean feature norm per layer).

    Args:
        result: `analyze`'s.
        path: the image file written.
        title: the figure's title.
    """
    plt = pyplot()

    layers = [layer for layer in result["layers"] if layer["roles"] == result["layers"][0]["roles"]]
    roles = layers[0]["roles"]
    mean = torch.tensor([layer["similarity"] for layer in layers]).mean(0)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2))
    a.imshow(mean.numpy(), vmin=0, vmax=1, cmap="viridis")
    a.set_xticks(range(len(roles)), list(roles))
    a.set_yticks(range(len(roles)), list(roles))
    for i in range(len(roles)):
        for j in range(len(roles)):
            a.text(j, i, f"{mean[i, j]:.2f}", ha="center", va="center", color="w" if mean[i, j] < 0.6 else "k")
    a.set_title(f"subspace similarity (Eq. 13), mean of {len(layers)} layers")
    norms = result["feature_norms"]
    b.plot(range(len(norms)), norms, marker="o")
    b.set_xticks(range(len(norms)), ["emb"] + [str(i + 1) for i in range(len(norms) - 1)])
    b.set_xlabel("layer")
    b.set_ylabel("mean feature L2 norm")
    b.set_title("feature norm per layer (Fig. 4)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def msf_figure(model: nn.Module, inputs: Inputs) -> Figure:
    """`vspec analyze --what msf`: `analyze` on one batch of `inputs.batch_size` images, drawn by `plot`.

    Args:
        model: a vspec model whose attentions are ProjectedAttentions.
        inputs: the analysis's inputs (`vspec.analysis.Inputs`).
    """
    problem = msf_problem(model)
    if problem:
        raise AnalysisError(problem)
    result = analyze(model, next(inputs.images(1, inputs.batch_size)))
    return Figure(result, lambda path, title: plot(result, path, title), nonfinite_result(result))
