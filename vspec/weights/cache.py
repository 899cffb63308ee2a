"""Where the ecosystem's download caches are, and the checks of what they hand back, for published weights.

Where: Hugging Face's hub cache (`HF_HUB_CACHE`, else `HF_HOME/hub`), torch hub's `checkpoints/` (`TORCH_HOME`),
vspec's own (`VSPEC_CACHE`, default `~/.cache/vspec`: `downloads/` for what a person puts there, `pretrained/` for
converted model folders, vspec.weights.converted). What the caches hand back is checked before it is read: a regular
file (a FIFO would block its reader for ever, a folder or a device holds no weights; `regular_file`), a Hub ref
holding a commit hash (`check_hub_cache`: huggingface_hub reads it raw). Every problem is a one-line
`WeightsUnavailable` naming the path. Fetching into these caches: vspec.weights.download.
"""

import os
import re
import stat
from pathlib import Path

import torch

from ..spec import SpecError
from ..spec.errors import cause, file_kind
from ..spec.weights import Hub, Manual, Url

__all__ = ["WeightsUnavailable", "check_hub_cache", "drop_path", "hf_cache", "offline", "regular_file",
           "torch_checkpoints", "vspec_cache"]


class WeightsUnavailable(SpecError):
    """Published weights that cannot be had or used: a one-line message (the CLI exits 2)."""

    def __init__(self, message: str):
        super().__init__("", message)


# ---------------------------------------------------------------- where things are


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def offline() -> bool:
    """Hugging Face's switch, read at each call (huggingface_hub reads it once, at import): HF_HUB_OFFLINE=1."""
    return _truthy("HF_HUB_OFFLINE")


def _home_cache(*parts: str) -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", *parts)


def hf_cache() -> Path:
    """Hugging Face's hub cache as huggingface_hub finds it: HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub (read at each call, so that a changed environment is honoured)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return _home_cache("huggingface", "hub")


def torch_checkpoints() -> Path:
    """torch hub's checkpoint folder (`torch.hub.get_dir()/checkpoints`, TORCH_HOME honoured)."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def vspec_cache() -> Path:
    """vspec's own cache: VSPEC_CACHE, else ~/.cache/vspec."""
    return Path(os.environ["VSPEC_CACHE"]) if os.environ.get("VSPEC_CACHE") else _home_cache("vspec")


def drop_path(source: Hub | Url | Manual, file: str | None = None) -> Path:
    """Where a person puts a file a program could not fetch: torch hub's checkpoints/<file> for a URL or a page;
    for a Hub file, vspec's cache downloads/<repo>/<file> (Hugging Face's cache is keyed by commits).

    Args:
        source: the entry's source.
        file: a Hub file's name; None (and for a URL or a page): the source's own.
    """
    if isinstance(source, Hub):
        return vspec_cache() / "downloads" / source.repo / (file or source.file)
    return torch_checkpoints() / source.file


# ---------------------------------------------------------------- what the caches hand back

def regular_file(path: Path, what: str) -> Path:
    """`path` if it is a regular file (links followed), else a one-line WeightsUnavailable saying what it is: a FIFO
    would block its reader for ever, a folder or a device is no file of weights. `what` begins the message.

    Args:
        path: the file.
        what: the message's start (what the file is).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as e:  # a dangling link, a link loop, a name too long, no permission
        raise WeightsUnavailable(f"{what}: {path} cannot be read ({e.strerror or cause(e)})") from None
    if not stat.S_ISREG(mode):
        kind = file_kind(mode)
        shown = f"{path} (a link to {path.resolve()})" if path.is_symlink() else str(path)
        raise WeightsUnavailable(f"{what}: {shown} is {kind}, not a file; delete it and run again")
    return path


def _damaged(what: str, path: Path, why: str, root: Path) -> WeightsUnavailable:
    return WeightsUnavailable(f"{what}: Hugging Face's cache is damaged: {path} {why}; delete {root} and run again")


def check_hub_cache(what: str, repo: str, revision: str) -> None:
    """Refuse what huggingface_hub would block on or raise a traceback for when it reads its cache for `repo`: the
    revision's ref (refs/<revision>, the commit it points at) must be a small regular file holding a commit hash.

    Args:
        what: the message's start (what is read).
        repo: the Hub repository id.
        revision: the revision whose ref (refs/<revision>) is read.
    """
    from huggingface_hub.file_download import repo_folder_name  # extra

    root = hf_cache() / repo_folder_name(repo_id=repo, repo_type="model")
    ref = root / "refs" / revision
    if not os.path.lexists(ref):
        return
    regular_file(ref, what)
    try:
        with open(ref, "rb") as f:
            raw = f.read(256)
    except OSError as e:
        raise _damaged(what, ref, f"cannot be read ({e.strerror or cause(e)})", root) from None
    if not re.fullmatch(rb"[0-9a-f]{40}\s*", raw):
        raise _damaged(what, ref, "holds no commit hash (40 hex digits)", root)
