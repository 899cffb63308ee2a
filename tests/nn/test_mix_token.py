"""MixToken and the training outputs beyond the logits, on a plain ViT with the dense head: a plain `model(x)` in
training is one tensor that mixes nothing; the training forward that asks for the outputs against a hand-written
one (the box drawn as the fixtures README describes it, tokens swapped by loops; the default draw from torch's
generator, the caller's numpy state untouched), the
class target mixed by the box's share for hard and soft labels, the spec's rules and file form, and head_loss's
refusals. The released Refiner's numbers: tests/models/refiner/test_mix_token.py."""

import json
import random
from typing import ClassVar

import attrs
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from attrs import frozen
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

import vspec
from vspec.nn.head_outputs import HeadOutput, as_outputs, head_loss
from vspec.nn.mix_token import TokenBox, draw_box, released_draw_box
from vspec.spec import MHSA, Block, ClassTokenHead, DenseAux, GAPHead, Model, PatchEmbed, PatchMerging, SpecError, Stage
from vspec.spec.kinds import unregister

CLASSES, GRID = 5, (4, 3)  # 16 x 12 px in 4 px patches


def tiny(**changes) -> Model:
    return Model(**{**dict(embedder=PatchEmbed(patch_size=4), block=Block(attention=MHSA(heads=2)), depth=2, dim=16,
                           num_classes=CLASSES, img_size=(16, 12), head=ClassTokenHead(dense=DenseAux(mix_token=True))),
                    **changes})


def readme_box(seed: int, hp: int, wp: int) -> tuple[int, int, int, int]:
    """The fixtures README's MixToken draw, written out: lam ~ beta(1, 1), row, column, cut int(side sqrt(1 - lam))."""
    np.random.seed(seed)
    lam = np.random.beta(1, 1)
    return cut(lam, np.random.randint(hp), np.random.randint(wp), hp, wp)


def cut(lam: float, r: int, c: int, hp: int, wp: int) -> tuple[int, int, int, int]:
    cut_r, cut_c = int(hp * np.sqrt(1 - lam)), int(wp * np.sqrt(1 - lam))
    return (max(r - cut_r // 2, 0), max(c - cut_c // 2, 0), min(r + cut_r // 2, hp), min(c + cut_c // 2, wp))


def by_hand(model, x, box):
    """The training forward with the box's tokens taken from sample B - 1 - b, one token at a time."""
    r1, c1, r2, c2 = box
    tokens = model.embedder(x)
    mixed = tokens.clone()
    b = len(x)
    for i in range(b):
        for r in range(r1, r2):
            for c in range(c1, c2):
                mixed[i, r * GRID[1] + c] = tokens[b - 1 - i, r * GRID[1] + c]
    h = torch.cat((model.cls_token.expand(b, -1, -1), mixed), dim=1) + model.pos_embed
    for block in model.stages[0].blocks:
        h = block(h).x
    h = model.norm(h)
    cls = model.head.fc(h[:, 0])
    aux = model.head.aux(h[:, 1:])
    unmixed = aux.clone()
    for i in range(b):
        for r in range(r1, r2):
            for c in range(c1, c2):
                unmixed[i, r * GRID[1] + c] = aux[b - 1 - i, r * GRID[1] + c]
    return cls, unmixed


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_the_training_forward_mixes_a_box_and_swaps_the_token_logits_back(seed):
    torch.manual_seed(seed)
    model = vspec.build(tiny()).double().train()
    model.set_training_outputs(True, draw=released_draw_box)
    x = torch.randn(3, 3, 16, 12, dtype=torch.float64)
    want = readme_box(seed, *GRID)
    np.random.seed(seed)
    cls, aux = as_outputs(model(x))
    assert cls.box == TokenBox(*want, GRID) and aux.box is None
    with torch.no_grad():
        ref_cls, ref_aux = by_hand(model, x, want)
    assert torch.allclose(cls.logits, ref_cls, atol=1e-12) and torch.allclose(aux.logits, ref_aux, atol=1e-12)
    if (want[2] - want[0]) * (want[3] - want[1]):  # a box of tokens: the class logits see the partner's
        with torch.no_grad():
            plain, _ = by_hand(model, x, (0, 0, 0, 0))
        assert not torch.allclose(cls.logits, plain)


def test_a_plain_training_forward_is_one_tensor_that_never_mixes_the_batch():
    """timm's convention: `model.train(); model(x)` is the logits tensor, each sample's its own (sample 0's logits do
    not move when sample 1's image changes), numpy's global state untouched; the outputs only on request."""
    torch.manual_seed(0)
    model = vspec.build(tiny()).double().train()
    x = torch.randn(3, 3, 16, 12, dtype=torch.float64)
    other = x.clone()
    other[1] = torch.randn(3, 16, 12, dtype=torch.float64)
    np.random.seed(5)
    state = np.random.get_state()
    out = model(x)
    assert isinstance(out, torch.Tensor) and out.shape == (3, CLASSES)
    assert torch.equal(model(other)[[0, 2]], out[[0, 2]])
    with torch.no_grad():
        cls, aux = by_hand(model, x, (0, 0, 0, 0))
    assert torch.allclose(out, cls + 0.5 * aux.amax(dim=1), atol=1e-12)  # the eval output, in training
    assert F.cross_entropy(out, torch.tensor([0, 1, 2])).requires_grad
    model.set_training_outputs(True)
    random.seed(3)
    cls, aux = as_outputs(model(x))
    assert cls.box is not None and aux.logits.shape == (3, 12, CLASSES)
    model.set_training_outputs(False)
    assert isinstance(model(x), torch.Tensor)
    assert vspec.head_loss is head_loss  # the loss of the outputs, at the top level
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), state))  # numpy never drawn from


@pytest.mark.parametrize("seed", [0, 1, 2, 9])
def test_the_default_draw_is_the_released_rule_on_pythons_random(seed):
    """lam, the row and the column from Python's random (no tensor: nothing read back from a device); the box cut
    as the README says; numpy's and torch's states untouched."""
    rng = random.Random(seed)
    hp, wp = 7, 5
    want = cut(rng.random(), rng.randrange(hp), rng.randrange(wp), hp, wp)
    state, torch_state = np.random.get_state(), torch.get_rng_state()
    assert draw_box((hp, wp), random.Random(seed)) == TokenBox(*want, (hp, wp))
    random.seed(seed)
    assert draw_box((hp, wp)) == TokenBox(*want, (hp, wp))  # the global stream: a checkpoint restores it
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), state))
    assert torch.equal(torch.get_rng_state(), torch_state)


def test_eval_and_the_feature_api_mix_nothing():
    torch.manual_seed(0)
    model = vspec.build(tiny()).eval()
    plain = vspec.build(tiny(head=ClassTokenHead(dense=DenseAux()))).eval()
    plain.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 16, 12)
    np.random.seed(1)
    model.set_training_outputs(True)
    with torch.no_grad():
        assert torch.equal(model(x), plain(x))
        assert torch.equal(model.train().forward_features(x), plain.train().forward_features(x))
    assert np.random.rand() == np.random.RandomState(1).rand()  # no draw


def soft_ce(logits, target):
    return -(target * logits.log_softmax(-1)).sum(-1).mean()


@pytest.mark.parametrize("criterion,smoothing", [
    (torch.nn.CrossEntropyLoss(), 0.0), (torch.nn.CrossEntropyLoss(label_smoothing=0.2), 0.2),
    (LabelSmoothingCrossEntropy(smoothing=0.1), 0.1), (F.cross_entropy, 0.0)])
def test_hard_labels_become_smoothed_one_hot_rows_mixed_by_the_box(criterion, smoothing):
    torch.manual_seed(0)
    cls, aux = torch.randn(4, CLASSES, dtype=torch.float64), torch.randn(4, 12, CLASSES, dtype=torch.float64)
    y = torch.tensor([0, 3, 1, 4])
    box = TokenBox(1, 0, 3, 2, GRID)  # 4 of 12 tokens: lam 2 / 3
    rows = torch.full((4, CLASSES), smoothing / CLASSES, dtype=torch.float64)
    rows[torch.arange(4), y] += 1 - smoothing
    mixed = 2 / 3 * rows + 1 / 3 * rows.flip(0)
    tokens = criterion(aux.reshape(48, CLASSES), y.repeat_interleave(12))
    outs = (HeadOutput(cls, "cls", box=box), HeadOutput(aux, "aux", "tokens", 0.5))
    assert torch.allclose(head_loss(criterion, outs, y), soft_ce(cls, mixed) + 0.5 * tokens, rtol=1e-12)
    target = rows.softmax(-1)  # a soft target goes through the criterion, mixed
    soft = (HeadOutput(cls, "cls", box=box), HeadOutput(aux, "aux", "tokens", 0.5))
    want = soft_ce(cls, 2 / 3 * target + 1 / 3 * target.flip(0)) + 0.5 * soft_ce(aux.reshape(48, -1),
                                                                                 target.repeat_interleave(12, 0))
    assert torch.allclose(head_loss(SoftTargetCrossEntropy(), soft, target), want, rtol=1e-12)
    assert torch.allclose(head_loss(SoftTargetCrossEntropy(), soft, target, dense_scale=0.3),
                          want + (0.15 - 0.5) * soft_ce(aux.reshape(48, -1), target.repeat_interleave(12, 0)))


def test_without_a_box_the_loss_is_bit_identical_to_the_declared_sum():
    torch.manual_seed(0)
    cls, aux = torch.randn(4, CLASSES), torch.randn(4, 12, CLASSES)
    y = torch.tensor([0, 3, 1, 4])
    ce = torch.nn.CrossEntropyLoss()
    got = head_loss(ce, (HeadOutput(cls, "cls"), HeadOutput(aux, "aux", "tokens", 0.5)), y)
    assert torch.equal(got, 0 + 1.0 * ce(cls, y) + 0.5 * ce(aux.reshape(48, CLASSES), y.repeat_interleave(12)))


def test_head_loss_refuses_what_it_cannot_compute():
    logits, y = torch.randn(2, CLASSES), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="^n_comn=2: the cos_reg term needs the attention maps.*attention_maps"):
        head_loss(F.cross_entropy, logits, y, n_comn=2)
    with pytest.raises(ValueError, match=r"token-labelling target \(2, 5, 14\) needs a head with one sample and one "
                                         r"tokens output .*got logits \(sample\)"):
        head_loss(F.cross_entropy, logits, torch.rand(2, CLASSES, 14))


def test_the_spec_fields_refuse_bodies_they_do_not_fit_and_are_written_only_when_set():
    assert tiny().head.mixes_tokens and not tiny(head=ClassTokenHead(dense=DenseAux())).head.mixes_tokens
    @frozen
    class MixingGAP(GAPHead):  # a head that asks for MixToken on a body that merges its grid
        kind: ClassVar[str] = "test_mixing_gap"
        mixes_tokens: ClassVar[bool] = True

    stage = Stage(depth=1, dim=16, block=Block(attention=MHSA(heads=2)))
    try:
        with pytest.raises(SpecError, match=r"^head: MixToken .* \(4x4, the head's 2x2\)"):
            Model(embedder=PatchEmbed(patch_size=4), img_size=16, class_token=False, head=MixingGAP(),
                  stages=(stage, attrs.evolve(stage, entry=PatchMerging())))
    finally:
        unregister(MixingGAP)
    with pytest.raises(SpecError, match=r"^block\.attention: attention_maps returns the maps every block hands on; "
                                        r"mhsa attention hands none on"):
        tiny(attention_maps=True)
    for spec in (tiny(), tiny(head=ClassTokenHead(dense=DenseAux())), tiny(dynamic_img_size=True)):
        data = json.loads(vspec.to_json(spec))
        assert ("mix_token" in data["head"]["dense"]) == spec.head.mixes_tokens and "attention_maps" not in data
        assert vspec.from_json(vspec.to_json(spec)) == spec and vspec.from_toml(vspec.to_toml(spec)) == spec
    with pytest.raises(SpecError, match=r"^head\.dense\.mix_token: must be bool"):
        vspec.from_json(vspec.to_json(tiny()).replace('"mix_token": true', '"mix_token": 1'))
