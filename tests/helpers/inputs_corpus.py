"""Malformed model names and preprocessing flags (issue 54): each `*_cases` function is a class of inputs, `n`
variants drawn from a seeded RNG. Tags: timm's `name.tag` with a tag the preset has not (random, another preset's,
another case, extended, dotted, non-ASCII, control characters, thousands of characters), and `--pretrained TAG`,
in every command that takes a model's name. Preprocessing: `--crop-pct`, `--img-size`, `--mean`, `--std` values that
are huge, tiny, NaN, infinite, negative or zero, for tools/eval.py on a real checkpoint (a value wrongly taken
evaluates, and the case fails) and `vspec label`. Every case is bad input: one line on stderr, exit 2, no traceback,
no hang (tests/helpers/cli_corpus.py runs them).
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

NAMES = ("deit_tiny", "lvvit_t", "vit_base", "t2t_vit_7", "sot_tiny")  # with published weights, and one without
OTHER_TAGS = ("released", "augreg2_in21k_ft_in1k", "ema", "fb_in1k", "deit_fb_in1k")
SPEC = {"embedder": {"kind": "patch", "patch_size": 4}, "block": {"attention": {"kind": "mhsa", "heads": 2}},
        "depth": 1, "dim": 16, "img_size": 8, "in_chans": 1, "num_classes": 10}


def bad_tag(rng: random.Random, name: str) -> str:
    """A tag `name` has not (none of the OTHER_TAGS drawn is the preset's own: `name`'s tags are left out)."""
    from vspec.factory import presets
    from vspec.spec import load_weights_table

    own = set(load_weights_table(presets()[name]))
    kind = rng.choice(["random", "other preset's", "case", "extended", "dotted", "non-ASCII", "control", "long"])
    real = rng.choice(sorted(own)) if own else "fb_in1k"
    tag = {"random": lambda: "".join(rng.choices(string.ascii_lowercase + string.digits + "_", k=rng.randint(1, 40))),
           "other preset's": lambda: rng.choice([t for t in OTHER_TAGS if t not in own]),
           "case": lambda: real.upper(),
           "extended": lambda: real + rng.choice(["_", "-1", "x", "2"]),
           "dotted": lambda: f"{real}.{rng.choice(['x', 'safetensors', 'v2'])}",
           "non-ASCII": lambda: real + rng.choice(["\u00e9", "\u6a19", "\u200b"]),
           "control": lambda: real + rng.choice(["\x1b[2J", "\x07", "\r"]),
           "long": lambda: "t" * rng.randint(300, 5000)}[kind]()
    return tag if tag not in own else tag + "_x"


def tag_cases(folder: Path, n: int, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """`n` command lines naming a preset with a tag it has not (`name.tag`, or `--pretrained TAG`), each command
    that takes a model's name in turn."""
    rng = random.Random(seed)
    spec = folder / "spec.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps(SPEC))
    run = ["--data", "synthetic", "--synthetic-size", "8", "--device", "cpu"]
    commands = {  # where MODEL goes, and the entry that runs it
        "build": ("vspec", ["build", "MODEL"]), "show": ("vspec", ["show", "MODEL"]),
        "profile": ("vspec", ["profile", "MODEL"]), "export": ("vspec", ["export", "MODEL", "--out", "OUT.onnx"]),
        "fit": ("vspec", ["fit", "MODEL", "--target", "params=1M"]),
        "analyze": ("vspec", ["analyze", "MODEL", "--out-dir", "OUT"]),
        "label": ("vspec", ["label", "MODEL", *run, "--out", "OUT"]),
        "weights": ("vspec", ["weights", "MODEL"]),
        "compare --to": ("vspec", ["compare", str(spec), "--match", "params", "--to", "MODEL", "--out-dir", "OUT"]),
        "train": ("train", ["MODEL", *run, "--out", "OUT", "--max-steps", "1"]),
        "eval": ("eval", ["MODEL", *run]),
    }
    takes_pretrained = ("build", "label", "train", "eval")
    cases = []
    for i in range(n):
        command = list(commands)[i % len(commands)]
        entry, template = commands[command]
        name = rng.choice(NAMES)
        tag = bad_tag(rng, name)
        out = str(folder / "out" / str(i))
        argv = [a.replace("MODEL", f"{name}.{tag}").replace("OUT", out) for a in template]
        how = "name.tag"
        if command in takes_pretrained and rng.random() < 0.5:
            argv = [a.replace(f"{name}.{tag}", name) for a in argv] + ["--pretrained", tag]
            how = "--pretrained TAG"
        elif command == "eval":
            argv.append("--pretrained")  # eval takes a preset's name only for its published weights
        cases.append((f"preset tag: {command}, {how} #{i}", entry, argv))
    return cases


def _checkpoint(folder: Path) -> str:
    """A tiny digits ViT's checkpoint (8 px, 1 channel): a flag value wrongly taken evaluates it."""
    import torch

    from vspec import build
    from vspec.spec import from_json
    from vspec.weights.checkpoint import save

    torch.manual_seed(0)
    return str(save(build(from_json(json.dumps(SPEC))), folder / "ckpt.pt"))


def preprocessing_cases(folder: Path, n: int, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """`n` tools/eval.py and `vspec label` command lines with one preprocessing flag out of its range."""
    rng = random.Random(seed)
    ckpt = _checkpoint(folder)
    values = {
        "--crop-pct": ["1e308", "1e-6", "1e-300", "5e-324", "0", "-0.0", "-1", "nan", "inf", "-inf", "0.2", "4.5",
                       "1e999", str(2**64)],
        "--img-size": ["0", "-1", "3", "7", str(10**5), str(2**31), str(2**64), "8 8 8"],
        "--mean": ["nan", "inf", "-inf", "1e999", "nan 0 0"],
        "--std": ["0", "-0.0", "-1", "nan", "inf", "-inf", "1e999"],
    }
    cases = []
    for i in range(n):
        flag = rng.choice(["--crop-pct", "--crop-pct", *values]) if i >= len(values) else list(values)[i]
        if rng.random() < 0.2 and flag != "--crop-pct":
            entry, argv = "vspec", ["label", ckpt, "--data", "digits", "--out", str(folder / "out" / str(i))]
        else:
            entry, argv = "eval", [ckpt, "--data", "digits"]
        value = rng.choice(values[flag])
        cases.append((f"preprocessing: {entry} {flag} {value} #{i}", entry, [*argv, flag, *value.split()]))
    return cases


def inputs_cases(folder: Path, n: int = 40, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """Both classes, `n` draws each: (name, entry, argv)."""
    return [*tag_cases(folder / "tags", n, seed), *preprocessing_cases(folder / "preprocessing", n, seed)]
