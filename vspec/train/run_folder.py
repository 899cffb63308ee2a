"""A training run's folder (OUT): the files a run writes there, what a fresh run may replace, what a resumed one
rewrites from last.pt (and the temporary files of killed saves it removes), the end-of-run files (a finished run's
resume writes those a kill or a signal left out), the model folders of --save-format folder, TensorBoard's logs and
the curves. The checkpoints' contents are vspec/train/checkpoints.py's, the atomic writes vspec/train/files.py's."""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..analysis import pyplot
from ..weights.checkpoint import model_of
from ..weights.folder import save_pretrained
from ..weights.loading import load_checkpoint
from .data.preprocess import run_pretrained_cfg
from .files import atomic_copy, atomic_write_text
from .text import run_tokenizer

__all__ = ["END_FILES", "MODEL_FOLDERS", "RUN_FILES", "check_fresh", "clean_stale_temps", "complete", "end_files",
           "jsonl", "plot", "prepare", "refresh_best_folder", "summary", "tensorboard", "write_end"]

# what a run writes into its folder (OUT/tb holds TensorBoard's logs); a fresh run refuses a folder holding
# one of the first four unless --overwrite
RUN_FILES = ("last.pt", "best.pt", "metrics.jsonl", "summary.json", "curves.png")
_TEMP = re.compile(r"\.(last\.pt|best\.pt|metrics\.jsonl|summary\.json|curves\.png)\.tmp-(\d+)")
# written after the last epoch's last.pt, in this order (summary.json last: the run's end): the model folder OUT/final
# (--save-format folder), the curves, the summary
END_FILES = ("final", "curves.png", "summary.json")


def jsonl(history: list[dict[str, Any]]) -> str:
    """The epochs' records as JSON lines (metrics.jsonl's text).

    Args:
        history: the records, one per epoch."""
    return "".join(json.dumps(record) + "\n" for record in history)


MODEL_FOLDERS = ("best", "final")  # --save-format folder: model folders of the best and the final weights


def check_fresh(out: Path, overwrite: bool) -> None:
    """Refuse (one ValueError line) to start a fresh run in a folder holding an earlier one's checkpoints,
    metrics or summary, unless `overwrite`.

    Args:
        out: the run's folder.
        overwrite: --overwrite was given."""
    used = [name for name in RUN_FILES[:4] if (out / name).exists()]
    if used and not overwrite:
        raise ValueError(f"{out} holds an earlier run ({', '.join(used)}): continue it with --resume, or replace it "
                         "with --overwrite")


def prepare(out: Path, ckpt: dict[str, Any] | None) -> None:
    """Rank 0 before training: remove the temporary files of killed saves; a fresh run clears the files of
    an earlier one; a resumed run rewrites metrics.jsonl and best.pt from last.pt (a kill may have landed
    between their writes).

    Args:
        out: the run's folder.
        ckpt: last.pt's contents for a resumed run, None for a fresh one."""
    out.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(out)
    if ckpt is None:
        for name in RUN_FILES:
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / "tb", ignore_errors=True)
        shutil.rmtree(run_tokenizer(out), ignore_errors=True)  # a text run's own vocabulary is trained afresh
        for name in MODEL_FOLDERS:  # an earlier --save-format folder run's (only what save_pretrained writes)
            for file in ("config.json", "model.safetensors"):
                if (out / name / file).is_file():
                    (out / name / file).unlink()
        return
    atomic_write_text(jsonl(ckpt["metrics"]), out / "metrics.jsonl")
    last, best = out / "last.pt", out / "best.pt"
    if ckpt["batches_done"] == 0 and ckpt.get("best_epoch") == ckpt["epoch"] and (
            not best.is_file() or best.stat().st_size != last.stat().st_size
            or best.stat().st_mtime_ns < last.stat().st_mtime_ns):
        atomic_copy(last, best)  # killed after last.pt, before its copy to best.pt


def refresh_best_folder(out: Path) -> None:
    """A resumed --save-format folder run: OUT/best rewritten from best.pt when it is missing or older (a kill
    between the two writes, or an earlier part of the run saved as pt only).

    Args:
        out: the run's folder."""
    best, config = out / "best.pt", out / "best" / "config.json"
    if best.is_file() and (not config.is_file() or config.stat().st_mtime_ns < best.stat().st_mtime_ns):
        _save_model_folder(best, out / "best")


def _save_model_folder(path: Path, folder: Path) -> None:
    """The model of the training checkpoint `path` as the model folder `folder`, with the run's inputs (as the loop's
    own export writes it)."""
    ckpt = load_checkpoint(path)
    model = model_of(ckpt, path)
    if ckpt.get("inputs"):
        rrc = (ckpt.get("recipe") or {}).get("random_resized_crop", True)
        model.pretrained_cfg = run_pretrained_cfg(ckpt["inputs"], model.spec, rrc)
    save_pretrained(model, folder)


def end_files(folder: bool) -> list[str]:
    """The end-of-run files of a run (`folder`: --save-format folder, which adds OUT/final).

    Args:
        folder: --save-format folder."""
    return [name for name in END_FILES if folder or name != "final"]


def _stale_end_files(out: Path, folder: bool) -> list[str]:
    """The end-of-run files of the finished run in `out` that are missing or older than its last.pt."""
    since = (out / "last.pt").stat().st_mtime_ns
    paths = [(name, out / name / "config.json" if name == "final" else out / name) for name in end_files(folder)]
    return [name for name, path in paths if not path.is_file() or path.stat().st_mtime_ns < since]


def summary(final: dict[str, Any], score: str, best: float, epochs: int, world: int, in_sync: bool | None,
            precision: str | None = None) -> str:
    """summary.json's text: the last record, the score's name, the best score, the epochs, the processes, whether
    their weights ended equal (None: not known, a summary written from last.pt under torchrun) and the precision the
    run trained in (fp32, bf16 or fp16; None: not recorded, a checkpoint of an earlier release).

    Args:
        final: the last epoch's record.
        score: the name of the score the best checkpoint is kept by.
        best: the best score.
        epochs: the epochs trained.
        world: the processes of the run.
        in_sync: whether their weights ended equal, or None.
        precision: the run's precision, or None."""
    return json.dumps({"final": final, "score": score, "best_score": best, "epochs": epochs, "world_size": world,
                       "ranks_in_sync": in_sync, "precision": precision})


def write_end(out: Path, names, history: list[dict[str, Any]], summary_text: str, final: Callable[[], Any],
              stopped: Callable[[], bool] = lambda: False) -> list[str]:
    """The end-of-run files `names` (of END_FILES, in its order): `final()` writes the model folder, the curves
    are drawn from `history`, summary.json holds `summary_text`. Before each, `stopped()` (a stop signal came):
    then the rest is left, and returned, for --resume (`complete`).

    Args:
        out: the run's folder.
        names: the files to write.
        history: the epochs' records.
        summary_text: summary.json's text.
        final: writes OUT/final.
        stopped: whether a stop signal came."""
    for i, name in enumerate(names):
        if stopped():
            return list(names[i:])
        if name == "final":
            final()
        elif name == "curves.png":
            plot(history, out / name)
        else:
            atomic_write_text(summary_text, out / name)
    return []


def complete(out: Path, ckpt: dict[str, Any], score: Callable[[], str], world: int, folder: bool) -> list[str]:
    """--resume of a finished run (its last.pt `ckpt`): the end-of-run files missing or older than last.pt, written
    from it (`score()`: the name of the run's score); returns their names.

    Args:
        out: the run's folder.
        ckpt: last.pt's contents.
        score: gives the name of the run's score.
        world: the processes of the run.
        folder: --save-format folder."""
    history, left = ckpt["metrics"], _stale_end_files(out, folder)
    if not (left and history):
        return []
    text = summary(history[-1], score(), ckpt["best_score"], len(history), world, True if world == 1 else None,
                   ckpt.get("precision"))
    write_end(out, left, history, text, lambda: _save_model_folder(out / "last.pt", out / "final"))
    return left


def clean_stale_temps(folder: Path) -> list[Path]:
    """Remove the temporary files that killed saves of a run left in `folder` (only our own names, and
    only those of processes no longer alive); returns them.

    Args:
        folder: the run's folder."""
    removed = []
    for p in Path(folder).glob(".*.tmp-*"):
        m = _TEMP.fullmatch(p.name)
        if m and not _alive(int(m.group(2))):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def tensorboard(out: Path):
    """A TensorBoard writer into OUT/tb, or None when tensorboard is not installed.

    Args:
        out: the run's folder."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # extra
    except Exception:  # noqa: BLE001 - tensorboard is optional
        return None
    return SummaryWriter(out / "tb")


def plot(history: list[dict[str, Any]], path: Path) -> None:
    """The curves (loss; top-1 / top-5, or a text task's metrics) against the epochs, written as a PNG.

    Args:
        history: the epochs' records.
        path: the PNG written (atomically)."""
    plt = pyplot()
    epochs = [h["epoch"] for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [h["train_loss"] for h in history], label="train")
    ax_loss.plot(epochs, [h["val_loss"] for h in history], label="val")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    if "val_top1" in history[0]:
        ax_acc.plot(epochs, [h["val_top1"] for h in history], label="val top-1")
        ax_acc.plot(epochs, [h["val_top5"] for h in history], label="val top-5")
        if any("ema_val_top1" in h for h in history):
            ax_acc.plot(epochs, [h.get("ema_val_top1", math.nan) for h in history], label="EMA val top-1")
        ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    else:  # a text task: its metrics (accuracy, Matthews, F1, correlations), each in [-1, 1]
        for key in (k for k in history[0] if k.startswith("val_") and k != "val_loss"):
            ax_acc.plot(epochs, [h[key] for h in history], label=key)
        ax_acc.set(xlabel="epoch", ylabel="metric", title="validation metrics")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    atomic_write_text(png.getvalue(), path)
