"""Malformed inputs to the `vspec` command, written into a folder: the corpus that
tests/cli/test_bad_input.py and tests/helpers/fuzz_cli.py run through `vspec.cli.main`.

Every case is bad input: the command must answer with one line on stderr and exit code 2, within a
time limit, printing nothing that a terminal would act on (escape sequences, other control characters)
and nothing that a strict UTF-8 stdout could not encode. The specs start from tiny valid ones (width 16,
one or two blocks, 16 px images), so that a case that wrongly validates builds in a moment and shows up
as a failure rather than a long run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import socket
import sys
import threading
import traceback
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from tests.helpers.data_corpus import data_cases
from tests.helpers.hf_corpus import hf_cases
from tests.helpers.hf_text_corpus import hf_text_cases
from tests.helpers.inputs_corpus import inputs_cases
from tests.helpers.label_corpus import label_cases
from tests.helpers.search_corpus import search_cases
from tests.helpers.shard_corpus import shard_cases
from tests.helpers.weights_corpus import weights_cases
from vspec.spec import (
    DAFF,
    MHSA,
    SOPE,
    Block,
    GAPHead,
    HeadTokenBlock,
    HeadTokens,
    MGCrP,
    Model,
    PatchEmbed,
    PatchMerging,
    SecondOrderHead,
    SoTEmbed,
    Stage,
    SvPN,
    WindowMHSA,
    to_dict,
    to_json,
    to_toml,
)


class Case(NamedTuple):
    name: str
    argv: list[str]
    env: dict[str, str] | None = None  # environment variables set while the case runs
    entry: str = "vspec"  # the command: vspec, train (tools/train.py) or eval (tools/eval.py)
    marker: str | None = None  # a file that a command injected through the input would create
    # the starts of the lines a command prints before it meets bad input read mid-run (an image of the epoch's
    # batches: `inputs:`, a head's `note:`, a progress line): not counted as the error's lines
    notes: tuple[str, ...] = ()


class Outcome(NamedTuple):
    code: int | None  # None: main raised, or was stopped at the time limit
    stderr: str
    stdout: str = ""
    hung: bool = False  # still running at the time limit
    executed: bool = False  # the case's marker file appeared: the input ran a command

    @property
    def traceback(self) -> bool:
        return not self.hung and (self.code is None or "Traceback" in self.stderr)

    @property
    def clean(self) -> bool:
        """Exit 2 with exactly one non-empty line on stderr (beside a training run's first, its precision: a
        refusal once it trains), no traceback, within the time limit, no command run (the marker absent), and nothing
        printed (stdout or stderr) that a terminal would act on: no control character but the line breaks, no lone
        surrogate (an undecodable byte of a file name)."""
        lines = self.stderr.splitlines()
        lines = lines[1:] if lines and lines[0].startswith("precision: ") else lines
        return (not self.hung and not self.executed and self.code == 2 and len(lines) == 1 and bool(lines[0].strip())
                and "Traceback" not in self.stderr and printable(self.stderr) and printable(self.stdout))


def printable(text: str) -> bool:
    """No control or format character (category Cc, Cf: ESC, BEL, bidi overrides, ...) but \\n and \\t, and
    no lone surrogate (Cs)."""
    return all(c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf", "Cs") for c in text)


def bases() -> dict[str, Model]:
    """Tiny valid specs of every family: ViT, Swin (two stages), DHVT, SoT."""
    vit = Model(embedder=PatchEmbed(patch_size=8), dim=16, depth=1, block=Block(attention=MHSA(heads=2)),
                img_size=16, num_classes=3)
    swin = Model(embedder=PatchEmbed(patch_size=2), img_size=16, class_token=False, pos_embed="none", head=GAPHead(),
                 num_classes=3,
                 stages=[Stage(depth=1, dim=16, block=Block(attention=WindowMHSA(heads=2, window=4))),
                         Stage(depth=1, dim=32, block=Block(attention=WindowMHSA(heads=2, window=2)),
                               entry=PatchMerging())])
    dhvt = Model(embedder=SOPE(patch_size=4), dim=16, depth=1, img_size=16, num_classes=3, pos_embed="none",
                 block=HeadTokenBlock(attention=MHSA(heads=2), ffn=DAFF(), head_tokens=HeadTokens()))
    sot = Model(embedder=SoTEmbed(stem_dim=8), dim=16, depth=1, img_size=32, num_classes=3,
                block=Block(attention=MHSA(heads=2)),
                head=SecondOrderHead(pool=MGCrP(heads=2, m=4, n=4), norm=SvPN()))
    return {"vit": vit, "swin": swin, "dhvt": dhvt, "sot": sot}


# field path (on the vit base unless prefixed `family:`) -> wrong values, as --set text
BAD_VALUES = {
    "dim": ["0", "-1", "-16", "1.5", "true", "null", '"16"', "[]", "{}", "x", "nan", "NaN", "1e40", "Infinity"],
    "depth": ["0", "-3", "2.0", "false", "[1]", "deep"],
    "img_size": ["0", "-16", "[16]", "[16, 16, 16]", "[16, 0]", "17", '"16"', "[true, 16]"],
    "num_classes": ["-1", "3.5", "[3]", "many"],
    "in_chans": ["0", "-3", "rgb"],
    "class_token": ["1", "yes", "null"],
    "pos_embed": ["sincos3d", "0", "[]"],
    "drop_path": ["1", "-0.1", "NaN", "Infinity", "-Infinity", "1e400", "nan", "inf", "half"],
    "init": ["jax", "1"],
    "head": ["5", "[]", "mlp"],
    "embedder.patch_size": ["0", "-8", "3", "8.0", "big"],
    "embedder.kind": ["conv", "5", "null"],
    "block.attention.heads": ["0", "-2", "3", "2.5", "[2]", "many"],
    "block.attention.head_dim": ["0", "-1", "x"],
    "block.attention.scale": ["0", "-1", "NaN", "Infinity"],
    "block.attention.attn_drop": ["1", "-1", "2"],
    "block.attention.kind": ["attention", "0"],
    "block.ffn.ratio": ["0", "-4", "0.01", "NaN", "Infinity"],
    "block.ffn.hidden": ["0", "-1", "1.5"],
    "block.ffn.act": ["swish", "1"],
    "block.ffn.kind": ["moe", "[]"],
    "block.norm.eps": ["0", "-1e-6", "NaN", "5e-324", "1e-46", "1e39"],  # the last three: 0, 0 and inf in float32
    "block.norm.kind": ["rmsnorm", "0"],
    "block.layer_scale": ["0", "-1", "NaN"],
    "block": ["5", "[]", '"mhsa"'],
    "stages": ["5", "[]", '"x"'],
    "swin:stages.0.block.attention.window": ["0", "-7", "3", "seven"],
    "swin:stages.1.dim": ["0", "-32"],
    "swin:stages.1.entry.kind": ["merge"],
    "swin:class_token": ["true"],
    "swin:stages.9.dim": ["1"],
    "dhvt:embedder.patch_size": ["3", "32", "0"],
    "dhvt:block.ffn.kernel": ["2", "0", "-3"],
    "dhvt:block.ffn.se_reduction": ["0", "-1"],
    "dhvt:block.ffn.spatial": ["conv"],
    "dhvt:block.ffn.cls": ["drop"],
    "dhvt:block.attention.heads": ["3"],
    "sot:head.pool.heads": ["0", "-6"],
    "sot:head.pool.m": ["0", "x"],
    "sot:head.norm.num_sv": ["0", "99"],
    "sot:head.norm.alpha": ["0", "1", "NaN"],
    "sot:head.fusion": ["product"],
    "sot:head.pool.kind": ["max"],
    "sot:embedder.block": ["vgg"],
    "sot:embedder.stem_dim": ["0"],
}

BAD_SETS = ["dim", "=16", "", "=", ".dim=16", "dim.=16", "block..attention.heads=2", "block.attention.heads.x=2",
            "block.7.attention.heads=2", "colour=red", "block.attention.colour=red", "stages.-1.dim=1",
            "version=3", "head.kind.x=1", "dim={[]: 1}", "dim={1, 2}", "dim=(", "block.attention=[1, 2]"]

PY_SPECS = {
    "raises.py": "raise ValueError('bad spec')\n",
    "raises_empty.py": "raise RuntimeError()\n",
    "raises_multiline.py": "raise ValueError('first\\nsecond\\nthird')\n",
    "raises_long.py": "raise ValueError('x' * 1_000_000)\n",
    "exit0.py": "import sys\nsys.exit(0)\n",
    "exit3.py": "import sys\nsys.exit(3)\n",
    "exit_msg.py": "import sys\nsys.exit('stop here')\n",
    "raise_systemexit.py": "raise SystemExit\n",
    "keyboard.py": "raise KeyboardInterrupt\n",
    "base_exception.py": "raise BaseException('odd')\n",
    "generator_exit.py": "raise GeneratorExit\n",
    "bad_str.py": "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n\nraise E()\n",
    "syntax.py": "SPEC = Model(\n",
    "indent.py": "if True:\nSPEC = 1\n",
    "import.py": "import no_such_module_for_vspec\n",
    "recursion.py": "def f():\n    return f()\n\nSPEC = f()\n",
    "memory.py": "raise MemoryError\n",
    "no_spec.py": "X = 1\n",
    "empty.py": "",
    "spec_int.py": "SPEC = 5\n",
    "spec_none.py": "SPEC = None\n",
    "spec_str.py": "SPEC = 'deit_tiny'\n",
    "spec_dict.py": "SPEC = {'dim': 16}\n",
    "spec_block.py": "from vspec.spec import Block\nSPEC = Block()\n",
    "spec_class.py": "from vspec.spec import Model\nSPEC = Model\n",
    "spec_invalid.py": "from vspec.spec import Model\nSPEC = Model(dim=0)\n",
    "spec_list.py": "from vspec.spec import Model\nSPEC = [Model()]\n",
    "null_byte.py": "SPEC = 1\x00\n",
}


def _write(folder: Path, name: str, data: str | bytes) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return str(path)


def _with(tree: dict, key: str, value) -> dict:
    """A copy of an unstructured spec with `value` at the dotted `key` (created where missing)."""
    out = json.loads(json.dumps(tree))
    node = out
    *parents, last = key.split(".")
    for k in parents:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    node[last] = value
    return out


def corpus(folder: Path) -> list[Case]:
    """Write the corpus' files under `folder` and return its cases (name, argv)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(11)
    specs = bases()
    files = {family: _write(folder, f"{family}.json", to_json(spec)) for family, spec in specs.items()}
    vit_json, vit_toml = to_json(specs["vit"]), to_toml(specs["vit"])
    vit_tree = to_dict(specs["vit"])
    cases: list[Case] = []

    def add(name: str, *argv: str) -> None:
        cases.append(Case(name, list(argv)))

    # ---------------------------------------------------------------- paths
    (folder / "dir.json").mkdir(exist_ok=True)
    (folder / "dir.py").mkdir(exist_ok=True)
    loop = folder / "loop.json"
    if not loop.is_symlink():
        loop.symlink_to(loop)
    dangling = folder / "dangling.toml"
    if not dangling.is_symlink():
        dangling.symlink_to(folder / "nowhere.toml")
    for name, path in [("missing .py", "no/such/spec.py"), ("missing .json", str(folder / "missing.json")),
                       ("missing .toml", str(folder / "missing.toml")), ("no suffix", str(folder)),
                       ("suffix .txt", _write(folder, "spec.txt", vit_json)),
                       ("suffix .yaml", _write(folder, "spec.yaml", "dim: 16\n")),
                       ("suffix .PY", _write(folder, "upper.PY", "SPEC = 1\n")),
                       ("folder named .json", str(folder / "dir.json")), ("folder named .py", str(folder / "dir.py")),
                       ("empty path", ""), ("dot", "."), ("trailing slash", str(folder) + "/x.json/"),
                       ("symlink loop", str(loop)), ("dangling symlink", str(dangling)),
                       ("name too long", str(folder / ("x" * 300 + ".json"))), ("/dev/null", "/dev/null"),
                       ("device .json", "/dev/zero.json")]:
        add(f"path: {name}", "show", path)
        add(f"path: {name} (build)", "build", path)

    # ---------------------------------------------------------------- empty, binary, non-UTF-8, truncated
    for suffix in (".py", ".json"):  # an empty TOML is the default model: valid
        add(f"empty {suffix}", "build", _write(folder, f"empty{suffix}", ""))
    add("whitespace .json", "build", _write(folder, "blank.json", " \n\t\n"))
    for suffix in (".py", ".json", ".toml"):
        add(f"random bytes {suffix}", "show", _write(folder, f"random{suffix}", rng.randbytes(512)))
        add(f"latin-1 {suffix}", "show", _write(folder, f"latin1{suffix}",
                                                  ("# caf\u00e9\n" if suffix != ".json" else '{"x": "caf\u00e9"}')
                                                  .encode("latin-1")))
        add(f"UTF-16 {suffix}", "show", _write(folder, f"utf16{suffix}", vit_json.encode("utf-16")))
        add(f"NUL bytes {suffix}", "show", _write(folder, f"nul{suffix}", b"\x00" * 64))
    add("UTF-8 BOM .json", "show", _write(folder, "bom.json", b"\xef\xbb\xbf" + vit_json.encode()))
    add("gzip .json", "show", _write(folder, "gz.json", b"\x1f\x8b\x08\x00" + rng.randbytes(100)))
    for cut in (1, 2, len(vit_json) // 4, len(vit_json) // 2, len(vit_json) - 30, len(vit_json) - 1):
        add(f"truncated JSON at {cut}", "show", _write(folder, f"cut{cut}.json", vit_json[:cut]))
    quotes = [i + 2 for i, c in enumerate(vit_toml) if c == '"' and vit_toml[i - 2:i] == "= "]
    for cut in quotes[:4]:
        add(f"truncated TOML at {cut}", "show", _write(folder, f"cut{cut}.toml", vit_toml[:cut]))
    add("TOML as JSON", "show", _write(folder, "toml.json", vit_toml))
    add("JSON as TOML", "show", _write(folder, "json.toml", vit_json))
    add("JSON list", "show", _write(folder, "list.json", "[1, 2]"))
    add("JSON string", "show", _write(folder, "string.json", '"vit"'))
    add("JSON null", "show", _write(folder, "null.json", "null"))
    add("JSON duplicate-free junk", "show", _write(folder, "junk.json", "{} {}"))

    # ---------------------------------------------------------------- deep nesting
    for depth in (1_000, 100_000):
        nested, objects = "[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth
        add(f"JSON [ x{depth}", "show", _write(folder, f"deep{depth}.json", nested))
        add(f"JSON object x{depth}", "show", _write(folder, f"deepobj{depth}.json", objects))
        add(f"JSON field nested x{depth}", "show",
            _write(folder, f"deepdim{depth}.json", f'{vit_json[:-2]}, "dim": {nested}}}'))
        add(f"TOML array x{depth}", "show", _write(folder, f"deep{depth}.toml", f"dim = {nested}"))
        add(f"TOML table x{depth}", "show",
            _write(folder, f"deeptab{depth}.toml", "dim = " + "{a = " * depth + "1" + "}" * depth))
        add(f"--set nested x{depth}", "show", files["vit"], "--set", f"dim={nested}")

    # ---------------------------------------------------------------- wrong types, ranges, kinds (JSON and --set)
    for key, values in BAD_VALUES.items():
        family, _, field = key.rpartition(":")
        family = family or "vit"
        for value in values:
            add(f"{family} --set {field}={value}", "build", files[family], "--set", f"{field}={value}")
        if family == "vit":  # the same values in a spec file
            try:
                parsed = json.loads(values[0])
            except ValueError:
                parsed = values[0]
            add(f"JSON {field}={values[0]}", "show",
                _write(folder, f"field_{field}.json", json.dumps(_with(vit_tree, field, parsed))))
    for text in ("NaN", "Infinity", "-Infinity", "1e999"):
        add(f"JSON drop_path {text}", "build", _write(folder, f"float_{text}.json",
                                                      vit_json[:-2] + f', "drop_path": {text}}}'))
    for text in ("nan", "inf", "-inf", "+inf"):
        add(f"TOML drop_path {text}", "build", _write(folder, f"float_{text}.toml", f"{vit_toml}drop_path = {text}\n"))
    for key in ("colour", "block.colour", "block.attention.colour", "head.colour", "embedder.colour"):
        add(f"unknown key {key}", "show", _write(folder, f"unknown_{key}.json", json.dumps(_with(vit_tree, key, 1))))
    add("unknown TOML table", "show", _write(folder, "unknown.toml", vit_toml + "\n[extra]\nx = 1\n"))
    add("version 99", "show", _write(folder, "v99.json", json.dumps({**vit_tree, "version": 99})))
    add("version string", "show", _write(folder, "vstr.json", json.dumps({**vit_tree, "version": "2"})))
    for name, value in (("head kind", {"kind": "mlp"}), ("embedder kind", {"kind": "conv", "patch_size": 8}),
                        ("attention kind", {"kind": "linear"}), ("head no kind", {"drop": 0.1})):
        field = {"head kind": "head", "embedder kind": "embedder", "attention kind": "block.attention",
                 "head no kind": "head"}[name]
        add(f"unknown {name}", "show", _write(folder, f"kind_{name.replace(' ', '_')}.json",
                                               json.dumps(_with(vit_tree, field, value))))

    # ---------------------------------------------------------------- --set syntax
    for text in BAD_SETS:
        add(f"--set {text!r}", "show", files["vit"], "--set", text)
    add("--set without value", "show", files["vit"], "--set")

    # ---------------------------------------------------------------- huge ints and long values
    for key in ("dim", "depth", "num_classes", "img_size", "block.attention.heads", "block.ffn.hidden",
                "embedder.patch_size", "in_chans"):
        add(f"--set {key}=10**40", "build", files["vit"], "--set", f"{key}={10**40}")
        add(f"--set {key}=2**63", "profile", files["vit"], "--set", f"{key}={2**63}")
    add("JSON 5000-digit int", "show", _write(folder, "digits.json", vit_json[:-2] + ', "dim": ' + "7" * 5000 + "}"))
    add("TOML 5000-digit int", "show", _write(folder, "digits.toml", vit_toml + "dim = " + "7" * 5000 + "\n"))
    add("--set 5000-digit int", "show", files["vit"], "--set", "dim=" + "7" * 5000)
    mb = "k" * 1_000_000
    add("1 MB --set value", "show", files["vit"], "--set", f"head.kind={mb}")
    add("1 MB --set int field", "show", files["vit"], "--set", f"dim={mb}")
    add("1 MB --set key", "show", files["vit"], "--set", f"{mb}=1")
    add("1 MB multi-line value", "show", files["vit"], "--set", "dim=" + "a\n" * 500_000)
    add("1 MB JSON value", "show", _write(folder, "mb.json", json.dumps({**vit_tree, "pos_embed": mb})))
    add("1 MB JSON key", "show", _write(folder, "mbkey.json", json.dumps({**vit_tree, mb: 1})))
    add("1 MB path", "show", "/" + mb + ".json")

    # ---------------------------------------------------------------- .py specs
    for name, source in PY_SPECS.items():
        add(f".py {name}", "show", _write(folder, f"py/{name}", source))
    add(".py non-UTF-8", "show", _write(folder, "py/latin1.py", "SPEC = 'caf\u00e9'\n".encode("latin-1")))

    # ---------------------------------------------------------------- --out targets
    _write(folder, "a_file", "x")
    for name, out in (("a folder", str(folder)), ("an existing folder with slash", str(folder) + "/"),
                      ("under a file", str(folder / "a_file" / "m.pt")), ("empty", ""),
                      ("/dev/full (disk full)", "/dev/full"), ("/proc", "/proc/vspec_model.pt")):
        add(f"--out {name}", "build", files["vit"], "--out", out)

    # ---------------------------------------------------------------- size guard
    for name, sets in (("dim 20000 x depth 4", ["dim=20000", "depth=4"]),
                       ("dim 10**6", ["dim=1000000"]),
                       ("10**12 classes", ["num_classes=1000000000000"]),
                       ("hidden 10**11", ["block.ffn.hidden=100000000000"]),
                       ("4096 px at patch 1", ["img_size=4096", "embedder.patch_size=1"]),
                       ("depth 10**7", ["depth=10000000"])):
        argv = [a for s in sets for a in ("--set", s)]
        add(f"size guard build: {name}", "build", files["vit"], *argv)
    add("size guard build: batch 10**9", "build", files["vit"], "--batch-size", str(10**9))
    add("size guard profile --meta: dim 10**9", "profile", files["vit"], "--meta", "--set", "dim=1000000000")
    add("size guard profile: dim 10**9", "profile", files["vit"], "--set", "dim=1000000000")
    add("size guard profile --meta: 2**20 px at patch 1", "profile", files["vit"], "--meta",
        "--input-size", str(2**20), "--set", "embedder.patch_size=1")

    # ---------------------------------------------------------------- flags
    for argv in (["--frobnicate"], ["build", files["vit"], "--frobnicate"], ["-x"], [], ["build"], ["show"],
                 ["profile", files["vit"], "--input-size", "0"], ["profile", files["vit"], "--input-size", "-16"],
                 ["profile", files["vit"], "--input-size", "abc"], ["profile", files["vit"], "--input-size", "1e3"],
                 ["profile", files["vit"], "--input-size", "17"], ["build", files["vit"], "--batch-size", "0"],
                 ["build", files["vit"], "--batch-size", "-1"], ["build", files["vit"], "--batch-size", "x"],
                 ["show", files["vit"], files["vit"]], ["build", files["vit"], "--json=3"],
                 ["build", files["vit"], "--out"], ["BUILD", files["vit"]], ["show", files["vit"], "--meta"],
                 ["profile", files["vit"], "--input-size"], ["--", "build"]):
        add(f"flags: {' '.join(a if len(a) < 30 else Path(a).name for a in argv) or '(none)'}", *argv)
    onnx = str(folder / "export" / "m.onnx")
    for argv in (["export", files["vit"]], ["export", files["vit"], "--out", str(folder / "m.txt")],
                 ["export", files["vit"], "--out", str(folder)],
                 ["export", files["vit"], "--out", onnx, "--batch", "0"],
                 ["export", files["vit"], "--out", onnx, "--batch", "1"],
                 ["export", files["vit"], "--out", onnx, "--opset", "1"],
                 ["export", files["vit"], "--out", str(folder / "m.pt2"), "--opset", "18"]):
        add(f"flags: {' '.join(a if len(a) < 30 else Path(a).name for a in argv)}", *argv)
    cases += hostile(folder, files["vit"], add)
    # tokenizer folders, GLUE files, model folders and compare's arguments, drawn by tests/helpers/data_corpus.py
    cases += [Case(name, argv, None, entry) for name, entry, argv in data_cases(folder / "data")]
    # Hugging Face text datasets: columns, labels, texts, splits, configurations (tests/helpers/hf_text_corpus.py)
    cases += [Case(name, argv, env, entry) for name, entry, argv, env in hf_text_cases(folder / "hf_text")]
    # image files, label maps, labels.json, normalisation flags, drawn by tests/helpers/label_corpus.py
    cases += [Case(name, argv, None, entry, notes=notes) for name, entry, argv, notes in label_cases(folder / "labels")]
    # published weights and the caches they come through, drawn by tests/helpers/weights_corpus.py
    cases += [Case(name, argv, env, entry) for name, entry, argv, env in weights_cases(folder / "weights")]
    # budget searches past their limits, non-finite ranges, repeated keys, drawn by tests/helpers/search_corpus.py
    cases += [Case(name, argv, None, entry) for name, entry, argv in search_cases(folder / "search")]
    # WebDataset packs: manifest names that would run a command, manifest fields, special files, members, patterns
    cases += [Case(name, argv, None, entry, marker=marker)
              for name, entry, argv, marker in shard_cases(folder / "shards")]
    # preset tags in every command that takes a model's name, preprocessing flags: tests/helpers/inputs_corpus.py
    cases += [Case(name, argv, None, entry) for name, entry, argv in inputs_cases(folder / "inputs")]
    # Hugging Face datasets: lying schemas and JSON files, labels, images, special files, patterns, loading scripts
    cases += [Case(name, argv, env, entry, marker=marker)
              for name, entry, argv, env, marker, _ in hf_cases(folder / "hf")]
    return cases


def _v1_daff(**changes) -> dict:
    """A first-edition (version 1, no `version` key) DHVT spec with DAFF feed-forwards."""
    block = {"attention": {"kind": "mhsa", "heads": 2}, "ffn": {"kind": "daff", "norm": "layernorm"}}
    return {"embedder": {"kind": "sope", "patch_size": 4}, "block": block, "depth": 2, "dim": 16, "img_size": 16,
            "num_classes": 3, "pos_embed": "none", **changes}


def _checkpoints(folder: Path) -> dict[str, str]:
    """Checkpoint files: a tiny ViT's, the same with NaN, inf and huge (overflowing) weights, and first-edition
    specs that the upgrade must refuse in one line."""
    import torch

    from vspec import build
    from vspec.weights.checkpoint import save, with_checksum

    out = {}
    torch.manual_seed(0)
    model = build(bases()["vit"])
    out["ok"] = str(save(model, folder / "ckpt" / "ok.pt"))
    for name, fill in (("nan", float("nan")), ("inf", float("inf"))):
        bad = build(bases()["vit"])
        bad.load_state_dict(model.state_dict())
        with torch.no_grad():
            bad.stages[0].blocks[0].attn.qkv.weight[0, 0] = fill
        out[name] = str(save(bad, folder / "ckpt" / f"{name}.pt"))
    huge = build(bases()["vit"])
    with torch.no_grad():
        for p in huge.parameters():
            p.fill_(1e30)  # finite, but the features overflow to inf and NaN
    out["huge"] = str(save(huge, folder / "ckpt" / "huge.pt"))
    for name, spec in (("v1 empty stack", {"block": [], "head": {"kind": "gap"}}),
                       ("v1 DAFF depth 2**31-1", _v1_daff(depth=2**31 - 1, head={"kind": "gap"}))):
        path = folder / "ckpt" / f"{name.replace(' ', '_').replace('*', '')}.pt"
        torch.save(with_checksum({"spec": json.dumps(spec), "state_dict": {}}), path)
        out[name] = str(path)
    return out


def hostile(folder: Path, vit: str, add) -> list[Case]:
    """Issue 19's cases (an outside fuzz of hostile invocations) and more of their kinds: first-edition specs
    the upgrade must size before it loops, non-UTF-8 and control characters in file names and keys, analyze's
    flags and environment, checkpoints with non-finite weights, special files as output targets."""
    cases: list[Case] = []

    def case(name: str, *argv: str, env: dict[str, str] | None = None) -> None:
        cases.append(Case(name, list(argv), env))

    # ---------------------------------------------------------------- format-1 upgrade
    v1 = {"empty stack": {"block": [], "head": {"kind": "gap"}},
          "empty stack, no class token": {"block": [], "class_token": False},
          "DAFF depth 2**31-1, gap head": _v1_daff(depth=2**31 - 1, head={"kind": "gap"}),
          "DAFF depth 2**31-1, no class token": _v1_daff(depth=2**31 - 1, class_token=False),
          "DAFF depth 2**40, gap head": _v1_daff(depth=2**40, head={"kind": "gap"}),
          "DAFF depth 10**7, no class token": _v1_daff(depth=10**7, class_token=False),
          "DAFF depth -1, gap head": _v1_daff(depth=-1, head={"kind": "gap"}),
          "DAFF listed stack of a non-table": _v1_daff(block=[5], head={"kind": "gap"})}
    for name, tree in v1.items():
        file = _write(folder, f"v1/{name.replace(' ', '_').replace(',', '').replace('*', '')}.json", json.dumps(tree))
        case(f"v1 {name}", "show", file)
    case("v1 empty stack (TOML)", "build", _write(folder, "v1/empty.toml", 'block = []\nhead = {kind = "gap"}\n'))
    v1_ok = _write(folder, "v1/ok.json", json.dumps(_v1_daff()))
    case("v1 --set empty stack", "show", v1_ok, "--set", "block=[]", "--set", "head=gap")
    case("v1 --set depth 2**31-1", "build", v1_ok, "--set", f"depth={2**31 - 1}", "--set", "head=gap")
    ckpts = _checkpoints(folder)
    for name in ("v1 empty stack", "v1 DAFF depth 2**31-1"):
        case(f"checkpoint: {name}", "analyze", ckpts[name], "--out-dir", str(folder / "analysis"))

    # ---------------------------------------------------------------- non-UTF-8 and control characters in names
    tiny = _write(folder, "names/tiny.json", (Path(vit)).read_text())
    for label, stem in (("\\xff", "\udcff"), ("latin-1 caf\\xe9", "caf\udce9"), ("ESC [2J", "\x1b[2J"),
                        ("BEL", "a\x07b"), ("bidi override", "a\u202eb"), ("newline", "a\nb")):
        case(f"name {label}: missing .json", "show", str(folder / "names" / f"{stem}_missing.json"))
        case(f"name {label}: missing .py", "build", str(folder / "names" / f"{stem}_missing.py"))
        bad = _write(folder, f"names/{stem}_bad.json", '{"dim": 0}')
        for command in ("show", "build", "profile", "analyze"):
            case(f"name {label}: {command} of an invalid spec", command, bad)
        case(f"name {label}: a .py spec that raises", "show", _write(folder, f"names/{stem}_raises.py",
                                                                       "raise ValueError('no')\n"))
        case(f"name {label}: --out under a file", "build", tiny, "--out", str(folder / "a_file" / f"{stem}.pt"))
        case(f"name {label}: --set key", "show", tiny, "--set", f"{stem}=1")
        case(f"name {label}: --set value", "show", tiny, "--set", f"head.kind={stem}")
        case(f"name {label}: --what", "analyze", tiny, "--what", stem)
        case(f"name {label}: --data", "analyze", tiny, "--data", stem)
        case(f"name {label}: unknown flag", "build", tiny, f"--{stem}")
        case(f"name {label}: subcommand", stem, tiny)
    # a valid spec under such a name: every path the command prints, then an error it reports
    for label, stem in (("\\xff", "\udcff"), ("ESC [2J", "\x1b[2J")):
        named = _write(folder, f"names/{stem}.json", Path(vit).read_text())
        case(f"name {label}: build prints it, then --out is a folder", "build", named, "--out", str(folder))
        case(f"name {label}: analyze prints it, then --heads is out of range", "analyze", named, "--what", "cka,maps",
             "--batch-size", "2", "--heads", "7", "--out-dir", str(folder / f"names/{stem}_out"))
        case(f"name {label}: analyze prints its --out-dir, then --heads is out of range", "analyze", vit, "--what",
             "cka,maps", "--batch-size", "2", "--heads", "7", "--out-dir", str(folder / f"names/{stem}_dir"))

    # ---------------------------------------------------------------- unknown keys holding escapes
    tree = json.loads(Path(vit).read_text())
    for label, key in (("ESC [2J", "\x1b[2J"), ("ESC ]0; title", "\x1b]0;pwned\x07"), ("NUL", "a\x00b"),
                       ("newline", "a\nb"), ("CR", "a\rb"), ("bidi override", "\u202ekey"), ("DEL", "\x7f"),
                       ("C1 CSI", "\x9b31m")):
        for where in ("", "block.", "block.attention.", "head.", "embedder."):
            file = _write(folder, f"keys/{label.replace(' ', '_')}_{where or 'root'}.json",
                          json.dumps(_with(tree, where + key, 1)))
            case(f"unknown key {label} at {where or 'the root'}", "show", file)
        case(f"unknown key {label} (TOML)", "show",
             _write(folder, f"keys/{label.replace(' ', '_')}.toml", f"dim = 16\n{json.dumps(key)} = 1\n"))
        case(f"unknown key {label} (--set)", "show", vit, "--set", f"{key}=1")
        case(f"unknown key {label} (--set, nested)", "show", vit, "--set", f"block.{key}.x=1")
        case(f"kind {label}", "show", vit, "--set", f"head.kind={key}")

    # ---------------------------------------------------------------- analyze: flags, environment, weights
    out = ["--out-dir", str(folder / "analysis")]
    # MPLBACKEND first: matplotlib reads it when first imported (cka plots, then --heads fails)
    for backend in ("bogus", "", "module://no_such_backend_module"):
        case(f"analyze MPLBACKEND={backend!r}", "analyze", vit, "--what", "cka,maps", "--batch-size", "2", "--heads",
             "7", *out, env={"MPLBACKEND": backend})
    for flag, values in (("--seed", [str(2**64), str(2**63), str(2**32), "-1", str(-2**63 - 1), str(10**40),
                                     "7" * 5000, "1e3", "nan", "inf", ""]),
                         ("--batches", [str(10**9), str(2**63), "1001", "0", "-1", "1e9", "nan"]),
                         ("--batch-size", [str(10**9), str(2**63), str(10**40), "0", "-1", "inf"]),
                         ("--blocks", [str(10**40), str(2**63), "0," + str(2**64), "nan", "", ",", "0,0"]),
                         ("--heads", [str(10**40), str(2**63), "-1", "inf", ""])):
        for value in values:
            what = "cka,maps" if flag in ("--blocks", "--heads") else "cka"
            size = [] if flag == "--batch-size" else ["--batch-size", "2"]
            case(f"analyze {flag} {value[:20]}", "analyze", vit, "--what", what, *size, *out, flag, value)
    for name in ("nan", "inf", "huge"):
        for what in ("msf", "cka", "maps", "all"):
            case(f"analyze checkpoint with {name} weights --what {what}", "analyze", ckpts[name], "--what", what,
                 "--batch-size", "2", *out)
    case("analyze checkpoint --set", "analyze", ckpts["ok"], "--set", "dim=32", *out)
    case("analyze --out-dir is a file", "analyze", vit, "--what", "cka", "--batch-size", "2", "--out-dir",
         str(folder / "a_file"))
    case("analyze --out-dir under a file", "analyze", vit, "--what", "cka", "--batch-size", "2", "--out-dir",
         str(folder / "a_file" / "x"))

    # ---------------------------------------------------------------- special files as outputs
    special = folder / "special"
    special.mkdir(exist_ok=True)
    fifo = special / "fifo.pt"
    if not fifo.exists():
        os.mkfifo(fifo)
    sock = special / "s.sock"
    if not sock.exists():
        cwd = os.getcwd()
        os.chdir(special)  # a relative name: a socket path is limited to 108 bytes
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.bind("s.sock")
        finally:
            os.chdir(cwd)
    links = {"to_fifo.pt": fifo, "dangling.pt": special / "nowhere" / "m.pt", "loop.pt": special / "loop.pt",
             "to_dir.pt": folder}
    for name, target in links.items():
        if not (special / name).is_symlink():
            (special / name).symlink_to(target)
    for name, target in (("a FIFO", fifo), ("a socket", sock), ("a symlink to a FIFO", special / "to_fifo.pt"),
                         ("a dangling symlink", special / "dangling.pt"), ("a symlink loop", special / "loop.pt"),
                         ("a symlink to a folder", special / "to_dir.pt"), ("/dev/null", "/dev/null"),
                         ("/dev/zero", "/dev/zero"), ("/dev/full", "/dev/full"), ("/dev/random", "/dev/random")):
        case(f"--out {name}", "build", vit, "--out", str(target))
        case(f"--out {name} (--json)", "build", vit, "--json", "--out", str(target))
    stuck = folder / "stuck"  # the files analyze would write already exist as FIFOs
    stuck.mkdir(exist_ok=True)
    for name in ("vit.cka.json", "vit.cka.png", "vit.maps.png", "vit.analysis.json"):
        if not (stuck / name).exists():
            os.mkfifo(stuck / name)
    for what in ("cka", "maps", "msf"):
        case(f"analyze output {what} is a FIFO", "analyze", vit, "--what", what, "--batch-size", "2",
             "--out-dir", str(stuck))
    case("analyze --out-dir is a FIFO", "analyze", vit, "--what", "cka", "--batch-size", "2", "--out-dir", str(fifo))
    case("analyze --out-dir is /dev/null", "analyze", vit, "--what", "cka", "--batch-size", "2", "--out-dir",
         "/dev/null")
    # a checkpoint or spec that is not a regular file (reading must not block either)
    case("analyze a FIFO checkpoint", "analyze", str(fifo), *out)
    case("show a FIFO spec", "show", _fifo(special / "spec.json"))
    case("build a FIFO .py spec", "build", _fifo(special / "spec.py"))

    # ---------------------------------------------------------------- huge and negative flags of build / profile
    for value in (str(2**63), str(10**40), "7" * 5000, "-" + str(2**63)):
        case(f"build --batch-size {value[:20]}", "build", vit, "--batch-size", value)
        case(f"profile --input-size {value[:20]}", "profile", vit, "--input-size", value)
        case(f"profile --meta --input-size {value[:20]}", "profile", vit, "--meta", "--input-size", value)

    # ---------------------------------------------------------------- --workers past its bound: refused before a fork
    run = ["--data", "synthetic", "--synthetic-size", "8", "--device", "cpu"]
    for value in (str(10**9), str(2**63), str(10**40), "100000", "-1", "1e3", "nan"):
        case(f"train --workers {value[:20]}", "train", vit, *run, "--out", str(folder / "workers"), "--workers", value)
        case(f"eval --workers {value[:20]}", "eval", ckpts["ok"], *run, "--workers", value)
        case(f"label --workers {value[:20]}", "label", ckpts["ok"], *run, "--out", str(folder / "labels_w"),
             "--workers", value)

    # ---------------------------------------------------------------- compare: refused before any training
    cmp = ["--out-dir", str(folder / "compare")]
    twin = _write(folder, "twin/vit.json", Path(vit).read_text())
    case("compare a missing spec", "compare", vit, str(folder / "missing.py"), *cmp)
    case("compare two specs named vit", "compare", vit, twin, *cmp)
    case("compare an invalid spec", "compare", vit, _write(folder, "compare_bad.json", '{"dim": 0}'), *cmp)
    for data in ("nope", "synthetic", "cifar10", "imagefolder", "\x1b[2J", ""):
        case(f"compare --data {data!r}", "compare", vit, "--data", data, *cmp)
    for flag, values in (("--seeds", ["0", "101", str(10**40), "x"]), ("--seed-base", ["-1", str(2**32), "nan"]),
                         ("--epochs", ["0", "-1", "1.5"]), ("--batch-size", ["0", str(2**63)]),
                         ("--lr", ["0", "-1", "nan", "inf", "x"]), ("--warmup-epochs", ["-1"]),
                         ("--threads", ["0", "1025"]), ("--recipe", ["bogus"])):
        for value in values:
            case(f"compare {flag} {value[:20]}", "compare", vit, flag, value, *cmp)
    case("compare --seed-base past 2**32", "compare", vit, "--seed-base", str(2**32 - 1), "--seeds", "2", *cmp)
    case("compare --out-dir is a file", "compare", vit, "--out-dir", vit)
    case("compare --out-dir is a FIFO", "compare", vit, "--out-dir", str(fifo))
    earlier = folder / "compare_earlier"
    _write(earlier, "compare.json", "{}")
    case("compare --out-dir holds an earlier comparison", "compare", vit, "--out-dir", str(earlier))
    return cases


def _fifo(path: Path) -> str:
    if not path.exists():
        os.mkfifo(path)
    return str(path)


TIME_LIMIT = 20.0  # seconds a case may run before it counts as a hang


class _Stopped(BaseException):
    """Raised in a case's code when its time limit passes (a BaseException: `except Exception` and the
    CLI's handlers do not swallow it; where something swallows it, it is raised again every second)."""


@contextlib.contextmanager
def _environment(env: dict[str, str] | None):
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _stream() -> io.TextIOWrapper:
    """A captured stream as strict as a real stdout under PYTHONIOENCODING=utf-8: an undecodable byte of
    a file name (a lone surrogate) cannot be written to it."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    return stream.buffer.getvalue().decode("utf-8")


def _main(entry: str):
    """The command `entry` names: vspec's main, tools/train.py's or tools/eval.py's."""
    from vspec.cli import main
    from vspec.cli.eval import main as eval_main
    from vspec.cli.train import main as train_main

    return {"vspec": main, "train": train_main, "eval": eval_main}[entry]


def run_case(argv: Sequence[str], env: dict[str, str] | None = None, limit: float | None = TIME_LIMIT,
             entry: str = "vspec") -> Outcome:
    """Run the command `entry` names (`_main`; default `vspec.cli.main`) on `argv` in this process with `env`
    set, stdout and stderr captured (stdout a strict
    UTF-8 stream, stderr as Python's own: UTF-8 with backslashreplace). A SystemExit gives its code; any
    other exception out of main counts as a traceback (its text is the stderr). Past `limit` seconds the
    case is stopped (SIGALRM, in the main thread of a POSIX process; elsewhere it runs unlimited) and
    counts as a hang."""
    main = _main(entry)
    out, err = _stream(), io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace",
                                           write_through=True)
    code: int | None
    fired = []

    def stop(signum, frame):
        fired.append(True)
        raise _Stopped

    timed = limit is not None and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGALRM, stop) if timed else None
    try:
        with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if timed:
                    signal.setitimer(signal.ITIMER_REAL, limit, 1.0)
                code = main(list(argv))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: BLE001 - what the user would see as a traceback
                if timed:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if not fired:
                    traceback.print_exc(file=err)
                code = None
            finally:
                if timed:
                    signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        if timed:
            signal.signal(signal.SIGALRM, previous)
    return Outcome(None if fired else code, _text(err), _text(out), hung=bool(fired))


def run_corpus(folder: Path, cases: Sequence[Case] | None = None,
               limit: float | None = TIME_LIMIT) -> list[tuple[Case, Outcome]]:
    limit_ = sys.getrecursionlimit()
    results = []
    for case in cases if cases is not None else corpus(folder):
        cwd = os.getcwd()
        outcome = run_case(case.argv, case.env, limit, case.entry)
        if case.notes:
            lines = outcome.stderr.splitlines(keepends=True)
            outcome = outcome._replace(stderr="".join(line for line in lines if not line.startswith(case.notes)))
        results.append((case, outcome._replace(executed=bool(case.marker and os.path.lexists(case.marker)))))
        os.chdir(cwd)
        sys.setrecursionlimit(limit_)
    return results
