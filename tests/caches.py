"""The ecosystem's download caches, filled by a test as the real downloads leave them (no network).

Hugging Face's hub cache (huggingface_hub's layout, read back with its own `try_to_load_from_cache` and
`scan_cache_dir`): `models--<owner>--<name>/blobs/<sha256 of the file>` (the Hub names an LFS blob by its
content's digest), `snapshots/<commit>/<file>` a relative link to the blob, `refs/<revision>` holding the commit.
torch hub's: `<TORCH_HOME>/hub/checkpoints/<file name>`.
"""

import hashlib
import os
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # any 40-hex commit, as the Hub's


def hub_put(cache: Path, repo: str, file: str, data: bytes, revision: str = "main") -> Path:
    """Put `data` as `repo`'s `file` into the Hugging Face hub cache `cache` (HF_HUB_CACHE); returns the
    snapshot path."""
    root = cache / f"models--{repo.replace('/', '--')}"
    blob = root / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / revision).write_text(COMMIT)
    link = root / "snapshots" / COMMIT / file
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(blob, link.parent))
    return link


def torch_put(torch_home: Path, file: str, data: bytes) -> Path:
    """Put `data` as torch hub's checkpoint `file` under TORCH_HOME `torch_home`."""
    path = torch_home / "hub" / "checkpoints" / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
