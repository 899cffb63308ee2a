"""Malformed inputs beyond spec files (issue 32): tokenizer folders, GLUE TSV files, model folders and `vspec
compare` arguments. Each `*_cases` function is a class of inputs: it draws `n` variants from a seeded RNG (random
bytes, cuts, JSON of other shapes, special files, symbolic links to /proc/self/mem and /dev/zero, sizes beyond
the guard) and returns them as corpus cases (tests/helpers/cli_corpus.py) for tools/train.py, tools/eval.py or `vspec`.
Every case is bad input: one line on stderr, exit 2, no traceback, no hang.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path

TEXT_SPEC = {"embedder": {"kind": "tokens", "vocab_size": 200, "max_positions": 16, "seq_len": 16, "padding_id": 0},
             "block": {"attention": {"kind": "mhsa", "heads": 2}, "ffn": {"kind": "mlp", "hidden": 32},
                       "post_norm": True},
             "depth": 1, "dim": 16, "num_classes": 2, "class_token": False, "pos_embed": "none",
             "final_norm": False, "head": {"kind": "first_token", "pooler": "tanh"}}
BERT_CONFIG = '{"tokenizer_class": "BertTokenizer"}'
WORDS = ["the", "film", "was", "good", "bad", "and", "very", "plot", "a", "story", "dull", "fine"]


def _write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def special_file(path: Path, kind: str) -> Path:
    """`path` made a special file: a FIFO, a folder, or a symbolic link (to /proc/self/mem, /dev/zero, nowhere)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to({"dangling link": path.parent / "nowhere"}.get(kind, kind))
    return path


SPECIAL = ("FIFO", "folder", "/proc/self/mem", "/dev/zero", "dangling link")


def cola_rows(rng: random.Random, n: int) -> str:
    """CoLA's format (no header: source, label, mark, sentence)."""
    return "".join(f"src\t{i % 2}\t\t{' '.join(rng.choices(WORDS, k=6))}.\n" for i in range(n))


def good_cola(folder: Path) -> Path:
    rng = random.Random(0)
    _write(folder / "train.tsv", cola_rows(rng, 24))
    _write(folder / "dev.tsv", cola_rows(rng, 8))
    return folder


def _train(spec: str, data: Path, out: Path, *extra: str, task: str = "cola") -> list[str]:
    return [spec, "--data", "glue", "--task", task, "--data-dir", str(data), "--out", str(out), "--max-steps", "1",
            "--batch-size", "4", "--device", "cpu", *extra]


# ---------------------------------------------------------------- tokenizer folders
def _tokenizer_json(folder: Path) -> bytes:
    from vspec.train.text.tokenizer import train_wordpiece

    train_wordpiece([" ".join(WORDS)] * 3, folder / "good_tokenizer", vocab_size=120)
    return (folder / "good_tokenizer" / "tokenizer.json").read_bytes()


def tokenizer_variants(folder: Path, rng: random.Random) -> dict[str, Callable[[Path], None]]:
    """Ways to make a tokenizer folder that no run can use, each a function that fills a fresh folder."""
    good = _tokenizer_json(folder)
    table = json.loads(good)

    def file(data: bytes | str, name: str = "tokenizer.json"):
        return lambda d: _write(d / name, data)

    def edited(path: list[str], value):
        tree = json.loads(good)
        node = tree
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return file(json.dumps(tree))

    variants = {
        "random bytes": lambda d: _write(d / "tokenizer.json", rng.randbytes(rng.randint(1, 4096))),
        "truncated": lambda d: _write(d / "tokenizer.json", good[:rng.randint(1, len(good) - 2)]),
        "a byte flipped to 0xff": lambda d: _write(d / "tokenizer.json", _flip(good, rng)),
        "empty": file(b""),
        "JSON of another shape": lambda d: _write(d / "tokenizer.json", json.dumps(rng.choice(
            [[1, 2], "tokenizer", None, 7, {}, {"model": 5}, {"model": {"type": "Nothing"}}]))),
        "nested 100,000 deep": file("[" * 100_000 + "]" * 100_000),
        "vocabulary of the wrong type": edited(["model", "vocab"], rng.choice([[1, 2], "abc", 5, None])),
        "vocabulary of special tokens only": edited(["model", "vocab"], {t: i for i, t in enumerate(
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}),
        "vocabulary of other text": lambda d: _other_text(d),
        "more tokens than the spec's vocab_size": edited(["model", "vocab"], {
            **table["model"]["vocab"], **{f"w{i}": 200 + i for i in range(rng.randint(100, 400))}}),
        "UTF-16": file(good.decode().encode("utf-16")),
        "config only": file(BERT_CONFIG, "tokenizer_config.json"),
        "config of an unknown class": file(json.dumps({"tokenizer_class": rng.choice(
            ["NoSuchTokenizer", "", "\x1b[2J", "x" * 5000])}), "tokenizer_config.json"),
        "binary vocab.txt": lambda d: (_write(d / "tokenizer_config.json", BERT_CONFIG),
                                       _write(d / "vocab.txt", rng.randbytes(rng.randint(1, 4096)) + b"\xff\xfe")),
        "latin-1 vocab.txt": lambda d: (_write(d / "tokenizer_config.json", BERT_CONFIG),
                                        _write(d / "vocab.txt", "[PAD]\n[UNK]\ncaf\u00e9\n".encode("latin-1"))),
        "no files": lambda d: d.mkdir(parents=True, exist_ok=True),
    }
    for kind in SPECIAL:
        variants[f"tokenizer.json is {kind}"] = lambda d, kind=kind: special_file(d / "tokenizer.json", kind)
        variants[f"vocab.txt is {kind}"] = lambda d, kind=kind: (_write(d / "tokenizer_config.json", BERT_CONFIG),
                                                                 special_file(d / "vocab.txt", kind))
    return variants


def _flip(data: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(data))
    return data[:i] + b"\xff" + data[i + 1:]


def _other_text(folder: Path) -> None:
    from vspec.train.text.tokenizer import train_wordpiece

    train_wordpiece(["0 1 2 3 4 5 6 7 8 9"] * 5, folder, vocab_size=60)


def tokenizer_cases(folder: Path, spec: str, n: int, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """`n` tokenizer folders drawn from `tokenizer_variants` (every variant first, then random repeats), each given
    to tools/train.py --tokenizer: (name, entry, argv)."""
    rng = random.Random(seed)
    data = good_cola(folder / "cola")
    variants = tokenizer_variants(folder, rng)
    names = list(variants) + [rng.choice(list(variants)) for _ in range(max(n - len(variants), 0))]
    cases = []
    for i, name in enumerate(names[:n]):
        d = folder / "tokenizers" / str(i)
        variants[name](d)
        cases.append((f"tokenizer: {name} #{i}", "train", _train(spec, data, folder / "runs" / f"tok{i}",
                                                                   "--tokenizer", str(d))))
    return cases


# ---------------------------------------------------------------- GLUE TSV files
TASKS = {"cola": None, "sst2": "sentence\tlabel", "stsb": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t"
                                                          "sentence1\tsentence2\tscore"}


def _row(task: str, rng: random.Random, label: str | None = None, extra: str = "") -> str:
    text = " ".join(rng.choices(WORDS, k=5)) + extra
    if task == "cola":
        return f"src\t{label or rng.choice('01')}\t\t{text}"
    if task == "sst2":
        return f"{text}\t{label or rng.choice('01')}"
    return f"0\tmain\tx\t2012\t0001\tnone\tnone\t{text}\t{text}\t{label or rng.uniform(0, 5):.3f}"


def tsv_variants(rng: random.Random) -> dict[str, Callable[[str], bytes | str]]:
    """Ways to make a GLUE train.tsv no run can read, each a function of the task giving the file's content."""

    def body(task: str, rows: list[str]) -> str:
        return "".join(f"{r}\n" for r in ([TASKS[task]] if TASKS[task] else []) + rows)

    def good(task: str) -> str:
        return body(task, [_row(task, rng) for _ in range(rng.randint(2, 8))])

    bad_label = {"cola": "2", "sst2": "positive", "stsb": rng.choice(["nan", "inf", "-inf", "high", ""])}
    return {
        "empty": lambda task: "",
        "header only": lambda task: body(task, []) if TASKS[task] else "\n\n",
        "random bytes": lambda task: rng.randbytes(rng.randint(1, 2048)),
        "latin-1": lambda task: (good(task) + _row(task, rng, extra=" caf\u00e9") + "\n").encode("latin-1"),
        "UTF-16": lambda task: good(task).encode("utf-16"),
        "NUL bytes": lambda task: good(task).encode().replace(b"\t", b"\x00", 1) + b"\x00" * 10,
        "a field over the limit": lambda task: good(task) + _row(task, rng, extra=" film" * (2**24 // 5 + 1)) + "\n",
        "too few fields": lambda task: good(task) + "x\n",
        "a bad label": lambda task: good(task) + _row(task, rng, bad_label[task]) + "\n",
        "a header of other columns": lambda task: "a\tb\tc\n" + good(task).split("\n", 1)[-1] if TASKS[task] else
        "x\n",
    }


def tsv_cases(folder: Path, spec: str, n: int, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """`n` GLUE folders whose train.tsv is drawn from `tsv_variants` or is a special file, for CoLA, SST-2 and
    STS-B, each given to tools/train.py --data glue: (name, entry, argv)."""
    rng = random.Random(seed)
    variants = tsv_variants(rng)
    kinds = [*variants, *(f"is {k}" for k in SPECIAL), "no dev.tsv"]
    draws = [(k, t) for k in kinds for t in TASKS]
    rng.shuffle(draws)
    cases = []
    for i, (kind, task) in enumerate(draws[:n]):
        d = folder / "tsv" / str(i)
        d.mkdir(parents=True)
        if kind.startswith("is "):
            special_file(d / "train.tsv", kind[3:])
        elif kind == "no dev.tsv":
            _write(d / "train.tsv", "".join(f"{r}\n" for r in ([TASKS[task]] if TASKS[task] else []) +
                                            [_row(task, rng) for _ in range(4)]))
        else:
            _write(d / "train.tsv", variants[kind](task))
        if kind != "no dev.tsv":
            _write(d / "dev.tsv", "".join(f"{r}\n" for r in ([TASKS[task]] if TASKS[task] else []) +
                                          [_row(task, rng) for _ in range(4)]))
        cases.append((f"TSV {task}: {kind} #{i}", "train", _train(spec, d, folder / "runs" / f"tsv{i}", task=task)))
    return cases


# ---------------------------------------------------------------- model folders
def model_folder_cases(folder: Path, n: int, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """`n` model folders of a tiny digits ViT (8 px, 1 channel, 10 classes) with one file damaged, replaced by a
    special file, or holding NaN / inf weights, each read by eval.py, `vspec export` and `vspec analyze`."""
    import torch

    import vspec
    from vspec.spec import MHSA, Block, Model, PatchEmbed

    rng = random.Random(seed)
    spec = Model(embedder=PatchEmbed(patch_size=4), dim=16, depth=1, block=Block(attention=MHSA(heads=2)),
                 img_size=8, in_chans=1, num_classes=10)
    torch.manual_seed(0)
    model = vspec.build(spec)
    good = vspec.save_pretrained(model, folder / "folders" / "good")
    files = {name: (good / name).read_bytes() for name in ("config.json", "model.safetensors")}

    def nonfinite(d: Path, value: float) -> None:
        bad = vspec.build(spec)
        bad.load_state_dict(model.state_dict())
        params = dict(bad.named_parameters())
        with torch.no_grad():
            p = params[rng.choice(sorted(params))]
            p.view(-1)[rng.randrange(p.numel())] = value
        vspec.save_pretrained(bad, d)

    kinds = [*(f"{name} is {kind}" for name in files for kind in SPECIAL), "config.json random bytes",
             "model.safetensors random bytes", "model.safetensors truncated", "NaN weight", "inf weight",
             "-inf weight"]
    cases = []
    for i in range(n):
        kind = kinds[i] if i < len(kinds) else rng.choice(kinds)
        d = folder / "folders" / str(i)
        if kind.endswith("weight"):
            nonfinite(d, float(kind.split()[0].lower()))
        else:
            for name, data in files.items():
                _write(d / name, data)
            name = kind.split()[0]
            (d / name).unlink()
            if kind.endswith("random bytes"):
                _write(d / name, rng.randbytes(rng.randint(1, 2048)))
            elif kind.endswith("truncated"):
                _write(d / name, files[name][:rng.randrange(len(files[name]))])
            else:
                special_file(d / name, kind.split(" is ", 1)[1])
        entry = ["eval", "export", "analyze"][i % 3]
        argv = {"eval": [str(d), "--data", "digits"],
                "export": ["export", str(d), "--out", str(folder / "exported" / f"{i}.pt2")],
                "analyze": ["analyze", str(d), "--what", "cka", "--batch-size", "2",
                            "--out-dir", str(folder / "analysis")]}[entry]
        cases.append((f"model folder: {kind} ({entry}) #{i}", "eval" if entry == "eval" else "vspec", argv))
    return cases


# ---------------------------------------------------------------- vspec compare's arguments
def compare_cases(folder: Path, spec: str, n: int, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """`n` `vspec compare` command lines, each with one bad argument drawn at random (a flag's value out of range,
    a spec too large to train, an output folder that cannot be made), all refused before any training."""
    rng = random.Random(seed)
    base = json.loads(Path(spec).read_text())
    flags = {"--epochs": lambda: rng.choice(["0", "-1", str(10**5 + 1), str(2**rng.randint(17, 80)), "1e3", "x"]),
             "--warmup-epochs": lambda: rng.choice(["-1", str(10**5 + 1), str(2**70)]),
             "--seeds": lambda: rng.choice(["0", "101", str(2**64), "-3"]),
             "--batch-size": lambda: rng.choice(["0", "-1", str(2**63), "3000"]),
             "--lr": lambda: rng.choice(["0", "-1e-3", "nan", "inf", "-inf", "1e999"]),
             "--threads": lambda: rng.choice(["0", "1025", "-2"]),
             "--seed-base": lambda: rng.choice(["-1", str(2**32), "4294967290"]),
             "--data": lambda: rng.choice(["nope", "synthetic", "", "cifar10", "\x1b[2J"])}
    (folder / "compare" / "a_file").parent.mkdir(parents=True, exist_ok=True)
    _write(folder / "compare" / "a_file", "x")
    cases = []
    for i in range(n):
        out = folder / "compare" / f"out{i}"
        argv = ["compare", spec]
        what = rng.choice(["flag", "flag", "too large", "out-dir"])
        if what == "flag":
            flag = rng.choice(list(flags))
            argv += [flag, flags[flag](), "--out-dir", str(out)]
            if flag == "--seed-base" and argv[-3] == "4294967290":
                argv += ["--seeds", "10"]
            name = f"{flag} {argv[3][:20]!r}"
        elif what == "too large":
            dim, depth = 2 ** rng.randint(13, 20), rng.randint(100, 10**4)  # terabytes of weights
            big = _write(folder / "compare" / f"big{i}.json", json.dumps({**base, "dim": dim, "depth": depth}))
            argv += [str(big), "--out-dir", str(out)]  # second: refused before the first one trains
            name = f"a spec of dim {dim}, depth {depth}"
        else:
            kind = rng.choice(["runs is a file", "under /proc", "is a file", "is a FIFO", "under a file"])
            if kind == "runs is a file":
                _write(out / "runs", "")
                argv += ["--out-dir", str(out), "--overwrite"]
            elif kind == "is a FIFO":
                argv += ["--out-dir", str(special_file(out, "FIFO"))]
            else:
                target = {"under /proc": f"/proc/vspec{i}", "is a file": str(folder / "compare" / "a_file"),
                          "under a file": str(folder / "compare" / "a_file" / "x")}[kind]
                argv += ["--out-dir", target]
            name = f"--out-dir {kind}"
        cases.append((f"compare: {name} #{i}", "vspec", argv))
    return cases


def data_cases(folder: Path, n: int = 40, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """Every class above, `n` draws each (model folders: fewer, each is a saved model): (name, entry, argv)."""
    spec = str(_write(folder / "text_spec.json", json.dumps(TEXT_SPEC)))
    image = str(_write(folder / "digits_spec.json", json.dumps(
        {"embedder": {"kind": "patch", "patch_size": 4}, "block": {"attention": {"kind": "mhsa", "heads": 2}},
         "depth": 1, "dim": 16, "img_size": 8, "in_chans": 1, "num_classes": 10})))
    return [*tokenizer_cases(folder, spec, n, seed), *tsv_cases(folder, spec, n, seed),
            *model_folder_cases(folder, max(n // 2, 1), seed), *compare_cases(folder, image, n, seed)]
