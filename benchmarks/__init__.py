"""vspec's speed comparisons, each a module run from the repository root: `python -m benchmarks.<name>` (see
docs/speed.md). What several of them share is in `benchmarks.common`; what they write lands under runs/benchmarks/
(git-ignored) unless told otherwise."""
