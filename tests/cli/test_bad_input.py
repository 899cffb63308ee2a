"""Bad input to `vspec` (issue 11, items 5, 7-10; issue 19): one line on stderr, exit 2, never a traceback,
a hang or a terminal escape; and the size guard's estimate against the models torch really builds."""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest
import torch

import vspec
import vspec.weights.checkpoint
from tests.helpers import fuzz_cli as fuzz
from tests.helpers.cli_corpus import TIME_LIMIT, Case, Outcome, bases, corpus, run_case, run_corpus
from vspec import spec as specs
from vspec.cli import output_file, output_folder
from vspec.cli.common import MAX_LINE, one_line, printable
from vspec.compiler import weights
from vspec.spec import MemoryBudgetError, SpecError, budget

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(ROOT.glob("specs/*.py"))


def _env(**changes: str) -> dict[str, str]:
    """The environment of a `vspec` process that runs this checkout's package (not an installed copy)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **changes}


ISSUE_43 = ("weights cache", "weights encoding", "weights dtype", "weights globals", "search size", "search values")
ISSUE_54 = ("shard names", "manifest", "shard files", "shard pattern",  # tests/helpers/shard_corpus.py
            "label image", "label map", "labels.json", "label flags", "label scores",  # tests/helpers/label_corpus.py
            "preset tag", "preprocessing")  # tests/helpers/inputs_corpus.py
ISSUE_61 = ("hf schema", "hf labels", "hf images", "hf files", "hf saved", "hf splits", "hf pattern", "hf script",
            "hf hub",  # tests/helpers/hf_corpus.py
            "hf text")  # tests/helpers/hf_text_corpus.py


def test_every_malformed_input_is_one_line_exit_2(tmp_path, capsys):
    """The whole corpus (tests/helpers/cli_corpus.py: paths, encodings, nesting, types, kinds, huge sizes,
    .py specs that raise or exit, --out targets, flags; tests/helpers/data_corpus.py: tokenizer folders, GLUE files,
    model folders, compare's arguments; tests/helpers/weights_corpus.py: published weights and their caches;
    tests/helpers/search_corpus.py: budget searches; tests/helpers/shard_corpus.py: WebDataset packs;
    tests/helpers/label_corpus.py: image files, label maps, labels.json, normalisation flags;
    tests/helpers/inputs_corpus.py: preset tags, preprocessing flags; tests/helpers/hf_corpus.py and
    hf_text_corpus.py: Hugging Face datasets) through vspec.cli.main, tools/train.py and tools/eval.py. Prints the
    figures, per class for issues 43's, 54's and 61's; no case runs a command (executions: the marker files a
    command injected through the input, or a dataset's loading script, would create)."""
    results = run_corpus(tmp_path)
    entries = {e: sum(case.entry == e for case, _ in results) for e in ("vspec", "train", "eval")}
    assert len(results) >= 700 and entries["train"] >= 80 and entries["eval"] >= 5, entries
    assert {name.split(":")[0] for name in (case.name for case, _ in results)} >= {
        "tokenizer", "TSV cola", "TSV sst2", "TSV stsb", "model folder", "compare", *ISSUE_43, *ISSUE_54, *ISSUE_61}
    bad = [(case.name, outcome.code, outcome.hung, outcome.stderr[:300]) for case, outcome in results
           if not outcome.clean]
    with capsys.disabled():
        print(f"\nfuzz_cli corpus: {fuzz.report(results, TIME_LIMIT)[0]}")
        for group in (*ISSUE_43, *ISSUE_54, *ISSUE_61):  # issues 43, 54, 61 (weights_, ..., inputs_, hf_corpus)
            drawn = [(case, o) for case, o in results if case.name.startswith(f"{group}:")]
            print(f"  {group}: {fuzz.report(drawn, TIME_LIMIT)[0]}")
    assert bad == []
    assert not (tmp_path / "weights" / "ran").exists()  # a release pickle's os.mkdir never ran
    markers = [case.marker for case, _ in results if case.marker]
    assert len(markers) >= 30 and not any(os.path.lexists(m) for m in markers)  # no manifest name ran a command
    assert all(len(o.stderr) <= MAX_LINE + 100 for _, o in results)  # "vspec: error: " and the cut notice


def test_the_real_entry_point_on_corpus_samples(tmp_path):
    """A few corpus cases through the installed `vspec` command, in its own process."""
    exe = Path(sys.executable).with_name("vspec")
    cases = {c.name: c for c in corpus(tmp_path)}
    for name in (".py exit3.py", ".py keyboard.py", "random bytes .json", "JSON [ x100000", "--out a folder",
                 "size guard profile --meta: dim 10**9", "1 MB JSON value", "v1 DAFF depth 2**31-1, gap head",
                 "name \\xff: missing .json", "unknown key ESC [2J at block.", "--out a FIFO",
                 "analyze --seed 18446744073709551616", "analyze MPLBACKEND='bogus'"):
        env = _env(PYTHONIOENCODING="utf-8", **(cases[name].env or {}))  # a strict UTF-8 stdout
        done = subprocess.run([str(exe), *cases[name].argv], capture_output=True, timeout=120, env=env)
        lines = done.stderr.decode().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("vspec"), (name, done.stderr)
        assert lines[0].isascii() and lines[0].isprintable(), (name, lines)


@pytest.mark.parametrize("source,needle", [
    ("import sys\nsys.exit(3)\n", "line 2: called sys.exit(3) instead of defining SPEC"),
    ("raise KeyboardInterrupt\n", "line 1: KeyboardInterrupt"),
    ("raise SystemExit\n", "line 1: called sys.exit() instead of defining SPEC"),
    ("class E(Exception):\n    def __str__(self):\n        raise RuntimeError\n\nraise E()\n", "line 5: E"),
    ("SPEC = (\n", "SyntaxError"),
])
def test_a_py_spec_that_exits_or_interrupts_names_the_file(tmp_path, source, needle):
    path = tmp_path / "s.py"
    path.write_text(source)
    with pytest.raises(SpecError) as e:
        vspec.load_spec(path)
    assert str(e.value).startswith(f"{path}, line ") and needle in str(e.value)


def test_encoding_and_nesting_errors_name_the_file(tmp_path):
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"pos_embed": "caf\u00e9"}'.encode("latin-1"))
    deep = tmp_path / "deep.toml"
    deep.write_text("dim = " + "[" * 5000 + "]" * 5000)
    digits = tmp_path / "digits.json"
    digits.write_text('{"dim": ' + "9" * 5000 + "}")
    for path, needle in ((latin, "not UTF-8 text (byte 18: invalid continuation byte)"),
                         (deep, "invalid TOML: nested too deeply"),
                         (digits, "invalid JSON: Exceeds the limit (4300 digits)")):
        with pytest.raises(SpecError, match=re.escape(f"{path}: {needle}")):
            vspec.load_spec(path)


def test_one_line_folds_cuts_and_names_empty_messages():
    assert one_line(RuntimeError()) == "RuntimeError"
    assert one_line(IndexError("")) == "IndexError"
    assert one_line(ValueError("a\nb\n\nc")) == "a b c"
    long = one_line(ValueError("x" * 1_000_000))
    assert long.startswith("x" * MAX_LINE) and long.endswith("... [999,500 more characters]")


def _bytes(model: torch.nn.Module) -> tuple[int, int]:
    """(parameter bytes, buffer bytes) of a model (built on meta: sizes without memory)."""
    return (sum(p.numel() * p.element_size() for p in model.parameters()),
            sum(b.numel() * b.element_size() for b in model.buffers()))


def _specs():
    kinds = bases()
    kinds |= {f"sot {b}": vspec.override(kinds["sot"], {"embedder.block": b}) for b in ("resnet", "inception")}
    kinds["gcp head"] = vspec.override(kinds["sot"], {"head.pool.kind": "gcp", "head.norm.kind": "repr_layernorm",
                                                      "head.fusion": "concat"})
    kinds["dense head"] = vspec.override(kinds["vit"], {"head.dense": {}})
    refined = vspec.load_spec(Path(__file__).parents[2] / "specs" / "refined_vit_s.py")  # refiner options
    paper = [specs.RefinerAttention(heads=12, refine=specs.Refine(expansion=2, constraint="row_col")),
             specs.RefinerAttention(heads=12, reuse=True, refine=specs.Refine(reduction=False, constraint="spatial"))]
    blocks = (*refined.block[:2], *(attrs.evolve(refined.block[0], attention=a) for a in paper))
    kinds["refiner"] = attrs.evolve(refined, stages=(specs.Stage(depth=4, dim=48, block=blocks),))
    return [(p.name, vspec.load_spec(p)) for p in PRESETS] + list(kinds.items())


@pytest.mark.parametrize("name,spec", _specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_guard_counts_the_real_weights(name, spec):
    """Every preset and a tiny model of every kind: the size guard's weights are the bytes of the parameters and
    buffers torch allocates, for the model and for the profiler's tied model, and its largest tensor the largest."""
    counted = weights(spec)
    for tied, figure in ((False, counted.params), (True, counted.distinct)):
        model = vspec.build(spec, device="meta", tie_repeats=tied)
        assert sum(_bytes(model)) == figure, (tied, _bytes(model), figure)
    assert counted.largest == max(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


@pytest.mark.parametrize("name", ["vit", "swin", "dhvt", "sot"])
def test_the_activation_estimate_covers_every_tensor_of_a_forward_pass(name):
    """The working set is at least the input plus the largest output of any module, at batch 3, and
    within a small factor of it."""
    spec = bases()[name]
    model = vspec.build(spec).eval()
    largest = []
    hooks = [m.register_forward_hook(lambda m, i, o: largest.append(o.numel() * o.element_size())
                                      if isinstance(o, torch.Tensor) else None) for m in model.modules()]
    x = vspec.example_input(spec, 3)
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    seen = x.numel() * 4 + max(largest)
    assert seen <= budget.activations(spec, batch=3)[0] <= 8 * seen


def test_build_refuses_a_model_that_does_not_fit(monkeypatch):
    """vspec.build compares the estimate with the free memory before allocating: a MemoryError and a
    SpecError giving both figures; check_memory=False builds anyway."""
    spec = bases()["vit"]
    need = weights(spec).params + budget.HOST_PER_BLOCK  # the weights and the block's objects: one byte short
    monkeypatch.setattr(budget, "available", lambda: need - 1)
    with pytest.raises(MemoryBudgetError) as e:
        vspec.build(spec)
    assert isinstance(e.value, MemoryError) and isinstance(e.value, SpecError)
    assert re.fullmatch(r"building it on cpu needs about [\d.]+ KiB \([\d.]+ KiB of weights, [\d.]+ KiB for the "
                        r"module objects of 1 blocks\) but only [\d.]+ KiB of memory is available", str(e.value))
    assert _bytes(vspec.build(spec, check_memory=False))[0] > 0
    assert vspec.build(spec, device="meta") is not None  # meta: no weights to fit


def test_huge_specs_are_refused_in_one_line():
    """Every size within the spec's bound (2**31 - 1) and still a weight beyond what one torch tensor can
    hold, even on the meta device: torch's "Storage size calculation overflowed" becomes the guard's line."""
    spec = vspec.override(bases()["vit"], {"dim": 2**31 - 1, "block.attention.heads": 1, "block.ffn.ratio": 1.0})
    with pytest.raises(MemoryBudgetError, match="^too large for torch, even on the meta device: a tensor beyond"):
        vspec.build(spec, device="meta")


def test_cli_size_guard_and_its_override(capsys, monkeypatch, tmp_path):
    path = tmp_path / "vit.json"
    path.write_text(vspec.to_json(bases()["vit"]))
    monkeypatch.setattr(budget, "available", lambda: 2**14)  # tiny model: 26 KiB
    code = vspec.cli.main(["build", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and re.fullmatch(r"vspec: error: building it and running a forward pass needs about .+ "
                                      r"but only 16 KiB of memory is available\n", err)
    assert vspec.cli.main(["build", str(path), "--no-memory-check"]) == 0
    assert "parameters" in capsys.readouterr().out
    assert vspec.cli.main(["profile", str(path), "--json"]) == 0  # does not fit: counted on the meta device
    assert '"counter": "torch.utils.flop_counter.FlopCounterMode (meta device)"' in capsys.readouterr().out
    for command in ("build", "profile"):
        assert "--no-memory-check" in vspec.cli.parser()._subparsers._group_actions[0].choices[command].format_help()


def test_out_creates_missing_folders_and_refuses_a_folder(capsys, tmp_path, monkeypatch):
    path = tmp_path / "vit.json"
    path.write_text(vspec.to_json(bases()["vit"]))
    out = tmp_path / "new" / "deeper" / "m.pt"
    assert vspec.cli.main(["build", str(path), "--out", str(out)]) == 0
    assert vspec.load(out).spec == bases()["vit"]
    capsys.readouterr()
    assert vspec.cli.main(["build", str(path), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"vspec: error: --out '{tmp_path}': is a folder; give a file name, e.g. " \
                                      f"{tmp_path / 'model.pt'}\n"
    out = tmp_path / "full.pt"  # a disk that fills up while the checkpoint is written

    def disk_full(model, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vspec.weights.checkpoint, "save", disk_full)
    outcome = run_case(["build", str(path), "--out", str(out)])
    assert outcome.clean and f"--out {out}: could not write the checkpoint ([Errno 28] No space left on device)" \
        in outcome.stderr


# ---------------------------------------------------------------- issue 19
def test_the_runner_stops_a_hang_and_counts_it(tmp_path):
    """A case still running at the limit (here a .py spec that loops, whose loader turns any exception into
    a SpecError) is stopped and counted as a hang; `python -m tests.helpers.fuzz_cli` prints the counts in one line."""
    loop = tmp_path / "loop.py"
    loop.write_text("while True:\n    pass\n")
    t0 = time.perf_counter()
    outcome = run_case(["show", str(loop)], limit=0.5)
    assert outcome.hung and not outcome.clean and not outcome.traceback and time.perf_counter() - t0 < 10
    results = [(Case("ok", []), Outcome(2, "vspec: error: x\n")), (Case("tb", []), Outcome(None, "Traceback ...\n")),
               (Case("hang", []), Outcome(None, "", hung=True)),
               (Case("escape", []), Outcome(2, "vspec: error: \x1b[2J\n")),
               (Case("ran", [], marker="/m"), Outcome(2, "vspec: error: y\n", executed=True))]
    lines = fuzz.report(results, 0.5)
    assert lines[0] == "tried 5 / clean one-line errors 1 / tracebacks 1 / hangs 1 / executions 1"
    assert lines[1:] == ["FAIL 'tb': exit None, 1 lines: 'Traceback ...'",
                         "FAIL 'hang': hung past 0.5 s, 1 lines: '(nothing on stderr)'",
                         "FAIL 'escape': exit 2, 1 lines: 'vspec: error: \\x1b[2J'",
                         "FAIL 'ran': exit 2, ran a command (created /m), 1 lines: 'vspec: error: y'"]


def test_printable_escapes_what_a_terminal_acts_on():
    assert printable("deit_tiny.py caf\u00e9 \u4e2d") == "deit_tiny.py caf\u00e9 \u4e2d"
    assert printable("\udcff\udce9.json") == "\\xff\\xe9.json"  # the bytes of a non-UTF-8 file name
    assert printable("a\x1b[2Jb\x07\n\r\t\x00\x7f\x9b\u202e\ud800") == \
        "a\\x1b[2Jb\\x07\\n\\r\\t\\x00\\x7f\\x9b\\u202e\\ud800"
    assert one_line(ValueError("key \x1b]0;title\x07")) == "key \\x1b]0;title\\x07"


@pytest.mark.parametrize("where", ["", "block.", "block.attention.", "head."])
def test_unknown_keys_are_escaped_like_values(tmp_path, where):
    """A key holding a terminal escape is shown as its repr (as values are, vspec.spec.errors.show); a plain
    key as written."""
    tree = vspec.to_dict(bases()["vit"])
    node = tree
    for k in where.split(".")[:-1]:
        node = node[k]
    node["\x1b[2J"] = 1
    with pytest.raises(SpecError) as e:
        vspec.from_dict(tree)
    assert str(e.value).startswith(f"{where}'\\x1b[2J': unknown key for ") and "\x1b" not in str(e.value)
    with pytest.raises(SpecError) as e:
        vspec.override(bases()["vit"], {f"{where}\x9bx": 1})
    assert str(e.value).startswith(f"{where}'\\x9bx': unknown key; allowed here: ")
    with pytest.raises(SpecError, match=r"^block\.colour: unknown key"):
        vspec.override(bases()["vit"], {"block.colour": 1})


def test_non_utf8_names_print_on_a_strict_utf8_stdout(tmp_path):
    """`PYTHONIOENCODING=utf-8 vspec show $'\xff.json'` and every command that prints its PATH: the byte is
    shown as \xff, on stdout and on stderr."""
    exe = Path(sys.executable).with_name("vspec")
    folder = os.fsencode(tmp_path)
    name = folder + b"/\xff.json"
    with open(name, "w") as f:
        f.write(vspec.to_json(bases()["vit"]))
    env = _env(PYTHONIOENCODING="utf-8")
    shown = os.fsdecode(folder) + "/\\xff.json"
    for argv, stream, text in ((["show", name], "stdout", f"Model ({shown})"),
                               (["build", name, "--out", folder + b"/\xfe.pt"], "stdout", "/\\xfe.pt"),
                               (["profile", name], "stdout", f"{shown} at 16x16"),
                               (["show", folder + b"/\xff\xfe.json"], "stderr", "/\\xff\\xfe.json: no such file")):
        done = subprocess.run([exe, *argv], capture_output=True, timeout=120, env=env)
        out = getattr(done, stream).decode("utf-8")
        assert done.returncode == (2 if stream == "stderr" else 0) and text in out, (argv, done.stderr)
        assert b"Traceback" not in done.stderr
    # an encoding without the character: escaped, not a UnicodeEncodeError
    done = subprocess.run([exe, "show", name], capture_output=True, timeout=120,
                          env={**env, "PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and f"Model ({shown})" in done.stdout.decode("ascii")


@pytest.mark.parametrize("make,kind", [
    (lambda p: os.mkfifo(p), "is a named pipe (FIFO), not a regular file"),
    (lambda p: p.symlink_to(p.parent / "gone" / "x.pt"), "a symbolic link to "),
    (lambda p: p.symlink_to(p), "Too many levels of symbolic links"),
])
def test_out_refuses_what_is_not_a_regular_file_before_building(tmp_path, make, kind):
    """A named pipe would block the write until a reader comes (the old code hung); a dangling link would
    write somewhere else; a device is refused too (/dev/null, /dev/full)."""
    path = tmp_path / "vit.json"
    path.write_text(vspec.to_json(bases()["vit"]))
    out = tmp_path / "m.pt"
    make(out)
    outcome = run_case(["build", str(path), "--out", str(out)], limit=30)
    assert outcome.clean and f"vspec: error: --out {out}: {kind}" in outcome.stderr and outcome.stdout == ""
    for device in ("/dev/null", "/dev/full"):
        with pytest.raises(SpecError, match=f"^--out {device}: is a character device, not a regular file"):
            output_file("--out", device)
    assert output_file("--out", path) == path  # a regular file is overwritten
    assert output_file("--out", tmp_path / "new" / "m.pt") == tmp_path / "new" / "m.pt"
    with pytest.raises(SpecError, match=f"^--out-dir {re.escape(str(path))}: is a regular file, not a folder"):
        output_folder("--out-dir", path)
    with pytest.raises(SpecError, match="is a regular file, not a folder$"):
        output_folder("--out-dir", path / "sub")


def _tiny_checkpoint(tmp_path, fill=None) -> Path:
    torch.manual_seed(0)
    model = vspec.build(bases()["vit"])
    if fill is not None:
        with torch.no_grad():
            if fill == "huge":
                for p in model.parameters():
                    p.fill_(1e30)  # finite weights, features beyond float32
            else:
                model.stages[0].blocks[0].ffn.fc2.bias[3] = fill
    return vspec.save(model, tmp_path / f"{fill}.pt")


@pytest.mark.parametrize("what", ["msf", "cka", "maps", "all"])
def test_analyze_refuses_non_finite_weights_and_results(tmp_path, capsys, what):
    """NaN / inf weights: one line naming the file and a weight (the old code: a LinAlgError traceback for
    msf, NaN written into the JSON for cka, nulls for maps, exit 0). Finite weights whose features overflow:
    one line naming the analysis; no JSON is written, and every JSON written is strict."""
    for fill in (float("nan"), float("-inf")):
        ckpt = _tiny_checkpoint(tmp_path, fill)
        assert vspec.cli.main(["analyze", str(ckpt), "--what", what, "--batch-size", "2"]) == 2
        assert capsys.readouterr().err == f"vspec: error: {ckpt}: weight stages.0.blocks.0.ffn.fc2.bias holds NaN or " \
                                          "infinite values: no model computes with it\n"
    ckpt = _tiny_checkpoint(tmp_path, "huge")
    assert vspec.cli.main(["analyze", str(ckpt), "--what", what, "--batch-size", "2"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"vspec analyze: error: (msf|cka|maps): .+ is NaN or infinite: the model's activations "
                        r"overflow\n", err), err
    assert not list(tmp_path.glob("*.json"))
    ckpt = _tiny_checkpoint(tmp_path)
    assert vspec.cli.main(["analyze", str(ckpt), "--what", what, "--batch-size", "2"]) == 0
    for out in tmp_path.glob("*.json"):
        json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{out} holds {c}"))


@pytest.mark.parametrize("flag,value,message", [
    ("--seed", str(2**64), "argument --seed: must be in [0, 2**32 - 1], got an int of 65 bits"),
    ("--seed", str(2**32), "argument --seed: must be in [0, 2**32 - 1], got 4294967296"),
    ("--seed", "-1", "argument --seed: must be in [0, 2**32 - 1], got -1"),
    ("--batches", str(10**9), "argument --batches: must be in [1, 1000], got 1000000000"),
    ("--batches", "0", "argument --batches: must be in [1, 1000], got 0"),
    ("--batch-size", str(10**9), "analyzing it needs about"),
])
def test_analyze_flags_are_range_checked(tmp_path, capsys, flag, value, message):
    """Like tools/train.py's flags: the old code raised ValueError for a seed beyond int64 and allocated
    --batches 10**9 batches of images up front until the memory ran out."""
    path = tmp_path / "vit.json"
    path.write_text(vspec.to_json(bases()["vit"]))
    outcome = run_case(["analyze", str(path), "--what", "cka", flag, value], limit=60)
    assert outcome.clean and message in outcome.stderr, outcome


def test_analyze_ignores_a_bogus_mplbackend(tmp_path):
    """The plots are files (Agg): MPLBACKEND=bogus, which fails matplotlib's import, is not read. In a
    process of its own, since matplotlib reads it when first imported."""
    path = tmp_path / "vit.json"
    path.write_text(vspec.to_json(bases()["vit"]))
    exe = Path(sys.executable).with_name("vspec")
    done = subprocess.run([str(exe), "analyze", str(path), "--what", "cka", "--batch-size", "2"], capture_output=True,
                          text=True, timeout=300, env=_env(MPLBACKEND="bogus"), cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (tmp_path / "runs/analyze/vit.cka.png").read_bytes()[:4] == b"\x89PNG"
    assert done.stdout.splitlines() == ["runs/analyze/vit.cka.png", "runs/analyze/vit.cka.json"]


def test_analyze_output_files_that_are_fifos_are_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "vit.json"
    path.write_text(vspec.to_json(bases()["vit"]))
    (tmp_path / "runs/analyze").mkdir(parents=True)
    os.mkfifo(tmp_path / "runs/analyze/vit.cka.json")
    outcome = run_case(["analyze", str(path), "--what", "cka", "--batch-size", "2"], limit=30)
    assert outcome.clean and outcome.stderr == "vspec: error: output runs/analyze/vit.cka.json: is a named pipe " \
                                               "(FIFO), not a regular file; give a new path or a file to overwrite\n"
    assert not (tmp_path / "runs/analyze/vit.cka.png").exists()


def test_a_reader_that_goes_away_gets_no_error_line(tmp_path):
    """`vspec show spec | head -1`: the pipe closes before vspec writes; it ends quietly (exit 141, as a
    command SIGPIPE ended), with no `Broken pipe` line on stderr."""
    exe = Path(sys.executable).with_name("vspec")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        done = subprocess.run([str(exe), "show", str(ROOT / "specs/swin_tiny.py")], stdout=write,
                              stderr=subprocess.PIPE, timeout=120, env=_env())
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == b"", done.stderr


# ---------------------------------------------------------------- issue 43
@pytest.mark.parametrize("check, flag, path, needle", [
    (output_file, "--out", "/proc/self/x.pt2", "/proc/self is on a proc file system (the kernel's)"),
    (output_file, "--out", "/proc/self/status", "/proc/self/status is on a proc file system (the kernel's)"),
    (output_file, "--out", "/proc/vspec/deeper/m.pt", "/proc is on a proc file system (the kernel's)"),
    (output_file, "--out", "/sys/kernel/x.json", "/sys/kernel is on a sysfs file system (the kernel's)"),
    (output_folder, "--out-dir", "/proc/vspec-compare", "/proc is on a proc file system (the kernel's)"),
    (output_folder, "--out-dir", "/sys/kernel", "/sys/kernel is on a sysfs file system (the kernel's)"),
])
def test_output_paths_on_the_kernels_file_systems_are_refused(check, flag, path, needle):
    """/proc and /sys take no new file, and an existing /proc file opens for writing as root: refused by where
    they are (the mount table), before any work."""
    with pytest.raises(SpecError) as e:
        check(flag, path)
    assert str(e.value) == f"{flag} {path}: {needle}, where no file can be written; give a path elsewhere"


def test_an_output_path_whose_folder_refuses_a_new_file_is_refused_and_nothing_is_left(tmp_path, monkeypatch):
    existing = tmp_path / "old.pt"
    existing.write_text("kept")
    mtime = existing.stat().st_mtime_ns
    assert output_file("--out", existing) == existing and existing.read_text() == "kept"
    assert existing.stat().st_mtime_ns == mtime
    assert output_file("--out", tmp_path / "new" / "deep" / "m.pt") == tmp_path / "new" / "deep" / "m.pt"
    assert output_folder("--out-dir", tmp_path / "runs") == tmp_path / "runs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.pt"]  # probes leave nothing, create no folder
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)  # a read-only folder, as a user other than root sees it
    with pytest.raises(SpecError, match=f"^--out {re.escape(str(tmp_path))}/new/m.pt: cannot write in "
                                        f"{re.escape(str(tmp_path))} \\(Permission denied\\)$"):
        output_file("--out", tmp_path / "new" / "m.pt")
    with pytest.raises(SpecError, match=r"^--out-dir .*/runs: cannot write in .* \(Permission denied\)$"):
        output_folder("--out-dir", tmp_path / "runs")
    monkeypatch.undo()
    real_open = os.open

    def read_only(path, flags, *args):
        if str(path) == str(existing) and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(SpecError, match=r"^--out .*/old.pt: cannot be written \(Permission denied\)$"):
        output_file("--out", existing)
    monkeypatch.undo()
    if os.geteuid() != 0:  # root writes a read-only folder anyway
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        with pytest.raises(SpecError, match="cannot write in"):
            output_file("--out", locked / "m.pt")


def test_build_and_analyze_refuse_a_proc_path_before_any_work(tmp_path, capsys, monkeypatch):
    import vspec.compiler

    def refuse(*args, **kwargs):
        raise AssertionError("built")

    monkeypatch.setattr(vspec.compiler, "build", refuse)
    path = tmp_path / "vit.json"
    path.write_text(vspec.to_json(bases()["vit"]))
    for argv in (["build", str(path), "--out", "/proc/self/m.pt"], ["analyze", str(path), "--out-dir", "/sys/x"]):
        assert vspec.cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "file system (the kernel's), where no file can be written" in err, err


def test_number_flags_take_ascii_digits_only():
    from vspec.cli.common import int_in, positive_float

    for text in ("\u0661\u0662", "\uff11\uff12", "\u0661", "1_0"):
        with pytest.raises(argparse.ArgumentTypeError, match="invalid int value"):
            int_in(0)(text)
        with pytest.raises(argparse.ArgumentTypeError, match="invalid float value"):
            positive_float(text + ".5")
    assert int_in(0)("12") == 12 and int_in(0)(" 7 ") == 7 and positive_float("1e-3") == 1e-3
