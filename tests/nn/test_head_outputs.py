"""Heads and training: the dense auxiliary head (Refined-ViT / LV-ViT) against hand computations, and the
declared contract between what a head returns in training and the loss each output takes."""

import json

import pytest
import torch
import torch.nn.functional as F
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

import vspec
from vspec.cli.train import main as train_main
from vspec.compiler import weights
from vspec.nn.head_outputs import HeadOutput, as_outputs, head_loss
from vspec.spec import MHSA, Block, ClassTokenHead, DenseAux, Model, Output, PatchEmbed, SpecError
from vspec.train import engine

DIM, CLASSES, TOKENS = 16, 5, 16  # 16 px images in 4 px patches: 16 patch tokens


def tiny(dense: DenseAux | None = DenseAux(), **changes) -> Model:
    return Model(**{**dict(embedder=PatchEmbed(patch_size=4), block=Block(attention=MHSA(heads=2)), depth=1, dim=DIM,
                           num_classes=CLASSES, img_size=16, head=ClassTokenHead(dense=dense)), **changes})


def by_hand(model, x, eval_weight):
    """cls logits + eval_weight x the max over patch tokens of the aux logits, from the module's weights."""
    feats = model.forward_features(x)
    fc, aux = model.head.fc, model.head.aux
    cls = feats[:, 0] @ fc.weight.T + fc.bias
    tokens = torch.einsum("bnd,cd->bnc", feats[:, 1:], aux.weight) + aux.bias
    return cls, tokens, cls + eval_weight * tokens.max(dim=1).values


@pytest.mark.parametrize("eval_weight", [0.5, 1.25])
def test_dense_eval_output_is_cls_plus_weighted_max_over_tokens(eval_weight):
    torch.manual_seed(0)
    model = vspec.build(tiny(DenseAux(eval_weight=eval_weight))).double().eval()
    x = torch.randn(3, 3, 16, 16, dtype=torch.float64)
    with torch.no_grad():
        out = model(x)
        _, _, expected = by_hand(model, x, eval_weight)
    assert out.shape == (3, CLASSES)
    assert torch.allclose(out, expected, rtol=1e-12, atol=1e-12)
    plain = vspec.build(tiny(None)).double().eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("head.aux")})
    with torch.no_grad():
        assert not torch.allclose(plain(x), out)  # the aux term is really there


def test_dense_training_outputs_follow_the_declaration():
    spec = tiny(DenseAux(loss_weight=0.3))
    assert spec.head.outputs() == (Output("cls"), Output("aux", "tokens", 0.3))
    assert tiny(None).head.outputs() == (Output("logits"),)
    torch.manual_seed(0)
    model = vspec.build(spec).double().train()
    x = torch.randn(2, 3, 16, 16, dtype=torch.float64)
    assert isinstance(model(x), torch.Tensor)  # the outputs only on request (the training loop's)
    outs = model.set_training_outputs(True)(x)
    assert all(isinstance(o, HeadOutput) for o in outs)
    assert [(o.name, o.target, o.weight) for o in outs] == list(spec.head.outputs())
    cls, tokens, _ = by_hand(model, x, 0.5)
    assert outs[0].logits.shape == (2, CLASSES) and outs[1].logits.shape == (2, TOKENS, CLASSES)
    assert torch.allclose(outs[0].logits, cls) and torch.allclose(outs[1].logits, tokens)
    # pre_logits is the class token (what fc reads) and get_classifier() is fc, as in timm's VOLO
    model.eval()
    with torch.no_grad():
        feats = model.forward_features(x)
        pre = model.forward_head(feats, pre_logits=True)
        assert torch.equal(pre, feats[:, 0]) and model.get_classifier() is model.head.fc
        assert torch.allclose(model.get_classifier()(pre), cls)


def soft(logits, target):
    """Cross-entropy with a probability target, by hand."""
    return -(target * logits.log_softmax(dim=-1)).sum(dim=-1).mean()


@pytest.mark.parametrize("criterion,soft_targets", [
    (torch.nn.CrossEntropyLoss(), False), (LabelSmoothingCrossEntropy(smoothing=0.1), False),
    (SoftTargetCrossEntropy(), True)])
def test_dense_loss_is_cls_loss_plus_weight_times_mean_token_loss(criterion, soft_targets):
    """The engine's loss for a dense head: loss(cls, y) + 0.5 x the mean over tokens of loss(aux_token, y),
    for hard labels (plain and label-smoothed) and for mixup / cutmix probability targets."""
    torch.manual_seed(0)
    model = vspec.build(tiny()).double().train().set_training_outputs(True)
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    y = torch.tensor([0, 3, 1, 4])
    if soft_targets:
        target = torch.softmax(torch.randn(4, CLASSES, dtype=torch.float64), dim=-1)
        probs = target
    else:
        target = y
        s = getattr(criterion, "smoothing", 0.0)
        probs = (1 - s) * F.one_hot(y, CLASSES).double() + s / CLASSES
    outs = model(x)
    cls, tokens = outs[0].logits, outs[1].logits
    expected = soft(cls, probs) + 0.5 * torch.stack([soft(tokens[:, n], probs) for n in range(TOKENS)]).mean()
    loss = engine.head_loss(criterion, outs, target)
    assert torch.allclose(loss, expected, rtol=1e-12)
    loss.backward()
    assert model.head.aux.weight.grad.abs().max() > 0


def test_a_bare_tuple_of_logits_is_no_longer_a_contract():
    """The old convention (a tuple of tensors means "sum the losses") is refused, not guessed."""
    logits = torch.randn(2, 3)
    with pytest.raises(TypeError, match="tuple of HeadOutput"):
        head_loss(F.cross_entropy, (logits, logits), torch.tensor([0, 1]))
    assert as_outputs(logits) == (HeadOutput(logits),)  # a tensor: one image output, weight 1


def test_reset_classifier_resets_both_classifiers():
    torch.manual_seed(0)
    model = vspec.build(tiny())
    x = torch.randn(2, 3, 16, 16)
    model.reset_classifier(7)
    assert model.head.fc.out_features == 7 and model.head.aux.out_features == 7
    assert [o.logits.shape for o in model.train().set_training_outputs(True)(x)] == [(2, 7), (2, TOKENS, 7)]
    assert model.eval()(x).shape == (2, 7)
    model.reset_classifier(0)  # features only, as timm: the class token, in either mode
    trunk = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("head."))
    assert sum(p.numel() for p in model.parameters()) == trunk
    with torch.no_grad():
        feats = model.forward_features(x)[:, 0]
        for mode in (False, True):
            assert torch.allclose(model.train(mode)(x), feats, atol=1e-6)


@pytest.mark.parametrize("fusion", ["sum", "late"])
def test_sot_two_classifier_heads_with_no_classes_return_features(fusion):
    """Regression: reset_classifier(0) on SoT's sum / late fusion added two identities of different widths
    (a crash); now the head returns its pre-logits features in either mode, as timm's models do."""
    spec = tiny(None, head=vspec.SecondOrderHead(fusion=fusion, pool=vspec.MGCrP(heads=1, m=3, n=3)))
    torch.manual_seed(0)
    model = vspec.build(spec)
    model.reset_classifier(0)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        pre = model.forward_head(model.forward_features(x), pre_logits=True)
        for mode in (False, True):
            assert torch.allclose(model.train(mode)(x), pre, atol=1e-6) and pre.shape == (2, DIM + 9)


def test_the_dense_head_adds_dim_x_classes_plus_classes_params_and_its_macs():
    dense, plain = tiny(), tiny(None)
    extra = DIM * CLASSES + CLASSES
    n = {s: sum(p.numel() for p in vspec.build(s).parameters()) for s in (dense, plain)}
    assert n[dense] - n[plain] == extra
    pd, pp = vspec.profile(dense), vspec.profile(plain)
    assert pd.params == n[dense] and pd.unsupported_ops == [] and pd.crosscheck_macs == pd.macs
    assert pd.macs - pp.macs == TOKENS * DIM * CLASSES  # the aux Linear on every patch token (eval mode)
    assert weights(dense).params - weights(plain).params == 4 * extra  # float32 bytes, as the size guard counts


def test_the_dense_option_round_trips_and_fails_in_one_line():
    spec = tiny(DenseAux(loss_weight=0.25, eval_weight=2.0))
    assert vspec.from_json(vspec.to_json(spec)) == spec and vspec.from_toml(vspec.to_toml(spec)) == spec
    assert vspec.override(tiny(None), {"head.dense": {}}) == tiny()
    with pytest.raises(SpecError) as e:
        vspec.override(spec, {"head.dense.loss_weight": 0})
    assert e.value.path == "head.dense.loss_weight" and "must be > 0" in e.value.message
    with pytest.raises(SpecError, match="head: the class_token head needs class_token = true"):
        tiny(class_token=False)


def test_a_dense_head_trains_on_digits_with_mixup(tmp_path, monkeypatch, capsys):
    """tools/train.py with the deit recipe (mixup / cutmix soft targets): every step's loss is the
    declared one, computed independently; the run finishes and its checkpoint evaluates to logits."""
    spec = tiny(in_chans=1, img_size=8, embedder=PatchEmbed(patch_size=2), num_classes=10)
    path = tmp_path / "dense.json"
    path.write_text(vspec.to_json(spec))
    checked = []

    def spy(criterion, outputs, target, **options):
        assert options == {"n_comn": None, "pooled": False, "dense_scale": 1.0}  # the deit recipe: plain
        loss = head_loss(criterion, outputs, target, **options)
        cls, tokens = (o.logits.float() for o in outputs)
        assert target.shape == (len(cls), 10)  # soft targets
        expected = soft(cls, target) + 0.5 * torch.stack([soft(tokens[:, n], target) for n in range(16)]).mean()
        checked.append(torch.allclose(loss, expected, rtol=1e-5))
        return loss

    monkeypatch.setattr(engine, "head_loss", spy)
    out = tmp_path / "run"
    assert train_main([str(path), "--data", "digits", "--out", str(out), "--batch-size", "16", "--max-steps", "3",
                       "--epochs", "1", "--device", "cpu", "--recipe", "deit", "--precision", "fp32"]) == 0
    assert checked == [True] * 3  # (the equation in fp32: auto may pick bf16 autocast)
    assert "1 x loss(cls, the label) + 0.5 x loss(aux, the label at every token)" in capsys.readouterr().err
    assert json.loads((out / "metrics.jsonl").read_text())["val_top1"] >= 0
    model = vspec.load(out / "last.pt").eval()
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    assert model.spec.head.dense == DenseAux()
