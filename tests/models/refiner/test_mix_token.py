"""Refiner's released training forward (fixtures README, "Token labeling": MixToken, cos_reg, Losses): the converted
model's MixToken box, training outputs, attention maps, loss and input gradient against relabel/mix_token.pt and
relabel/cos_reg.pt, and head_loss's dispatch of every released loss case of relabel/losses.pt."""

import warnings

import numpy as np
import pytest
import torch

from tests.helpers.checks import FIXTURES, STORED_ATOL
from vspec.convert import from_official
from vspec.nn.head_outputs import HeadOutput, as_outputs, head_loss
from vspec.nn.mix_token import TokenBox, released_draw_box
from vspec.nn.token_losses import relabel_cross_entropy, soft_cross_entropy
from vspec.spec import DenseAux

EXACT = 1e-6  # losses, maps and gradients (float32)
# logits: the stored float32 values are themselves up to 5.8e-6 off the same model run in float64, so logits are held
# to the converters' STORED_ATOL (1e-5); the losses and gradients built on them agree to 1e-6


def fixture(name: str) -> dict:
    return torch.load(FIXTURES / f"relabel/{name}.pt", weights_only=True)


def close(got, want, atol=EXACT):
    diff = (got - want).abs().max().item()
    assert diff <= atol, f"{diff:.3g} off (tolerance {atol})"


def released(data: dict, **changes):
    """The released model converted with no note: mix_token and cos_reg are honoured; its training forward returns
    the head's outputs, MixToken's box drawn as released (numpy's global stream)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = from_official("refiner", data["state_dict"], {**data["config"], **changes})
    return model.set_training_outputs(True, draw=released_draw_box)


def draws_after(seed: int, count: int) -> float:
    """numpy's next uniform after `count` MixToken draws (beta, randint, randint) from `seed`."""
    np.random.seed(seed)
    for _ in range(count):
        np.random.beta(1.0, 1.0), np.random.randint(6), np.random.randint(6)
    return np.random.rand()


def test_mix_token_training_forward_loss_and_gradient_are_the_released():
    data = fixture("mix_token")
    model = released(data)
    assert model.spec.head.dense == DenseAux(mix_token=True) and not model.spec.attention_maps
    np.random.seed(data["np_seed"])
    x = data["x"].clone().requires_grad_()
    out = model.train()(x)
    assert np.random.rand() == draws_after(data["np_seed"], 1)  # beta, then row, then column: three draws, no more
    cls, aux = as_outputs(out)
    assert cls.box == TokenBox(*data["bbox"].tolist(), (6, 6)) and aux.box is None and cls.maps is None
    assert cls.box.lam == 1 - 8 / 36
    close(cls.logits, data["train_cls"], STORED_ATOL)
    close(aux.logits, data["train_aux"], STORED_ATOL)  # swapped back in the box: each token its own image's
    loss = head_loss(torch.nn.CrossEntropyLoss(), out, data["target"])  # a relabel target: the released loss
    close(loss, data["loss"])
    close(loss, relabel_cross_entropy(cls.logits, aux.logits, cls.box.corners, data["target"], dense_weight=0.5,
                                      cls_weight=1.0))
    loss.backward()
    close(x.grad, data["grad_x"])


def test_without_mix_token_or_in_eval_nothing_is_mixed_or_drawn():
    data = fixture("mix_token")
    plain = released(data, mix_token=False).train()
    np.random.seed(data["np_seed"])
    with torch.no_grad():
        cls, aux = as_outputs(plain(data["x"]))
    assert np.random.rand() == draws_after(data["np_seed"], 0) and cls.box is None
    close(cls.logits, data["train_nomix_cls"], STORED_ATOL)
    close(aux.logits, data["train_nomix_aux"], STORED_ATOL)
    assert (data["train_nomix_aux"] - data["train_aux"]).abs().max() > 0.1  # the fixture's mixing is visible
    model = released(data).eval()
    np.random.seed(data["np_seed"])
    with torch.no_grad():
        close(model(data["x"]), data["y_eval"], STORED_ATOL)
    assert np.random.rand() == draws_after(data["np_seed"], 0)


def test_cos_reg_maps_loss_terms_and_gradient_are_the_released():
    data = fixture("cos_reg")
    model = released(data).eval()
    assert model.spec.attention_maps and model.spec.head.dense.mix_token
    with torch.no_grad():
        close(model(data["x"]), data["y_eval"], STORED_ATOL)  # before the training forwards move the BN statistics
    model.train()
    losses = {}
    for n_comn in (None, 2, 3):
        np.random.seed(data["np_seed"])
        x = data["x"].clone().requires_grad_()
        out = model(x)
        cls, aux = as_outputs(out)
        assert cls.box.corners == tuple(data["bbox"].tolist()) and aux.maps is None
        close(cls.logits, data["train_cls"], STORED_ATOL)
        close(aux.logits, data["train_aux"], STORED_ATOL)
        assert len(cls.maps) == 4 and torch.equal(cls.maps[0], cls.maps[1])  # a shared block hands on what it got
        for got, want in zip(cls.maps, data["atten"], strict=True):
            close(got, want)
        losses[n_comn] = head_loss(torch.nn.CrossEntropyLoss(), out, data["target"], n_comn=n_comn)
        if n_comn == 3:
            losses[n_comn].backward()
            close(x.grad, data["grad_x_ncomn3"])
    close(losses[None], data["loss_no_atten"])
    for n in (2, 3):
        close(losses[n], data[f"loss_ncomn{n}"])
        close(losses[n] - losses[None], data[f"cos_term_ncomn{n}"])


def case_outputs(name: str, inputs: dict) -> tuple[tuple[HeadOutput, ...], torch.Tensor, dict]:
    """losses.pt's case `name` as a head's training outputs, its target and head_loss's keywords."""
    if name.startswith("stce"):  # SoftTargetCrossEntropyCosReg / the repeat tiling: one sample output
        return (HeadOutput(inputs["output"], maps=tuple(inputs["atten"])),), inputs["target_2d_mixup0.7"], {"n_comn": 2}
    kind, weight, *rest = name.split("_")
    box = None if "nobox" in rest else TokenBox(*inputs["box"].tolist(), (7, 7))
    maps = tuple(inputs["atten"]) if "atten" in rest else None
    outs = (HeadOutput(inputs["output"], "cls", box=box, maps=maps),
            HeadOutput(inputs["aux_output"], "aux", "tokens", 0.5))
    target = inputs[("target_2d" if "2d" in rest else "target_relabel") + ("_mixup0.7" if "mixup" in rest else "")]
    keywords = {"dense_scale": float(weight.removeprefix("dw")) / 0.5, "pooled": kind == "rpce"}  # weight 0.5 declared
    if maps is not None:
        keywords["n_comn"] = 3 if "ncomn3" in rest else 2
    return outs, target, keywords


@pytest.mark.parametrize("name", sorted(set(fixture("losses")["cases"]) - {"stce_repeat2"}))
def test_head_loss_computes_every_released_loss(name):
    """Relabel targets (3-D) dispatch to RelabelCrossEntropy with the declared weights, `pooled` to
    RelabelPooledCrossEntropy, 2-D targets go through the criterion with the class target box-mixed, the dense
    weight scales at run time (dw1.0 = 0.5 x 2), and n_comn adds the cos term of the maps the outputs carry."""
    data = fixture("losses")
    outs, target, keywords = case_outputs(name, data["inputs"])
    close(head_loss(soft_cross_entropy, outs, target, **keywords), data["cases"][name]["loss"])
