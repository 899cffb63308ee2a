"""--data hf --streaming in the tests: parquet files of noise JPEGs written by `datasets` itself (nothing downloaded),
each image distinct, so that a sample's bytes name its row; and `vspec train` with the rows each process trains on
recorded (`python -m tests.helpers.hf_stream_runs`)."""

import hashlib
import io
import os
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = ("ant", "bee", "cat")


def jpeg(i: int, size: int = 8) -> bytes:
    """A noise JPEG of its own for row `i`."""
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(i).integers(0, 256, (size, size, 3), dtype=np.uint8)).save(out, "JPEG")
    return out.getvalue()


def parquet_split(folder: Path, sizes, row_group: int = 4, split: str = "train", first: int = 0) -> list[str]:
    """Files folder/SPLIT-0000N.parquet of `sizes` rows (an Image column `image`, a ClassLabel `label`), in row
    groups of `row_group`, written by datasets' to_parquet; rows numbered from `first` (row i: jpeg(i), i % 3)."""
    import datasets

    datasets.disable_progress_bars()
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list(CLASSES))})
    paths, i = [], first
    folder.mkdir(parents=True, exist_ok=True)
    for n, size in enumerate(sizes):
        rows = range(i, i + size)
        ds = datasets.Dataset.from_dict({"image": [{"bytes": jpeg(r), "path": None} for r in rows],
                                         "label": [r % 3 for r in rows]}, features=features)
        path = folder / f"{split}-{n:05d}.parquet"
        ds.to_parquet(str(path), batch_size=row_group)
        paths.append(str(path))
        i += size
    return paths


@lru_cache(maxsize=1)
def _rows() -> dict[str, int]:
    return {hashlib.sha256(jpeg(i)).hexdigest(): i for i in range(200)}


def row_of(data: bytes) -> int:
    """The row whose image these bytes are (rows up to 200)."""
    return _rows()[hashlib.sha256(data).hexdigest()]


def record_rows(folder: Path) -> None:
    """Each training sample a stream makes, from now on (in this process and the loader workers it forks),
    recorded as a line "EPOCH ROW" in folder/rank{RANK}-{PID}.txt."""
    from vspec.train.data.hf_stream import HFStream

    make = HFStream._item

    def recorded(self, sample, key):
        if self.train:
            with open(folder / f"rank{self.rank}-{os.getpid()}.txt", "a") as f:
                f.write(f"{self.epoch} {sample[3]}\n")
        return make(self, sample, key)

    HFStream._item = recorded


def recorded_rows(folder: Path) -> dict[int, dict[int, list[int]]]:
    """{epoch: {rank: the rows its processes made}} of the files `record_rows` wrote."""
    out: dict[int, dict[int, list[int]]] = {}
    for path in folder.glob("rank*.txt"):
        rank = int(path.name[4:].split("-")[0])
        for line in path.read_text().splitlines():
            epoch, row = map(int, line.split())
            out.setdefault(epoch, {}).setdefault(rank, []).append(row)
    return out


if __name__ == "__main__":  # `python -m tests.helpers.hf_stream_runs ROWS_FOLDER TRAIN_ARGS...`: vspec train, recorded
    from vspec.cli.train import main

    record_rows(Path(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
