"""Token labeling on mnist5k (issue 46, item 7; docs/families/refiner.md, "Token labeling on mnist5k"): a teacher
trained with vspec labels the training set with `vspec label`, then `vspec compare` trains a small dense-head
student (specs/compare_vit_dense.py) without and with the teacher's token labels, 3 seeds each, and writes the
table, the per-seed scores and Welch's test to OUT/compare.json (the Refiner page shows its table).

    python -m benchmarks.token_labels [--out docs/compare/token_labels] [--teacher-epochs 12] [--seeds 3]

Three steps, each a vspec command (printed before it runs):
1. vspec train specs/compare_vit_dense.py --data mnist5k --recipe compare --epochs E --out OUT/teacher
2. vspec label OUT/teacher --data mnist5k --out OUT/labels --grid 7 --top-k 5
3. vspec compare specs/compare_vit_dense.py --data mnist5k --token-labels OUT/labels --seeds N --recipe compare
   --threads 1 --out-dir OUT
OUT defaults to runs/benchmarks/token_labels; the Refiner page's figures are `--out docs/compare/token_labels`.
The teacher's run and the label maps are left in OUT/teacher and OUT/labels (git-ignored under docs/: only
compare.json is committed); its final val top-1 is added to compare.json under "teacher".
About 3 minutes on a 2-core CPU.
"""

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path

from .common import out_dir

STUDENT = "specs/compare_vit_dense.py"


def vspec(*argv: str) -> None:
    from vspec.cli import main

    print("$ vspec " + shlex.join(argv), flush=True)
    code = main(list(argv))
    if code:
        sys.exit(f"vspec {argv[0]} exited {code}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(out_dir() / "token_labels"),
                   help="where compare.json lands (default: runs/benchmarks/token_labels; the Refiner page's: "
                        "docs/compare/token_labels)")
    p.add_argument("--teacher-epochs", type=int, default=12)
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    out = Path(args.out)
    teacher, labels = out / "teacher", out / "labels"
    for folder in (teacher, labels):
        shutil.rmtree(folder, ignore_errors=True)
    vspec("train", STUDENT, "--data", "mnist5k", "--recipe", "compare", "--epochs", str(args.teacher_epochs),
          "--device", "cpu", "--out", str(teacher), "--log-interval", "600")
    vspec("label", str(teacher), "--data", "mnist5k", "--out", str(labels), "--grid", "7", "--top-k", "5",
          "--device", "cpu")
    vspec("compare", STUDENT, "--data", "mnist5k", "--token-labels", str(labels), "--seeds", str(args.seeds),
          "--recipe", "compare", "--threads", "1", "--out-dir", str(out), "--overwrite")
    summary = json.loads((teacher / "summary.json").read_text())
    result = json.loads((out / "compare.json").read_text())
    result["teacher"] = {"spec": STUDENT, "epochs": args.teacher_epochs, "recipe": "compare",
                         "val_top1": summary["final"]["val_top1"],
                         "label_grid": 7, "top_k": 5}
    (out / "compare.json").write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    from vspec.compare import table

    print(table(result))


if __name__ == "__main__":
    main()
