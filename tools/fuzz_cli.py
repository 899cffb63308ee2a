"""Run the malformed-input corpus (tests/cli_corpus.py) through `vspec.cli.main` and count the answers.

    python tools/fuzz_cli.py [-v]

Prints `tried N / clean one-line errors C / tracebacks T`, then every case that was not a clean one-line
error (exit 2, one non-empty line on stderr): with its exit code and the first and last lines it printed.
Exit status 1 when any case failed.
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from cli_corpus import run_corpus  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="print every case's stderr line")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = run_corpus(Path(folder))
    clean = [(c, o) for c, o in results if o.clean]
    tracebacks = [(c, o) for c, o in results if "Traceback" in o.stderr or o.code is None]
    print(f"tried {len(results)} / clean one-line errors {len(clean)} / tracebacks {len(tracebacks)}")
    for case, outcome in results:
        lines = outcome.stderr.strip().splitlines() or ["(nothing on stderr)"]
        if not outcome.clean:
            tail = f" ... {lines[-1][:200]}" if len(lines) > 1 else ""
            print(f"FAIL {case.name}: exit {outcome.code}, {len(lines)} lines: {lines[0][:200]}{tail}")
        elif args.verbose:
            print(f"ok   {case.name}: {lines[0][:200]}")
    return 0 if len(clean) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
