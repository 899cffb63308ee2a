"""Profiler: reference numbers for the presets, counters agreeing, meta-device profiling, the parts
of a model adding up to the whole, conventions attributed by where the MACs sit."""

import re
from pathlib import Path

import pytest
import torch
from torch import nn

import vspec
from tests.helpers.docs_examples import every_page
from vspec.nn.layers import AttentionCore
from vspec.profiler import _flop_counter_mapping, norm_macs, sdpa_macs

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "specs").glob("*.py"))

# (params, analytic MACs with attention matmuls, no norms): timm's parameter counts; MACs as docs/profiling.md
# gives them
REFERENCE = {
    "deit_tiny": (5_717_416, 1.2537e9),
    "deit_small": (22_050_664, 4.599e9),
    "vit_base": (86_567_656, 17.564e9),
}


def vit_macs(dim: int, depth: int, hidden: int, tokens: int, patch_dim: int, patches: int, classes: int,
             norms_per_block: int = 2, final_norm: bool = True) -> dict[str, int]:
    """ViT MACs written out from the architecture (batch 1): linear / conv / attention / norm."""
    block_linear = tokens * dim * 3 * dim + tokens * dim * dim + 2 * tokens * dim * hidden
    attention = 2 * tokens * tokens * dim
    return {
        "linear": depth * block_linear + dim * classes,
        "conv": patches * patch_dim * dim,
        "attention": depth * attention,
        "norm": 5 * tokens * dim * (depth * norms_per_block + final_norm),
    }


@pytest.fixture(scope="module")
def profiles():
    return {p.stem: vspec.profile(vspec.load_spec(p)) for p in SPECS}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_numbers(profiles, name):
    params, macs = REFERENCE[name]
    prof = profiles[name]
    assert prof.params == params
    assert abs(prof.macs - macs) / macs < 0.005
    assert prof.unsupported_ops == []


@pytest.mark.parametrize("name,dim", [("deit_tiny", 192), ("deit_small", 384), ("vit_base", 768)])
def test_vit_macs_by_op_match_formula(profiles, name, dim):
    expect = vit_macs(dim, 12, 4 * dim, 197, 3 * 16 * 16, 196, 1000)
    by_op = profiles[name].by_op
    assert by_op["linear"] == expect["linear"]
    assert by_op["conv"] == expect["conv"]
    assert by_op["scaled_dot_product_attention"] == expect["attention"]
    assert by_op["layer_norm"] == expect["norm"]
    assert profiles[name].macs == sum(expect.values())


def test_simplevit_weight_params_msf_table6(profiles):
    prof = profiles["simplevit_s"]
    assert round(prof.params_weights / 1e6, 2) == 21.91  # MSF Table 6, orig S
    assert abs(2 * prof.macs / 1e9 - 9.16) < 0.01 * 9.16  # Table 6: 9.16 G FLOPs = 2 x MACs


def whole_model_macs(model: nn.Module, x: torch.Tensor) -> int:
    """FlopCounterMode over the whole (untied) model's forward, with the profiler's formulas."""
    from torch.utils.flop_counter import FlopCounterMode

    mode = FlopCounterMode(display=False, custom_mapping=_flop_counter_mapping())
    with mode, torch.no_grad():
        model(x)
    return mode.get_total_flops() // 2


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_preset_fully_counted(profiles, path):
    prof = profiles[path.stem]
    spec = vspec.load_spec(path)
    model = vspec.build(spec, device="meta").eval()
    assert prof.unsupported_ops == []
    assert prof.params == sum(p.numel() for p in model.parameters())
    # MSF's convention: the weights of linear and convolution layers, nothing else
    assert prof.params_weights == sum(m.weight.numel() for m in model.modules()
                                      if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d)))
    assert sum(c.params for c in prof.components.values()) == prof.params
    assert sum(c.macs for c in prof.components.values()) == prof.macs
    assert sum(s.params for s in prof.stages) + sum(c.params for c in prof.components.values() if c.stage is None) \
        == prof.params
    if prof.counter.startswith("fvcore"):  # above 300 M parameters the count is FlopCounterMode's own, on meta
        assert prof.crosscheck_macs == prof.macs  # FlopCounterMode with the same formulas agrees exactly
    assert sum(prof.by_op.values()) == prof.macs
    # the parts (each distinct one counted once, times its repeats) add up to the whole forward pass
    assert whole_model_macs(model, vspec.example_input(spec, 1, device="meta")) == prof.macs
    assert prof.distinct_parts < len(prof.components) or len(prof.components) <= 4


def test_meta_device_agrees_with_fvcore(profiles):
    meta = vspec.profile(vspec.load_spec(ROOT / "specs/deit_small.py"), meta=True)
    real = profiles["deit_small"]
    assert meta.counter.endswith("(meta device)")
    assert meta.macs == real.macs and meta.params == real.params
    assert {k: (c.params, c.macs) for k, c in meta.components.items()} == \
        {k: (c.params, c.macs) for k, c in real.components.items()}


def test_two_billion_parameter_vit_on_meta_device():
    spec = vspec.override(vspec.load_spec(ROOT / "specs/vit_base.py"),
                          {"dim": 1920, "depth": 48, "block.attention.heads": 16, "block.ffn.ratio": 5.0})
    prof = vspec.profile(spec)  # > 300 M parameters: meta path chosen automatically, no weights allocated
    assert prof.counter.endswith("(meta device)")
    d, hidden, tokens = 1920, 9600, 197
    expected_params = (3 * 256 * d + d) + d + tokens * d + 48 * (
        4 * d * d + 4 * d + 2 * d * hidden + hidden + d + 4 * d) + 2 * d + d * 1000 + 1000
    assert prof.params == expected_params and prof.params > 2e9
    expect = vit_macs(d, 48, hidden, tokens, 3 * 256, 196, 1000)
    assert prof.macs == sum(expect.values())


def swin_macs(dim: int, depths: tuple[int, ...], window: int = 7, tokens: int = 56 * 56, classes: int = 1000):
    """Swin MACs written out from the architecture (batch 1, 224 px): per block qkv + proj + MLP (ratio 4)
    + the attention matmuls inside windows of window^2 tokens + two LayerNorms; patch merging between
    stages; the 4 x 4 patch convolution and its LayerNorm, the final LayerNorm and the classifier."""
    n = min(window * window, tokens)
    total = tokens * 48 * dim + 5 * tokens * dim
    for i, depth in enumerate(depths):
        if i:
            tokens //= 4
            total += tokens * 4 * dim * 2 * dim + 5 * tokens * 4 * dim  # on the merged grid
            dim *= 2
        n = min(n, tokens)
        total += depth * (tokens * dim * 3 * dim + tokens * dim * dim + 2 * tokens * dim * 4 * dim
                          + 2 * tokens * n * dim + 2 * 5 * tokens * dim)
    return total + 5 * tokens * dim + dim * classes


@pytest.mark.parametrize("name,dim,depths,timm_gmacs", [("swin_tiny", 96, (2, 2, 6, 2), 4.51),
                                                         ("swin_small", 96, (2, 2, 18, 2), 8.77),
                                                         ("swin_base", 128, (2, 2, 18, 2), 15.47)])
def test_swin_macs(profiles, name, dim, depths, timm_gmacs):
    """The formula exactly; timm's published GMACs (its results tables) to 0.5 %."""
    prof = profiles[name]
    assert prof.macs == swin_macs(dim, depths)
    assert abs(prof.macs / 1e9 - timm_gmacs) / timm_gmacs < 0.005
    assert [s.grid for s in prof.stages] == [(56, 56), (28, 28), (14, 14), (7, 7)]
    assert [s.dim for s in prof.stages] == [dim * 2**i for i in range(4)]
    # blocks of a stage that differ only in their shift are counted once each; stage 4 (7 x 7, one window,
    # no shift) has one distinct block
    assert prof.distinct_parts == 1 + 2 + 3 * 2 + 1 + 1 + 1 + 1


def test_depth_1000_counts_distinct_blocks_once():
    spec = vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"), {"depth": 1000})
    prof = vspec.profile(spec)
    assert prof.distinct_parts == 4 and len(prof.components) == 1003
    assert prof.macs == sum(vit_macs(192, 1000, 768, 197, 3 * 16 * 16, 196, 1000).values())
    assert prof.params == 185_664 + 1000 * 444_864 + 384 + 193_000


def test_stages_that_repeat_count_each_distinct_part_once():
    """Identical blocks in different stages (one spec, one token shape, one shift) are built once, tied,
    counted once and multiplied (400 one-block stages used to count 403 distinct of 403 parts); the
    totals are still those of the whole, untied model's forward pass."""
    ln = vspec.Norm(eps=1e-5)
    swin = vspec.Block(attention=vspec.WindowMHSA(heads=2, window=4), norm=ln)
    first = [vspec.Stage(depth=2, dim=32, block=swin)] * 20  # 8 x 8 grid: unshifted and shifted blocks
    merged = [vspec.Stage(depth=2, dim=64, block=swin, entry=vspec.PatchMerging(norm=ln))]
    later = [vspec.Stage(depth=2, dim=64, block=swin)] * 20  # 4 x 4 grid, one window: no shift
    spec = vspec.Model(embedder=vspec.PatchEmbed(patch_size=4, norm=ln), stages=first + merged + later,
                       img_size=32, class_token=False, pos_embed="none", head=vspec.GAPHead(), num_classes=10)
    prof = vspec.profile(spec)
    # embedder, two blocks at 32 wide (shift 0 and 2), the entry, one block at 64 wide, final norm, head
    assert prof.distinct_parts == 7 and len(prof.components) == 1 + 40 + 1 + 42 + 1 + 1
    model = vspec.build(spec, device="meta").eval()
    assert prof.params == sum(p.numel() for p in model.parameters())
    assert whole_model_macs(model, torch.empty(1, 3, 32, 32, device="meta")) == prof.macs
    assert prof.crosscheck_macs == prof.macs and sum(prof.by_op.values()) == prof.macs
    assert len({(s.params, s.macs) for s in prof.stages[:20]}) == 1
    assert len({(s.params, s.macs) for s in prof.stages[21:]}) == 1
    assert sum(s.params for s in prof.stages) + sum(c.params for c in prof.components.values() if c.stage is None) \
        == prof.params
    assert sum(s.macs for s in prof.stages) + sum(c.macs for c in prof.components.values() if c.stage is None) \
        == prof.macs
    meta = vspec.profile(spec, meta=True)
    assert (meta.macs, meta.params, meta.conventions) == (prof.macs, prof.params, prof.conventions)


def test_conventions_follow_where_the_macs_sit(monkeypatch):
    """An attention core that builds its map with plain matmuls instead of SDPA: the op kinds change,
    the DHVT convention (everything but the attention matmuls) does not."""
    spec = vspec.load_spec(ROOT / "specs/dhvt_tiny_cifar_p4.py")
    before = vspec.profile(spec)

    def matmul_core(self, q, k, v, mask=None, causal=False):
        return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1) @ v

    monkeypatch.setattr(AttentionCore, "forward", matmul_core)
    after = vspec.profile(spec)
    assert "scaled_dot_product_attention" in before.by_op and "scaled_dot_product_attention" not in after.by_op
    assert after.macs == before.macs and after.conventions == before.conventions


def test_input_size_changes_the_grid():
    spec = vspec.load_spec(ROOT / "specs/simplevit_s.py")  # fixed sin-cos: any size the patch divides
    small = vspec.profile(spec, input_size=112)
    assert small.input_size == (112, 112)
    assert small.by_op["scaled_dot_product_attention"] == 12 * 2 * 49 * 49 * 384
    with pytest.raises(vspec.SpecError, match="embedder.patch_size"):
        vspec.profile(spec, input_size=100)


def test_formulas():
    assert sdpa_macs((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)) == 2 * 3 * 5 * 7 * (4 + 6)
    assert norm_macs((2, 10), True) == 100 and norm_macs((2, 10), False) == 80


def test_preset_tables_match_measurement(profiles):
    """The preset tables (one per family page, vspec's own on the profiling page) are what the profiler measures
    (params exactly, MACs to 4 digits)."""
    rows = re.findall(r"^\| `specs/(\w+)\.py` \|[^|]*\| ([\d,]+)[^|]*\| ([\d.]+) G \|$",
                      every_page(), re.M)
    assert sorted(name for name, _, _ in rows) == sorted(p.stem for p in SPECS)  # each preset in one table, once
    for name, params, macs in rows:
        assert int(params.replace(",", "")) == profiles[name].params
        assert float(macs) == float(f"{profiles[name].macs / 1e9:.4g}")
