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
from vspec import fitting as F
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
    result = F.fit(deit, macs=sot_macs, vary=[f"dim={','.join(map(str, DIMS))}", "depth=8:16"])
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
    for suffix in (".py", ".json"):
        out = tmp_path / f"fitted{suffix}"
        done = cli("fit", "specs/deit_small.py", "--target", f"macs={sot_macs}", "--vary", "dim,depth", "--top", "3",
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


def test_params_and_like_targets():
    deit = vspec.load_spec(ROOT / "specs/deit_small.py")
    result = F.fit(deit, params="10M", vary=["dim", "depth=6:12"])
    assert result.target == {"params": 10e6} and abs(result.best.params - 10e6) / 10e6 <= 0.02
    assert all(abs(c.deviation) >= abs(result.best.deviation) for c in result.candidates)
    same = F.fit(deit, like=ROOT / "specs/deit_small.py", vary=["dim=192,384,768", "depth=6,12"])
    assert same.best.values == {"dim": 384, "depth": 12} and same.best.deviation == 0  # itself, exactly
    assert F.parse_amount("4.6G") == 4.6e9 and F.parse_amount("800k") == 8e5 and F.parse_amount("1.5e6") == 1.5e6


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
    with pytest.raises(F.FitError, match=nearest) as e:
        F.fit(deit, macs="100G")
    assert e.value.result.best.values == {"dim": 768, "depth": 24}
    with pytest.raises(F.FitError, match="no field 'blok.heads'"):
        F.fit(deit, macs="4G", vary=["blok.heads"])
    with pytest.raises(F.FitError, match="no default range; give the values"):
        F.fit(deit, macs="4G", vary=["class_token"])
    with pytest.raises(F.FitError, match="several stages: name the fields"):
        F.fit(ROOT / "specs/swin_tiny.py", macs="4G")
    with pytest.raises(F.FitError, match="expected a number"):
        F.fit(deit, macs="lots")
    with pytest.raises(F.FitError, match="no target"):
        F.fit(deit)
    done = cli("fit", "specs/deit_small.py", "--target", "macs=100G")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "the nearest, dim=768, depth=24" in done.stderr
    done = cli("fit", "specs/deit_small.py", "--target", "flops=4G")
    assert done.returncode == 2 and "expected macs=AMOUNT" in done.stderr


def test_a_staged_spec_varies_named_stage_fields():
    swin = vspec.load_spec(ROOT / "specs/swin_tiny.py")
    p = vspec.profile(swin, meta=True, crosscheck=False)
    result = F.fit(swin, macs=p.macs * 1.3, vary=["stages.2.depth=2:18:2", "stages.3.depth=1:4"], tolerance=0.05)
    assert result.original.macs == p.macs and result.best.macs > p.macs
    assert result.spec.stages[2].depth == result.best.values["stages.2.depth"]


def test_vspec_fit_is_the_function():
    result = vspec.fit(ROOT / "specs/deit_tiny.py", params="4M", vary=["depth"], tolerance=0.1)
    assert isinstance(result, F.FitResult) and abs(result.best.deviation) <= 0.1


def test_fit_edge_cases(tmp_path):
    refined = vspec.load_spec(ROOT / "specs/refined_vit_m.py")  # a width off the default step (420): kept
    assert refined.stages[0].dim % F.DIM_STEP and refined.stages[0].dim in F.axes(refined, ["dim"])["dim"]
    deit = vspec.load_spec(ROOT / "specs/deit_tiny.py")
    with pytest.raises(F.FitError, match="must be finite and > 0"):
        F.fit(deit, macs=float("nan"))
    with pytest.raises(F.FitError, match="given twice"):
        F.fit(deit, macs="1G", vary=["depth", "depth=1:3"])
    result = F.fit(deit, params="4M", vary=["depth"], tolerance=0.2)
    out = tmp_path / 'odd """ C:\\Users\\fit.py'
    F.write(result, out, 'vspec fit C:\\Users\\x """ --out odd')
    assert vspec.load_spec(out) == result.spec
    from vspec.cli.fit import vary_items

    assert vary_items(["dim,depth=4:12", "dim=192,256"]) == ["dim", "depth=4:12", "dim=192,256"]
