"""`vspec fit` / `vspec.fit` (issue 36): the variant of a spec nearest a MAC / parameter budget, from the spec
alone. The search is checked against an exhaustive walk of its grid written here (every combination through `override`,
each valid one profiled afresh, no shared cache), and the chosen spec against `vspec profile` (fvcore)."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

import vspec
from vspec import fitting
from vspec.spec import SpecError

ROOT = Path(__file__).resolve().parents[1]
DIMS, DEPTHS = list(range(288, 481, 24)) + [292], list(range(8, 17))  # 292: 6 heads do not divide it


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vspec.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.fixture(scope="module")
def sot_macs():
    return vspec.profile(vspec.load_spec(ROOT / "specs/sot_small.py")).macs


def test_deit_small_fitted_to_sot_small_macs_is_the_nearest_valid_variant_of_its_grid(sot_macs):
    deit = vspec.load_spec(ROOT / "specs/deit_small.py")
    result = fitting.fit(deit, macs=sot_macs, vary=[f"dim={','.join(map(str, DIMS))}", "depth=8:16"])
    walk = {}
    for dim, depth in itertools.product(DIMS, DEPTHS):
        try:
            variant = vspec.override(deit, {"dim": dim, "depth": depth})
        except SpecError:
            continue
        p = vspec.profile(variant, meta=True, crosscheck=False)  # afresh: no cache shared with the search
        walk[dim, depth] = (p.params, p.macs)
    assert (292, 12) not in walk and len(walk) == (len(DIMS) - 1) * len(DEPTHS)
    assert {(c.values["dim"], c.values["depth"]): (c.params, c.macs) for c in result.candidates} == walk
    nearest = min(abs(m - sot_macs) / sot_macs for _, m in walk.values())
    assert abs(result.best.deviation) == pytest.approx(nearest, rel=1e-12)
    assert abs(result.best.macs - sot_macs) / sot_macs == pytest.approx(nearest, rel=1e-12)
    best = (result.best.values["dim"], result.best.values["depth"])
    assert result.spec == vspec.override(deit, {"dim": best[0], "depth": best[1]})
    full = vspec.profile(result.spec)  # fvcore, as `vspec profile` counts
    assert (full.params, full.macs) == (result.best.params, result.best.macs) == walk[best]
    assert result.original.values == {"dim": 384, "depth": 12} and result.tried == len(DIMS) * len(DEPTHS)


def test_the_cli_writes_the_chosen_spec_and_vspec_profile_prints_its_numbers(tmp_path, sot_macs):
    vary = ["--vary", "dim,depth"]  # the full search once; the second format on its answer's grid alone (half the time)
    for suffix in (".py", ".json"):
        out = tmp_path / f"fitted{suffix}"
        done = cli("fit", "specs/deit_small.py", "--target", f"macs={sot_macs}", *vary, "--top", "3",
                   "--out", str(out))
        assert done.returncode == 0, done.stderr
        chosen = next(line for line in done.stdout.splitlines() if line.startswith("| chosen |"))
        cells = [c.strip() for c in chosen.strip("|").split("|")]
        dim, depth, params, macs = int(cells[1]), int(cells[2]), int(cells[3].replace(",", "")), \
            int(cells[4].replace(",", ""))
        spec = vspec.load_spec(out)
        assert (spec.stages[0].dim, spec.stages[0].depth) == (dim, depth)
        shown = json.loads(cli("profile", str(out), "--json").stdout)
        assert (shown["params"], shown["macs"]) == (params, macs)
        assert abs(macs - sot_macs) / sot_macs <= 0.02
        vary = ["--vary", f"dim={dim}", "--vary", f"depth={depth}"]


def test_params_and_like_targets():
    deit = vspec.load_spec(ROOT / "specs/deit_small.py")
    result = fitting.fit(deit, params="10M", vary=["dim", "depth=6:12"])
    assert result.target == {"params": 10e6} and abs(result.best.params - 10e6) / 10e6 <= 0.02
    assert all(abs(c.deviation) >= abs(result.best.deviation) for c in result.candidates)
    same = fitting.fit(deit, like=ROOT / "specs/deit_small.py", vary=["dim=192,384,768", "depth=6,12"])
    assert same.best.values == {"dim": 384, "depth": 12} and same.best.deviation == 0  # itself, exactly
    assert fitting.parse_amount("4.6G") == 4.6e9 and fitting.parse_amount("800k") == 8e5
    assert fitting.parse_amount("1.5e6") == 1.5e6


def test_a_depth_reuses_the_counts_of_its_blocks():
    """profile(cache=...): the counts of a variant that only changes depth are the uncached profile's."""
    deit = vspec.load_spec(ROOT / "specs/deit_tiny.py")
    cache = {}
    for depth in (2, 5, 12):
        variant = vspec.override(deit, {"depth": depth})
        cached, fresh = vspec.profile(variant, meta=True, cache=cache), vspec.profile(variant, meta=True)
        assert cached == fresh
    assert len(cache) == 4  # embedder, one block, norm, head: counted once for the three depths


def test_errors_are_one_line():
    deit = ROOT / "specs/deit_small.py"
    nearest = r"no variant within 2 % of macs=100G: the nearest, dim=768, depth=24, has 171.6M params, 35.05G MACs"
    with pytest.raises(fitting.FitError, match=nearest) as e:
        fitting.fit(deit, macs="100G")
    assert e.value.result.best.values == {"dim": 768, "depth": 24}
    with pytest.raises(fitting.FitError, match="no field 'blok.heads'"):
        fitting.fit(deit, macs="4G", vary=["blok.heads"])
    with pytest.raises(fitting.FitError, match="no default range; give the values"):
        fitting.fit(deit, macs="4G", vary=["class_token"])
    with pytest.raises(fitting.FitError, match="several stages: name the fields"):
        fitting.fit(ROOT / "specs/swin_tiny.py", macs="4G")
    with pytest.raises(fitting.FitError, match="expected a number"):
        fitting.fit(deit, macs="lots")
    with pytest.raises(fitting.FitError, match="no target"):
        fitting.fit(deit)
    done = cli("fit", "specs/deit_small.py", "--target", "macs=100G")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "the nearest, dim=768, depth=24" in done.stderr
    done = cli("fit", "specs/deit_small.py", "--target", "flops=4G")
    assert done.returncode == 2 and "expected macs=AMOUNT" in done.stderr


def test_a_staged_spec_varies_named_stage_fields():
    swin = vspec.load_spec(ROOT / "specs/swin_tiny.py")
    p = vspec.profile(swin, meta=True, crosscheck=False)
    result = fitting.fit(swin, macs=p.macs * 1.3, vary=["stages.2.depth=2:18:2", "stages.3.depth=1:4"], tolerance=0.05)
    assert result.original.macs == p.macs and result.best.macs > p.macs
    assert result.spec.stages[2].depth == result.best.values["stages.2.depth"]


def test_vspec_fit_is_the_function():
    result = vspec.fit(ROOT / "specs/deit_tiny.py", params="4M", vary=["depth"], tolerance=0.1)
    assert isinstance(result, fitting.FitResult) and abs(result.best.deviation) <= 0.1


def test_fit_edge_cases(tmp_path):
    refined = vspec.load_spec(ROOT / "specs/refined_vit_m.py")  # a width off the default step (420): kept
    assert refined.stages[0].dim % fitting.DIM_STEP and refined.stages[0].dim in fitting.axes(refined, ["dim"])["dim"]
    deit = vspec.load_spec(ROOT / "specs/deit_tiny.py")
    with pytest.raises(fitting.FitError, match="must be finite and > 0"):
        fitting.fit(deit, macs=float("nan"))
    with pytest.raises(fitting.FitError, match="given twice"):
        fitting.fit(deit, macs="1G", vary=["depth", "depth=1:3"])
    result = fitting.fit(deit, params="4M", vary=["depth"], tolerance=0.2)
    out = tmp_path / 'odd """ C:\\Users\\fit.py'
    fitting.write(result, out, 'vspec fit C:\\Users\\x """ --out odd')
    assert vspec.load_spec(out) == result.spec
    from vspec.cli.fit import vary_items

    assert vary_items(["dim,depth=4:12", "dim=192,256"]) == ["dim", "depth=4:12", "dim=192,256"]


# ---------------------------------------------------------------- issue 43: bounds, non-finite values, paths
def _no_profile(monkeypatch):
    """Any profile (of a candidate, the original or like='s target) fails the test."""
    import vspec.profiler

    def refuse(*args, **kwargs):
        raise AssertionError("profiled")

    monkeypatch.setattr(vspec.profiler, "profile", refuse)


def _cli_error(capsys, *argv: str) -> str:
    assert vspec.cli.main(list(argv)) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.out == "", captured
    return captured.err


SIX_AXES = ["dim=192,256,320,384,448,512,576,640,704,768", "depth=1:10", "block.attention.heads=1:10",
            "block.ffn.ratio=1:5.5:0.5", "embedder.patch_size=8:17", "num_classes=10:100:10"]


@pytest.mark.parametrize("vary, needle", [
    (["depth=1:10000"], "walks 50,005,000 blocks (the candidates' depths summed), more than 1,000,000"),
    ([f"dim={','.join(map(str, range(6, 18001, 6)))}"], ("3,000 distinct combinations of dim (each a new block to "
                                                         "profile), more than 2,000")),
    (SIX_AXES, ("1,000,000 candidates (10 dim x 10 depth x 10 block.attention.heads x 10 block.ffn.ratio x 10 "
                "embedder.patch_size x 10 num_classes), more than 10,000")),
    (["block.ffn.ratio=1:4:1e-9"], "3,000,000,001 candidates (3,000,000,001 block.ffn.ratio), more than 10,000"),
    (["dim=1:100000000"], "100,000,000 candidates (100,000,000 dim), more than 10,000"),
    (["dim=1:10**30"], "expected LOW:HIGH[:STEP] of ints"),
    (["dim=1:" + "9" * 5000], "expected LOW:HIGH[:STEP] of ints (ASCII digits), got '99999"),
    (["dim=1:3\n0"], "--vary dim=1:3\\n0: expected LOW:HIGH[:STEP] of ints (ASCII digits), got '3\\n0'"),
    (["dim=1:" + "9" * 40, "depth"], f"({10**40 - 1:,} dim x 24 depth), more than 10,000"),
])
def test_a_search_past_its_limit_is_refused_before_any_profile(monkeypatch, vary, needle):
    """Counted from the axes' lengths (ranges are never listed), before the original or like='s target is
    profiled: one line naming the count, the limit and --max-candidates."""
    _no_profile(monkeypatch)
    deit = vspec.load_spec(ROOT / "specs/deit_small.py")
    for target in ({"macs": "1G"}, {"like": ROOT / "specs/sot_small.py"}):
        with pytest.raises(fitting.FitError) as e:
            fitting.fit(deit, vary=vary, **target)
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
        if "expected" not in needle:
            assert str(e.value).endswith("narrow --vary or raise --max-candidates"), str(e.value)


def test_max_candidates_raises_or_lowers_the_limit(monkeypatch):
    deit = vspec.load_spec(ROOT / "specs/deit_tiny.py")
    assert fitting.search_size(deit, ["depth=1:30"]) == {"candidates": 30, "parts": 1, "blocks": 465}
    assert fitting.search_size(deit, ["dim", "depth"]) == {"candidates": 888, "parts": 37, "blocks": 888 * 25 // 2}
    refused = r"the search has 30 candidates \(30 depth\), more than 20; narrow --vary"
    with pytest.raises(fitting.FitError, match=refused):
        fitting.fit(deit, params="4M", vary=["depth=1:30"], max_candidates=20)
    assert fitting.fit(deit, params="4M", vary=["depth=1:30"], max_candidates=30, tolerance=0.5).tried == 30
    for bad in (0, -1, 1.5, True, float("nan")):
        with pytest.raises(fitting.FitError, match="max_candidates: must be an int >= 1"):
            fitting.fit(deit, params="4M", max_candidates=bad)


def test_the_cli_refuses_a_search_past_its_limit_before_profiling(monkeypatch, capsys):
    _no_profile(monkeypatch)
    err = _cli_error(capsys, "fit", "specs/deit_small.py", "--target", "macs=1G", "--vary", "depth=1:10000")
    assert err.startswith("vspec fit: error: the search walks 50,005,000 blocks") and "--max-candidates" in err
    err = _cli_error(capsys, "fit", "specs/deit_small.py", "--target", "like=sot_small", "--vary", "dim=1:100000000")
    assert "100,000,000 candidates (100,000,000 dim), more than 10,000" in err
    err = _cli_error(capsys, "fit", "deit_tiny", "--target", "params=4M", "--vary", "depth=1:30",
                     "--max-candidates", "20")
    assert "30 candidates (30 depth), more than 20" in err
    err = _cli_error(capsys, "fit", "deit_tiny", "--target", "params=4M", "--max-candidates", "0")
    assert "argument --max-candidates: must be >= 1, got 0" in err
    monkeypatch.undo()
    assert vspec.cli.main(["fit", "deit_tiny", "--target", "params=4M", "--vary", "depth=1:30", "--tolerance", "0.5",
                           "--max-candidates", "30"]) == 0
    assert "30 valid of 30 combinations" in capsys.readouterr().out


def test_a_search_past_its_limit_is_refused_before_torch_is_imported():
    """The refusal comes within a second: `vspec fit PRESET` past its limit answers before it imports torch (whose
    import alone takes seconds), in a fresh process."""
    code = ("import sys; from vspec.cli import main; rc = main(['fit', 'deit_small', '--target', 'params=1M', "
            "'--vary', 'dim=1:100000000']); print(rc, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.split() == ["2", "False"], (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "100,000,000 candidates" in done.stderr


def test_every_one_stage_presets_default_search_is_under_the_limit(monkeypatch):
    """`vspec fit PRESET` (dim, depth) is never refused; counted without profiling."""
    _no_profile(monkeypatch)
    sizes = {}
    for path in sorted(ROOT.glob("specs/*.py")):
        spec = vspec.load_spec(path)
        if len(spec.stages) == 1:
            sizes[path.stem] = size = fitting.search_size(spec, fitting.default_vary(spec))
            fitting.check_size(size, fitting.MAX_CANDIDATES)
    assert len(sizes) >= 60 and max(s["candidates"] for s in sizes.values()) == 9264  # bert_large, gpt2_medium


def test_axes_of_a_range_are_lazy():
    deit = vspec.load_spec(ROOT / "specs/deit_small.py")
    dims = fitting.axes(deit, ["dim=1:100000000"])["dim"]
    assert isinstance(dims, range) and len(dims) == 10**8 and dims[-1] == 10**8
    ratios = fitting.axes(deit, ["block.ffn.ratio=1:4:1e-9"])["block.ffn.ratio"]
    assert len(ratios) == 3 * 10**9 + 1 and ratios[0] == 1.0 and ratios[-1] == 4.0 and ratios[1] == 1.000000001
    assert list(fitting.axes(deit, ["block.ffn.ratio=2.0:3.0:0.25"])["block.ffn.ratio"]) == [2.0, 2.25, 2.5, 2.75, 3.0]
    assert list(fitting.axes(deit, ["depth=4:12:3"])["depth"]) == [4, 7, 10]
    refined = vspec.load_spec(ROOT / "specs/refined_vit_m.py")  # 420: off the step, kept in its place
    widths = fitting.axes(refined, ["dim"])["dim"]
    assert list(widths) == sorted({*range(208, 841, 8), 420}) and 420 in widths and 421 not in widths
    assert widths[list(widths).index(420)] == 420 and len(widths) == len(list(widths))


@pytest.mark.parametrize("item, value", [
    ("block.ffn.ratio=nan:4", "nan"), ("block.ffn.ratio=1:inf", "inf"), ("block.ffn.ratio=1:4:nan", "nan"),
    ("block.ffn.ratio=1:4:inf", "inf"), ("block.ffn.ratio=1e999:2", "1e999"), ("block.ffn.ratio=-inf:2", "-inf"),
    ("block.ffn.ratio=2,NaN", "NaN"), ("block.ffn.ratio=2,Infinity", "Infinity"), ("dim=192,1e999", "1e999"),
])
def test_non_finite_bounds_steps_and_values_are_refused(monkeypatch, capsys, item, value):
    _no_profile(monkeypatch)
    deit = vspec.load_spec(ROOT / "specs/deit_small.py")
    with pytest.raises(fitting.FitError) as e:
        fitting.fit(deit, macs="1G", vary=[item])
    assert str(e.value) == f"--vary {item}: {value!r} is not a finite number", str(e.value)
    err = _cli_error(capsys, "fit", "specs/deit_small.py", "--target", "macs=1G", "--vary", item)
    assert err == f"vspec fit: error: --vary {item}: {value!r} is not a finite number\n"


@pytest.mark.parametrize("item", ["depth=\u0661:\u0661\u0662", "depth=1:\uff11\uff12", "block.ffn.ratio=\u0661.5:4",
                                  "depth=1:12:\u0662", "depth=\u0661\u0662,3", "depth=1_0:12"])
def test_only_ascii_numbers_in_vary(monkeypatch, capsys, item):
    _no_profile(monkeypatch)
    with pytest.raises(fitting.FitError, match="expected LOW:HIGH|is not a number"):
        fitting.fit(ROOT / "specs/deit_small.py", macs="1G", vary=[item])
    err = _cli_error(capsys, "fit", "specs/deit_small.py", "--target", "macs=1G", "--vary", item)
    assert err.startswith("vspec fit: error: --vary ")


@pytest.mark.parametrize("target, needle", [
    ("params=1M,params=20K", "--target 'params=1M,params=20K': params given twice"),
    ("macs=1G,params=2M,macs=3G", "macs given twice"),
])
def test_a_repeated_target_is_refused(monkeypatch, capsys, target, needle):
    _no_profile(monkeypatch)
    assert needle in _cli_error(capsys, "fit", "specs/deit_small.py", "--target", target)


@pytest.mark.parametrize("flag, value, needle", [
    ("--tolerance", "\u0660.5", "argument --tolerance: invalid float value"),
    ("--tolerance", "nan", "argument --tolerance: must be finite and >= 0, got 'nan'"),
    ("--tolerance", "-0.1", "must be finite and >= 0"),
    ("--top", "\u0663", "argument --top: invalid int value"),
    ("--top", "0", "argument --top: must be >= 1, got 0"),
    ("--max-candidates", "\u0661\u0660", "argument --max-candidates: invalid int value"),
])
def test_fit_flags_take_ascii_numbers_in_range(monkeypatch, capsys, flag, value, needle):
    _no_profile(monkeypatch)
    assert needle in _cli_error(capsys, "fit", "specs/deit_small.py", "--target", "macs=1G", flag, value)


def test_out_makes_missing_folders_and_bad_paths_are_refused_before_the_search(monkeypatch, capsys, tmp_path):
    out = tmp_path / "new" / "dir" / "x.json"
    assert vspec.cli.main(["fit", "deit_tiny", "--target", "params=4M", "--vary", "depth", "--tolerance", "0.5",
                           "--out", str(out)]) == 0
    assert vspec.load_spec(out).stages[0].dim == 192 and str(out) in capsys.readouterr().out
    _no_profile(monkeypatch)
    for bad, needle in ((tmp_path, "is a folder; give a file name"), ("/proc/self/x.json", "/proc"),
                        ("/proc/self/status.json", "/proc"), ("/sys/x.json", "/sys"),
                        (tmp_path / "new" / "dir" / "x.json" / "y.json", "is a regular file, not a folder")):
        err = _cli_error(capsys, "fit", "deit_tiny", "--target", "params=4M", "--out", str(bad))
        assert err.startswith("vspec: error: --out ") and needle in err, err
