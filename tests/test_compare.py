"""`vspec compare` (issue 24, item 5; issue 36): a tiny comparison on digits writes its JSON, PNG and table; the
summary numbers are those of its runs; bad input is one line; The compare page's table is the committed measurement (at
matched MACs); --grid, --match, text data and Welch's noise test."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import vspec.cli
from tests.helpers.docs_examples import doc
from vspec import compare as comparison
from vspec.spec import MHSA, MLP, Block, GAPHead, Model, PatchEmbed, to_json

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "docs" / "compare"


def tiny(**changes) -> Model:
    """8 x 8 grey digits, patch 4 (a 2 x 2 grid), one block of width 16."""
    fields = dict(embedder=PatchEmbed(patch_size=4), block=Block(attention=MHSA(heads=2), ffn=MLP(ratio=2.0)),
                  depth=1, dim=16, num_classes=10, img_size=8, in_chans=1)
    return Model(**{**fields, **changes})


@pytest.fixture
def specs(tmp_path):
    paths = []
    for name, spec in (("tiny_cls", tiny()), ("tiny_gap", tiny(class_token=False, head=GAPHead(), depth=2))):
        path = tmp_path / f"{name}.json"
        path.write_text(to_json(spec))
        paths.append(str(path))
    return paths


def test_a_tiny_comparison_writes_its_json_png_and_table(specs, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["compare", *specs, "--data", "digits", "--seeds", "2", "--seed-base", "5", "--epochs", "1",
            "--batch-size", "256", "--out-dir", str(out)]
    assert vspec.cli.main(argv) == 0
    captured = capsys.readouterr()
    result = json.loads((out / "compare.json").read_text())
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert captured.out.splitlines()[:4] == comparison.table(result).splitlines()
    assert "[1/4] tiny_cls seed 5: training" in captured.err and "[4/4] tiny_gap seed 6:" in captured.err
    assert "epoch 1: train_loss" in captured.err  # the engine's line per epoch
    assert result["data"] == {"name": "digits", "train": 1437, "val": 360, "classes": 10}
    assert result["seeds"] == [5, 6] and result["recipe"]["name"] == "compare" and result["recipe"]["epochs"] == 1
    assert result["command"].startswith("vspec compare ") and "--seeds 2 --seed-base 5" in result["command"]
    assert result["torch"] and result["cpu"] and result["threads"] >= 1 and result["wall_s"] > 0
    assert [r["name"] for r in result["specs"]] == ["tiny_cls", "tiny_gap"]
    for row, path in zip(result["specs"], specs):
        prof = vspec.profile(vspec.load_spec(path), crosscheck=False)
        assert (row["params"], row["macs"]) == (prof.params, prof.macs) and row["samples_per_s"] > 0
        assert [r["seed"] for r in row["runs"]] == [5, 6]
        top1 = np.array([r["val_top1"] for r in row["runs"]])
        summary = row["score"]
        assert summary["mean"] == pytest.approx(top1.mean(), abs=1e-12)
        assert summary["std"] == pytest.approx(top1.std(ddof=1), abs=1e-12)
        assert (summary["min"], summary["max"]) == (top1.min(), top1.max())
        for run in row["runs"]:  # each run's record is its last epoch in its own folder
            lines = (out / "runs" / f"{row['name']}-seed{run['seed']}" / "metrics.jsonl").read_text().splitlines()
            assert json.loads(lines[-1])["val_top1"] == run["val_top1"]


def test_the_same_seed_gives_the_same_run(specs, tmp_path):
    """Same data order and weights for a seed: two runs of one spec agree (what makes the specs comparable)."""
    from vspec.train.recipes import resolve

    recipe = resolve("compare", epochs=1, batch_size=256)
    runs = [comparison.compare(specs[:1], data="digits", seeds=[3], recipe=recipe, out=tmp_path / out,
                      say=lambda _: None)["specs"][0]["runs"] for out in "ab"]
    timing = ("images_per_s", "epoch_time_s")
    a, b = ([{k: v for k, v in r.items() if k not in timing} for r in rs] for rs in runs)
    assert a == b and a[0]["train_loss"] > 0


def test_spread_is_mean_sample_std_min_max():
    values = [91.5, 93.25, 90.0]
    s = comparison.spread(values)
    assert (s["mean"], s["min"], s["max"]) == (pytest.approx(np.mean(values)), 90.0, 93.25)
    assert s["std"] == pytest.approx(np.std(values, ddof=1))
    assert comparison.spread([97.0]) == {"mean": 97.0, "std": 0.0, "min": 97.0, "max": 97.0}


def _error(capsys, argv) -> str:
    assert vspec.cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.out == "", captured
    return captured.err


@pytest.mark.parametrize("case,needle", [
    ("missing", "no such file"),
    ("duplicate", "two specs are named 'tiny_cls'"),
    ("text", "a text body"),
    ("--data nope", "--data: unknown 'nope'; expected one of digits"),
    ("--data synthetic", "--data: unknown 'synthetic'"),
    ("--data hf", "--data: unknown 'hf'"),  # its options are not compare's
    ("--data cifar10", "cifar10: needs a data directory"),
    ("--seeds 0", "argument --seeds: must be in [1, 100], got 0"),
    ("--epochs 0", "argument --epochs: must be in [1, 100000], got 0"),
    ("--epochs 1180591620717411303424", "argument --epochs: must be in [1, 100000], got an int of 71 bits"),
    ("--warmup-epochs 100001", "argument --warmup-epochs: must be in [0, 100000], got 100001"),
    ("too large", "training it needs about"),
    ("runs is a file", "cannot make"),
    ("out under /proc", ("--out-dir /proc/vspec-compare: /proc is on a proc file system (the kernel's), where no "
                         "file can be written")),
    ("--lr nan", "argument --lr: must be finite and > 0, got nan"),
    ("--seed-base 4294967295", "--seed-base 4294967295 + --seeds 3 passes 2**32"),
    ("--batch-size 1438", "--batch-size 1438 is more than the 1437 training images of digits"),
    ("--match macs --tolerance 0", "--match macs: tiny_gap: no variant within 0 % of macs="),
    ("--vary dim", "--to, --vary and --tolerance go with --match macs|params"),
    ("--grid depth", "--grid depth: expected KEY=V1,V2,..."),
    ("--grid dim=15", "2 does not divide dim 15"),
    ("--data rt-polarity", "an image model on text data"),
    ("--task cola", "--task names a GLUE task: for --data glue"),
    *([("--device cuda", "--device cuda: no CUDA device here")] if not torch.cuda.is_available() else []),
])
def test_bad_input_is_one_line_before_any_training(specs, tmp_path, capsys, case, needle):
    out = tmp_path / "cmp"
    argv = ["compare", *specs, "--out-dir", str(out)]
    if case == "missing":
        argv[1] = str(tmp_path / "gone.py")
    elif case == "duplicate":
        other = tmp_path / "other"
        other.mkdir()
        (other / "tiny_cls.json").write_text(Path(specs[0]).read_text())
        argv.insert(2, str(other / "tiny_cls.json"))
    elif case == "text":
        argv.insert(2, str(ROOT / "specs" / "demo_text.py"))
    elif case == "too large":  # the second spec: refused before the first one trains
        huge = tmp_path / "huge.json"
        huge.write_text(json.dumps({**json.loads(Path(specs[0]).read_text()), "dim": 2**15, "depth": 40}))
        argv.insert(2, str(huge))
    elif case == "runs is a file":
        out.mkdir()
        (out / "runs").write_text("")
        argv += ["--overwrite"]
    elif case == "out under /proc":
        argv[argv.index("--out-dir") + 1] = "/proc/vspec-compare"
    else:
        argv += case.split()
    err = _error(capsys, argv)
    assert err.startswith("vspec") and needle in err, err
    assert not (out / "runs").is_dir()


def test_an_earlier_comparison_is_kept_unless_overwrite(specs, tmp_path, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare.json").write_text("{}")
    err = _error(capsys, ["compare", *specs, "--out-dir", str(out)])
    assert "holds an earlier comparison; replace it with --overwrite" in err
    assert (out / "compare.json").read_text() == "{}"


def test_readme_shows_the_committed_comparison():
    """The compare page's table is `table` of docs/compare/compare.json, its plot the committed PNG: never typed."""
    result = json.loads((MEASURED / "compare.json").read_text())
    readme = doc("compare")
    assert comparison.table(result) in readme
    assert "](compare/compare.png)" in readme and (MEASURED / "compare.png").is_file()
    assert f"`{result['command']}`" in readme
    assert result["data"]["name"] == "mnist5k" and len(result["seeds"]) == 3 and len(result["specs"]) == 3
    assert result["match"]["what"] == "macs" and "--match macs" in result["command"]
    budget = result["specs"][0]["macs"]  # matched within the tolerance, the originals beside
    assert all(abs(r["macs"] - budget) / budget <= result["match"]["tolerance"] for r in result["specs"])
    assert all(r["matched"]["macs"] != r["macs"] for r in result["specs"][1:])
    assert "vs the best: Welch's p" in comparison.table(result)
    minutes = re.search(r"took (\d+\.\d) min", readme)
    assert minutes and float(minutes.group(1)) == round(result["wall_s"] / 60, 1)
    assert f"({result['cpu']}, {result['threads']} thread" in readme
    assert f"load average at {result['load_average'][0]:.2f}" in readme and f"torch {result['torch']})" in readme


def test_validation_is_resized_as_training_is_without_random_crops(tmp_path):
    """The training loop's validation images: a plain resize like the training images under `none` (a 0.875
    centre crop would enlarge every digit by 8 / 7 and cost compare_vit 15 points of top-1 on mnist5k), timm's
    centre crop after random resized crops (`deit`)."""
    from PIL import Image

    from vspec.train import RunConfig, TrainConfig, resolve
    from vspec.train.engine import Training

    digit = Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8) * 4, "L")
    seen = {}
    for name in ("none", "deit"):
        t = Training(TrainConfig(tiny(img_size=16), resolve(name), "digits", RunConfig(out=tmp_path / name)))
        t.setup(model=False)
        seen[name] = t.loaders.val.dataset.transform(digit)
        if name == "none":
            assert torch.equal(seen[name], t.loaders.train.dataset.dataset.transform(digit))  # Seeded wraps it
    assert not torch.allclose(seen["deit"], seen["none"])  # resized to 18, the centre 16 kept


def test_welch_is_the_textbook_test():
    """t and the Welch-Satterthwaite df from their formulas; p at a tabulated point: t = 2.776 with 4 degrees of
    freedom is the two-sided 5 % critical value."""
    a, b = [0.0, 1.0, 2.0], [4.0, 6.5, 5.0]
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 3
    test = comparison.welch(a, b)
    assert test["t"] == pytest.approx((np.mean(a) - np.mean(b)) / np.sqrt(va + vb))
    assert test["df"] == pytest.approx((va + vb) ** 2 / (va**2 / 2 + vb**2 / 2))
    d = 2.776 * np.sqrt(2 / 3)  # equal variances (1) and sizes: df = 4, t = d / sqrt(2 / 3)
    at_critical = comparison.welch([d, d + 1, d + 2], [0.0, 1.0, 2.0])
    assert at_critical["df"] == pytest.approx(4.0) and at_critical["p"] == pytest.approx(0.05, abs=2e-4)
    assert comparison.welch([1.0], [2.0, 3.0]) is None
    assert comparison.welch([1.0, 1.0], [1.0, 1.0])["p"] == 1.0 and comparison.welch([2.0, 2.0], [1.0, 1.0])["p"] == 0.0


def test_token_labels_train_each_spec_without_and_with_them(tmp_path, capsys):
    """--token-labels DIR: each spec twice (NAME, NAME+tl), the second on the label maps, a column saying which; a
    spec without the dense head, or text, is refused before any run."""
    from vspec.spec import ClassTokenHead, DenseAux

    dense, plain = tmp_path / "dense.json", tmp_path / "plain.json"
    dense.write_text(to_json(tiny(embedder=PatchEmbed(patch_size=2), head=ClassTokenHead(dense=DenseAux()))))
    plain.write_text(to_json(tiny()))
    labels, out = tmp_path / "labels", tmp_path / "cmp"
    assert vspec.cli.main(["label", str(dense), "--data", "digits", "--out", str(labels), "--grid", "6",
                           "--device", "cpu"]) == 0
    argv = ["compare", str(dense), "--data", "digits", "--token-labels", str(labels), "--seeds", "1", "--epochs",
            "1", "--batch-size", "256", "--out-dir", str(out)]
    assert vspec.cli.main(argv) == 0
    result = json.loads((out / "compare.json").read_text())
    assert [(r["name"], r["token_labels"]) for r in result["specs"]] == [("dense", None), ("dense+tl", str(labels))]
    assert f"--token-labels {labels}" in result["command"]
    runs = out / "runs"
    assert "token_labels" not in torch.load(runs / "dense-seed0" / "last.pt", weights_only=False)["data_args"]
    assert torch.load(runs / "dense+tl-seed0" / "last.pt", weights_only=False)["data_args"]["token_labels"] == \
        str(labels.resolve())
    assert "| token labels |" in comparison.table(result) and "| dense+tl | yes |" in comparison.table(result)
    capsys.readouterr()
    argv[argv.index(str(dense))] = str(plain)
    assert "no dense auxiliary head" in _error(capsys, [*argv, "--overwrite"])


def test_a_precision_axis_trains_every_spec_in_each_and_tests_the_difference(specs, tmp_path, capsys):
    """--precision fp32,bf16: each spec twice (NAME@fp32, NAME@bf16, in that precision: its runs' checkpoints say
    so, and the two rows' weights differ), a column saying which, Welch's test of the best against the other."""
    out = tmp_path / "cmp"
    assert vspec.cli.main(["compare", specs[0], "--data", "digits", "--precision", "fp32,bf16", "--seeds", "2",
                           "--epochs", "1", "--batch-size", "256", "--out-dir", str(out)]) == 0
    result = json.loads((out / "compare.json").read_text())
    assert [(r["name"], r["precision"]) for r in result["specs"]] == [("tiny_cls@fp32", "fp32"),
                                                                      ("tiny_cls@bf16", "bf16")]
    assert "--precision fp32,bf16" in result["command"]
    saved = {p: torch.load(out / "runs" / f"tiny_cls@{p}-seed0" / "last.pt", weights_only=True) for p in
             ("fp32", "bf16")}
    assert [saved[p]["precision"] for p in saved] == ["fp32", "bf16"]
    assert [r["precision"] for row in result["specs"] for r in row["runs"]] == ["fp32", "fp32", "bf16", "bf16"]
    assert any(not torch.equal(saved["fp32"]["state_dict"][k], v) for k, v in saved["bf16"]["state_dict"].items())
    table = comparison.table(result)
    assert "| spec | precision | params |" in table and "| tiny_cls@bf16 | bf16 |" in table
    tests = comparison.noise(result)
    assert sorted(t is None for t in tests.values()) == [False, True]  # the best, and Welch's p of the other
    assert all(t is None or ("within noise" if t["p"] >= comparison.ALPHA else "distinguishable") in table
               for t in tests.values())


def test_matched_to_the_first_budget_on_a_grid(specs, tmp_path, capsys):
    """--grid expands a spec; --match macs fits every other spec to the first's MACs before training, and the
    table shows the original counts beside the matched ones and the noise column."""
    out = tmp_path / "cmp"
    argv = ["compare", specs[0], specs[1], "--grid", "ffn.ratio=2.0,3.0", "--match", "macs", "--vary", "dim=8:40:2",
            "--vary", "depth", "--tolerance", "0.1", "--data", "digits", "--seeds", "2", "--epochs", "1",
            "--batch-size", "256", "--out-dir", str(out)]
    argv[argv.index("ffn.ratio=2.0,3.0")] = "block.ffn.ratio=2.0,3.0"
    assert vspec.cli.main(argv) == 0
    result = json.loads((out / "compare.json").read_text())
    names = [r["name"] for r in result["specs"]]
    assert names == ["tiny_cls[block.ffn.ratio=2.0]", "tiny_cls[block.ffn.ratio=3.0]",
                     "tiny_gap[block.ffn.ratio=2.0]", "tiny_gap[block.ffn.ratio=3.0]"]
    budget = result["specs"][0]["macs"]
    assert result["specs"][0]["matched"]["fitted"] == {}  # the reference keeps its form
    for row in result["specs"][1:]:
        assert abs(row["macs"] - budget) / budget <= 0.1 and row["matched"]["fitted"]
        spec = vspec.override(vspec.load_spec(row["path"]), {"block.ffn.ratio": float(row["name"][-4:-1]),
                                                             **row["matched"]["fitted"]})
        assert vspec.profile(spec).macs == row["macs"]
    table = capsys.readouterr().out
    assert "| matched from (params, MACs) | fitted |" in table and "the reference" in table
    assert comparison.table(result) in table and ("distinguishable" in table or "within noise" in table)
    assert result["vs_best"][max(result["specs"], key=lambda r: r["score"]["mean"])["name"]] is None


@pytest.mark.slow  # ~21 s: six text runs
def test_a_text_comparison_on_rt_polarity_prints_accuracy_and_the_noise_column(tmp_path, capsys):
    body = vspec.override(vspec.load_spec(ROOT / "specs/demo_text.py"),
                          {"embedder.seq_len": 32, "embedder.max_positions": 32, "depth": 1, "dim": 32,
                           "block.ffn.hidden": 64})
    path = tmp_path / "small_text.json"
    path.write_text(to_json(body))
    out = tmp_path / "cmp"
    argv = ["compare", str(path), "--grid", "head.kind=first_token,gap", "--data", "rt-polarity", "--seeds", "2",
            "--epochs", "1", "--batch-size", "256", "--lr", "1e-3", "--out-dir", str(out)]
    assert vspec.cli.main(argv) == 0
    result = json.loads((out / "compare.json").read_text())
    assert result["metric"] == "val_accuracy" and result["data"]["task"] == "rt-polarity"
    assert result["recipe"]["name"] == "glue" and (out / "tokenizer" / "tokenizer.json").is_file()
    for row in result["specs"]:
        assert row["scores"] == [r["val_accuracy"] for r in row["runs"]] and 0 < row["score"]["mean"] < 1
    table = capsys.readouterr().out
    assert "| val accuracy, mean |" in table and comparison.table(result) in table
    assert [line.split("|")[-2].strip() for line in table.splitlines()[2:4]].count("best") == 1


def test_matched_to_another_spec_fits_every_one(specs, tmp_path):
    """--to SPEC: the budget is another spec's, and every compared spec is fitted to it (the first too)."""
    from vspec.train.recipes import resolve

    to = tmp_path / "wide.json"
    to.write_text(to_json(tiny(dim=24)))
    result = comparison.compare(specs, data="digits", seeds=[0], recipe=resolve("compare", epochs=1, batch_size=256),
                       out=tmp_path / "cmp", match="params", to=to, vary=["dim=8:48:2", "depth"], tolerance=0.1,
                       say=lambda _: None)
    budget = vspec.profile(vspec.load_spec(to), meta=True).params
    assert result["match"]["to"] == str(to)
    for row in result["specs"]:
        assert row["matched"]["fitted"] and abs(row["params"] - budget) / budget <= 0.1
    assert all(test is None for test in result["vs_best"].values())  # one seed: no test
    assert "- (one seed)" in comparison.table(result)


def test_a_glue_comparison_compares_the_tasks_headline_metric(tmp_path):
    from tests.helpers.text_runs import cola_folder
    from vspec.train.recipes import resolve
    from vspec.train.text.readers import GLUE

    body = vspec.override(vspec.load_spec(ROOT / "specs/demo_text.py"),
                          {"embedder.seq_len": 16, "embedder.max_positions": 16, "depth": 1, "dim": 16,
                           "block.ffn.hidden": 32})
    path = tmp_path / "tiny_text.json"
    path.write_text(to_json(body))
    result = comparison.compare([path], grid={"depth": [1, 2]}, data="glue", task="cola", data_dir=str(cola_folder(
        tmp_path / "cola")), seeds=[0, 1], recipe=resolve("glue", epochs=1, batch_size=16), recipe_name="glue",
        out=tmp_path / "cmp", say=lambda _: None)
    metric = f"val_{GLUE['cola'].metric}"
    assert result["metric"] == metric and result["data"]["task"] == "cola" and result["data"]["train"] == 64
    for row in result["specs"]:
        assert row["scores"] == [r[metric] for r in row["runs"]]
    assert f"| {metric.replace('_', ' ')}, mean |" in comparison.table(result)


def test_a_grid_over_what_match_varies_and_a_stale_tokenizer_are_refused_or_replaced(specs, tmp_path, capsys):
    out = tmp_path / "cmp"
    err = _error(capsys, ["compare", *specs, "--grid", "dim=16,24", "--match", "macs", "--out-dir", str(out)])
    assert "--grid dim is also what --match varies (depth, dim)" in err
    (out / "tokenizer").mkdir(parents=True)
    err = _error(capsys, ["compare", *specs, "--out-dir", str(out)])
    assert "holds an earlier comparison" in err


# ---------------------------------------------------------------- issue 43: bounds, repeated keys, non-finite values
def _refuse_work(monkeypatch):
    """Loading a spec, profiling or training fails the test: the refusals come first."""
    import vspec.profiler

    def refuse(*args, **kwargs):
        raise AssertionError("worked")

    monkeypatch.setattr(comparison, "load_spec", refuse)
    monkeypatch.setattr(vspec.profiler, "profile", refuse)
    monkeypatch.setattr(comparison, "data_info", refuse)


def test_a_grid_past_its_limit_is_refused_before_any_spec_is_built(specs, tmp_path, capsys, monkeypatch):
    _refuse_work(monkeypatch)
    six = [a for k in ("dim", "depth", "block.attention.heads", "block.ffn.ratio", "img_size", "num_classes")
           for a in ("--grid", f"{k}={','.join(str(v) for v in range(1, 11))}")]
    err = _error(capsys, ["compare", *specs, *six, "--out-dir", str(tmp_path / "cmp")])
    assert err == (f"vspec compare: error: --grid: 2,000,000 grid points (2 specs x 10 dim x 10 depth x 10 "
                   f"block.attention.heads x 10 block.ffn.ratio x 10 img_size x 10 num_classes), more than "
                   f"{comparison.MAX_GRID}; each is trained --seeds times: narrow --grid or raise --max-candidates\n")
    err = _error(capsys, ["compare", *specs, "--grid", "depth=1,2,3", "--max-candidates", "5", "--out-dir",
                          str(tmp_path / "cmp")])
    assert "--grid: 6 grid points (2 specs x 3 depth), more than 5;" in err
    with pytest.raises(ValueError, match=r"^--grid: 6 grid points \(2 specs x 3 depth\), more than 5;"):
        comparison.load_specs(specs, {"depth": [1, 2, 3]}, max_points=5)


def test_a_grid_at_its_limit_is_built(specs):
    assert list(comparison.load_specs(specs, {"depth": [1, 2, 3]}, max_points=6)) == [
        "tiny_cls[depth=1]", "tiny_cls[depth=2]", "tiny_cls[depth=3]",
        "tiny_gap[depth=1]", "tiny_gap[depth=2]", "tiny_gap[depth=3]"]


def test_a_match_search_past_its_limit_is_refused_before_any_profile(specs, tmp_path, capsys, monkeypatch):
    import vspec.profiler

    def refuse(*args, **kwargs):
        raise AssertionError("profiled")

    monkeypatch.setattr(vspec.profiler, "profile", refuse)
    out = str(tmp_path / "cmp")
    err = _error(capsys, ["compare", *specs, "--match", "macs", "--vary", "depth=1:10000", "--out-dir", out])
    assert "--match macs: tiny_gap: the search walks 50,005,000 blocks" in err and "--max-candidates" in err
    err = _error(capsys, ["compare", *specs, "--match", "macs", "--vary", "depth=1:30", "--max-candidates", "20",
                          "--out-dir", out])
    assert "--match macs: tiny_gap: the search has 30 candidates (30 depth), more than 20" in err


@pytest.mark.parametrize("argv, needle", [
    (["--match", "macs", "--vary", "block.ffn.ratio=nan:4"], "--vary block.ffn.ratio=nan:4: 'nan' is not a finite"),
    (["--match", "macs", "--vary", "block.ffn.ratio=1:inf"], "--vary block.ffn.ratio=1:inf: 'inf' is not a finite"),
    (["--grid", "depth=1,2", "--grid", "depth=3"], "--grid depth: given twice; give its values once (depth=V1,V2,...)"),
    (["--grid", "block.ffn.ratio=2.0,NaN"], "--grid block.ffn.ratio=2.0,NaN: 'NaN' is not a finite number"),
    (["--grid", "block.ffn.ratio=1e999"], "--grid block.ffn.ratio=1e999: '1e999' is not a finite number"),
    (["--max-candidates", "0"], "argument --max-candidates: must be >= 1, got 0"),
    (["--max-candidates", "\u0661\u0660"], "argument --max-candidates: invalid int value"),
    (["--seeds", "\u0662"], "argument --seeds: invalid int value"),
    (["--match", "macs", "--tolerance", "nan"], "argument --tolerance: must be finite and >= 0, got 'nan'"),
    (["--match", "macs", "--vary", "depth=\u0661:\u0663"], "expected LOW:HIGH[:STEP] of ints (ASCII digits)"),
    (["--precision", "fp64"], "argument --precision: 'fp64': expected one or more of auto, fp32, bf16, fp16, comma"),
    (["--precision", "fp32,fp32"], "argument --precision: 'fp32,fp32': expected one or more of"),
])
def test_bad_flags_are_one_line_before_any_spec_is_loaded(specs, tmp_path, capsys, monkeypatch, argv, needle):
    if "--vary" not in argv:
        _refuse_work(monkeypatch)
    err = _error(capsys, ["compare", *specs, *argv, "--out-dir", str(tmp_path / "cmp")])
    assert needle in err and "cannot convert" not in err, err


def test_the_refiner_page_shows_the_token_label_comparison():
    """Issue 46's mnist5k comparison (benchmarks/token_labels.py): the Refiner page's table is `table` of
    docs/compare/token_labels/compare.json, with and without the teacher's token labels, 3 seeds each, and its verdict
    is the noise test's."""
    result = json.loads((MEASURED / "token_labels" / "compare.json").read_text())
    page = doc("families/refiner")
    assert comparison.table(result) in page and f"`{result['command']}`" in page
    assert result["data"]["name"] == "mnist5k" and len(result["seeds"]) == 3
    assert [r.get("token_labels") is not None for r in result["specs"]] == [False, True]
    assert "--token-labels" in result["command"] and result["teacher"]["val_top1"] > 80
    within = all(t is None or t["p"] >= comparison.ALPHA for t in comparison.noise(result).values())
    assert ("Within the seed noise" in page) == within


@pytest.mark.parametrize("measured, data", [("digits", "digits"), ("rt_polarity", "rt-polarity")])
def test_the_training_page_shows_the_precision_comparisons(measured, data):
    """Issue 63's accuracy parity: the Training page's tables are `table` of docs/compare/precision/*/compare.json,
    fp32 against bf16, 3 seeds each, and its verdict is the noise test's."""
    result = json.loads((MEASURED / "precision" / measured / "compare.json").read_text())
    page = doc("training")
    assert comparison.table(result) in page and f"`{result['command']}`" in page
    assert result["data"]["name"] == data and len(result["seeds"]) == 3 and "--precision fp32,bf16" in result["command"]
    assert [r["precision"] for r in result["specs"]] == ["fp32", "bf16"]
    assert all(run["precision"] == row["precision"] for row in result["specs"] for run in row["runs"])
    within = all(t is None or t["p"] >= comparison.ALPHA for t in comparison.noise(result).values())
    assert ("In both, bf16 is within the seed noise of fp32" in page) == within
