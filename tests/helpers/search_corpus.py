"""Budget searches that must be refused before they start (issue 43): each `*_cases` function is a class of
`vspec fit` / `vspec compare` command lines, `n` variants drawn from a seeded RNG. Search-size explosions: axes whose
values multiply past the limit many times over (sizes counted here from the ranges, independently of vspec), one
depth range walking millions of blocks, float steps of 1e-9, a `--grid` of millions of points; non-finite or
non-ASCII ranges and repeated keys. Every case is bad input: one line on stderr, exit 2, no traceback, no hang
(tests/helpers/cli_corpus.py runs them, each within its time limit: a search that started would not end in it).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

SPEC = {"embedder": {"kind": "patch", "patch_size": 4}, "block": {"attention": {"kind": "mhsa", "heads": 2}},
        "depth": 2, "dim": 16, "img_size": 8, "in_chans": 1, "num_classes": 10}
INT_KEYS = ("dim", "depth", "num_classes", "block.attention.heads", "block.ffn.hidden")
FLOAT_KEYS = ("block.ffn.ratio", "drop_path", "block.attention.attn_drop")


def _range(rng: random.Random, at_least: int) -> tuple[str, int]:
    """An integer range LOW:HIGH[:STEP] of at least `at_least` values, and its length."""
    low, step = rng.randint(1, 8), rng.choice([1, 1, 2, 8])
    n = rng.randint(at_least, 100 * at_least)
    text = f"{low}:{low + (n - 1) * step}" + (f":{step}" if step != 1 or rng.random() < 0.3 else "")
    return text, n


def explosion_cases(spec: str, n: int, rng: random.Random, limit: int) -> list[tuple[str, str, list[str]]]:
    """`vspec fit` searches past `limit` (vspec.fitting.MAX_CANDIDATES) candidates at least tenfold: several axes
    whose lengths multiply past it, one list of thousands of widths, a float step of 1e-9, depths into the
    millions."""
    cases = []
    for i in range(n):
        what = rng.choice(["axes", "axes", "list", "float step", "deep", "huge range"])
        if what == "axes":  # k axes of m values each, m ** k >= 10 * limit
            k = rng.randint(2, len(INT_KEYS))
            m = math.ceil((10 * limit) ** (1 / k))
            vary, total = [], 1
            for key in rng.sample(INT_KEYS, k):
                text, size = _range(rng, m)
                vary += [f"{key}={text}"]
                total *= size
        elif what == "list":  # one key, a list of 10 x limit widths
            total = 10 * limit + rng.randint(0, limit)
            vary = ["dim=" + ",".join(str(8 * (j + 1)) for j in range(total))]
        elif what == "float step":
            step = rng.choice(["1e-9", "1e-7", "0.000001"])
            vary, total = [f"{rng.choice(FLOAT_KEYS)}=0.1:0.9:{step}"], int(0.8 / float(step))
        elif what == "deep":  # few candidates, but each builds millions of blocks
            high = rng.choice([10**6, 10**7, 10**8])
            vary, total = [f"depth={high - rng.randint(0, 5)}:{high}"], 6
        else:
            vary, total = [f"dim=1:{rng.choice([10**8, 10**12, 10**18])}"], 10**8
        argv = ["fit", spec, "--target", rng.choice(["params=1M", "macs=2G", "params=20K,macs=1M"])]
        argv += [a for v in vary for a in ("--vary", v)]
        cases.append((f"search size: {what}, {total:.3g} candidates #{i}", "vspec", argv))
    return cases


def grid_cases(spec: str, folder: Path, n: int, rng: random.Random, limit: int) -> list[tuple[str, str, list[str]]]:
    """`vspec compare --grid` of at least ten times `limit` points (vspec.compare.MAX_GRID), refused before any spec
    is built."""
    cases = []
    for i in range(n):
        k = rng.randint(1, 3)
        m = math.ceil((10 * limit) ** (1 / k)) + rng.randint(0, 20)
        argv = ["compare", spec, "--out-dir", str(folder / f"grid{i}")]
        for key in rng.sample(["dim", "depth", "num_classes"], k):
            argv += ["--grid", f"{key}=" + ",".join(str(j + 1) for j in range(m))]
        cases.append((f"search size: compare --grid of {m ** k:,} points #{i}", "vspec", argv))
    return cases


def value_cases(spec: str, folder: Path, n: int, rng: random.Random) -> list[tuple[str, str, list[str]]]:
    """Ranges and values that are no finite ASCII number (NaN, inf, 1e999, Arabic-Indic, full-width or
    superscript digits, underscores), repeated --target and --grid keys, bad --max-candidates; in `vspec fit` and
    in `vspec compare --match`."""
    bad = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "\u0661\u0662", "\uff11\uff12", "\u00b2", "1_0"]
    cases = []
    for i in range(n):
        word = rng.choice(bad)
        what = rng.choice(["low", "high", "step", "list", "target twice", "grid twice", "max-candidates"])
        key = rng.choice(FLOAT_KEYS if rng.random() < 0.5 else INT_KEYS)
        vary = {"low": f"{key}={word}:4", "high": f"{key}=1:{word}", "step": f"{key}=1:4:{word}",
                "list": f"{key}=1,{word},2"}.get(what, "dim=8,16")
        target = "params=1M,params=20K" if what == "target twice" else "params=1M"
        argv = ["fit", spec, "--target", target, "--vary", vary]
        if what == "max-candidates":
            argv += ["--max-candidates", rng.choice(["0", "-1", "nan", "1e3", word])]
        if what == "grid twice" or (what != "target twice" and rng.random() < 0.4):
            argv = ["compare", spec, spec.replace(".json", "_b.json"), "--match", "params", "--vary", vary,
                    "--out-dir", str(folder / f"values{i}")]
            argv += ["--grid", "num_classes=3", "--grid", "num_classes=4"] if what == "grid twice" else []
            argv += ["--max-candidates", rng.choice(["0", "-1", "nan", word])] if what == "max-candidates" else []
        cases.append((f"search values: {what} {word!r} ({argv[0]}) #{i}", "vspec", argv))
    return cases


def search_cases(folder: Path, n: int = 24, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """Every class above, `n` draws each: (name, entry, argv)."""
    from vspec.compare import MAX_GRID
    from vspec.fitting import MAX_CANDIDATES

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "search.json"
    spec.write_text(json.dumps(SPEC))
    (folder / "search_b.json").write_text(json.dumps({**SPEC, "dim": 24}))
    return [*explosion_cases(str(spec), n, rng, MAX_CANDIDATES), *grid_cases(str(spec), folder, n, rng, MAX_GRID),
            *value_cases(str(spec), folder, n, rng)]
