"""The CPU benchmarks (benchmarks/models.py, benchmarks/text.py, benchmarks/compile.py's --step,
benchmarks/common.py) at tiny sizes: their rows in fp32 and bf16 are their rounds, vspec's bf16 against its own fp32
comes from the same rounds, MFU is the model's FLOPs (written out here, fvcore's convention) over the matmul rate of
the row's precision, the table reads rows written before precision and MFU were recorded, and the default precisions
follow the CPU's flags (monkeypatched: the tests hold on CPUs with and without native bf16). No timing is asserted."""

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers

import vspec
from benchmarks import common, models, text
from vspec.convert.hf import from_hf
from vspec.ops import attention, vit

ROOT = Path(__file__).resolve().parents[1]
RATES = {"fp32": 50.0, "bf16": 200.0}  # GFLOP/s given to the runs, so that MFU's arithmetic is checked exactly
LN = 5  # fvcore counts a LayerNorm as 5 MACs per element


def deit_tiny_macs() -> int:
    """MACs of one 224 px image through DeiT-Ti (197 tokens of 192, 12 blocks, MLP 768, 1000 classes)."""
    n, d, f = 197, 192, 768
    block = 4 * n * d * d + 2 * n * n * d + 2 * n * d * f + 2 * LN * n * d  # qkv + proj, q k^T and a v, MLP, 2 norms
    return 196 * (16 * 16 * 3) * d + 12 * block + LN * n * d + d * 1000  # patches, blocks, final norm, head


def bert_macs(tokens: int, d: int, ffn: int, layers: int) -> int:
    """MACs of one sequence through a BERT body with its tanh pooler (post-norm: two norms a block, one embedding
    norm)."""
    block = 4 * tokens * d * d + 2 * tokens * tokens * d + 2 * tokens * d * ffn + 2 * LN * tokens * d
    return layers * block + LN * tokens * d + d * d


def check_rows(rows: list[dict], macs: int, run: list[str]) -> None:
    """Each row within its rounds, each side's MFU = rate x FLOPs / the matmul rate of its precision; vspec's
    bf16-against-fp32 row the same rounds as the others."""
    for r in rows:
        assert r["rounds"] == 2 and r["ratio_min"] <= r["ratio"] <= r["ratio_max"] and r["vspec_rate"] > 0
        flops = (2 if r["mode"] == "forward" else 6) * macs
        for side in ("reference", "vspec"):
            precision = r["precision"] if side == "vspec" else r["reference_precision"]
            assert r[side + "_mfu"] == pytest.approx(r[side + "_rate"] * flops / (RATES[precision] * 1e9), rel=1e-9)
    for mode in ("forward", "forward+backward"):
        by = {(r["reference"].startswith("vspec"), r["precision"]): r for r in rows if r["mode"] == mode}
        assert sorted(k[1] for k in by if not k[0]) == sorted(run)
        if len(run) == 2:
            own = by[True, "bf16"]
            assert own["reference_precision"] == "fp32" and own["reference"] == "vspec fp32"
            assert own["reference_rate"] == by[False, "fp32"]["vspec_rate"]
            assert own["vspec_rate"] == by[False, "bf16"]["vspec_rate"]
        else:
            assert (True, "bf16") not in by


def test_the_cpu_benchmark_rows_are_its_rounds_in_fp32_and_bf16(tmp_path, monkeypatch, capsys):
    """`python -m benchmarks.models --precision fp32 bf16` (deit_tiny, batch 1, 2 rounds): the two precisions, vspec's
    bf16 against its fp32, MFU per side; the JSON holds the matmul rates, the flags and the choices; its table
    has the precision and MFU columns."""
    monkeypatch.setattr(common, "matmul_rate", lambda p: RATES[p] * 1e9)
    heaps = []  # the allocator asked for (the test process's own is left as it is)
    monkeypatch.setattr(common, "set_heap", lambda kept: heaps.append(kept) or True)
    out = tmp_path / "models.json"
    monkeypatch.setattr(sys, "argv", ["models", "--models", "deit_tiny", "--precision", "fp32", "bf16",
                                      "--batch-size", "1", "--rounds", "2", "--json", str(out)])
    models.main()
    printed = capsys.readouterr().out
    assert heaps == [True] and ", heap kept," in printed
    assert "matmul rate (2048^3" in printed and "fp32 50.0 GFLOP/s, bf16 200.0 GFLOP/s" in printed
    result = json.loads(out.read_text())
    assert result["machine"]["matmul GFLOP/s"] == RATES and result["machine"]["heap"] == "kept"
    assert result["machine"]["flags"] == common.cpu_flags() and result["machine"]["choices"] == common.choices()
    rows = result["rows"]
    assert [(r["mode"], r["precision"], r["reference_precision"]) for r in rows] == [
        (m, p, q) for m in ("forward", "forward+backward") for p, q in (("fp32", "fp32"), ("bf16", "bf16"),
                                                                       ("bf16", "fp32"))]
    check_rows(rows, deit_tiny_macs(), ["fp32", "bf16"])
    table = models.table(result)
    assert table.count("| deit_tiny | timm vit_tiny_patch16_224 | batch 1, 224 px |") == 4
    assert table.count("| deit_tiny | vspec fp32 | batch 1, 224 px |") == 2 and "| bf16 vs fp32 |" in table
    mfu = rows[0]["vspec_mfu"]
    assert f"-{rows[0]['ratio_max']:.3f}] | {100 * rows[0]['reference_mfu']:.1f} % | {100 * mfu:.1f} % |" in table
    assert "matmul GFLOP/s fp32 50.0, bf16 200.0" in table and ", heap kept," in table


@pytest.mark.parametrize("asked, took, entry", [("kept", True, "kept"), ("kept", False, "glibc"),
                                                ("glibc", True, "glibc")])
def test_the_heap_option_keeps_the_heap_unless_told_or_refused(monkeypatch, asked, took, entry):
    """--heap kept asks glibc to keep freed blocks and says "kept" where it took that; --heap glibc leaves the
    allocator alone."""
    heaps = []
    monkeypatch.setattr(common, "set_heap", lambda kept: heaps.append(kept) or took)
    assert common.apply_heap(asked) == {"heap": entry}
    assert heaps == ([True] if asked == "kept" else [])


def tiny_bert() -> tuple[transformers.BertModel, torch.nn.Module]:
    config = transformers.BertConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=1, intermediate_size=256,
                                     vocab_size=2000)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    ref = transformers.BertModel(config)
    return ref, from_hf(ref)


@pytest.mark.parametrize("run", [["fp32", "bf16"], ["bf16"]])
def test_the_text_benchmark_rows_in_each_precision_with_mfu(run):
    """benchmarks/text.py's race at a tiny BERT (1 x 64, 16 tokens): the precisions asked, MFU from the padded
    length's MACs; bf16 alone has no row against fp32."""
    ref, ours = tiny_bert()
    rows = text.compare(ref, ours, 2, 16, 2, run, RATES)
    assert len(rows) == 2 * (len(run) + (len(run) == 2))
    check_rows(rows, bert_macs(16, 64, 256, 1), run)


def test_the_table_reads_rows_written_before_precision_and_mfu():
    """docs/cpu/models.json predates bf16: its rows print as fp32 with the MFU cells blank."""
    result = json.loads((ROOT / "docs" / "cpu" / "models.json").read_text())
    assert "precision" not in result["rows"][0]
    lines = models.table(result).splitlines()[2:2 + len(result["rows"])]
    r = result["rows"][0]
    assert lines[0] == (f"| deit_tiny | timm vit_tiny_patch16_224 | batch 32, 224 px | forward | fp32 | "
                        f"{r['reference_rate']:.1f} img/s | {r['vspec_rate']:.1f} img/s | {r['ratio']:.3f} "
                        f"[{r['ratio_min']:.3f}-{r['ratio_max']:.3f}] |  |  |")
    assert all(line.split(" | ")[4] == "fp32" and line.endswith("|  |  |") for line in lines)


@pytest.mark.parametrize("native", ["AMX", "AVX-512 BF16", None])
def test_the_default_precisions_follow_the_cpu_s_bf16(monkeypatch, native):
    """bf16 joins fp32 by default where the CPU computes it natively (AMX or AVX-512 BF16: vspec.ops.precision's
    native_bf16, what `--precision auto` picks by); asked, as asked."""
    monkeypatch.setattr(common, "native_bf16", lambda: native)
    assert common.precisions(None) == (["fp32", "bf16"] if native else ["fp32"])
    assert common.precisions(["bf16"]) == ["bf16"]


def test_the_header_names_the_flags_the_choices_and_the_matmul_rates(monkeypatch, capsys):
    monkeypatch.setattr(common, "cpu_flags", lambda: {f: f == "avx2" for f in common.FLAGS})
    monkeypatch.setattr(common, "native_bf16", lambda: None)
    monkeypatch.setattr(common, "matmul_rate", lambda p: RATES[p] * 1e9)
    monkeypatch.setattr(vit, "ONEDNN_WINS", not vit.ONEDNN_WINS)
    info = common.header({"timm": "x"}, ["fp32"])
    printed = capsys.readouterr().out
    assert "CPU flags: avx2 yes, avx512f no, avx512_bf16 no, amx_bf16 no, amx_tile no; native bf16: no" in printed
    assert f"ONEDNN_WINS {vit.ONEDNN_WINS}, SHORT_K {vit.SHORT_K}" in printed
    assert info["choices"]["ONEDNN_WINS"] is vit.ONEDNN_WINS and info["matmul GFLOP/s"] == {"fp32": 50.0}
    assert info["timm"] == "x" and info["flags"]["avx2"] and not info["flags"]["amx_bf16"]


def test_the_matmul_rate_is_the_fastest_product_s_flops(monkeypatch):
    """2 n^3 FLOPs over the fastest of the timed products, over every engine (the clock faked: torch.mm's products of
    3, 1.5 and 2 s, oneDNN's of 4, 1.25 and 5 s where it is there)."""
    ticks = iter([0.0, 3.0, 10.0, 11.5, 20.0, 22.0, 30.0, 34.0, 40.0, 41.25, 50.0, 55.0])
    monkeypatch.setattr(common, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    onednn = vit._ONEDNN is not None
    assert common.matmul_rate("bf16", n=8, reps=3) == 2 * 8**3 / (1.25 if onednn else 1.5)


@pytest.mark.skipif(vit._ONEDNN is None, reason="torch without oneDNN: matmul_rate times torch.mm alone")
def test_both_engines_compute_the_product_timed():
    """The oneDNN engine `matmul_rate` times computes a @ b, as torch.mm does."""
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    out = vit._ONEDNN(a, b.t().contiguous(), None, "none", [], "")
    torch.testing.assert_close(out, a @ b)


@pytest.mark.parametrize("math_only", [True, False])
def test_bf16_runs_both_models_on_sdpa_s_math_backend_where_vspec_does(monkeypatch, math_only):
    """Where torch's CPU flash attention cannot run bf16 (vspec/ops/attention.py), the reference gets SDPA's math
    backend under the benchmark's bf16 too, as vspec takes it; elsewhere SDPA chooses."""
    monkeypatch.setattr(attention, "_FLASH_PACKS_WITHOUT_AVX512", math_only)
    with common.autocast("bf16"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert torch.backends.cuda.flash_sdp_enabled() is not math_only  # the flags SDPA's CPU dispatch reads too
        assert torch.backends.cuda.math_sdp_enabled()
    with common.autocast("fp32"):
        assert not torch.is_autocast_enabled("cpu") and torch.backends.cuda.flash_sdp_enabled()


def test_the_step_profile_classes_each_models_ops_and_rates_the_linear_shapes(monkeypatch, capsys):
    """`python -m benchmarks.step_profile` (deit_tiny, batch 1, fp32, one step): every class printed for both models,
    the matrix products a share of each step, the step the classes' sum; --gemms rates each linear shape that ran
    (DeiT-Ti's qkv: 197 tokens, 192 -> 576)."""
    from benchmarks import step_profile
    monkeypatch.setattr(sys, "argv", ["step_profile", "--model", "deit_tiny", "--batch-size", "1", "--precision",
                                      "fp32", "--steps", "1", "--rounds", "1", "--gemms"])
    step_profile.main()
    printed = capsys.readouterr().out
    rows = {line.split("  ")[1].strip(): line for line in printed.splitlines() if line.startswith("  ") and "(" in line
            and "%" in line}
    assert set(rows) == {*step_profile.CLASSES, "the rest"}
    products = [float(cell.split("(")[1].split("%")[0]) for cell in rows["matrix products"].split(")")[:2]]
    assert all(0 < p < 100 for p in products)
    assert "profiled reference / vspec" in printed and "heap kept (vspec.train.heap):" in printed
    assert "197 x 192 -> 576" in printed
    assert step_profile.classify("aten::gelu_backward") == "GELU" and step_profile.classify("aten::view") == "the rest"
    assert "matrix products' ceiling: reference step / vspec's products" in printed


def test_the_ceiling_is_the_reference_step_over_vspecs_products_and_the_budget_left_for_the_rest():
    """The ceiling line: 900 ms (reference) over 500 ms of products is 1.8; for 1.25x the other work may take
    900 / 1.25 - 500 = 220 ms, 300 now being 300 / 220 of it; products over 720 ms leave no budget."""
    from benchmarks.step_profile import ceiling
    line = ceiling(900.0, 500.0, 300.0, 1.25)
    assert "products 1.800" in line and "may take 220.0 ms a step, now 300.0 (1.36x that)" in line
    assert "the products alone are 30.0 ms too slow" in ceiling(900.0, 750.0, 100.0, 1.25)


def test_the_heap_benchmark_races_both_modes_and_leaves_the_steady_state(monkeypatch, capsys):
    """`python -m benchmarks.heap` (deit_tiny, batch 1, fp32, 2 rounds): a line per model and precision with both
    modes' times and the ratios' range; glibc's steady state after it."""
    from benchmarks import heap as heap_bench
    from vspec.train import heap
    if heap._glibc() is None:
        pytest.skip("glibc's allocator only (Linux)")
    modes = []
    real = heap.set_heap
    monkeypatch.setattr(heap_bench, "set_heap", lambda kept: modes.append(kept) or real(kept))
    monkeypatch.setitem(heap_bench.PAIRS, "deit_tiny", ("timm vit_tiny_patch16_224", 1))
    monkeypatch.setattr(sys, "argv", ["heap", "--models", "deit_tiny", "--precision", "fp32", "--rounds", "2"])
    heap_bench.main()
    line = [row for row in capsys.readouterr().out.splitlines() if "deit_tiny" in row]
    assert len(line) == 1 and "fp32 batch 1" in line[0] and "default/kept" in line[0] and "(range " in line[0]
    assert modes[0] is False and modes[-1] is False and modes[1:-1].count(True) == modes[1:-1].count(False) == 2


def test_the_compile_benchmark_races_eager_vspec_against_the_compiled_steps(tmp_path, monkeypatch, capsys):
    """`python -m benchmarks.compile --step deit_tiny` (batch 1, fp32, 2 rounds, dynamo's eager backend): vspec's eager
    training step against the twin's, eager and compiled, and against its own compiled step, all from the same rounds,
    the compiled rows with their compile time; the rows and table are benchmarks/models.py's."""
    from benchmarks import compile as compile_bench
    monkeypatch.setattr(common, "matmul_rate", lambda p: RATES[p] * 1e9)
    out = tmp_path / "compile.json"
    cache = os.environ.get(compile_bench.CACHE)
    monkeypatch.setattr(sys, "argv", ["compile", "--step", "deit_tiny", "--precision", "fp32", "--batch-size", "1",
                                      "--rounds", "2", "--backend", "eager", "--json", str(out)])
    try:
        compile_bench.main()
    finally:
        torch._dynamo.reset()
    assert os.environ.get(compile_bench.CACHE) == cache  # inductor's cache folder as it was before the cold compiles
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["machine"]["compile backend"] == "eager" and result["machine"]["matmul GFLOP/s"] == {"fp32": 50.0}
    rows = result["rows"]
    twin = "timm vit_tiny_patch16_224"
    assert [r["reference"] for r in rows] == [twin, f"{twin} compiled", "vspec compiled"]
    assert len({r["vspec_rate"] for r in rows}) == 1  # one eager vspec in the rounds all rows read
    assert rows[0]["compile_s"] is None and all(r["compile_s"] > 0 for r in rows[1:])
    assert printed.count("(compile ") == 2
    flops = 6 * deit_tiny_macs()
    for r in rows:
        assert (r["mode"], r["precision"], r["rounds"]) == ("forward+backward", "fp32", 2)
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
        assert r["vspec_mfu"] == pytest.approx(r["vspec_rate"] * flops / (RATES["fp32"] * 1e9), rel=1e-9)
    assert models.table(result).count("| deit_tiny | ") == 3


def test_the_compile_benchmark_steps_only_presets_with_a_twin(monkeypatch):
    from benchmarks import compile as compile_bench
    monkeypatch.setattr(sys, "argv", ["compile", "--step", "sot_tiny"])
    with pytest.raises(SystemExit, match="presets with a twin .*not sot_tiny"):
        compile_bench.main()


def test_the_packed_benchmark_finds_each_linear_shape_and_races_both_sides(tmp_path, monkeypatch, capsys):
    """benchmarks/packed.py: the hooks find DeiT-Ti's linear layers at their rows (12 blocks of qkv, proj, fc1 with
    its GELU, fc2; the head on the batch); with native bf16, `--models deit_tiny` (batch 1, 2 rounds) prints and
    writes a row per shape and one for the whole forward, each ratio within its rounds' range, packing done on the
    packed side; without, it says there is nothing to measure and writes nothing."""
    from benchmarks import packed

    model = vspec.create_model("deit_tiny").eval()
    shapes = packed.layer_shapes(model, torch.randn(1, 3, 224, 224))
    assert shapes == {(197, 192, 576, None): 12, (197, 192, 192, None): 12, (197, 192, 768, "gelu"): 12,
                      (197, 768, 192, None): 12, (1, 192, 1000, None): 1}
    monkeypatch.setattr(packed, "BATCH", {"deit_tiny": 1})
    monkeypatch.setattr(common, "set_heap", lambda kept: True)
    reorders = []
    op = vit._REORDER
    monkeypatch.setattr(vit, "_REORDER", op and (lambda w, rows: reorders.append(rows) or op(w, rows)))
    out = tmp_path / "packed.json"
    monkeypatch.setattr(sys, "argv", ["packed", "--models", "deit_tiny", "--rounds", "2", "--json", str(out)])
    packed.main()
    printed = capsys.readouterr().out
    if not (vit._NATIVE_BF16 and vit._ONEDNN is not None and op is not None):
        assert "nothing to measure" in printed and not out.exists() and not reorders
        return
    rows = json.loads(out.read_text())["rows"]
    assert [(tuple(r["shape"]), r["act"], r["calls"]) for r in rows[:-1]] == sorted(
        ((shape[:3], shape[3], calls) for shape, calls in shapes.items()), key=lambda t: (t[0], str(t[1])))
    assert rows[-1]["shape"] is None and rows[-1]["batch"] == 1 and "deit_tiny forward, batch 1" in printed
    assert all(r["ratio_min"] <= r["ratio"] <= r["ratio_max"] and r["plain_ms"] > 0 < r["packed_ms"] for r in rows)
    assert reorders  # the packed side packed
    table = packed.table(json.loads(out.read_text()))
    assert table.count("| deit_tiny |") == len(rows) and "**whole forward**, batch 1" in table and "heap kept;" in table
