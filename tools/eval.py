"""Evaluate a checkpoint: `python tools/eval.py runs/x/best.pt --data digits` (see --help)."""

import sys

from vspec.cli.eval import main

if __name__ == "__main__":
    sys.exit(main())
