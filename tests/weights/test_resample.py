"""New image sizes (issue 24, item 3): a checkpoint's position tables resampled to another img_size
(vspec.weights.resample, against timm's functions and F.interpolate written out), vspec.load / eval.py at another size,
and dynamic_img_size: the model at any size equals the model built at that size with resampled weights, and the kinds
that need a fixed grid are refused at spec time."""

import json

import attrs
import pytest
import torch
import torch.nn.functional as F
from timm.layers import resample_abs_pos_embed
from timm.layers.pos_embed_rel import resize_rel_pos_bias_table_simple

import vspec
from vspec.cli.eval import main as eval_main
from vspec.ops.resample import resample_bias_table, resample_pos_embed
from vspec.spec import (
    KINDS,
    MHSA,
    SOPE,
    Block,
    ClassTokenHead,
    DenseAux,
    GAPHead,
    HeadTokenBlock,
    HeadTokens,
    IRPEAttention,
    MeanShiftAttention,
    Model,
    Norm,
    PatchEmbed,
    PatchMerging,
    SecondOrderHead,
    SimplePatchEmbed,
    SpecError,
    Stage,
    WindowMHSA,
    from_json,
    load_spec,
    override,
    to_json,
    to_toml,
)
from vspec.weights.checkpoint import CheckpointError
from vspec.weights.resample import resample_state

DEIT = Model(embedder=PatchEmbed(patch_size=4), dim=32, depth=2, block=Block(attention=MHSA(heads=2)),
             img_size=32, num_classes=10)


def seeded(spec: Model, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = vspec.build(spec).eval()
    with torch.no_grad():  # position tables away from their tiny init, so that resampling them shows
        for name, p in model.named_parameters():
            if name == "pos_embed" or name.endswith("relative_position_bias_table"):
                p.normal_()
    return model


def bicubic(grid: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The reference: (C, h, w) -> (C, H, W) by F.interpolate, bicubic, align_corners=False, in float64."""
    return F.interpolate(grid[None].double(), size=size, mode="bicubic", align_corners=False)[0]


# ---------------------------------------------------------------- the tables
@pytest.mark.parametrize("new", [(12, 12), (6, 10), (4, 4)])
def test_pos_embed_equals_timm_and_the_bicubic_reference_with_the_class_token_kept(new):
    torch.manual_seed(0)
    table = torch.randn(1, 1 + 8 * 8, 16)
    ours = resample_pos_embed(table, (8, 8), new, prefix=1)
    timm = resample_abs_pos_embed(table, list(new), old_size=[8, 8], num_prefix_tokens=1, antialias=False)
    assert ours.shape == (1, 1 + new[0] * new[1], 16)
    torch.testing.assert_close(ours, timm, rtol=0, atol=1e-6)
    assert torch.equal(ours[:, :1], table[:, :1])  # the class token's row as it was
    patches = table[0, 1:].T.reshape(16, 8, 8)  # (d, h, w): token (i, j) at row i * 8 + j
    ref = bicubic(patches, new).reshape(16, -1).T
    torch.testing.assert_close(ours[0, 1:].double(), ref, rtol=0, atol=1e-5)


def test_pos_embed_without_prefix_and_identity_at_the_same_grid():
    table = torch.randn(1, 6 * 4, 8)
    torch.testing.assert_close(resample_pos_embed(table, (6, 4), (9, 6), 0),
                               resample_abs_pos_embed(table, [9, 6], [6, 4], num_prefix_tokens=0, antialias=False))
    assert resample_pos_embed(table, (6, 4), (6, 4), 0) is table


@pytest.mark.parametrize("old, new", [((7, 7), (4, 4)), ((2, 2), (4, 4)), ((4, 4), (7, 7))])
def test_relative_bias_table_equals_timm_and_the_bicubic_reference(old, new):
    torch.manual_seed(1)
    table = torch.randn((2 * old[0] - 1) * (2 * old[1] - 1), 3)
    ours = resample_bias_table(table, old, new)
    shape = ((2 * new[0] - 1) * (2 * new[1] - 1), 3)
    torch.testing.assert_close(ours, resize_rel_pos_bias_table_simple(table, new, shape), rtol=0, atol=1e-6)
    a, b = 2 * old[0] - 1, 2 * old[1] - 1
    ref = bicubic(table.T.reshape(3, a, b), (2 * new[0] - 1, 2 * new[1] - 1)).reshape(3, -1).T
    torch.testing.assert_close(ours.double(), ref, rtol=0, atol=1e-5)


# ---------------------------------------------------------------- whole state dicts and checkpoints
def test_identity_when_the_size_is_the_same():
    state = seeded(DEIT).state_dict()
    out = resample_state(state, DEIT, DEIT)
    assert out.keys() == state.keys() and all(out[k] is state[k] for k in state)


def test_a_checkpoint_at_32_px_loads_and_runs_at_48(tmp_path):
    model = seeded(DEIT)
    path = vspec.save(model, tmp_path / "deit.pt")
    big = vspec.load(path, img_size=48).eval()
    assert big.spec == attrs.evolve(DEIT, img_size=(48, 48))
    ref = resample_abs_pos_embed(model.pos_embed.detach(), [12, 12], [8, 8], num_prefix_tokens=1, antialias=False)
    torch.testing.assert_close(big.pos_embed.detach(), ref, rtol=0, atol=1e-6)
    others = {k: v for k, v in model.state_dict().items() if k != "pos_embed"}
    assert all(torch.equal(big.state_dict()[k], v) for k, v in others.items())
    x = torch.randn(2, 3, 48, 48)
    assert big(x).shape == (2, 10) and torch.isfinite(big(x)).all()
    same = vspec.load(path, img_size=32).eval()
    torch.testing.assert_close(same(x[..., :32, :32]), model(x[..., :32, :32]), rtol=0, atol=0)


def test_a_size_the_spec_refuses_is_one_line(tmp_path):
    path = vspec.save(seeded(DEIT), tmp_path / "deit.pt")
    with pytest.raises(CheckpointError) as e:
        vspec.load(path, img_size=30)
    assert str(e.value) == f"{path}: img_size 30: embedder.patch_size: 4 does not divide the image height 30"


SWIN = Model(embedder=PatchEmbed(patch_size=4, norm=Norm(eps=1e-5)), class_token=False, pos_embed="none",
             head=GAPHead(), num_classes=5, img_size=32,
             stages=[Stage(depth=2, dim=16, block=Block(attention=WindowMHSA(heads=2, window=4))),
                     Stage(depth=2, dim=32, block=Block(attention=WindowMHSA(heads=4, window=4)),
                           entry=PatchMerging())])


@pytest.mark.parametrize("old, new", [(32, 16), (16, 32)])
def test_swin_tables_follow_the_clamped_window(old, new):
    """Windows of 4 on grids (8, 4) at 32 px, (4, 2) at 16 px: the second stage's window is clamped to 2."""
    a, b = attrs.evolve(SWIN, img_size=old), attrs.evolve(SWIN, img_size=new)
    state = seeded(a).state_dict()
    out = resample_state(state, a, b)
    windows = {32: (4, 4), 16: (4, 2)}
    for key, value in state.items():
        if key.endswith("relative_position_bias_table"):
            stage = int(key.split(".")[1])
            w = windows[new][stage]
            expected = resize_rel_pos_bias_table_simple(value, (w, w), ((2 * w - 1) ** 2, value.shape[1]))
            torch.testing.assert_close(out[key], expected, rtol=0, atol=1e-6)
            assert (out[key] is value) == (windows[old][stage] == w)
        else:
            assert out[key] is value
    model = vspec.build(b).eval()
    model.load_state_dict(out)
    assert torch.isfinite(model(torch.randn(1, 3, new, new))).all()


def test_a_weight_without_a_rule_is_named():
    state = {**seeded(DEIT).state_dict(), "head.fc.weight": torch.zeros(3, 3)}
    with pytest.raises(ValueError, match=r"^head.fc.weight: shape \[3, 3\] at img_size \[32, 32\], \[10, 32\] at"):
        resample_state(state, DEIT, attrs.evolve(DEIT, img_size=48))


def test_eval_cli_at_another_size(tmp_path, capsys):
    spec = attrs.evolve(DEIT, img_size=16, in_chans=1, depth=1, dim=16)
    path = vspec.save(seeded(spec), tmp_path / "tiny.pt")
    assert eval_main([str(path), "--data", "digits", "--img-size", "24", "--json", "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["img_size"] == [24, 24] and result["images"] == 360
    assert eval_main([str(path), "--data", "digits", "--img-size", "22", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "img_size (22, 22): embedder.patch_size: 4 does not divide the image height 22" in err


# ---------------------------------------------------------------- dynamic_img_size
DYNAMIC = {  # one small model per kind that declares any_grid
    "patch": DEIT,
    "mhsa": DEIT,
    "mlp": DEIT,
    "class_token": attrs.evolve(DEIT, head=ClassTokenHead(dense=DenseAux())),
    "simple_patch": attrs.evolve(DEIT, embedder=SimplePatchEmbed(patch_size=4), pos_embed="sincos2d",
                                 class_token=False, head=GAPHead(norm=Norm())),
    "gap": attrs.evolve(DEIT, head=GAPHead(), pos_embed="sincos1d",
                        block=HeadTokenBlock(attention=MHSA(heads=2), head_tokens=HeadTokens())),
    "mean_shift": attrs.evolve(DEIT, block=Block(attention=MeanShiftAttention(heads=2))),
    "second_order": attrs.evolve(DEIT, head=SecondOrderHead()),
}


def test_every_kind_that_declares_any_grid_is_tested_here():
    assert {tag for tag, cls in KINDS.items() if cls.any_grid} == set(DYNAMIC)


@pytest.mark.parametrize("spec", list(dict.fromkeys(DYNAMIC.values())),
                         ids=lambda s: "+".join(t for t, v in DYNAMIC.items() if v == s))
def test_dynamic_model_equals_the_model_built_at_each_size(spec):
    dynamic = seeded(attrs.evolve(spec, dynamic_img_size=True))
    for size in [(32, 32), (48, 48), (16, 24)]:
        fixed_spec = attrs.evolve(spec, img_size=size)
        fixed = vspec.build(fixed_spec).eval()
        fixed.load_state_dict(resample_state(dynamic.state_dict(), spec, fixed_spec))
        x = torch.randn(2, 3, *size)
        torch.testing.assert_close(dynamic(x), fixed(x), rtol=0, atol=1e-5)
    feats = dynamic.forward_intermediates(torch.randn(1, 3, 48, 32), indices=1, intermediates_only=True)
    assert feats[0].shape == (1, 32, 12, 8)


def test_dynamic_refuses_sizes_the_patch_does_not_divide():
    model = vspec.build(attrs.evolve(DEIT, dynamic_img_size=True))
    with pytest.raises(ValueError, match=r"positive multiples of its patch size 4 \(dynamic_img_size\)$"):
        model(torch.randn(1, 3, 30, 32))
    with pytest.raises(ValueError, match="or set dynamic_img_size"):
        vspec.build(DEIT)(torch.randn(1, 3, 48, 48))


@pytest.mark.parametrize("spec, path, tag", [
    (load_spec("specs/swin_tiny.py"), "stages.1.entry", "patch_merging"),
    (attrs.evolve(SWIN, stages=SWIN.stages[:1]), "block.attention", "window_mhsa"),
    (load_spec("specs/dhvt_tiny_cifar_p4.py"), "embedder", "sope"),
    (attrs.evolve(DEIT, embedder=SOPE()), "embedder", "sope"),
    (load_spec("specs/dhvt_tiny_cifar_p4.py").stages[0].block.ffn, "block.ffn", "daff"),
    (attrs.evolve(DEIT, block=Block(attention=IRPEAttention(heads=2))), "block.attention", "irpe"),
    (load_spec("specs/t2t_vit_7.py"), "embedder", "t2t"),
    (load_spec("specs/conformer_ti.py"), "embedder", "conformer_stem"),
    (attrs.evolve(load_spec("specs/refined_vit_s.py"), embedder=PatchEmbed()), "block.0.attention", "refiner"),
    (load_spec("specs/bert_base.py"), "embedder", "tokens"),
])
def test_kinds_built_for_one_grid_are_refused_at_spec_time(spec, path, tag):
    if not isinstance(spec, Model):  # an FFN: on DeiT
        spec = attrs.evolve(DEIT, block=Block(attention=MHSA(heads=2), ffn=spec))
    with pytest.raises(SpecError) as e:
        attrs.evolve(spec, dynamic_img_size=True)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{path}: {tag} is built for the token grid of img_size")


def test_the_field_is_written_only_when_set():
    preset = load_spec("specs/deit_tiny.py")
    assert "dynamic_img_size" not in to_json(preset) and "dynamic_img_size" not in to_toml(preset)
    on = attrs.evolve(preset, dynamic_img_size=True)
    assert json.loads(to_json(on))["dynamic_img_size"] is True and from_json(to_json(on)) == on
    assert from_json(to_json(preset)) == preset and not from_json(to_json(preset)).dynamic_img_size
    assert override(preset, {"dynamic_img_size": True}) == on  # --set dynamic_img_size=true
    with pytest.raises(SpecError, match="^dynamic_img_size: must be bool"):
        from_json(json.dumps({**json.loads(to_json(preset)), "dynamic_img_size": 1}))



def test_at_twice_the_size_only_the_position_tables_change_shape():
    """The claim of vspec.weights.resample's doc: across every image preset (built on the meta device at its size and at
    twice it), the weights whose shape follows the grid are the position table and Swin's bias tables alone."""
    from pathlib import Path

    checked = 0
    for path in sorted(Path(__file__).resolve().parents[2].glob("specs/*.py")):
        spec = load_spec(path)
        if spec.embedder.text:
            continue
        big = attrs.evolve(spec, img_size=tuple(2 * s for s in spec.img_size))
        small, large = (vspec.build(s, device="meta").state_dict() for s in (spec, big))
        assert small.keys() == large.keys(), path.name
        changed = {k for k in small if small[k].shape != large[k].shape}
        assert all(k == "pos_embed" or k.endswith("relative_position_bias_table") for k in changed), path.name
        checked += 1
    assert checked >= 50  # 59 image presets when written


def test_readme_table_is_the_measured_run():
    """docs/interop.md's "New image sizes" table: the rows of docs/img_size/img_size.json (benchmarks/img_size.py)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = json.loads((root / "docs/img_size/img_size.json").read_text())
    readme = (root / "docs/interop.md").read_text()
    assert run["depth"] == 12 and run["trained_at"] == 32 and run["data"] == "mnist5k"
    assert f"--depth {run['depth']} --epochs {run['epochs']} --batch-size {run['batch_size']}" in readme
    for row in run["rows"]:
        size, grid = row["img_size"], row["img_size"] // 4
        how = "as trained" if size == run["trained_at"] else "resampled"
        line = f"| {size} | {grid} x {grid} | {how} | {row['top1_bicubic']:.1f} | {row['top1_nearest']:.1f} |"
        assert line in readme, line
    assert json.loads((root / "docs/img_size/metrics.jsonl").read_text().splitlines()[-1])["epoch"] == run["epochs"]
