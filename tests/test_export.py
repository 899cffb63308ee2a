"""vspec.export and `vspec export`: one preset of each family through torch.export and torch.onnx's dynamo exporter,
traced at a batch of 2 and run at a batch of 3 (the dynamic batch): the torch.export program in torch, the ONNX graph
in onnxruntime, each equal to the eager model's float32 logits within 1e-4.

Test time: every preset is shrunk to the first and the last block of each stage (`shrink`; widths, heads, image
sizes and every kind as the preset has them), which keeps what each family's export must get through: Swin's
unshifted and shifted windows and patch merging, Refiner's compute and shared (refining) blocks, Conformer's first
plain block and its coupled blocks with the last fusion's stride, T2T's soft splits, iRPE's bucket gathers, SoT's
DenseNet stem and second-order head, a text body's padding mask (and GPT-2's causal mask and last-token head).
The slowest families to trace are marked slow (`make test-slow`).

onnx, onnxscript and onnxruntime are imported without a skip: the `dev` extra installs the `export` extra."""

import sys
from pathlib import Path

import attrs
import onnxruntime
import pytest
import torch

import vspec
from vspec import export
from vspec.cli import main
from vspec.spec import load_spec

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-4

torch.set_num_threads(2)


def shrink(spec: vspec.Model) -> vspec.Model:
    """Each stage cut to its first and last block (a listed stack keeps those two entries)."""
    stages = []
    for stage in spec.stages:
        if stage.depth > 2:
            block = stage.block[:1] + stage.block[-1:] if isinstance(stage.block, tuple) else stage.block
            stage = attrs.evolve(stage, block=block, depth=2)
        stages.append(stage)
    return attrs.evolve(spec, stages=stages)


def model_of(preset: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = vspec.build(shrink(load_spec(ROOT / "specs" / f"{preset}.py"))).eval()
    if preset == "deit_tiny_sot":
        # svPN's power iteration starts from v0, a learned vector initialised to ones. Under the released scalar
        # centering, Q's rows nearly sum to zero on random features, so Q v0 is tiny and svPN amplifies Q's float32
        # rounding far beyond 1e-4 even when computed in float64 (test_sot_start_vector_at_init_is_ill_conditioned):
        # eager and exported then differ by rounding noise of the model, not of the export. A trained v0 moves;
        # here it is drawn.
        with torch.no_grad():
            model.head.norm.v0.copy_(torch.randn(model.head.norm.v0.shape, generator=torch.Generator().manual_seed(0)))
    return model


slow = pytest.mark.slow
FAMILIES = [  # (family, preset): the normal run keeps ViT, DHVT, MSF and a text body
    ("vit", "deit_tiny"),
    ("dhvt", "dhvt_tiny_cifar_p4"),
    ("msf", "msf_vit_ti"),
    ("text", "electra_small"),
    pytest.param("refiner", "refined_vit_s", marks=slow),
    pytest.param("irpe", "deit_tiny_irpe_k", marks=slow),
    pytest.param("text_causal", "gpt2", marks=slow),
    pytest.param("swin", "swin_tiny", marks=slow),
    pytest.param("sot", "deit_tiny_sot", marks=slow),
    pytest.param("t2t", "t2t_vit_7", marks=slow),
    pytest.param("conformer", "conformer_ti", marks=slow),
    pytest.param("lvvit", "lvvit_t", marks=slow),
]


@pytest.mark.parametrize("family, preset", FAMILIES)
def test_export_equals_eager(family, preset, tmp_path):
    model = model_of(preset)
    program = export.export_program(model, batch=2)
    ran = export.check(model, program, batch=3)
    assert ran.batch == 3 and ran.max_abs_diff <= TOL, ran
    path = export.export_onnx(model, tmp_path / f"{preset}.onnx", program=program)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == export.input_names(model)
    assert all(isinstance(i.shape[0], str) for i in session.get_inputs())  # a named (dynamic) batch axis
    ran = export.check(model, path, batch=3)
    assert ran.runtime.startswith("onnxruntime") and ran.max_abs_diff <= TOL, ran
    if model.text:  # the check's batch pads its samples after the first: the mask is an input that acts
        ids, mask = export.example_inputs(model, 3, seed=1)
        assert not mask.all()
        full = export.run_onnx(path, (ids, torch.ones_like(mask)))
        assert (full - export.run_onnx(path, (ids, mask))).abs().max() > 1e-3


def test_sot_start_vector_at_init_is_ill_conditioned():
    """Why model_of draws SoT's v0: at its init (ones) svPN in float64 moves by more than the tolerance when its
    input Q is rounded to float32; from a drawn v0, by far less."""
    torch.manual_seed(0)
    model = vspec.build(shrink(load_spec(ROOT / "specs/deit_tiny_sot.py"))).eval().double()
    head = model.head
    with torch.no_grad():
        tokens, _ = head.words(model.forward_features(vspec.example_input(model.spec, 3).double()), None)
        q = head.pool(tokens)
        moved = (head.norm(q.float().double()) - head.norm(q)).abs().max()
        head.norm.v0.copy_(torch.randn(head.norm.v0.shape, generator=torch.Generator().manual_seed(0)))
        drawn = (head.norm(q.float().double()) - head.norm(q)).abs().max()
    assert moved > TOL and drawn < TOL / 10, (moved, drawn)


def test_exact_svpn_is_a_program_but_no_onnx_graph(tmp_path):
    """SoT's exact svPN (no preset uses it) is an SVD: torch.export takes it; ONNX has no operator for it, and
    export_onnx says so in one line naming the module."""
    spec = vspec.override(shrink(load_spec(ROOT / "specs/deit_tiny_sot.py")),
                          {"embedder.kind": "patch", "embedder.patch_size": 16, "head.norm.method": "exact"})
    model = vspec.build(spec).eval()
    program = export.export_program(model)
    assert export.check(model, program).max_abs_diff <= TOL
    with pytest.raises(export.ExportError, match=r"^head.norm calls linalg_svd \(torch.linalg\), which ONNX has no"):
        export.export_onnx(model, tmp_path / "exact.onnx", program=program)
    assert not (tmp_path / "exact.onnx").exists()


def test_static_batch_takes_only_its_batch(tmp_path):
    model = model_of("deit_tiny")
    path = export.export_onnx(model, tmp_path / "static.onnx", batch=2, dynamic_batch=False)
    assert export.check(model, path, batch=2).max_abs_diff <= TOL
    with pytest.raises(Exception, match="(?i)dimension|shape"):
        export.run_onnx(path, export.example_inputs(model, 3))
    with pytest.raises(export.ExportError, match="batch 1"):
        export.export_program(model, batch=1)  # dynamic: traced at 2 or more
    assert export.export_program(model, batch=1, dynamic_batch=False) is not None


def test_tracing_restores_the_training_mode():
    model = vspec.build(shrink(load_spec(ROOT / "specs/deit_tiny.py"))).train()
    export.export_program(model, batch=2)
    assert model.training


def test_the_dev_install_has_the_export_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {r.split(">")[0] for r in extras["export"]} == {"onnx", "onnxscript", "onnxruntime"}
    assert "export" in extras["dev"][0]


# ---------------------------------------------------------------- the command
def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


TINY = ["--set", "depth=1", "--set", "dim=64", "--set", "img_size=32", "--set", "block.attention.heads=2"]


def test_cli_exports_a_spec_to_onnx_and_checks_it(capsys, tmp_path):
    out = tmp_path / "sub" / "tiny.onnx"
    code, text, err = run(capsys, "export", ROOT / "specs/deit_tiny.py", *TINY, "--out", out, "--check")
    assert code == 0, err
    assert out.is_file() and "max |exported - eager| = " in text and "batch of 3 (onnxruntime" in text


def test_cli_exports_a_checkpoint_to_pt2(capsys, tmp_path):
    ckpt, out = tmp_path / "tiny.pt", tmp_path / "tiny.pt2"
    assert run(capsys, "build", ROOT / "specs/deit_tiny.py", *TINY, "--out", ckpt)[0] == 0
    code, text, err = run(capsys, "export", ckpt, "--out", out, "--check", "--batch", "3")
    assert code == 0, err
    assert "batch of 4 (torch.export)" in text
    model, program = vspec.load(ckpt).eval(), torch.export.load(out)
    x = vspec.example_input(model.spec, 5)
    with torch.no_grad():
        assert (program.module()(x) - model(x)).abs().max() <= TOL


@pytest.mark.parametrize("argv, needle", [
    (["--out", "m.txt"], "the suffix says the format: .onnx (ONNX) or .pt2 (torch.export)"),
    (["--out", "m.pt2", "--opset", "18"], "--opset applies to .onnx"),
    (["--out", "m.onnx", "--batch", "1"], "batch 1: a dynamic batch is traced at a batch of 2 or more"),
    (["--out", "m.onnx", "--batch", "0"], "--batch: must be in [1, 4096]"),
    (["--out", "m.onnx", "--opset", "7"], "--opset: must be in [18, 30]"),
    ([], "the following arguments are required: --out"),
])
def test_cli_errors_are_one_line(capsys, tmp_path, argv, needle):
    argv = [str(tmp_path / a) if a.startswith("m.") else a for a in argv]
    code, _, err = run(capsys, "export", ROOT / "specs/deit_tiny.py", *TINY, *argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_cli_refuses_set_on_a_checkpoint_and_names_a_missing_extra(capsys, tmp_path, monkeypatch):
    ckpt = tmp_path / "tiny.pt"
    assert run(capsys, "build", ROOT / "specs/deit_tiny.py", *TINY, "--out", ckpt)[0] == 0
    code, _, err = run(capsys, "export", ckpt, "--set", "depth=2", "--out", tmp_path / "m.pt2")
    assert code == 2 and "--set applies to spec files" in err
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if the extra were not installed
    code, _, err = run(capsys, "export", ckpt, "--out", tmp_path / "m.onnx")
    assert code == 2 and "needs onnxscript" in err and "pip install 'vspec[export]'" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "m.onnx").exists()


def test_cli_check_above_the_tolerance_and_an_exporter_failure_are_one_line(capsys, tmp_path, monkeypatch):
    out = tmp_path / "tiny.pt2"
    monkeypatch.setattr(export, "TOLERANCE", -1.0)  # every difference is above it
    code, _, err = run(capsys, "export", ROOT / "specs/deit_tiny.py", *TINY, "--out", out, "--check")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "above -1;" in err and out.is_file(), err

    def refuse(*args, **kwargs):
        raise RuntimeError("no tracing today\nsecond line")

    monkeypatch.setattr(torch.export, "export", refuse)
    code, _, err = run(capsys, "export", ROOT / "specs/deit_tiny.py", *TINY, "--out", tmp_path / "m.pt2")
    assert code == 2 and err.strip() == "vspec export: error: torch.export failed: RuntimeError: no tracing today"


@pytest.mark.parametrize("out, needle", [
    ("/proc/self/x.pt2", "--out /proc/self/x.pt2: /proc/self is on a proc file system (the kernel's)"),
    ("/sys/x.onnx", "--out /sys/x.onnx: /sys is on a sysfs file system (the kernel's)"),
])
def test_cli_refuses_an_unwritable_out_before_exporting(capsys, monkeypatch, out, needle):
    """Issue 43: the path is checked before the model is built or traced, not after the export."""
    import vspec.compiler

    def refuse(*args, **kwargs):
        raise AssertionError("built or exported")

    monkeypatch.setattr(vspec.compiler, "build", refuse)
    monkeypatch.setattr(export, "export", refuse)
    code, text, err = run(capsys, "export", ROOT / "specs/deit_tiny.py", *TINY, "--out", out)
    assert code == 2 and text == "" and err == f"vspec: error: {needle}, where no file can be written; give a path " \
                                               "elsewhere\n", err


def test_cli_makes_the_missing_folders_of_out(capsys, tmp_path):
    out = tmp_path / "new" / "deeper" / "tiny.pt2"
    code, _, err = run(capsys, "export", ROOT / "specs/deit_tiny.py", *TINY, "--out", out)
    assert code == 0 and out.is_file(), err
