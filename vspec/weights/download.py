"""Fetching published weights into the ecosystem's caches (vspec.weights.cache says where they are) and verifying them.

Fetching: `huggingface_hub.hf_hub_download` / `snapshot_download`, or `torch.hub.download_url_to_file` for a URL;
only the cache is read when `HF_HUB_OFFLINE=1` or the host cannot be reached (`reachable`: a connection probe of at
most PROBE_SECONDS, instead of huggingface_hub's half a minute of retries). A file a person put where an error said
(`drop_path`) is taken first. A digest is checked where one is published (`verify`). Every problem is a one-line
`WeightsUnavailable` naming the path, and where to put the file when it cannot be fetched.
"""

import hashlib
import os
import socket
import threading
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import torch

from ..spec.errors import cause
from ..spec.weights import Hub, Manual, PublishedWeights, Url
from .cache import WeightsUnavailable, check_hub_cache, drop_path, hf_cache, offline, regular_file

__all__ = ["PROBE_SECONDS", "expected_digest", "fetch", "hub_endpoint", "reachable", "sha256", "tokenizer_folder",
           "verify"]

_REACHABLE: dict[tuple[str, int], bool] = {}
PROBE_SECONDS = 3.0  # how long a connection (with its name lookup) may take before the network counts as absent


def reachable(url: str, timeout: float = PROBE_SECONDS) -> bool:
    """Whether a TCP connection to `url`'s host (or to the HTTPS proxy's, where one is set) opens within `timeout`
    seconds, the name lookup included (it runs in a thread: getaddrinfo has no timeout of its own); answered once per
    host and process. Without it, huggingface_hub retries an unreachable Hub for half a minute.

    Args:
        url: the address whose host is probed.
        timeout: seconds to wait.
    """
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    parsed = urlparse(proxy or url)
    key = (parsed.hostname or "", parsed.port or (443 if parsed.scheme == "https" else 80))
    if key not in _REACHABLE:
        result: list[bool] = []

        def probe() -> None:
            try:
                socket.create_connection(key, timeout=timeout).close()
                result.append(True)
            except OSError:
                result.append(False)

        thread = threading.Thread(target=probe, daemon=True)
        thread.start()
        thread.join(timeout)
        _REACHABLE[key] = bool(result and result[0])
    return _REACHABLE[key]


def hub_endpoint() -> str:
    """The Hub's address as huggingface_hub uses it (HF_ENDPOINT, read by huggingface_hub at import)."""
    from huggingface_hub import constants  # extra

    return constants.ENDPOINT


def _local_only(url: str) -> bool:
    """Read only the cache: HF_HUB_OFFLINE is set, or `url`'s host cannot be reached."""
    return offline() or not reachable(url)


def _no_network(url: str) -> str:
    return "HF_HUB_OFFLINE is set" if offline() else f"{urlparse(url).hostname} cannot be reached (no network?)"


# ---------------------------------------------------------------- fetching


def _unavailable(name: str, tag: str, source: Hub | Url | Manual, file: str, url: str, why: str) -> WeightsUnavailable:
    return WeightsUnavailable(f"{name} ({tag}): {why}; download {url} and put it at {drop_path(source, file)}")


def _dropped(name: str, tag: str, source: Hub | Url | Manual, file: str | None = None) -> Path | None:
    """The file a person put where the error said (a regular file), or None where there is nothing."""
    path = drop_path(source, file)
    return regular_file(path, f"{name} ({tag})") if os.path.lexists(path) else None


def _hub_file(name: str, tag: str, source: Hub, file: str) -> Path:
    if (dropped := _dropped(name, tag, source, file)) is not None:
        return dropped
    try:
        from huggingface_hub import hf_hub_download  # extra
        from huggingface_hub.errors import LocalEntryNotFoundError  # extra
    except ImportError:
        url = f"https://huggingface.co/{source.repo}/resolve/{source.revision}/{file}"
        raise _unavailable(name, tag, source, file, url, "huggingface_hub is not installed") from None
    url = f"{hub_endpoint()}/{source.repo}/resolve/{source.revision}/{file}"
    check_hub_cache(f"{name} ({tag})", source.repo, source.revision)
    local = _local_only(url)
    try:
        path = Path(hf_hub_download(source.repo, file, revision=source.revision, cache_dir=hf_cache(),
                                    local_files_only=local))
    except LocalEntryNotFoundError:
        why = f"not in Hugging Face's cache and {_no_network(url)}" if local else \
            "not in Hugging Face's cache and it cannot be downloaded (no network?)"
        raise _unavailable(name, tag, source, file, url, why) from None
    except Exception as e:  # noqa: BLE001 - any other failure of the Hub (gated, removed, HTTP): one line
        raise _unavailable(name, tag, source, file, url, f"the Hub refused it ({cause(e)})") from None
    return regular_file(path, f"{name} ({tag})")


def _url_file(name: str, tag: str, source: Url | Manual) -> Path:
    if (dropped := _dropped(name, tag, source)) is not None:
        return dropped
    if isinstance(source, Manual):
        raise _unavailable(name, tag, source, source.file, source.page,
                           f"{source.file} is behind a page a program cannot follow")
    if _local_only(source.url):
        raise _unavailable(name, tag, source, source.file, source.url,
                           f"not in torch hub's cache and {_no_network(source.url)}")
    path = drop_path(source)
    try:  # torch writes a temporary file beside it and renames it when whole
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.hub.download_url_to_file(source.url, str(path), hash_prefix=source.sha256, progress=True)
    except Exception as e:  # noqa: BLE001 - no network, HTTP errors, a cache that cannot be written: one line
        raise _unavailable(name, tag, source, source.file, source.url, f"it cannot be downloaded ({cause(e)})") \
            from None
    return regular_file(path, f"{name} ({tag})")


def fetch(name: str, tag: str, entry: PublishedWeights) -> dict[str, Path]:
    """The source's files ({"weights": path[, "config": path]}) in their caches, fetched where missing; each a
    regular file.

    Args:
        name: the preset's name.
        tag: the weights' tag.
        entry: its published-weights entry.
    """
    source = entry.source
    if isinstance(source, Hub):
        files = {"weights": _hub_file(name, tag, source, source.file)}
        if source.config is not None:
            files["config"] = _hub_file(name, tag, source, source.config)
        return files
    return {"weights": _url_file(name, tag, source)}


def sha256(path: Path) -> str:
    """The file's sha256 (hex), read in 16 MiB chunks.

    Args:
        path: the file.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def expected_digest(path: Path, source: Hub | Url | Manual) -> str | None:
    """The sha256 a fetched file must have: a URL's or page's published one; for a Hub file, its blob's name
    where that is a sha256 (Git LFS files, i.e. every weights file: the Hub names the blob by the content's
    digest).

    Args:
        path: the fetched file.
        source: where it came from.
    """
    if not isinstance(source, Hub):
        return source.sha256
    blob = path.resolve().name
    if len(blob) == 64 and set(blob) <= set("0123456789abcdef"):
        return blob
    # a file put by hand (the drop path keeps the file's own name): the entry's digest, if any
    return source.sha256 if path.name == PurePosixPath(source.file).name else None


def verify(name: str, tag: str, entry: PublishedWeights, files: Mapping[str, Path]) -> bool:
    """A corrupt source file (its digest not the published one) or one that cannot be read is refused, naming it.
    Returns whether the weights file was checked against a published digest (False: unverified, no digest known:
    a file put by hand for a source that publishes none, or an entry that records none).

    Args:
        name: the preset's name.
        tag: the weights' tag.
        entry: its published-weights entry.
        files: the fetched files (`fetch`).
    """
    verified = False
    for key, path in files.items():
        want = expected_digest(path, entry.source)
        if want is None:
            continue
        verified = verified or key == "weights"
        try:
            got = sha256(path)
        except OSError as e:  # EIO of a link to /proc/self/mem, a file gone meanwhile
            raise WeightsUnavailable(f"{name} ({tag}): {path} cannot be read ({e.strerror or cause(e)}); delete it "
                                     "and run again to fetch it anew") from None
        if got != want:
            raise WeightsUnavailable(f"{name} ({tag}): {path} is corrupt (its sha256 is not the published {want}); "
                                     "delete it and run again to fetch it anew")
    return verified


def tokenizer_folder(repo: str) -> Path:
    """A Hub repository's tokenizer files (no weights), through Hugging Face's cache (`HF_HUB_OFFLINE` honoured, and
    only the cache read where the Hub cannot be reached), as a folder `transformers.AutoTokenizer` reads; each
    file in it a regular file.

    Args:
        repo: the Hub repository id.
    """
    try:
        from huggingface_hub import snapshot_download  # extra
    except ImportError:
        raise WeightsUnavailable(f"hf:{repo}: huggingface_hub is not installed") from None
    check_hub_cache(f"hf:{repo}", repo, "main")
    local = _local_only(hub_endpoint())
    try:
        folder = Path(snapshot_download(repo, allow_patterns=["*.json", "*.txt", "*.model"], cache_dir=hf_cache(),
                                        local_files_only=local))
    except Exception as e:  # noqa: BLE001 - offline with nothing cached, no network, no such repository
        why = _no_network(hub_endpoint()) if local else f"it cannot be downloaded ({cause(e)})"
        raise WeightsUnavailable(f"hf:{repo}: its tokenizer is not in Hugging Face's cache ({hf_cache()}) and "
                                 f"{why}") from None
    for path in sorted(folder.rglob("*")):
        if not path.is_dir():
            regular_file(path, f"hf:{repo}")
    return folder
