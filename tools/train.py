"""Train a vspec spec: `python tools/train.py SPEC --data digits --out runs/x` (see --help).

Several GPUs or machines: `torchrun --nproc_per_node=N tools/train.py ...` (docs/training.md)."""

import sys

from vspec.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
