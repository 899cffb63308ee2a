"""Does torchvision's decode_jpeg(device="cuda") wait for the device? 256 generated ImageNet-shaped JPEGs
(benchmarks/loader.py's) decoded in one batched call: the call's host time and the device work left after it,
alone; then the same call on a side stream while 20 bf16 8192^3 matrix products are queued on the default stream
(about 30 ms on an H200): a decoder that leaves the other stream alone returns in about its own time, one that
waits for the device returns when the products are done. The products alone are timed last. Writes
OUT/decode_sync.json.

    python -m benchmarks.decode_sync [--out DIR]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from torchvision.io import decode_jpeg

from vspec.train.data.sources import read_bytes

from .common import jpeg, out_dir, write_json


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=out_dir(), help="writes OUT/decode_sync.json (default: $OUT, "
                                                               "else runs/benchmarks/)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / f"{i}.jpg" for i in range(256)]
        for i, p in enumerate(paths):
            jpeg((p, i))
        data = [read_bytes(str(p)) for p in paths]
    out = {"device": torch.cuda.get_device_name(), "alone": [], "behind_products": []}
    decode_jpeg(data, device="cuda")
    torch.cuda.synchronize()
    for _ in range(3):
        t0 = time.perf_counter()
        decode_jpeg(data, device="cuda")
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        out["alone"].append({"call_ms": 1e3 * (t1 - t0), "left_ms": 1e3 * (time.perf_counter() - t1)})
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    for _ in range(2):
        torch.cuda.synchronize()
        for _ in range(20):
            a @ a
        t1 = time.perf_counter()
        with torch.cuda.stream(side):
            decode_jpeg(data, device="cuda")
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        out["behind_products"].append({"call_ms": 1e3 * (t2 - t1), "all_done_ms": 1e3 * (time.perf_counter() - t1)})
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
    out["products_alone_ms"] = 1e3 * (time.perf_counter() - t0)
    print(json.dumps(out, indent=1))
    write_json(args.out / "decode_sync.json", out)
    return out


if __name__ == "__main__":
    main()
