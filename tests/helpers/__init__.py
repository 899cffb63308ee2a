"""What the tests share, and nothing else imports: checks and references (`checks`), random draws compared with a
reference's (`stats`), Hypothesis strategies, the ecosystem's caches filled as downloads leave them, the
malformed-input corpora, the documentation's examples, the shrunk presets, the training runs' command lines; and the
fuzzers, run from the repository's root as
`python -m tests.helpers.fuzz_cli` and `python -m tests.helpers.fuzz_compose`. No test module imports another."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
