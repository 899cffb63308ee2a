"""Hugging Face datasets where their users keep them (`--data hf --data-dir WHERE`), found without downloading
anything. WHERE is

    a save_to_disk folder     a DatasetDict's (dataset_dict.json: its splits) or a Dataset's (state.json: one split,
                              train); its arrow files memory-mapped where they are
    parquet / arrow files     a folder of them (a Hub repository's clone, `to_parquet`'s files), one file, or a glob
                              (`*`, `?`, `[...]`, `**`; braces are not expanded); each file's split named as
                              Hugging Face names it (below)
    a Hub dataset id          owner/name (the --subset NAME folder for one of several configurations) read from the
                              local Hub cache (HF_HUB_CACHE, else HF_HOME/hub), never fetched

A file's split: `SPLIT-00000-of-00002.parquet` (push_to_hub's shards) names any split (but `data`, save_to_disk's
own name); else the first of the split
keywords (train, training; validation, valid, dev, val; test, testing, eval, evaluation) found in its folders' names
and then its own, between `-._ `, digits and `/`; else train. Arrow files are memory-mapped; parquet files are
converted once by `datasets` into arrow files in its cache (HF_DATASETS_CACHE, else HF_HOME/datasets), memory-mapped
from there and reused by later runs (--streaming reads the parquet files in place). Nothing here runs a dataset's
code: a folder that holds a loading script (`NAME.py`) and no data files is refused (datasets 4 and later no longer
run such scripts either). Every problem is one DataError line naming the file. Torch-free; `datasets` and `pyarrow`
are imported when a dataset is read.

    open_splits(where, config=None, splits=None) -> {split: datasets.Dataset}
    split_files(where, config=None)              -> {split: [its parquet / arrow files, in order]}
    image_columns(features, image_column=None, label_column=None) -> (image column, label column, class names)
"""

from __future__ import annotations

import glob
import json
import os
import re
import stat
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...extras import needs
from ...spec.errors import file_kind, show
from .registry import DataError

__all__ = ["MAX_FILES", "hub_id", "image_columns", "open_splits", "split_files"]

_SUFFIXES = (".parquet", ".arrow")
MAX_FILES = 100_000  # data files of one WHERE (the Hub's largest image sets hold a few thousand)
_MAX_SCANNED = 1_000_000  # names looked at while listing a folder or a glob, before giving up
_MAX_JSON = 1 << 20  # bytes of a save_to_disk folder's JSON files
_SPLIT_KEYWORDS = {"train": ("train", "training"), "validation": ("validation", "valid", "dev", "val"),
                  "test": ("test", "testing", "eval", "evaluation")}
_SHARDED = re.compile(r"^(\w+(?:\.\w+)*)-\d{5}-of-\d{5}")  # push_to_hub's `train-00000-of-00002.parquet`
_WORDS = re.compile(r"[-._ 0-9]+")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_GLOB = re.compile(r"[*?[]")


def hub_id(where: str) -> bool:
    """Whether WHERE names a Hub dataset (owner/name, or a legacy name), not a path: nothing there by that name.

    Args:
        where: --data-dir."""
    return (not os.path.lexists(where) and bool(_HUB_ID.fullmatch(where)) and not where.endswith(_SUFFIXES)
            and ".." not in where)


def split_files(where: str, config: str | None = None) -> dict[str, list[str]]:
    """The parquet / arrow files of each split of WHERE (a save_to_disk folder's arrow files too), in a fixed order:
    by path, as HF numbers its shards.

    Args:
        where: a folder, a glob of files, or a Hub dataset's id.
        config: the dataset's configuration (a subset), or None."""
    kind, found = _locate(where, config)
    if kind == "disk":
        return {split: _disk_files(folder) for split, folder in found.items()}
    return found


def open_splits(where: str, config: str | None = None, splits: Iterable[str] | None = None) -> dict[str, Any]:
    """Every split of WHERE as a `datasets.Dataset` (only `splits` where given: each must be there), unformatted,
    nothing downloaded (module docstring).

    Args:
        where: a folder, a glob of files, or a Hub dataset's id.
        config: the dataset's configuration (a subset), or None.
        splits: the splits to open, or None (every one)."""
    kind, found = _locate(where, config)
    if splits is not None:
        splits = list(dict.fromkeys(splits))
        missing = [s for s in splits if s not in found]
        if missing:
            raise DataError(f"hf: {where} has no split {missing[0]!r}; its splits: {', '.join(found)}")
        found = {s: found[s] for s in splits}
    with needs("--data hf"):
        import datasets  # extra
    with _quiet(datasets):
        if kind == "disk":
            return {split: _load_disk(datasets, folder) for split, folder in found.items()}
        return {split: _load_files(datasets, split, files) for split, files in found.items()}


def image_columns(features, image_column: str | None = None,
                  label_column: str | None = None) -> tuple[str, str, list[str] | None]:
    """(image column, label column, the class names) of `features` (a `datasets.Features`): the one `Image` feature
    and the one `ClassLabel` feature (its names the classes), else an integer column named `label` (names None:
    classes 0 to its largest); a named column is checked instead. One DataError line when none, several or a
    column of another type is there.

    Args:
        features: the split's features.
        image_column: --image-column, or None (found).
        label_column: --label-column, or None (found)."""
    with needs("--data hf"):
        from datasets import ClassLabel, Image, Value  # extra

    columns = ", ".join(f"{k} ({_type(v)})" for k, v in features.items()) or "none"

    def named(name: str, flag: str):
        if name not in features:
            raise DataError(f"hf: {flag} {show(name)}: no such column; the columns: {columns}")
        return features[name]

    if image_column is not None:
        if not isinstance(named(image_column, "--image-column"), Image):
            raise DataError(f"hf: --image-column {image_column}: holds {_type(features[image_column])}, not images "
                            "(an Image feature)")
    else:
        images = [k for k, v in features.items() if isinstance(v, Image)]
        if len(images) != 1:
            raise DataError(f"hf: {'several' if images else 'no'} Image columns ({columns}): "
                            f"{'name one with ' if images else 'an image set needs one; '}--image-column NAME")
        image_column = images[0]
    if label_column is None:
        labels = [k for k, v in features.items() if isinstance(v, ClassLabel)]
        if len(labels) > 1:
            raise DataError(f"hf: several ClassLabel columns ({columns}): name one with --label-column NAME")
        if not labels and "label" not in features:
            raise DataError(f"hf: no label column: no ClassLabel feature and no column 'label' ({columns}); "
                            "--label-column NAME (a ClassLabel or an integer column)")
        label_column = labels[0] if labels else "label"
    feature = named(label_column, "--label-column")
    if isinstance(feature, ClassLabel):
        return image_column, label_column, list(feature.names)
    if isinstance(feature, Value) and re.fullmatch(r"u?int\d+", feature.dtype):
        return image_column, label_column, None
    raise DataError(f"hf: label column {label_column!r}: holds {_type(feature)}, not class labels (a ClassLabel or "
                    "an integer column)")


def _type(feature) -> str:
    """A feature as a message names it: Image, ClassLabel, int64, string, ..."""
    dtype = getattr(feature, "dtype", None)
    return dtype if type(feature).__name__ == "Value" else type(feature).__name__


# ---------------------------------------------------------------- where the files are
def _locate(where: str, config: str | None) -> tuple[str, dict]:
    """("disk", {split: its folder}) for a save_to_disk folder, else ("files", {split: its files})."""
    if not isinstance(where, str) or not where:
        raise DataError("hf: --data-dir names the dataset (a folder, parquet / arrow files or a Hub id)")
    if not os.path.lexists(where):
        if "{" in where and "}" in where:
            raise DataError(f"hf: --data-dir {show(where)}: braces are not expanded; name the files with a glob "
                            "(*, ?, [...], **)")
        if _GLOB.search(where):
            base = Path(_glob_base(where))
            return "files", _name_splits(base, _bounded_glob(where), config, where)
        if hub_id(where):
            return _locate_folder(_snapshot(where), config, where)
        raise DataError(f"hf: {where}: no such file or folder")
    path = Path(where)
    if path.is_dir():
        return _locate_folder(path, config, where)
    _data_file(path)
    if config is not None:
        raise DataError(f"hf: --subset {show(config)}: names a configuration's folder; {where} is one file")
    return "files", _name_splits(path.parent, [path], None, where)


def _locate_folder(folder: Path, config: str | None, where: str) -> tuple[str, dict]:
    if (folder / "dataset_dict.json").exists() or (folder / "state.json").exists():
        if config is not None:
            raise DataError(f"hf: --subset {show(config)}: {where} is a save_to_disk folder (one configuration)")
        return "disk", _disk_splits(folder)
    return "files", _name_splits(folder, _listed(folder), config, where)


def _glob_base(pattern: str) -> str:
    """The folders of `pattern` before its first wildcard."""
    parts = Path(pattern).parts
    fixed = [p for p in parts[:next(i for i, p in enumerate(parts) if _GLOB.search(p))]]
    return str(Path(*fixed)) if fixed else "."


def _bounded_glob(pattern: str) -> list[Path]:
    found = []
    for n, name in enumerate(glob.iglob(pattern, recursive=True)):
        if n >= _MAX_SCANNED or len(found) >= MAX_FILES:
            raise DataError(f"hf: --data-dir {show(pattern)} matches more than {MAX_FILES:,} data files (at most "
                            f"{MAX_FILES:,}; name fewer)")
        if name.endswith(_SUFFIXES):
            found.append(Path(name))
    if not found:
        raise DataError(f"hf: --data-dir {show(pattern)} matches no parquet or arrow file")
    return found


def _listed(folder: Path) -> list[Path]:
    """The parquet / arrow files under `folder` (links to files followed, not to folders), at most MAX_FILES;
    none: one line, which names a loading script the folder holds."""
    found, scanned = [], 0
    for top, dirs, files in os.walk(folder, onerror=_walk_error):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        scanned += len(dirs) + len(files)
        found += [Path(top, f) for f in files if f.endswith(_SUFFIXES)]
        if scanned > _MAX_SCANNED or len(found) > MAX_FILES:
            raise DataError(f"hf: {folder}: more than {MAX_FILES:,} data files or {_MAX_SCANNED:,} names under it, the "
                            "most a folder is listed for; name fewer (a glob of them, --subset)")
    if not found:
        scripts = sorted(p.name for p in folder.glob("*.py"))
        if scripts:
            raise DataError(f"hf: {folder}: a loading script ({scripts[0]}) and no parquet or arrow files: vspec never "
                            "runs a dataset's code (datasets 4 and later no longer run loading scripts either); read "
                            "the Hub's parquet conversion (hf download --repo-type dataset ID --revision "
                            "refs/convert/parquet) or save it with save_to_disk where the script ran")
        raise DataError(f"hf: {folder}: no parquet or arrow files (expected a save_to_disk folder, parquet / arrow "
                        "files, or a Hub dataset id)")
    return found


def _walk_error(e: OSError) -> None:
    raise DataError(f"hf: {e.filename}: cannot be listed ({e.strerror or type(e).__name__})")


def _split_word(part: str) -> str | None:
    """The split whose keyword is a word of `part` (a folder's or a file's name), if any."""
    words = _WORDS.split(part.lower())
    return next((split for word in words for split, keys in _SPLIT_KEYWORDS.items() if word in keys), None)


def _split_of(parts: tuple[str, ...]) -> str:
    """A data file's split from its path's parts below the root (module docstring)."""
    stem = parts[-1].rsplit(".", 1)[0]
    sharded = _SHARDED.match(stem)
    if sharded and sharded.group(1) != "data":  # save_to_disk's own `data-00000-of-00001.arrow`: no split's name
        return sharded.group(1)
    return next(filter(None, map(_split_word, (*parts[:-1], stem))), "train")


def _name_splits(root: Path, files: list[Path], config: str | None, where: str) -> dict[str, list[str]]:
    """{split: files} of the data files under `root`, those of configuration `config` where given: a top folder
    that is neither `data` nor a split's (the Hub's `nyu-mll/glue/rte/`); without it, the files outside any
    configuration, else the only configuration's."""
    relative = sorted((f.relative_to(root).parts, f) for f in files)
    configs = {p[0] for p, _ in relative if len(p) > 1 and p[0] != "data" and not _split_word(p[0])}
    outside = [(p, f) for p, f in relative if p[0] not in configs]
    if config is None and not outside and len(configs) > 1:
        raise DataError(f"hf: {where} holds the configurations {', '.join(sorted(configs))}: name one with --subset "
                        "NAME")
    if config is None and not outside:
        config = next(iter(configs))
    if config is not None and config not in configs:
        raise DataError(f"hf: --subset {show(config)}: {where} holds no such configuration (its configurations: "
                        f"{', '.join(sorted(configs)) or 'none'})")
    chosen = outside if config is None else [(p[1:], f) for p, f in relative if p[0] == config]
    splits: dict[str, list[str]] = {}
    for parts, f in chosen:
        _data_file(f)
        splits.setdefault(_split_of(parts), []).append(str(f))
    return splits


def _data_file(path: Path) -> None:
    """A data file to read: a regular file (links followed) with a parquet or arrow name, not empty."""
    if not path.name.endswith(_SUFFIXES):
        raise DataError(f"hf: {path}: not a parquet or arrow file (a .parquet or .arrow name)")
    try:
        st = os.stat(path)
    except OSError as e:  # a dangling link, a loop, no permission
        raise DataError(f"hf: {path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"hf: {path}: is {file_kind(st.st_mode)}, not a data file")
    if st.st_size == 0:
        raise DataError(f"hf: {path}: is empty, not a {path.suffix[1:]} file")


# ---------------------------------------------------------------- the Hub cache
def _snapshot(repo: str) -> Path:
    """The snapshot of Hub dataset `repo` in the local cache: refs/main's, else the only one."""
    from ...weights.cache import hf_cache  # torch

    cache = hf_cache()
    root = cache / f"datasets--{repo.replace('/', '--')}"
    how = (f"fill it on a machine with network: hf download --repo-type dataset {repo} (with HF_HUB_CACHE or HF_HOME "
           f"pointing at this cache), or datasets.load_dataset('{repo}').save_to_disk(DIR) and --data-dir DIR")
    snapshots = root / "snapshots"
    if not snapshots.is_dir():
        raise DataError(f"hf: {repo}: no such file or folder, and no Hub dataset of that id in the cache {cache} "
                        f"(nothing is downloaded; {how})")
    ref = root / "refs" / "main"
    if os.path.lexists(ref):
        commit = _small_file(ref, 64).decode("ascii", "replace").strip()
        if not re.fullmatch(r"[0-9a-f]{40}", commit):
            raise DataError(f"hf: {ref}: holds no commit hash; the cache is damaged: delete {root} and fill it again")
        if not (snapshots / commit).is_dir():
            raise DataError(f"hf: {repo}: refs/main names {commit}, which is not in {snapshots}; {how}")
        return snapshots / commit
    found = sorted(p for p in snapshots.iterdir() if p.is_dir())
    if len(found) != 1:
        raise DataError(f"hf: {repo}: {len(found)} snapshots in {snapshots} and no refs/main to choose one; {how}")
    return found[0]


# ---------------------------------------------------------------- save_to_disk folders
def _small_file(path: Path, limit: int = _MAX_JSON) -> bytes:
    """A small regular file's bytes; anything else one line naming it."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise DataError(f"hf: {path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"hf: {path}: is {file_kind(st.st_mode)}, not a file")
    if st.st_size > limit:
        raise DataError(f"hf: {path}: {st.st_size:,} bytes, more than such a file holds (at most {limit:,})")
    try:
        with open(path, "rb") as f:
            return f.read(limit + 1)
    except OSError as e:  # /proc/self/mem: a regular file to stat, EIO to read
        raise DataError(f"hf: {path}: cannot be read ({e.strerror or type(e).__name__})") from None


def _json(path: Path, what: str) -> dict:
    data = _small_file(path)
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise DataError(f"hf: {path}: not the JSON of {what} ({type(e).__name__})") from None
    if not isinstance(value, dict):
        raise DataError(f"hf: {path}: holds a JSON {type(value).__name__}, not the object of {what}")
    return value


def _disk_splits(folder: Path) -> dict[str, Path]:
    """{split: its folder} of a save_to_disk folder: a DatasetDict's dataset_dict.json names them, a Dataset is
    train."""
    if not (folder / "dataset_dict.json").exists():
        return {"train": folder}
    splits = _json(folder / "dataset_dict.json", "a DatasetDict").get("splits")
    if not (isinstance(splits, list) and splits and all(isinstance(s, str) and re.fullmatch(r"\w+(\.\w+)*", s)
                                                        for s in splits)):
        raise DataError(f"hf: {folder / 'dataset_dict.json'}: its splits {show(splits)} are not a list of split names")
    for split in splits:
        if not (folder / split).is_dir():
            raise DataError(f"hf: {folder}: dataset_dict.json lists the split {split}, which has no folder there")
    return {split: folder / split for split in splits}


def _disk_files(folder: Path) -> list[str]:
    """The arrow files that a split's state.json lists, checked: plain names of regular files in its folder."""
    state = _json(folder / "state.json", "a saved Dataset's state")
    listed = state.get("_data_files")
    if not (isinstance(listed, list) and all(isinstance(f, dict) for f in listed)):
        raise DataError(f"hf: {folder / 'state.json'}: its _data_files {show(listed)} are not a list of files")
    files = []
    for item in listed:
        name = item.get("filename")
        if not (isinstance(name, str) and name.endswith(".arrow") and name == Path(name).name
                and not name.startswith(".")):
            raise DataError(f"hf: {folder / 'state.json'}: lists {show(name)}, not an arrow file's name in {folder}")
        _data_file(folder / name)
        files.append(str(folder / name))
    _json(folder / "dataset_info.json", "a saved Dataset's info")
    return files


# ---------------------------------------------------------------- reading
@contextmanager
def _quiet(datasets):
    """datasets' progress bars off while vspec reads (its own progress line is the run's)."""
    was = datasets.utils.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was:
            datasets.enable_progress_bars()


def _datasets_cache() -> str:
    """datasets' cache as it finds it (HF_DATASETS_CACHE, else HF_HOME/datasets), read at each call: datasets reads
    it once, at import."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return os.environ["HF_DATASETS_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                     "huggingface")
    return os.path.join(home, "datasets")


def _load_disk(datasets, folder: Path):
    if not _disk_files(folder):  # an empty split saved: datasets cannot load it back
        raise DataError(f"hf: {folder}: the split has no rows (its state.json lists no arrow file)")
    try:
        ds = datasets.Dataset.load_from_disk(str(folder))
    except Exception as e:  # noqa: BLE001 - a lying state.json or dataset_info.json, a damaged arrow file
        raise DataError(f"hf: {folder}: not a readable save_to_disk folder ({type(e).__name__}: {e})") from None
    return ds.with_format(None)


def _load_files(datasets, split: str, files: list[str]):
    import pyarrow as pa  # extra (datasets')

    kinds = {Path(f).suffix for f in files}
    if len(kinds) > 1:
        raise DataError(f"hf: the {split} split mixes parquet and arrow files ({files[0]}, ...)")
    schemas = [_schema(pa, f) for f in files]
    for f, s in zip(files[1:], schemas[1:]):
        if not s.equals(schemas[0]):
            raise DataError(f"hf: {f}: its columns differ from those of {files[0]} (the {split} split's first file)")
    try:
        if kinds == {".arrow"}:
            parts = [datasets.Dataset.from_file(f) for f in files]
            return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        return datasets.Dataset.from_parquet(files, split=split, cache_dir=_datasets_cache())
    except Exception as e:  # noqa: BLE001 - pyarrow's and datasets' errors for a file that lies about itself
        raise DataError(f"hf: the {split} split ({files[0]}{', ...' if len(files) > 1 else ''}) cannot be read "
                        f"({type(e).__name__}: {e})") from None


def _schema(pa, path: str):
    """A data file's arrow schema read from its footer (parquet) or head (arrow stream), without its Hugging Face
    metadata once that is checked against the columns."""
    try:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq  # extra (datasets')

            schema = pq.read_schema(path)
        else:
            with pa.memory_map(path) as f:
                schema = pa.ipc.open_stream(f).schema
    except (pa.ArrowException, OSError) as e:
        kind = "a parquet file" if path.endswith(".parquet") else "an arrow stream file (save_to_disk's format)"
        raise DataError(f"hf: {path}: not {kind} ({type(e).__name__}: {e})") from None
    _check_features(path, schema)
    return schema.remove_metadata()


def _check_features(path: str, schema) -> None:
    """The features a file's schema metadata declares (datasets' `huggingface` key) must be those of its columns;
    datasets itself drops a declaration that does not fit, and a class's names with it."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return
    from datasets import Features  # extra

    try:
        declared = Features.from_dict(json.loads(raw)["info"]["features"])
        types = declared.arrow_schema
    except Exception as e:  # noqa: BLE001 - any JSON that is not features
        raise DataError(f"hf: {path}: its schema's Hugging Face features cannot be read ({type(e).__name__})") from None
    for name, feature in declared.items():
        at = schema.get_field_index(name)
        if at < 0 or not types.field(name).type.equals(schema.field(at).type):
            holds = "no such column" if at < 0 else f"the column holds {schema.field(at).type}"
            raise DataError(f"hf: {path}: its schema's features say {name} is {_type(feature)}, but {holds}")
