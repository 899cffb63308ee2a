"""Refiner's analyses behind `vspec analyze`: linear CKA against a float64 HSIC reference written from
the formula, the feature-evolution curve of Eq. 2 against features computed block by block, the
attention maps against softmax(q k^T / sqrt(d)) from the qkv weights, the before / after hook logic
with a stand-in map-refining module, and the command's files and one-line errors."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from einops import rearrange
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import vspec
from vspec.analysis import AnalysisError
from vspec.cli import main
from vspec.models.msf.modules import GaussianAttentionCore, GaussianBiasedCore
from vspec.models.refiner.analysis import attention_maps, default_blocks, feature_evolution, linear_cka
from vspec.models.refiner.modules import MapRefiner
from vspec.nn.layers import AttentionCore, AttentionCoreBase
from vspec.nn.swin import BiasedAttentionCore
from vspec.spec import Block, GAPHead, Model, PatchEmbed, PatchMerging, Stage, WindowMHSA

ROOT = Path(__file__).resolve().parents[3]
F64 = torch.float64


def hsic_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)), K = X X^T, L = Y Y^T, HSIC(K, L) = tr(K H L H) / (n-1)^2."""
    n = x.shape[0]
    h = torch.eye(n, dtype=F64) - torch.full((n, n), 1 / n, dtype=F64)
    k, l = x.double() @ x.double().T, y.double() @ y.double().T  # noqa: E741

    def hsic(a, b):
        return torch.trace(a @ h @ b @ h) / (n - 1) ** 2

    return float(hsic(k, l) / torch.sqrt(hsic(k, k) * hsic(l, l)))


def tiny_vit(**changes) -> vspec.Model:
    """DeiT-Tiny at 3 blocks x 16, 2 heads, 16 px, 4 px patches: 16 patch tokens + the class token."""
    return vspec.override(vspec.load_spec(ROOT / "specs" / "deit_tiny.py"),
                          {"depth": 3, "dim": 16, "block.attention.heads": 2, "img_size": 16,
                           "embedder.patch_size": 4, "num_classes": 3, **changes})


def tiny_swin() -> Model:
    """Two Swin stages at 32 px: 8x8 tokens x 16 (windows of 4x4, the second block shifted), merged into
    4x4 tokens x 32."""
    return Model(embedder=PatchEmbed(patch_size=4), img_size=32, num_classes=3, class_token=False,
                 pos_embed="none", head=GAPHead(),
                 stages=[Stage(depth=2, dim=16 * 2**i, block=Block(attention=WindowMHSA(heads=2, window=4)),
                               entry=PatchMerging() if i else None) for i in range(2)])


# ---------------------------------------------------------------- linear CKA
@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 20), p=st.integers(1, 8), q=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_linear_cka_equals_the_hsic_form(n, p, q, seed):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, p, generator=g, dtype=F64), torch.randn(n, q, generator=g, dtype=F64)
    assert linear_cka(x, y) == pytest.approx(hsic_cka(x, y), abs=1e-9)
    assert linear_cka(x.float(), y.float()) == pytest.approx(hsic_cka(x, y), abs=1e-5)  # float64 inside


@settings(max_examples=25, deadline=None)
@given(n=st.integers(4, 20), p=st.integers(2, 8), seed=st.integers(0, 2**16), c=st.floats(0.01, 100))
def test_linear_cka_invariances(n, p, seed, c):
    """CKA(X, X) = 1; an orthogonal map, an isotropic scaling and a shift of X leave CKA(X, Y) unchanged;
    a non-isotropic scaling of the columns generally changes it."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, p, generator=g, dtype=F64), torch.randn(n, p + 1, generator=g, dtype=F64)
    o, _ = torch.linalg.qr(torch.randn(p, p, generator=g, dtype=F64))
    ref = linear_cka(x, y)
    assert linear_cka(x, x) == pytest.approx(1, abs=1e-12) and 0 <= ref <= 1 + 1e-12
    assert linear_cka(c * x @ o + torch.randn(p, generator=g, dtype=F64), y) == pytest.approx(ref, abs=1e-9)


def test_linear_cka_reads_more_than_the_scale():
    x = torch.randn(50, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert linear_cka(x * torch.tensor([1.0, 10.0, 100.0], dtype=F64), x) < 0.99
    with pytest.raises(AnalysisError, match="as many examples"):
        linear_cka(x, x[:10])


# ---------------------------------------------------------------- Eq. 2
@pytest.mark.parametrize("final_norm", [True, False])
def test_feature_evolution_is_eq2_over_the_blocks(final_norm):
    """F_k from features computed here block by block, tokens of the batch as examples, averaged over two
    batches; F_0 = 1; without the final norm the last block's output is f_out, so CKA(f_last, f_out) = 1."""
    torch.manual_seed(0)
    model = vspec.build(tiny_vit(final_norm=final_norm)).eval()
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(5, 3, 16, 16, generator=g) for _ in range(2)]
    result = feature_evolution(model, batches)
    expected = []
    with torch.no_grad():
        for x in batches:
            feats = [model.forward_tokens(x)[0]]
            for block in model.stages[0].blocks:
                feats.append(block(feats[-1]).x)
            out = model.norm(feats[-1]).reshape(-1, 16)
            cka = [hsic_cka(f.reshape(-1, 16), out) for f in feats[1:]]
            expected.append([c / cka[0] for c in cka])
    assert result["taps"] == [f"stages.0.blocks.{j}" for j in range(3)] and result["batches"] == 2
    assert result["F"] == pytest.approx([sum(col) / 2 for col in zip(*expected)], abs=1e-6)
    assert result["F"][0] == pytest.approx(1, abs=1e-12)
    assert (result["cka"][-1] == pytest.approx(1, abs=1e-6)) != final_norm


def test_feature_evolution_refuses_stages_with_other_token_counts():
    model = vspec.build(tiny_swin())
    with pytest.raises(AnalysisError, match="stages.0 has 64 tokens, the final features 16: CKA"):
        feature_evolution(model, [torch.randn(2, 3, 32, 32)])


# ---------------------------------------------------------------- attention maps
CORES = {
    "plain": (AttentionCore(), None),
    "scale 1": (AttentionCore(scale=1.0), None),
    "bool mask": (AttentionCore(), "bool"),
    "float mask": (BiasedAttentionCore(), "float"),
    "gaussian": (GaussianAttentionCore(), None),
    "gaussian + mask": (GaussianBiasedCore(scale=0.3), "float"),
}


@pytest.mark.parametrize("name", CORES)
def test_core_map_is_the_map_the_core_applies(name):
    """core.attention_map(q, k, mask) @ v equals the core's own output: the map is the one it uses; and it is
    the equation's: softmax((q k^T [- 1/2 |k|^2 for MSF's Gaussian cores, Eq. 12]) * scale + mask)."""
    core, mask_kind = CORES[name]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 5, generator=g, dtype=F64) for _ in range(3))
    mask = None
    if mask_kind == "float":
        mask = torch.randn(1, 3, 7, 7, generator=g, dtype=F64)
    elif mask_kind == "bool":
        mask = torch.rand(7, 7, generator=g) > 0.3
        mask.fill_diagonal_(True)
    a = core.attention_map(q, k, mask)
    assert torch.allclose(a.sum(-1), torch.ones(2, 3, 7, dtype=F64))
    assert torch.allclose(a @ v, core.eval()(q, k, v, mask), atol=1e-10)
    logits = q @ k.transpose(-2, -1)
    if "gaussian" in name:
        logits = logits - 0.5 * (k * k).sum(-1)[:, :, None, :]
    logits = logits * (core.scale or 5 ** -0.5)
    if mask is not None:
        logits = logits + mask if mask.dtype != torch.bool else logits.masked_fill(~mask, -math.inf)
    assert torch.allclose(a, torch.softmax(logits, -1), atol=1e-12)


def test_maps_of_a_vit_equal_softmax_of_its_qkv():
    """Each map of the chosen blocks and heads equals softmax(q k^T / sqrt(d)) computed here from the
    block's input and its qkv weights; full N x N with the class token; before = after (no refiner)."""
    torch.manual_seed(0)
    model = vspec.build(tiny_vit()).eval()
    image = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    maps = attention_maps(model, image, blocks=[0, 2], heads=[1, 0])
    assert [m["block"] for m in maps] == [0, 2] and all(not m["refined"] and m["tokens"] == 17 for m in maps)
    with torch.no_grad():
        x, inputs = model.forward_tokens(image)[0].double(), []
        for block in model.stages[0].blocks:
            inputs.append(block.norm1(x.float()).double())
            x = block(x.float()).x.double()
    for m in maps:
        attn = model.stages[0].blocks[m["block"]].attn
        qkv = inputs[m["block"]] @ attn.qkv.weight.double().T + attn.qkv.bias.double()
        q, k, _ = (rearrange(t, "b n (h d) -> b h n d", h=2) for t in qkv.chunk(3, dim=-1))
        ref = (q @ k.transpose(-2, -1) / math.sqrt(8)).softmax(-1)[0, [1, 0]]
        assert m["before"].shape == (2, 17, 17) and torch.allclose(m["before"], ref, atol=1e-5)
        assert torch.equal(m["after"], m["before"])
        assert torch.allclose(m["before"].sum(-1), torch.ones(2, 17, dtype=F64))
    assert [m["block"] for m in attention_maps(model, image)] == default_blocks(3) == [0, 1, 2]
    assert default_blocks(12) == [0, 4, 7, 11] and default_blocks(4) == [0, 1, 2, 3] and default_blocks(1) == [0]
    with pytest.raises(IndexError, match="head 2 is out of range for block 0"):
        attention_maps(model, image, blocks=[0], heads=[2])
    with pytest.raises(IndexError, match="block 3 is out of range"):
        attention_maps(model, image, blocks=[3])


class ExpandFlip(MapRefiner):
    """A stand-in map-refining module: (B, H, N, N) -> (B, 2H, N, N), the maps' mirror images and the maps x 2."""

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        return torch.cat((maps.flip(-1), 2 * maps), dim=1)


class ToyAttention(nn.Module):
    """Plain attention through an AttentionCore, or (refine) a materialised map refined before use."""

    def __init__(self, dim: int, heads: int, refine: bool, called: bool = True):
        super().__init__()
        self.heads, self.called = heads, called
        self.qkv = nn.Linear(dim, 3 * dim)
        self.core = AttentionCore()
        self.refine = ExpandFlip() if refine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        if self.refine is None or not self.called:
            return rearrange(self.core(q, k, v), "b h n d -> b n (h d)")
        a = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).softmax(-1)
        a = self.refine(a)
        a = a[:, :self.heads] + a[:, self.heads:]  # back to H maps
        return rearrange(a @ v, "b h n d -> b n (h d)")


class ToyModel(nn.Module):
    """The few things attention_maps reads: `layout` (token counts), `stages[i].blocks`, a forward."""

    def __init__(self, called: bool = True):
        super().__init__()
        blocks = nn.ModuleList(ToyAttention(8, 2, refine=j == 1, called=called) for j in range(2))
        self.stages = nn.ModuleList([nn.Module()])
        self.stages[0].blocks = blocks
        self.layout = [SimpleNamespace(tokens=SimpleNamespace(length=5))]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.stages[0].blocks:
            x = x + block(x)
        return x


def test_maps_before_and_after_a_refining_module():
    """A block with a map-refining module (MapRefiner): before = its input maps (recomputed here), after = its
    output (H' = 2H maps); a block without one: the core's map, before = after. A refining module that
    does not run is reported, not silently replaced by the core's map."""
    torch.manual_seed(0)
    model = ToyModel()
    x = torch.randn(1, 5, 8)
    maps = attention_maps(model, x, blocks=[0, 1], heads=[0, 1])
    assert [m["refined"] for m in maps] == [False, True]
    with torch.no_grad():
        inputs = [x, x + model.stages[0].blocks[0](x)]
    for m, block, h in zip(maps, model.stages[0].blocks, inputs):
        q, k, _ = (rearrange(t, "b n (h d) -> b h n d", h=2) for t in block.qkv(h).double().chunk(3, dim=-1))
        ref = (q @ k.transpose(-2, -1) / 2).softmax(-1)[0]
        assert torch.allclose(m["before"], ref, atol=1e-5)
        assert torch.allclose(m["after"], ExpandFlip()(ref[None])[0, :2] if m["refined"] else ref, atol=1e-5)
    assert not torch.allclose(maps[1]["after"], maps[1]["before"])
    with pytest.raises(AnalysisError, match="block 1 .* was not computed"):
        attention_maps(ToyModel(called=False), x, blocks=[1])


def test_maps_refuse_window_attention():
    """Unshifted windows fold into the batch axis, shifted ones into the heads axis: both refused; a
    stage whose one window covers the grid is global attention, shown."""
    model = vspec.build(tiny_swin())
    for b in (0, 1):
        with pytest.raises(AnalysisError, match=f"block {b} .* attends within windows \\(16 of 64 tokens"):
            attention_maps(model, torch.randn(1, 3, 32, 32), blocks=[b])
    assert attention_maps(model, torch.randn(1, 3, 32, 32), blocks=[2, 3])[1]["before"].shape == (2, 16, 16)


# ---------------------------------------------------------------- the command
def test_analyze_writes_cka_and_maps(tmp_path, capsys):
    path = tmp_path / "tiny.json"
    path.write_text(vspec.to_json(tiny_vit()))
    assert main(["analyze", str(path), "--what", "cka,maps", "--blocks", "0,2", "--heads", "1",
                 "--batch-size", "4", "--batches", "2", "--out-dir", str(tmp_path)]) == 0
    for name in ("cka", "maps"):
        assert (tmp_path / f"tiny.{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "tiny.analysis.png").exists()
    cka = json.loads((tmp_path / "tiny.cka.json").read_text())
    assert cka["batches"] == 2 and len(cka["F"]) == 3 and cka["F"][0] == 1
    torch.manual_seed(0)
    model = vspec.build(tiny_vit())
    g = torch.Generator().manual_seed(0)
    assert cka["F"] == pytest.approx(feature_evolution(model, [torch.randn(4, 3, 16, 16, generator=g)
                                                               for _ in range(2)])["F"], abs=1e-9)
    maps = json.loads((tmp_path / "tiny.maps.json").read_text())["maps"]
    assert [(m["block"], m["heads"], m["tokens"]) for m in maps] == [(0, [1], 17), (2, [1], 17)]
    assert all(0 < m["entropy_before"][0] <= math.log(17) and m["entropy_after"] == m["entropy_before"]
               for m in maps)
    # the default (all): the MSF analysis too, on a plain ViT; synthetic images from --data
    capsys.readouterr()
    assert main(["analyze", str(path), "--data", "synthetic", "--out-dir", str(tmp_path / "all")]) == 0
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == [
        f"tiny.{a}.{e}" for a in ("analysis", "cka", "maps") for e in ("json", "png")]


def test_analyze_skips_what_does_not_apply_unless_asked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "swin.json"
    path.write_text(vspec.to_json(tiny_swin()))
    assert main(["analyze", str(path), "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "cka: skipped: stages.0 has 64 tokens" in out and "maps: skipped:" in out
    written = tmp_path / "runs" / "analyze"  # a spec's files: not beside it
    assert (written / "swin.analysis.png").exists() and not (written / "swin.cka.png").exists()
    assert not list(tmp_path.glob("swin.*.png"))
    assert main(["analyze", str(path), "--what", "cka", "--batch-size", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vspec analyze: error: cka: stages.0 has 64 tokens") and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--blocks", "3"], "--blocks: 3 is out of range: the model has 3 blocks (0..2)"),
    (["--blocks", "0,x"], "--blocks: expected comma-separated ints"),
    (["--blocks", "-1"], "--blocks: expected distinct ints >= 0"),
    (["--heads", "2"], "head 2 is out of range for block 0 (2 maps: 0..1)"),
    (["--what", "cka,norms"], "--what: expected all or a comma-separated list of msf, cka, maps"),
    (["--data", "synthetic", "--batches", "3"], "--data synthetic has 64 validation images, 3 x 32 asked for"),
    (["--data", "nope"], "dataset: unknown 'nope'"),
])
def test_analyze_bad_options_are_one_line(tmp_path, capsys, argv, message):
    path = tmp_path / "tiny.json"
    path.write_text(vspec.to_json(tiny_vit()))
    assert main(["analyze", str(path), "--what", "cka,maps", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_analyze_help_documents_the_analyses(capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--what", "--batch-size", "--batches", "--blocks", "--heads", "--data", "--data-dir", "--seed",
                   "--out-dir", "--set"):
        assert option in text
    for phrase in ("PATH_STEM.cka.png", "PATH_STEM.maps.png", "PATH_STEM.analysis.png", "Eq. 2", "Fig. 1"):
        assert phrase in text


class HiddenMapCore(AttentionCoreBase):
    """A core that hides its map (a fused kernel): no attention_map."""

    def forward(self, q, k, v, mask=None, causal=False):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def test_a_core_without_an_attention_map_is_refused_in_one_line():
    model = vspec.build(tiny_vit()).eval()
    model.stages[0].blocks[1].attn.core = HiddenMapCore()
    image = torch.randn(1, 3, 16, 16)
    assert len(attention_maps(model, image, blocks=[0])) == 1  # the other blocks still analysed
    with pytest.raises(AnalysisError, match=r"^the maps analysis needs each shown block's attention map: "
                                            r"HiddenMapCore gives no attention map$"):
        attention_maps(model, image, blocks=[0, 1])


class PlainAttention(nn.Module):
    """An attention module of its own: no attention core, no projections that analysis can read."""

    def __init__(self, dim: int):
        super().__init__()
        self.mix = nn.Linear(dim, dim)

    def forward(self, x):
        return self.mix(x.mean(1, keepdim=True)).expand_as(x)


def test_an_attention_without_hooks_is_refused_in_one_line_by_every_analysis():
    from vspec.models.msf.analysis import similarities

    model = vspec.build(tiny_vit()).eval()
    model.stages[0].blocks[1].attn = PlainAttention(16)
    with pytest.raises(AnalysisError, match=r"^block 1 \(stages\.0\.blocks\.1\) gives no attention map"):
        attention_maps(model, torch.randn(1, 3, 16, 16), blocks=[1])
    with pytest.raises(AnalysisError, match=r"^block 1's attention \(PlainAttention\) gives no role matrices"):
        similarities(model)
