"""The device pipeline (vspec/train/data/device_decode.py) on `--device` against the CPU, on generated ImageNet-shaped
JPEGs (benchmarks/loader.py's): decoded pixels against Pillow's decoder (the CPU path's). JPEG decoders differ in their
IDCT and chroma upsampling (libjpeg-turbo's "fancy" 4:2:0 upsampling against nvJPEG's), most on these images'
independent per-channel noise, so the check is a tolerance: PSNR >= 30 dB, mean |diff| <= 3 levels. Then the whole
training and validation pipelines against themselves on the CPU with the same draws: the same computation, so
their mean |diff| (normalised) is at most the decoders' (mean |diff| / (255 std)) plus 0.005. And the rates at the
batch: decoding alone, decoding + random resized crop + flip, the whole training pipeline, validation. Writes
OUT/decode_check.json; exits 1 when a check fails.

    python -m benchmarks.decode_check [--device cuda] [--images 256] [--out DIR]
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vspec.train.data.device_decode import DevicePipeline, decode
from vspec.train.data.sources import read_bytes

from .common import jpeg, out_dir, sync, write_json


def rate(fn, n: int, device: torch.device, rounds: int = 3) -> float:
    fn()  # warm-up
    sync(device)
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn()
    sync(device)
    return rounds * n / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--out", type=Path, default=out_dir(), help="writes OUT/decode_check.json (default: $OUT, "
                                                               "else runs/benchmarks/)")
    args = ap.parse_args(argv)
    device, cpu = torch.device(args.device), torch.device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / f"{i}.jpg" for i in range(args.images)]
        for i, p in enumerate(paths):
            jpeg((p, i))
        data = [read_bytes(str(p)) for p in paths]
        pil = [torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1) for p in paths]
    out = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "images": len(data)}
    decoded = decode(data, device, 3)
    diffs = [(d.cpu().int() - p.int()).abs() for d, p in zip(decoded, pil)]
    every = torch.cat([d.flatten().float() for d in diffs])
    out["decode_mean_abs"], out["decode_max_abs"] = float(every.mean()), int(every.max())
    out["decode_psnr_db"] = float(10 * torch.log10(255**2 / every.square().mean().clamp_min(1e-12)))
    kw = {"random_resized_crop": True, "auto_augment": "rand-m9-mstd0.5-inc1", "re_prob": 0.25}
    on_dev, on_cpu = DevicePipeline((224, 224), 3, device, **kw), DevicePipeline((224, 224), 3, cpu, **kw)
    for split, train in (("train", True), ("val", False)):
        a = on_dev(data, train, on_dev.generator(0, 0)).cpu()
        b = on_cpu(data, train, on_cpu.generator(0, 0))
        out[f"{split}_mean_abs"] = float((a - b).abs().mean())
        out[f"{split}_rate"] = rate(lambda t=train: on_dev(data, t, on_dev.generator(0, 1)), len(data), device)
    out["decode_rate"] = rate(lambda: decode(data, device, 3), len(data), device)
    crop = DevicePipeline((224, 224), 3, device, random_resized_crop=True)
    crop.colour = None  # the crop and flip alone
    out["crop_rate"] = rate(lambda: crop(data, True, crop.generator(0, 1)), len(data), device)
    bound = out["decode_mean_abs"] / (255 * 0.225) + 0.005  # ImageNet's smallest std
    out["ok"] = (out["decode_psnr_db"] >= 30 and out["decode_mean_abs"] <= 3 and out["train_mean_abs"] <= bound
                 and out["val_mean_abs"] <= bound)
    for k, v in out.items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    write_json(args.out / "decode_check.json", out)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
