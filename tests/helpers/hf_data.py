"""--data hf in the tests: Hugging Face datasets written here with `datasets` itself (nothing downloaded), holding
the very files of an image folder (tests/helpers/shard_runs.py's), so that both read the same pixels: a save_to_disk
folder, parquet files named as push_to_hub names them, and a Hub cache filled as huggingface_hub fills it."""

from pathlib import Path

HASH = "0123456789abcdef0123456789abcdef01234567"  # the snapshot's commit in a filled Hub cache
SPLITS = {"train": "train", "validation": "val"}  # the Hugging Face split: the image folder's


def offline(monkeypatch, tmp_path: Path) -> Path:
    """The Hub and datasets offline, their caches under `tmp_path` (HF_HOME): nothing read from or written to
    ~/.cache. Returns HF_HOME."""
    home = tmp_path / "hf_home"
    for name, value in {"HF_HOME": home, "HF_HUB_CACHE": home / "hub", "HF_DATASETS_CACHE": home / "datasets",
                        "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}.items():
        monkeypatch.setenv(name, str(value))
    return home


def from_folder(folder: Path, splits: dict[str, str] = SPLITS):
    """The image folder `folder` (<split>/<class>/<file>) as a DatasetDict in ImageFolder's order (classes sorted,
    files sorted in each): an `image` column of the files' bytes and a ClassLabel `label` of the class folders."""
    import datasets

    classes = sorted(p.name for p in (folder / "train").iterdir())
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    out = {}
    for name, sub in splits.items():
        files = [(f, c) for c, cls in enumerate(classes) for f in sorted((folder / sub / cls).iterdir())]
        out[name] = datasets.Dataset.from_dict(
            {"image": [{"bytes": f.read_bytes(), "path": None} for f, _ in files], "label": [c for _, c in files]},
            features=features)
    return datasets.DatasetDict(out)


def parquet(dd, folder: Path, shards: int = 2, under: str = "data") -> Path:
    """The splits of `dd` as push_to_hub writes them: `folder/under/SPLIT-0000i-of-0000n.parquet`."""
    for split, ds in dd.items():
        for i in range(shards):
            part = folder / under / f"{split}-{i:05d}-of-{shards:05d}.parquet"
            part.parent.mkdir(parents=True, exist_ok=True)
            ds.shard(shards, i, contiguous=True).to_parquet(str(part))
    return folder


def hub_cache(home: Path, repo: str, dd, config: str | None = None) -> Path:
    """`dd` as huggingface_hub's cache holds Hub dataset `repo` (under HF_HOME `home`): snapshots/HASH/ with the
    parquet files (in the folder `config` where given), refs/main naming HASH. Returns the snapshot."""
    root = home / "hub" / f"datasets--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(HASH)
    snapshot = root / "snapshots" / HASH
    parquet(dd, snapshot, shards=1, under=config or "data")
    (snapshot / "README.md").write_text("---\nlicense: mit\n---\n")
    return snapshot
