"""Evaluate a checkpoint: `python tools/eval.py runs/x/best.pt --data digits` (see --help)."""

import sys

from vspec.train.cli import eval_main

if __name__ == "__main__":
    sys.exit(eval_main())
