"""`python -m vspec`: the `vspec` command (vspec.cli)."""

import sys

from .cli import main

sys.exit(main())
