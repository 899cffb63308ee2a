"""`make demo`: build and profile every preset in specs/ and print one table (MACs at each spec's
image size, batch 1; conv+linear is the SoT paper's counting convention), then train
specs/demo_digits.py on scikit-learn's 8x8 digits (resized to 32 x 32) on the CPU and report the
validation accuracy and where the checkpoint and the curves are."""

import sys
import time
from pathlib import Path

import torch

import vspec
from vspec.cli.tables import format_table

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    rows = [["spec", "params", "weight params", "MACs (G)", "conv+linear MACs (G)", "output", "build+fwd s"]]
    for path in sorted((ROOT / "specs").glob("*.py")):
        spec = vspec.load_spec(path)
        t0 = time.perf_counter()
        model = vspec.build(spec).eval()
        with torch.no_grad():
            y = model(vspec.example_input(spec, 1))
        elapsed = time.perf_counter() - t0
        prof = vspec.profile(spec, crosscheck=False)
        rows.append([path.stem, f"{prof.params:,}", f"{prof.params_weights:,}", f"{prof.macs / 1e9:.4f}",
                     f"{prof.conventions['conv_linear'] / 1e9:.4f}", str(tuple(y.shape)), f"{elapsed:.2f}"])
    print(format_table(rows))
    print(flush=True)
    return train_demo()


def train_demo() -> int:
    """Train the demo spec on digits with the `none` recipe; the run's own summary line follows."""
    from vspec.cli.train import main as train_main

    out = ROOT / "runs" / "demo_digits"
    argv = [str(ROOT / "specs/demo_digits.py"), "--data", "digits", "--out", str(out), "--recipe", "none",
            "--epochs", "10", "--batch-size", "64", "--device", "cpu", "--overwrite"]
    print("python tools/train.py " + " ".join(argv[:1] + argv[1:]), flush=True)
    t0 = time.perf_counter()
    code = train_main(argv)
    print(f"demo training took {time.perf_counter() - t0:.0f} s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
