"""The tables `vspec build` and `vspec profile` print: a model's parts grouped by stage, runs of equal blocks
merged, numbers in SI units."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from ..spec import Model, Tokens, layout, state_layout

__all__ = ["count", "describe", "format_table", "grouped", "input_label", "si", "stage_labels"]


def grouped(rows: list[tuple[str, str, int | None, int | None, tuple[int, ...]]],
            stage_labels: Sequence[str]) -> list[tuple[str, int, tuple[int, ...]]]:
    """(name, role, stage, index in stage, values) rows of the model's parts -> (label, repeats, values),
    merging runs of blocks of one stage with equal values ("stages.0.blocks.0-11", 12, values) and
    putting a row with the stage's sums (labelled `stage_labels[i]`) before each stage's parts.

    Args:
        rows: the parts' rows, in the model's order.
        stage_labels: each stage's label (`stage_labels`)."""
    out: list[tuple[str, int, tuple[int, ...]]] = []
    run: tuple[int, int] | None = None  # (stage, first block) of the run in out[-1]
    for k, (name, role, stage, index, values) in enumerate(rows):
        if stage is not None and (k == 0 or rows[k - 1][2] != stage):
            sums = tuple(sum(r[4][i] for r in rows if r[2] == stage) for i in range(len(values)))
            out.append((stage_labels[stage], 1, sums))
            run = None
        if role == "block" and run and run[0] == stage and out[-1][2] == values:
            out[-1] = (f"  stages.{stage}.blocks.{run[1]}-{index}", out[-1][1] + 1, values)
            continue
        out.append(("  " * (stage is not None) + name, 1, values))
        run = (stage, index) if role == "block" else None
    return out


def stage_labels(spec: Model, tokens: Sequence[Tokens]) -> list[str]:
    """`stage i: <its tokens>`, and the state carried into it -> out of it (Conformer's CNN map), where there is.

    Args:
        spec: the model's spec.
        tokens: each stage's token layout."""
    states = [", ".join(map(str, s.values())) for s in state_layout(spec)]
    labels = [f"stage {i}: {t}" for i, t in enumerate(tokens)]
    ends = [(states[s.first], states[s.first + s.depth]) for s in layout(spec)]
    return [label + (f"; {a}" if a else "") + (f" -> {b or 'none'}" if b != a else "")
            for label, (a, b) in zip(labels, ends)]


def input_label(spec: Model) -> str:
    """What one sample is: `224x224 input` or, for a text body, `128 tokens`.

    Args:
        spec: the model's spec."""
    if spec.embedder.text:
        return f"{spec.embedder.seq_len} tokens"
    return f"{spec.img_size[0]}x{spec.img_size[1]} input"


def describe(spec: Model) -> str:
    """One line on the body: `12 blocks at width 192` or `4 stages of 2/2/6/2 blocks at widths 96/...`.

    Args:
        spec: the model's spec."""
    if spec.isotropic:
        return f"{spec.depth} blocks at width {spec.dim}"
    return (f"{len(spec.stages)} stages of {'/'.join(str(s.depth) for s in spec.stages)} blocks at widths "
            f"{'/'.join(str(s.dim) for s in spec.stages)}")


def si(x: float) -> str:
    """`x` with an SI suffix (K, M, G) and 4 significant digits: 5.717 M.

    Args:
        x: the number."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x:.4g}"


def count(n: int, times: int, fmt=lambda v: f"{v:,}") -> str:
    """A count as printed in a table: `times x n` when a part repeats, else `n`.

    Args:
        n: the count of one copy.
        times: how many copies.
        fmt: how `n` is written (default: with thousands separators)."""
    return f"{times} x {fmt(n)}" if times > 1 else fmt(n)


def format_table(rows: list[list[str]], align: str = "", widths: Sequence[int | None] | None = None) -> str:
    """rows[0] the header: columns two spaces apart (tabulate's plain format), aligned as `align` says per column
    ("l" left, "r" right; default: the first left, the others right); `widths`: a column's most characters, its
    longer cells wrapped onto more lines (at spaces, a word longer than that broken).

    Args:
        rows: the table's rows of cells, the header first.
        align: one letter per column, "l" or "r".
        widths: per column, its most characters or None (no wrapping)."""
    align = align or "l" + "r" * (len(rows[0]) - 1)
    return tabulate(rows[1:], headers=rows[0], tablefmt="plain", disable_numparse=True, preserve_whitespace=True,
                    colalign=[{"l": "left", "r": "right"}[a] for a in align], break_on_hyphens=False,
                    maxcolwidths=list(widths) if widths else None)
