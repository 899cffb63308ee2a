"""LV-ViT as released: the converter against the authors' outputs (the fixtures' README, "LV-ViT"), every
constructor argument honoured or refused by name, the re-scaled block against its equation, and a released
checkpoint file (its `state_dict` entry, DDP's `module.` prefixes) through `create_model(pretrained=True)`."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import vspec
from tests.helpers.caches import pickle_bytes, released_preset, torch_put
from tests.helpers.checks import FIXTURES, argument_cases, assert_close_to_stored, check_argument
from vspec.convert import ConversionNote, from_official, official
from vspec.models.lvvit.convert import LVVIT
from vspec.spec import MHSA, MLP, Block, ConvStem, DenseAux, Model, Norm, PatchEmbed, RescaledBlock
from vspec.weights import published


def fixture(name: str) -> dict:
    return torch.load(FIXTURES / f"{name}.pt", weights_only=True)


@pytest.mark.parametrize("name", ["lvvit_cls", "lvvit_dense", "lvvit_stem128"])
def test_released_models_reproduce_the_reference_outputs(name):
    """Eval outputs: class logits (lvvit_cls), + 0.5 x the per-class max over patch tokens of the dense head's
    (lvvit_dense; lvvit_stem128: the 128-wide stem, patch 8 so a 4 x 4 projection, skip_lam 3, `order`)."""
    data = fixture(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = from_official("lvvit", data["state_dict"], data["config"]).eval()
    notes = [str(w.message) for w in caught if issubclass(w.category, ConversionNote)]
    assert notes == []  # mix_token is MixToken in the training forward, as released
    assert model.spec.head.mixes_tokens == bool(data["config"]["mix_token"])
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])
    assert sum(p.numel() for p in model.parameters()) == {"lvvit_cls": 375_514, "lvvit_dense": 376_004,
                                                          "lvvit_stem128": 412_948}[name]


@pytest.mark.parametrize("bn", ["batch statistics", "running statistics"])
def test_the_training_forward_mixes_tokens_as_released(bn):
    """lvvit_dense.pt's training keys: numpy seeded with 12 draws the box rows 0:2, columns 1:3 of the 4 x 4 grid
    (lam from the box 0.75); the class and token logits of the train-mode forward (`y_train`: the stem's BatchNorms
    on the batch's statistics; `y_train_bn_eval`: on their running ones)."""
    import numpy as np

    from vspec.nn.head_outputs import as_outputs
    from vspec.nn.mix_token import TokenBox, released_draw_box

    data = fixture("lvvit_dense")
    mix = data["train_mix"]
    model = from_official("lvvit", data["state_dict"], data["config"]).train()
    model.set_training_outputs(True, draw=released_draw_box)  # the head's outputs, the box drawn as released
    if bn == "running statistics":
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.eval()
    np.random.seed(mix["numpy_seed"])
    with torch.no_grad():
        cls, aux = as_outputs(model(data["x"]))
    assert cls.box == TokenBox(*mix["box"], tuple(mix["grid"])) and cls.box.lam == mix["lam_from_box"]
    want = data["y_train"] if bn == "batch statistics" else data["y_train_bn_eval"]
    assert_close_to_stored(cls.logits, want[0])
    assert_close_to_stored(aux.logits, want[1])


def test_the_stems_are_one_kind_of_two_widths():
    """Refined-ViT's stem doubles its width at each conv; LV-ViT's keeps it (64, or 128 in lvvit_l)."""
    assert ConvStem().widths == (32, 64, 128)
    assert ConvStem(width=64, growth=1).widths == (64, 64, 64)
    stem = fixture("lvvit_stem128")["state_dict"]
    assert [tuple(stem[f"patch_embed.conv{i}.weight"].shape) for i in (1, 2, 3)] == [
        (128, 3, 7, 7), (128, 128, 3, 3), (128, 128, 3, 3)]
    assert tuple(stem["patch_embed.proj.weight"].shape) == (32, 128, 4, 4)  # kernel patch_size / 2


def test_the_rescaled_block_divides_each_residual_branch_by_skip_lam():
    """Against the block's equations written out (README: x + attn(LN1(x)) / skip_lam, then
    x + mlp(LN2(x)) / skip_lam; q, k, v rows of one qkv matrix, head-major; exact GELU)."""
    torch.manual_seed(0)
    spec = Model(embedder=PatchEmbed(patch_size=4), img_size=8, dim=16, depth=1, num_classes=3,
                 block=RescaledBlock(attention=MHSA(heads=2, qkv_bias=False), ffn=MLP(ratio=3.0),
                                     norm=Norm(eps=1e-5), skip_lam=3.0))
    block = vspec.build(spec).stages[0].blocks[0].eval()
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(2, 5, 16)
    sd = {k: v.detach() for k, v in block.state_dict().items()}

    def ln(t, name):
        return F.layer_norm(t, (16,), sd[f"{name}.weight"], sd[f"{name}.bias"], eps=1e-5)

    def attention(t):
        q, k, v = (t @ sd["attn.qkv.weight"].T).view(2, 5, 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = ((q * 8**-0.5) @ k.transpose(-1, -2)).softmax(-1)
        return (a @ v).transpose(1, 2).reshape(2, 5, 16) @ sd["attn.proj.weight"].T + sd["attn.proj.bias"]

    def mlp(t):
        h = F.gelu(t @ sd["ffn.fc1.weight"].T + sd["ffn.fc1.bias"])
        return h @ sd["ffn.fc2.weight"].T + sd["ffn.fc2.bias"]

    y = x + attention(ln(x, "norm1")) / 3.0
    y = y + mlp(ln(y, "norm2")) / 3.0
    with torch.no_grad():
        assert torch.allclose(block(x).x, y, atol=1e-5)


def test_skip_lam_1_is_the_plain_pre_norm_block():
    data = fixture("lvvit_cls")
    config = {**data["config"], "skip_lam": 1.0}
    spec = LVVIT.spec_of(config)
    assert type(spec.stages[0].blocks[0]) is Block
    as_rescaled = vspec.override(spec, {"block.kind": "rescaled", "block.skip_lam": 1.0})
    plain, rescaled = from_official("lvvit", data["state_dict"], config).eval(), vspec.build(as_rescaled).eval()
    rescaled.load_state_dict(plain.state_dict())
    with torch.no_grad():
        assert torch.equal(plain(data["x"]), rescaled(data["x"]))
        assert (plain(data["x"]) - data["y"]).abs().max() > 1e-3  # skip_lam 2 (the fixture's) is another model


# ---------------------------------------------------------------- every constructor argument
# LV_ViT.__init__'s arguments (zihangJiang/TokenLabeling @ 9dbfd59, tlt/models/lvvit.py)
LVVIT_CONSTRUCTOR = (
    "img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads", "mlp_ratio", "qkv_bias",
    "qk_scale", "drop_rate", "attn_drop_rate", "drop_path_rate", "drop_path_decay", "hybrid_backbone", "norm_layer",
    "p_emb", "head_dim", "skip_lam", "order", "mix_token", "return_dense",
)


def base() -> dict:
    """lvvit_cls's config: 64 px, patch 16, the 64-wide stem, dim 48, depth 4, 2 heads, skip_lam 2, no dense head."""
    return fixture("lvvit_cls")["config"]


def blocks(spec) -> tuple:
    return spec.stages[0].blocks


def as_base(spec) -> bool:
    return spec == LVVIT.spec_of(base())


# argument -> [(changes to the fixture's config, the converted spec's expected property or the refusal's text)]
LVVIT_CASES = {
    "img_size": [({"img_size": 128}, lambda s: s.img_size == (128, 128)),
                 ({"img_size": (64, 96)}, lambda s: s.img_size == (64, 96)),
                 ({"img_size": 72}, r"img_size 72: the patch_size 16 must divide each side"),
                 ({"img_size": "64"}, r"img_size '64': an int or a pair of ints")],
    "patch_size": [({"patch_size": 8}, lambda s: s.embedder == ConvStem(patch_size=8, width=64, growth=1)),
                   ({"patch_size": 7, "img_size": 63}, r"patch_size 7: the CNN stem \(p_emb '4_2'\) strides 2")],
    "in_chans": [({"in_chans": 1}, lambda s: s.in_chans == 1)],
    "num_classes": [({"num_classes": 0}, lambda s: s.num_classes == 0)],
    "embed_dim": [({"embed_dim": 96}, lambda s: s.dim == 96)],
    "depth": [({"depth": 2}, lambda s: len(blocks(s)) == 2)],
    "num_heads": [({"num_heads": 4}, lambda s: blocks(s)[0].attention.heads == 4)],
    "mlp_ratio": [({"mlp_ratio": 4.0}, lambda s: blocks(s)[0].ffn == MLP(ratio=4.0))],
    "qkv_bias": [({"qkv_bias": True}, lambda s: blocks(s)[0].attention.qkv_bias)],
    "qk_scale": [({"qk_scale": 0.1}, lambda s: blocks(s)[0].attention.scale == 0.1),
                 ({"qk_scale": "x"}, r"qk_scale 'x': a number, or None")],
    "drop_rate": [({"drop_rate": 0.1}, r"drop_rate 0.1: the released model also drops after the position")],
    "attn_drop_rate": [({"attn_drop_rate": 0.1}, lambda s: blocks(s)[0].attention.attn_drop == 0.1)],
    "drop_path_rate": [({"drop_path_rate": 0.1}, lambda s: s.drop_path == 0.1)],
    "drop_path_decay": [({"drop_path_decay": "fix"}, as_base),  # at rate 0 every decay is 0
                        ({"drop_path_decay": "fix", "drop_path_rate": 0.1}, r"drop_path_decay 'fix': vspec ramps")],
    "hybrid_backbone": [({"hybrid_backbone": "resnet26d"}, r"hybrid_backbone: the CNN-backbone embedding")],
    "norm_layer": [({"norm_layer": "LayerNorm(eps=1e-6)"}, lambda s: blocks(s)[0].norm == Norm(eps=1e-6)),
                   ({"norm_layer": "BatchNorm2d"}, r"norm_layer 'BatchNorm2d': only LayerNorm")],
    "p_emb": [({"p_emb": "4_2_128"}, lambda s: s.embedder == ConvStem(patch_size=16, width=128, growth=1)),
              ({"p_emb": 1}, lambda s: s.embedder == PatchEmbed(patch_size=16))],
    "head_dim": [({"head_dim": 24}, as_base),  # 48 / 2
                 ({"head_dim": 16}, r"head_dim 16: only embed_dim / num_heads")],
    "skip_lam": [({"skip_lam": 3.0}, lambda s: blocks(s)[0].skip_lam == 3.0),
                 ({"skip_lam": 1.0}, lambda s: type(blocks(s)[0]) is Block)],
    "order": [({"order": ["tr"] * 3}, lambda s: len(blocks(s)) == 3),  # overrides depth
              ({"order": ["tr", "mha"]}, r"order \['tr', 'mha'\]: only 'tr' blocks are converted"),
              ({"order": "tr"}, r"order 'tr': None or a list of block types")],
    "mix_token": [({"mix_token": True, "return_dense": True}, lambda s: s.head.dense.mix_token),
                  ({"mix_token": True}, r"mix_token without return_dense: the released constructor asserts")],
    "return_dense": [({"return_dense": True}, lambda s: s.head.dense == DenseAux())],
    "unknown keys": [({"window": 7}, r"unknown argument 'window'; the released constructor takes img_size, ")],
}


def test_the_cases_cover_every_constructor_argument():
    assert tuple(LVVIT.arguments) == LVVIT_CONSTRUCTOR
    assert list(LVVIT_CASES) == [*LVVIT_CONSTRUCTOR, "unknown keys"]


@pytest.mark.parametrize(**argument_cases(LVVIT_CASES))
def test_every_argument_is_honoured_or_refused_by_name(changes, expect):
    check_argument("lvvit", "LV-ViT", fixture("lvvit_cls")["state_dict"], {**base(), **changes}, expect)


def test_a_headless_dense_model_is_noted():
    data = fixture("lvvit_dense")
    config = {**data["config"], "num_classes": 0, "mix_token": False}
    state = {k: v for k, v in data["state_dict"].items() if not k.startswith(("head.", "aux_head."))}
    with pytest.warns(ConversionNote, match="num_classes 0 with return_dense: the released eval output adds"):
        from_official("lvvit", state, config)


# ---------------------------------------------------------------- a released checkpoint file


def test_a_released_checkpoint_file_loads_through_create_model(caches, tmp_path, monkeypatch):
    """What the release's train script saves (the weights under `state_dict`, keyed as a DDP run saved them),
    as a preset of this test's own at the fixture's size: the authors' eval output."""
    data = fixture("lvvit_dense")
    folder = tmp_path / "presets"
    folder.mkdir()
    params = published.params(vspec.build(official()["lvvit"].spec_of(data["config"])))
    released_preset(folder, "lvvit_fixture", "lvvit", data["config"], params=params, classes=10,
                    unwrap=("state_dict",), source="Url('https://github.com/zihangJiang/TokenLabeling/releases/"
                                                   "download/1.0/lvvit_fixture.pth.tar')")
    monkeypatch.setenv("VSPEC_SPECS", str(folder))
    ddp = {f"module.{k}": v for k, v in data["state_dict"].items()}
    torch_put(caches["torch"], "lvvit_fixture.pth.tar", pickle_bytes({"epoch": 299, "arch": "lvvit_s",
                                                                     "state_dict": ddp, "metric": 83.3}))
    with pytest.warns(UserWarning, match="is unverified: no published sha256"):
        model = vspec.create_model("lvvit_fixture", pretrained=True).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])
