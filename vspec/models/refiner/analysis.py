"""Refiner's figures, `vspec analyze --what cka,maps`: the feature-evolution curve of linear CKA (appendix A.4,
Eq. 2; Fig. 2 / Fig. 4) and the attention maps of chosen blocks and heads before and after refinement (Fig. 1 /
Fig. 5), of any model whose attention shows its maps. The model is read through `forward_intermediates` or forward
hooks; nothing is edited."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...analysis import AnalysisError, Figure, InputError, Inputs, nonfinite_result, pyplot
from ...nn.layers import AttentionCoreBase
from .modules import MapRefiner

__all__ = ["attention_maps", "cka_figure", "cka_problem", "default_blocks", "feature_evolution", "linear_cka",
           "maps_figure", "maps_summary", "plot_cka", "plot_maps"]


# ---------------------------------------------------------------- Refiner: feature evolution (A.4, Eq. 2)
def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA (Kornblith et al. 2019) of x (n, p) and y (n, q), one example per row (p and q may
    differ): ||Y_c^T X_c||_F^2 / (||X_c^T X_c||_F ||Y_c^T Y_c||_F), X_c, Y_c column-centred; in float64,
    in [0, 1], unchanged by an orthogonal map or an isotropic scaling of either.

    Args:
        x: (n, p) features.
        y: (n, q) features of the same examples.
    """
    if x.shape[0] != y.shape[0]:
        raise AnalysisError(f"CKA needs as many examples in both: {x.shape[0]} and {y.shape[0]}")
    x, y = (t.detach().double() for t in (x, y))
    x, y = x - x.mean(0), y - y.mean(0)
    norms = torch.linalg.matrix_norm(x.T @ x) * torch.linalg.matrix_norm(y.T @ y)
    return float((y.T @ x).square().sum() / norms)


def cka_problem(model: nn.Module) -> str | None:
    """Why the CKA curve does not apply (a tap with another token count than the final features), or None.

    Args:
        model: a vspec model (its `feature_info` and `layout`).
    """
    lengths = [model.layout[f["stage"]].tokens.length for f in model.feature_info]
    for f, n in zip(model.feature_info, lengths):
        if n != lengths[-1]:
            return (f"{f['module']} has {n} tokens, the final features {lengths[-1]}: CKA with tokens as "
                    "examples needs one token count")
    return None


@torch.no_grad()
def feature_evolution(model: nn.Module, batches: Iterable[torch.Tensor]) -> dict[str, Any]:
    """Refiner's Eq. 2 (appendix A.4; Fig. 2, Fig. 4): F_k = CKA(f_k, f_out) / CKA(f_in, f_out), linear CKA,
    f_k the token features after `feature_info` entry k (each block of a one-stage model, each stage
    otherwise; read through forward_intermediates), f_in those after the first, f_out the model's final
    features (final norm included). An example is one token: a batch's (B, N, C) features are B x N rows,
    prefix tokens included (the usual choice for ViT CKA), so every tap needs the final token count
    (`cka_problem`). F_0 = 1. Averaged over the batches (the paper: ten batches of 32). Returns the taps'
    module names, the mean CKA(f_k, f_out) and the mean F_k.

    Args:
        model: a vspec model.
        batches: the input batches.
    """
    problem = cka_problem(model)
    if problem:
        raise AnalysisError(problem)
    model.eval()
    ckas, fs = [], []
    for x in batches:
        out, feats = model.forward_intermediates(x, output_fmt="NLC")
        cka = [linear_cka(f.flatten(0, 1), out.flatten(0, 1)) for f in feats]
        ckas.append(cka)
        fs.append([c / cka[0] for c in cka])
    mean = [torch.tensor(v, dtype=torch.float64).mean(0).tolist() for v in (ckas, fs)]
    return {"taps": [f["module"] for f in model.feature_info], "batches": len(fs), "cka": mean[0], "F": mean[1]}


def plot_cka(result: dict[str, Any], path: Path, title: str) -> None:
    """Fig. 2 / Fig. 4: F_k over depth.

    Args:
        result: `feature_evolution`'s.
        path: the image file written.
        title: the figure's title.
    """
    plt = pyplot()
    f = result["F"]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot(range(len(f)), f, marker="o")
    ax.set_xticks(range(len(f)))
    ax.set_xlabel(f"{'stage' if result['taps'][0] == 'stages.0' else 'block'} (0: f_in)")
    ax.set_ylabel("CKA(f_k, f_out) / CKA(f_in, f_out)")
    ax.set_title(f"feature evolution (Refiner Eq. 2), {result['batches']} batch(es)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ---------------------------------------------------------------- Refiner: attention maps (Fig. 1, Fig. 5)
def default_blocks(depth: int, count: int = 4) -> list[int]:
    """`count` blocks evenly spaced from the first to the last.

    Args:
        depth: the number of blocks.
        count: how many to pick (at most `depth`).
    """
    n = min(count, depth)
    return sorted({round(i * (depth - 1) / max(n - 1, 1)) for i in range(n)})


def _map_sources(block: nn.Module) -> tuple[MapRefiner | None, AttentionCoreBase | None]:
    """The block's first map-refining module (a MapRefiner) and its first attention core."""
    refiner = next((m for m in block.modules() if isinstance(m, MapRefiner)), None)
    core = next((m for m in block.modules() if isinstance(m, AttentionCoreBase)), None)
    return refiner, core


def _block_parts(model: nn.Module) -> list[tuple[str, int, nn.Module]]:
    """Every block in forward order: its module name, its stage's token count and the block."""
    return [(f"stages.{i}.blocks.{j}", shape.tokens.length, block) for i, (shape, stage)
            in enumerate(zip(model.layout, model.stages)) for j, block in enumerate(stage.blocks)]


# what the hooks keep: block -> (kind, the core's q shape or the maps' shape, its map or maps); only the first call
def _keep_core(seen: dict[int, tuple], b: int, core: AttentionCoreBase, args: tuple, kwargs: dict) -> None:
    if b not in seen:
        inputs = dict(zip(("q", "k", "v", "mask", "causal"), args)) | kwargs
        inputs.pop("v")
        try:
            seen[b] = ("core", inputs["q"].shape, core.attention_map(**inputs))
        except NotImplementedError as e:  # a core that hides its map (AttentionCoreBase.attention_map)
            seen[b] = ("none", None, str(e))


def _keep_materialised(seen: dict[int, tuple], b: int, out: tuple) -> None:
    if b not in seen:  # out: (A v, the maps handed on), which are the maps it used when it refines none
        seen[b] = ("core", out[1].shape, out[1].double())


def _keep_refined(seen: dict[int, tuple], b: int, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
    if b not in seen:
        maps = args[0] if args else next(iter(kwargs.values()))
        seen[b] = ("refiner", maps.shape, (maps.double(), out.double()))


def _hook(seen: dict[int, tuple], b: int, name: str, block: nn.Module):
    """Hook the module of block `b` whose maps show (its MapRefiner, else its attention core) to keep them in
    `seen[b]`; returns the hook's handle."""
    refiner, core = _map_sources(block)
    if refiner is not None:
        return refiner.register_forward_hook(lambda m, a, kw, o: _keep_refined(seen, b, a, kw, o), with_kwargs=True)
    if core is not None and core.returns_maps:
        return core.register_forward_hook(lambda m, a, kw, o: _keep_materialised(seen, b, o), with_kwargs=True)
    if core is not None:
        return core.register_forward_pre_hook(lambda m, a, kw: _keep_core(seen, b, m, a, kw), with_kwargs=True)
    raise AnalysisError(f"block {b} ({name}) gives no attention map (no attention core with an "
                        "attention_map, no map-refining module)")


def _shown(b: int, part: tuple[str, int, nn.Module], seen: dict[int, tuple], image: torch.Tensor,
           heads: Sequence[int] | None) -> dict[str, Any]:
    """Block `b`'s entry of `attention_maps`: its kept maps, checked, in the shown heads."""
    name, length, _ = part
    if image.dtype == torch.long:  # a sentence's token ids: its own length, not the spec's seq_len
        length = image.shape[1]
    if b not in seen:
        raise AnalysisError(f"block {b} ({name}): its attention map was not computed in the forward pass")
    kind, shape, maps = seen[b]
    if kind == "none":
        raise AnalysisError(f"the maps analysis needs each shown block's attention map: {maps}")
    before, after = maps if kind == "refiner" else (maps, maps)
    if shape[0] != 1 or before.shape[-1] < length:
        raise AnalysisError(f"block {b} ({name}) attends within windows ({before.shape[-1]} of {length} "
                            "tokens per map); the maps analysis shows maps over all tokens")
    count = min(before.shape[1], after.shape[1])
    shown = list(range(min(4, count))) if heads is None else list(heads)
    for h in shown:
        if not 0 <= h < count:
            raise IndexError(f"head {h} is out of range for block {b} ({count} maps: 0..{count - 1})")
    return {"block": b, "module": name, "refined": kind == "refiner", "tokens": before.shape[-1],
            "heads": shown, "before": before[0, shown], "after": after[0, shown]}


@torch.no_grad()
def attention_maps(model: nn.Module, image: torch.Tensor, blocks: Sequence[int] | None = None,
                   heads: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The attention maps of one image (image: (1, C, H, W); a text body's input_ids (1, L)) in the chosen
    blocks (indices over all blocks in forward order; default: 4 evenly spaced) and heads (default: the first
    4), before and after refinement, read through forward hooks on a forward pass. A block with a map-refining module
    (a MapRefiner; forward(maps (B, H, N, N)) -> (B, H', N, N)): its input (before) and output
    (after). Any other block: its attention core's map (before = after), `attention_map` in float64 from the
    core's inputs, or the maps a core that materialises them returns (`returns_maps`: Refiner's). Only a
    block's first such module counts, on its first call. Each map is N x N over all the tokens the
    attention sees, prefix tokens included (a class token is row and column 0). Attention within
    windows (Swin) is refused. Returns per block: index, module, refined, tokens, the shown heads and
    their maps (H_shown, N, N) before and after.

    Args:
        model: a vspec model (its `layout` and `stages`).
        image: the one input, (1, C, H, W) pixels or (1, L) token ids; a larger batch is cut to its first.
        blocks: the blocks shown, by index over all blocks; None: `default_blocks`.
        heads: the heads shown in each block; None: the first 4 (fewer where a block has fewer).

    Raises:
        IndexError: a block or head out of range.
        AnalysisError: a block that gives no map over all its tokens.
    """
    parts = _block_parts(model)
    blocks = default_blocks(len(parts)) if blocks is None else list(blocks)
    for b in blocks:
        if not 0 <= b < len(parts):
            raise IndexError(f"block {b} is out of range: the model has {len(parts)} blocks (0..{len(parts) - 1})")
    seen: dict[int, tuple] = {}
    handles = []
    try:
        for b in blocks:
            name, _, block = parts[b]
            handles.append(_hook(seen, b, name, block))
        model.eval()
        model(image[:1])
    finally:
        for h in handles:
            h.remove()
    return [_shown(b, parts[b], seen, image, heads) for b in blocks]


def _entropy(maps: torch.Tensor) -> list[float | None]:
    """Per map: the mean entropy of its rows (nats) where each row is a distribution, else None."""
    ok = [bool((m >= 0).all() and torch.allclose(m.sum(-1), m.new_ones(m.shape[0]), atol=1e-6)) for m in maps]
    return [float(-(m * m.clamp_min(1e-300).log()).sum(-1).mean()) if good else None for m, good in zip(maps, ok)]


def maps_summary(maps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the JSON keeps of the maps (not the maps): per block and shown head, the mean row entropy
    before and after (log N for a uniform map; None where the rows are not distributions).

    Args:
        maps: `attention_maps`'s.
    """
    return [{k: m[k] for k in ("block", "module", "refined", "tokens", "heads")}
            | {"entropy_before": _entropy(m["before"]), "entropy_after": _entropy(m["after"])} for m in maps]


def plot_maps(maps: list[dict[str, Any]], path: Path, title: str, labels: Sequence[str] | None = None) -> None:
    """Fig. 1 / Fig. 5 as a grid: a row per block, a column per head (and, when a shown block refines its
    maps, a before / after pair of columns per head); each panel on its own colour scale. `labels`: a text
    body's tokens, the ticks of every map (queries down, keys across).

    Args:
        maps: `attention_maps`'s.
        path: the image file written.
        title: the figure's title.
        labels: a text body's tokens; None: no ticks.
    """
    plt = pyplot()
    pair = any(m["refined"] for m in maps)
    cols = max(len(m["heads"]) for m in maps) * (2 if pair else 1)
    size = 1.9 if labels is None else max(1.9, 0.14 * len(labels) + 0.8)  # room for a tick label per token
    fig, axes = plt.subplots(len(maps), cols, figsize=(size * cols, size * len(maps)), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for row, m in zip(axes, maps):
        for c, h in enumerate(m["heads"]):
            for side, key in enumerate(("before", "after")[:1 + pair]):
                ax = row[c * (1 + pair) + side]
                ax.imshow(m[key][c].numpy(), cmap="viridis", interpolation="nearest")
                if labels is not None:
                    ax.axis("on")
                    ticks = range(len(labels))
                    ax.set_xticks(ticks, labels, rotation=90, fontsize=5)
                    ax.set_yticks(ticks, labels, fontsize=5)
                label = f"head {h}" + (f", {key}" if pair else "")
                ax.set_title(f"block {m['block']}, {label}" if c == side == 0 else label, fontsize=7)
    fig.suptitle(title + ("; after = before in blocks without a refiner" if pair else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)  # a 197 x 197 map keeps most of its pixels
    plt.close(fig)


def cka_figure(model: nn.Module, inputs: Inputs) -> Figure:
    """`vspec analyze --what cka`: `feature_evolution` over `inputs.batches` batches, drawn by `plot_cka`.

    Args:
        model: a vspec model.
        inputs: the analysis's inputs (`vspec.analysis.Inputs`).
    """
    result = feature_evolution(model, inputs.images(inputs.batches, inputs.batch_size))
    return Figure(result, lambda path, title: plot_cka(result, path, title), nonfinite_result(result))


def maps_figure(model: nn.Module, inputs: Inputs) -> Figure:
    """`vspec analyze --what maps`: `attention_maps` of one image (or the sentence) in `inputs.blocks` and
    `inputs.heads`, drawn by `plot_maps`; the JSON keeps `maps_summary` (and the sentence's tokens).

    Args:
        model: a vspec model.
        inputs: the analysis's inputs (`vspec.analysis.Inputs`).
    """
    try:
        x = next(inputs.images(1, 1)) if inputs.sentence is None else inputs.sentence
        shown = attention_maps(model, x, inputs.blocks, inputs.heads)
    except IndexError as e:  # a block or head out of range
        raise InputError(f"--heads / --blocks: {e}") from None
    result = {"maps": maps_summary(shown)} | ({} if inputs.labels is None else {"tokens": inputs.labels})
    where = next((f"the attention map of block {m['block']}" for m in shown
                  if nonfinite_result([m["before"], m["after"]]) is not None), None)
    return Figure(result, lambda path, title: plot_maps(shown, path, title, inputs.labels), where)
