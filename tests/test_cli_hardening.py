"""Bad input to `vspec` (issue 11, items 5, 7-10): one line on stderr, exit 2, never a traceback; and
the size guard's estimate against the models torch really builds."""

import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch
from cli_corpus import bases, corpus, run_case, run_corpus

import vspec
from vspec import spec as S
from vspec.cli import MAX_LINE, one_line
from vspec.spec import MemoryBudgetError, SpecError, budget

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted(ROOT.glob("specs/*.py"))


def test_every_malformed_input_is_one_line_exit_2(tmp_path):
    """The whole corpus (tests/cli_corpus.py: paths, encodings, nesting, types, kinds, huge sizes,
    .py specs that raise or exit, --out targets, flags) through vspec.cli.main."""
    results = run_corpus(tmp_path)
    assert len(results) >= 300
    bad = [(case.name, outcome.code, outcome.stderr[:300]) for case, outcome in results if not outcome.clean]
    assert bad == []
    assert all(len(o.stderr) <= MAX_LINE + 100 for _, o in results)  # "vspec: error: " and the cut notice


def test_the_real_entry_point_on_corpus_samples(tmp_path):
    """A few corpus cases through the installed `vspec` command, in its own process."""
    exe = Path(sys.executable).with_name("vspec")
    cases = {c.name: c for c in corpus(tmp_path)}
    for name in (".py exit3.py", ".py keyboard.py", "random bytes .json", "JSON [ x100000", "--out a folder",
                 "size guard profile --meta: dim 10**9", "1 MB JSON value"):
        done = subprocess.run([str(exe), *cases[name].argv], capture_output=True, text=True, timeout=120)
        lines = done.stderr.splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("vspec: error: "), (name, done.stderr)


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
    refined = vspec.load_spec(Path(__file__).parents[1] / "specs" / "refined_vit_s.py")  # refiner options
    paper = [S.RefinerAttention(heads=12, refine=S.Refine(expansion=2, constraint="row_col")),
             S.RefinerAttention(heads=12, reuse=True, refine=S.Refine(reduction=False, constraint="spatial"))]
    blocks = (*refined.block[:2], *(attrs.evolve(refined.block[0], attention=a) for a in paper))
    kinds["refiner"] = attrs.evolve(refined, stages=(S.Stage(depth=4, dim=48, block=blocks),))
    return [(p.name, vspec.load_spec(p)) for p in PRESETS] + list(kinds.items())


@pytest.mark.parametrize("name,spec", _specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_estimate_bounds_the_real_weights_within_1_5x(name, spec):
    """Every preset and a tiny model of every kind: the spec-time estimate of the weights is at least
    what torch allocates (parameters and buffers) and at most 1.5 x the parameters; the same for the
    profiler's tied model."""
    est = budget.estimate(spec)
    for tied, estimate in ((False, est.params), (True, est.distinct_params)):
        params, buffers = _bytes(vspec.build(spec, device="meta", tie_repeats=tied))
        assert params + buffers <= estimate <= 1.5 * params, (tied, params, buffers, estimate)


@pytest.mark.parametrize("name", ["vit", "swin", "dhvt", "sot"])
def test_the_activation_estimate_covers_every_tensor_of_a_forward_pass(name):
    """The working set is at least the input plus the largest output of any module, at batch 3, and
    within a small factor of it."""
    spec = bases()[name]
    model = vspec.build(spec).eval()
    largest = []
    hooks = [m.register_forward_hook(lambda m, i, o: largest.append(o.numel() * o.element_size())
                                      if isinstance(o, torch.Tensor) else None) for m in model.modules()]
    x = torch.randn(3, spec.in_chans, *spec.img_size)
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    seen = x.numel() * 4 + max(largest)
    assert seen <= budget.estimate(spec, batch=3).activations <= 8 * seen


def test_build_refuses_a_model_that_does_not_fit(monkeypatch):
    """vspec.build compares the estimate with the free memory before allocating: a MemoryError and a
    SpecError giving both figures; check_memory=False builds anyway."""
    spec = bases()["vit"]
    need = budget.estimate(spec).params
    monkeypatch.setattr(budget, "available", lambda: need // 2)
    with pytest.raises(MemoryBudgetError) as e:
        vspec.build(spec)
    assert isinstance(e.value, MemoryError) and isinstance(e.value, SpecError)
    assert re.fullmatch(r"building it on cpu needs about [\d.]+ KiB \([\d.]+ KiB of weights, [\d.]+ KiB for the "
                        r"module objects of 1 blocks\) but only [\d.]+ KiB of memory is available", str(e.value))
    assert _bytes(vspec.build(spec, check_memory=False))[0] > 0
    assert vspec.build(spec, device="meta") is not None  # meta: no weights to fit


def test_huge_specs_are_refused_before_torch_sees_them():
    """Every size within the spec's bound (2**31 - 1) and still a weight beyond what one torch tensor can
    hold, even on the meta device (where the old code ended in "Storage size calculation overflowed")."""
    spec = vspec.override(bases()["vit"], {"dim": 2**31 - 1, "block.attention.heads": 1, "block.ffn.ratio": 1.0})
    with pytest.raises(MemoryBudgetError, match="too large for torch: its largest tensor would take"):
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


def test_out_creates_missing_folders_and_refuses_a_folder(capsys, tmp_path):
    path = tmp_path / "vit.json"
    path.write_text(vspec.to_json(bases()["vit"]))
    out = tmp_path / "new" / "deeper" / "m.pt"
    assert vspec.cli.main(["build", str(path), "--out", str(out)]) == 0
    assert vspec.load(out).spec == bases()["vit"]
    capsys.readouterr()
    assert vspec.cli.main(["build", str(path), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"vspec: error: --out '{tmp_path}': is a folder; give a file name, e.g. " \
                                      f"{tmp_path / 'model.pt'}\n"
    outcome = run_case(["build", str(path), "--out", "/dev/full"])
    assert outcome.clean and "--out /dev/full: could not write the checkpoint" in outcome.stderr
