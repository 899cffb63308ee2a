"""Malformed published weights and caches (issue 43): each `*_cases` function is a class of inputs, `n` variants
drawn from a seeded RNG, for `vspec build --pretrained`, tools/eval.py --pretrained and `vspec weights` on tiny
presets of this corpus' own (a timm ViT from the Hub, the same from a release URL, a Hugging Face BERT body), each
case with caches of its own (Hugging Face's, torch hub's, vspec's: the environment the case runs in). Classes:
special files and links anywhere in the caches, damaged refs and config.json files, published weights of
another dtype kind, release pickles holding globals that weights-only loading refuses. Every case is bad input:
one line on stderr, exit 2, no traceback, no hang (tests/helpers/cli_corpus.py runs them).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import pathlib
import random
from pathlib import Path

import attrs

from tests.helpers.caches import hub_put, pickle_bytes, safetensors_bytes, torch_put
from tests.helpers.data_corpus import SPECIAL, special_file

REPO, TEXT_REPO = "tiny/vit", "tiny/bert"
URL = "https://github.com/tiny/vit/releases/download/v1/tiny_vit.pth"
BERT = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 24,
        "vocab_size": 50, "max_position_embeddings": 32, "type_vocab_size": 2}


class ReleaseNamespace(argparse.Namespace):
    """A class of its own in a release pickle: a global weights-only loading refuses, though a Namespace's is read."""


def _presets(folder: Path) -> tuple[Path, dict[str, dict], dict[str, int]]:
    """The corpus' presets (tiny_hub, tiny_url, tiny_text) in `folder`, their published state dicts (timm's and
    transformers' names) and parameter counts."""
    import timm
    import torch
    import transformers

    import vspec
    from vspec.convert import spec_from_hf
    from vspec.factory import presets
    from vspec.spec import load_spec

    torch.manual_seed(0)
    deit = load_spec(presets()["deit_tiny"])
    vit = attrs.evolve(deit, dim=16, depth=1, img_size=(16, 16), num_classes=3,
                       embedder=attrs.evolve(deit.embedder, patch_size=8),
                       block=attrs.evolve(deit.block, attention=attrs.evolve(deit.block.attention, heads=2)))
    ref = timm.create_model("deit_tiny_patch16_224", img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2,
                            num_classes=3)
    bert = transformers.BertModel(transformers.BertConfig(**BERT))
    text = spec_from_hf({"model_type": "bert", **BERT}, classifier=False)
    params = {"vit": sum(p.numel() for p in vspec.build(vit).parameters()),
              "text": sum(p.numel() for p in vspec.build(text).parameters())}
    folder.mkdir(parents=True, exist_ok=True)
    head = "from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Hub, Preprocess, PublishedWeights, Url, from_json\n"
    pre = "preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9)"
    (folder / "tiny_hub.py").write_text(
        f"{head}SPEC = from_json({vspec.to_json(vit)!r})\nWEIGHTS = {{'hub': PublishedWeights(source=Hub({REPO!r}, "
        f"'model.safetensors'), converter='timm', params={params['vit']}, licence='MIT', classes=3, {pre})}}\n")
    (folder / "tiny_url.py").write_text(
        f"{head}SPEC = from_json({vspec.to_json(vit)!r})\nWEIGHTS = {{'release': PublishedWeights(source=Url({URL!r}), "
        f"converter='timm', params={params['vit']}, licence='MIT', classes=3, unwrap=('model',), {pre})}}\n")
    (folder / "tiny_text.py").write_text(
        f"{head}SPEC = from_json({vspec.to_json(text)!r})\nWEIGHTS = {{'hub': PublishedWeights("
        f"source=Hub({TEXT_REPO!r}, "
        f"'pytorch_model.bin', config='config.json'), converter='hf', params={params['text']}, licence='MIT', "
        f"classes=0, config={{'model_type': 'bert'}}, tokenizer={TEXT_REPO!r})}}\n")
    states = {"vit": dict(ref.state_dict()), "text": {f"bert.{k}": v for k, v in bert.state_dict().items()}}
    return folder, states, params


class _Setup:
    """Per case: caches of its own, filled with the valid published files, and the environment naming them."""

    def __init__(self, root: Path, presets: Path, states: dict[str, dict]):
        self.root, self.presets, self.states = root, presets, states

    def case(self, i: int) -> tuple[dict[str, Path], dict[str, str]]:
        roots = {k: self.root / f"case{i}" / k for k in ("hf", "torch", "vspec")}
        hub_put(roots["hf"], REPO, "model.safetensors", safetensors_bytes(self.states["vit"]))
        torch_put(roots["torch"], Path(URL).name, pickle_bytes({"model": self.states["vit"]}))
        hub_put(roots["hf"], TEXT_REPO, "pytorch_model.bin", pickle_bytes(self.states["text"]))
        hub_put(roots["hf"], TEXT_REPO, "config.json", json.dumps(BERT).encode())
        env = {"HF_HUB_CACHE": str(roots["hf"]), "TORCH_HOME": str(roots["torch"]),
               "VSPEC_CACHE": str(roots["vspec"]), "VSPEC_SPECS": str(self.presets), "HF_HUB_OFFLINE": "1"}
        return roots, env


def _command(rng: random.Random, preset: str) -> tuple[str, list[str]]:
    """(entry, argv) reading `preset`'s published weights: vspec build --pretrained or tools/eval.py --pretrained."""
    if rng.random() < 0.5:
        return "vspec", ["build", preset, "--pretrained"]
    return "eval", [preset, "--pretrained", "--data", "synthetic", "--synthetic-size", "4", "--batch-size", "4"]


def _snapshot(roots: dict[str, Path], repo: str, file: str) -> Path:
    return next((roots["hf"] / f"models--{repo.replace('/', '--')}" / "snapshots").glob(f"*/{file}"))


def cache_cases(setup: _Setup, n: int, rng: random.Random, start: int) -> list[tuple]:
    """A special file or link anywhere in the caches: the Hub file's blob or snapshot link, the revision's ref, the
    file a person drops, a release file in torch hub's cache, the converted folder in vspec's."""
    places = ("blob", "snapshot", "ref", "drop path", "release file", "converted folder")
    cases = []
    for i in range(start, start + n):
        roots, env = setup.case(i)
        where = rng.choice(places)  # an empty folder where the converted one goes is made anew: no error
        kind = rng.choice([k for k in SPECIAL if not (where == "converted folder" and k == "folder")])
        preset = "tiny_url" if where == "release file" else "tiny_hub"
        snapshot = _snapshot(roots, REPO, "model.safetensors")
        target = {"blob": snapshot.resolve(), "snapshot": snapshot, "ref": snapshot.parents[2] / "refs" / "main",
                  "drop path": roots["vspec"] / "downloads" / REPO / "model.safetensors",
                  "release file": roots["torch"] / "hub" / "checkpoints" / Path(URL).name,
                  "converted folder": roots["vspec"] / "pretrained" / "tiny_hub.hub"}[where]
        target.unlink(missing_ok=True)  # a file or link the case's caches hold
        special_file(target, kind)
        entry, argv = _command(rng, preset)
        if where == "ref" and rng.random() < 0.3:
            entry, argv = "vspec", ["weights", preset]
        cases.append((f"weights cache: {where} is {kind} ({entry}) #{i}", entry, argv, env))
    return cases


def encoding_cases(setup: _Setup, n: int, rng: random.Random, start: int) -> list[tuple]:
    """The cache's text files damaged: the ref holds no commit hash (random bytes, not UTF-8, empty, too long, a
    branch name), the Hugging Face config.json is no UTF-8 JSON table (random bytes, Latin-1, a list, cut,
    nested too deep, a field of a wrong type)."""
    refs = {"random bytes": lambda: rng.randbytes(rng.randint(1, 64)), "not UTF-8": lambda: b"\xff\xfe\xfd" * 14,
            "empty": lambda: b"", "too long": lambda: b"0" * 5000, "a branch name": lambda: b"main\n"}
    configs = {"random bytes": lambda: rng.randbytes(rng.randint(1, 256)),
               "Latin-1": lambda: json.dumps({**BERT, "x": "caf\u00e9"}, ensure_ascii=False).encode("latin-1"),
               "a JSON list": lambda: b"[1, 2]", "cut": lambda: json.dumps(BERT).encode()[:rng.randint(1, 40)],
               "nested too deep": lambda: b"[" * 100_000 + b"]" * 100_000,
               "a string width": lambda: json.dumps({**BERT, "hidden_size": "16"}).encode()}
    cases = []
    for i in range(start, start + n):
        roots, env = setup.case(i)
        if rng.random() < 0.4:
            what = rng.choice(list(refs))
            (_snapshot(roots, REPO, "model.safetensors").parents[2] / "refs" / "main").write_bytes(refs[what]())
            entry, argv = ("vspec", ["weights", "tiny_hub"]) if rng.random() < 0.3 else _command(rng, "tiny_hub")
            cases.append((f"weights encoding: ref {what} ({entry}) #{i}", entry, argv, env))
        else:
            what = rng.choice(list(configs))
            hub_put(roots["hf"], TEXT_REPO, "config.json", configs[what]())
            cases.append((f"weights encoding: config.json {what} #{i}", "vspec", ["build", "tiny_text", "--pretrained"],
                          env))
    return cases


def dtype_cases(setup: _Setup, n: int, rng: random.Random, start: int) -> list[tuple]:
    """Published floating-point weights stored in another kind of dtype (integers, booleans, complex): every
    tensor, or one drawn at random."""
    import torch

    dtypes = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64)
    cases = []
    for i in range(start, start + n):
        roots, env = setup.case(i)
        dtype, every = rng.choice(dtypes), rng.random() < 0.5
        state = dict(setup.states["vit"])
        for key in (list(state) if every else [rng.choice(sorted(state))]):
            state[key] = (state[key] * 100).to(dtype)
        hub_put(roots["hf"], REPO, "model.safetensors", safetensors_bytes(state))
        entry, argv = _command(rng, "tiny_hub")
        cases.append((f"weights dtype: {'every tensor' if every else 'one tensor'} {dtype} ({entry}) #{i}", entry,
                      argv, env))
    return cases


def global_cases(setup: _Setup, n: int, rng: random.Random, start: int, marker: Path) -> list[tuple]:
    """A release pickle whose `args` (or another entry) holds a global weights-only loading refuses: code that would
    run (os.mkdir of `marker`: it must never appear), a class of its own, functions, modules, other types."""
    import torch

    values = {"os.mkdir": lambda: _Call(os.mkdir, (str(marker),)), "a Namespace subclass": lambda: ReleaseNamespace(),
              "functools.partial": lambda: functools.partial(print, 1),
              "datetime": lambda: datetime.datetime(2021, 1, 1), "a path": lambda: pathlib.PurePosixPath("/x"),
              "an nn.Module": lambda: torch.nn.Linear(2, 2), "a function": lambda: print}
    cases = []
    for i in range(start, start + n):
        roots, env = setup.case(i)
        what, key = rng.choice(list(values)), rng.choice(["args", "optimizer", "extra"])
        torch_put(roots["torch"], Path(URL).name, pickle_bytes({"model": setup.states["vit"], key: values[what]()}))
        entry, argv = _command(rng, "tiny_url")
        cases.append((f"weights globals: {key} holds {what} ({entry}) #{i}", entry, argv, env))
    return cases


class _Call:
    """Pickles as the call f(*args): what a malicious file would run on loading without weights_only."""

    def __init__(self, f, args: tuple):
        self.f, self.args = f, args

    def __reduce__(self):
        return self.f, self.args


def weights_cases(folder: Path, n: int = 24, seed: int = 0) -> list[tuple[str, str, list[str], dict[str, str]]]:
    """Every class above, `n` draws each: (name, entry, argv, env). The marker file `folder/ran` must not exist
    after the cases ran (a refused global never runs)."""
    rng = random.Random(seed)
    presets, states, _ = _presets(folder / "presets")
    setup = _Setup(folder / "caches", presets, states)
    out: list[tuple] = []
    for make in (cache_cases, encoding_cases, dtype_cases):
        out += make(setup, n, rng, len(out))
    return out + global_cases(setup, n, rng, len(out), folder / "ran")
