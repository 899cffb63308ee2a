"""`python -m vspec.cli`: the `vspec` command."""

import sys

from . import main

sys.exit(main())
