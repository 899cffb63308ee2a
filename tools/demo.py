"""`make demo`: build and profile every preset in specs/ and print one table (MACs at each spec's
image size, batch 1; conv+linear is the SoT paper's counting convention)."""

import sys
import time
from pathlib import Path

import torch

import vspec

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    rows = [("spec", "params", "weight params", "MACs (G)", "conv+linear MACs (G)", "output", "build+fwd s")]
    for path in sorted((ROOT / "specs").glob("*.py")):
        spec = vspec.load_spec(path)
        t0 = time.perf_counter()
        model = vspec.build(spec).eval()
        with torch.no_grad():
            y = model(torch.randn(1, spec.in_chans, *spec.img_size))
        elapsed = time.perf_counter() - t0
        prof = vspec.profile(spec, crosscheck=False)
        rows.append((path.stem, f"{prof.params:,}", f"{prof.params_weights:,}", f"{prof.macs / 1e9:.4f}",
                     f"{prof.conventions['conv_linear'] / 1e9:.4f}", str(tuple(y.shape)), f"{elapsed:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
