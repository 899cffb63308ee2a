"""Run the malformed-input corpus (tests/helpers/cli_corpus.py, with tests/helpers/data_corpus.py's tokenizer
folders, GLUE files, model folders and compare arguments, tests/helpers/shard_corpus.py's packs, and
tests/helpers/label_corpus.py's image files, label maps, labels.json and normalisation flags) through
`vspec.cli.main`, tools/train.py and tools/eval.py; count the answers.

    python -m tests.helpers.fuzz_cli [-v] [--limit SECONDS]

Each case runs in this process, on this checkout's vspec, under a time limit (default 20 s, by SIGALRM),
with stdout a strict UTF-8 stream. Prints `tried N / clean one-line errors C / tracebacks T / hangs H /
executions E` (E: cases whose input ran a command: the file it would create was found), then every case that was
not a clean one-line error (exit 2, one non-empty line on stderr, within the limit, no command run, no control
character or undecodable byte printed): its exit code, or that it hung, and the first and last lines it printed.
Exit status 1 when any case failed.
"""

import argparse
import sys
import tempfile
from pathlib import Path

from tests.helpers.cli_corpus import TIME_LIMIT, Case, Outcome, run_corpus  # noqa: E402


def report(results: list[tuple[Case, Outcome]], limit: float, verbose: bool = False) -> list[str]:
    """The summary line, then a line per case that was not a clean one-line error (every case: verbose)."""
    clean = sum(o.clean for _, o in results)
    tracebacks = sum(o.traceback for _, o in results)
    hangs = sum(o.hung for _, o in results)
    executions = sum(o.executed for _, o in results)
    lines = [f"tried {len(results)} / clean one-line errors {clean} / tracebacks {tracebacks} / hangs {hangs} / "
             f"executions {executions}"]
    for case, outcome in results:
        printed = outcome.stderr.strip().splitlines() or ["(nothing on stderr)"]
        if not outcome.clean:
            what = f"hung past {limit:g} s" if outcome.hung else f"exit {outcome.code}"
            what += f", ran a command (created {case.marker})" if outcome.executed else ""
            tail = f" ... {ascii(printed[-1][:200])}" if len(printed) > 1 else ""
            lines.append(f"FAIL {ascii(case.name)}: {what}, {len(printed)} lines: {ascii(printed[0][:200])}{tail}")
        elif verbose:
            lines.append(f"ok   {ascii(case.name)}: {ascii(printed[0][:200])}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="print every case's stderr line")
    p.add_argument("--limit", type=float, default=TIME_LIMIT, metavar="SECONDS",
                   help=f"time limit per case; a case still running then counts as a hang (default {TIME_LIMIT:g})")
    args = p.parse_args()
    if not args.limit > 0:
        p.error(f"--limit must be > 0, got {args.limit}")
    with tempfile.TemporaryDirectory() as folder:
        results = run_corpus(Path(folder), limit=args.limit)
    print("\n".join(report(results, args.limit, args.verbose)))
    return 0 if all(o.clean for _, o in results) else 1


if __name__ == "__main__":
    sys.exit(main())
