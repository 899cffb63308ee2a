"""What timm's train.py asks of a model besides its forward (issue 54, item 11): `set_grad_checkpointing()` runs the
blocks under activation checkpointing (fewer bytes kept for the backward pass, the same gradients, the carried state
of every family still threaded), and `group_matcher()` gives `create_optimizer_v2(..., layer_decay=...)` one
parameter group per block."""

import logging

import attrs
import pytest
import timm.optim
import torch
import torch.nn.functional as F

import vspec
from tests.helpers.shrunk import small_spec, train_steps
from vspec.nn.head_outputs import head_loss

torch.set_num_threads(2)


def blocks(model) -> list[torch.nn.Module]:
    return [b for stage in model.stages for b in stage.blocks]


def backward(model, x, checkpointing: bool, **kwargs) -> tuple[dict, int, int]:
    """One forward_features + backward in train mode (seed 0): the gradients, the bytes kept for the backward pass
    (every tensor autograd saves during the forward pass and every block's input, parameters left out, each storage
    once) and how many times the blocks ran."""
    model.set_grad_checkpointing(checkpointing)
    model.train().zero_grad()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept, calls = {}, []

    def keep(t):
        if t.untyped_storage().data_ptr() not in params:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    def block_input(module, args):
        calls.append(module)
        if len(calls) <= len(blocks(model)):  # the forward pass's calls, not the backward's recomputation
            keep(args[0])

    hooks = [b.register_forward_pre_hook(block_input) for b in blocks(model)]
    try:
        torch.manual_seed(0)
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            out = model.forward_features(x, **kwargs)
        forward_bytes = sum(kept.values())
        sum(o.float().square().sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
    finally:
        for h in hooks:
            h.remove()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return grads, forward_bytes, len(calls)


def test_grad_checkpointing_keeps_a_fraction_of_the_activations_with_equal_gradients():
    torch.manual_seed(0)
    model = vspec.create_model("deit_tiny", depth=4, img_size=64, num_classes=3, drop_path_rate=0.1)
    x = torch.randn(4, 3, 64, 64)
    plain, plain_bytes, plain_calls = backward(model, x, False)
    ckpt, ckpt_bytes, ckpt_calls = backward(model, x, True)
    assert (plain_calls, ckpt_calls) == (4, 8)  # each block run again in the backward pass
    # a block keeps ~15 activations of its input's size (norms, q k v, scores, MLP hidden): checkpointed, its input
    assert ckpt_bytes < plain_bytes / 4, (ckpt_bytes, plain_bytes)
    assert plain.keys() == ckpt.keys() == {n for n, _ in model.named_parameters() if not n.startswith("head.")}
    for name, g in plain.items():  # the same draws of drop path in the recomputation: the same gradients
        torch.testing.assert_close(ckpt[name], g, rtol=0, atol=0, msg=name)
    model.set_grad_checkpointing(False)
    with torch.no_grad():  # nothing to keep: no recomputation
        model.set_grad_checkpointing(True)
        calls = []
        hooks = [b.register_forward_pre_hook(lambda m, a: calls.append(m)) for b in blocks(model)]
        model.eval()(x)
        [h.remove() for h in hooks]
        assert len(calls) == 4


@pytest.mark.parametrize("name", ["swin_tiny", "refined_vit_s", "dhvt_tiny_cifar_p4", "conformer_ti", "demo_text"])
def test_grad_checkpointing_threads_every_familys_state(name):
    """Swin's windows and merges, Refiner's attention maps handed block to block, DHVT, Conformer's CNN map beside
    the tokens, a text body's padding mask: run again in the backward pass, the same gradients."""
    spec = attrs.evolve(small_spec(name), drop_path=0.1)
    torch.manual_seed(0)
    model = vspec.build(spec)
    x = vspec.example_input(spec, 2, generator=torch.Generator().manual_seed(0))
    kwargs = {}
    if model.text:  # padding at the end of the second sequence
        kwargs["attention_mask"] = torch.ones_like(x)
        kwargs["attention_mask"][1, x.shape[1] // 2:] = 0
    plain, plain_bytes, plain_calls = backward(model, x, False, **kwargs)
    ckpt, ckpt_bytes, ckpt_calls = backward(model, x, True, **kwargs)
    assert ckpt_calls == 2 * plain_calls == 2 * len(blocks(model))
    assert ckpt_bytes < plain_bytes
    assert plain.keys() == ckpt.keys()
    for key, g in plain.items():
        torch.testing.assert_close(ckpt[key], g, rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("name, fields", [("lvvit_t", {}), ("refined_vit_s", {"attention_maps": True})])
def test_grad_checkpointing_keeps_the_training_outputs(name, fields):
    """The training loop's outputs through checkpointed blocks: LV-ViT's MixToken box (drawn before the blocks) and
    dense head, Refiner's attention maps of every block for cos_reg: the same outputs, the same gradients."""
    spec = attrs.evolve(small_spec(name), drop_path=0.1, **fields)
    torch.manual_seed(0)
    model = vspec.build(spec).train().set_training_outputs(True)
    x, y = vspec.example_input(spec, 4), torch.tensor([0, 1, 2, 0])
    grads, outputs = [], []
    for checkpointing in (False, True):
        model.set_grad_checkpointing(checkpointing)
        model.zero_grad()
        torch.manual_seed(0)
        out = model(x)
        head_loss(F.cross_entropy, out, y, **({"n_comn": 1} if fields else {})).backward()
        outputs.append(out)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    plain, ckpt = outputs
    assert [o.name for o in ckpt] == [o.name for o in plain] and len(plain) == (2 if name == "lvvit_t" else 1)
    assert (plain[0].box is None) == (ckpt[0].box is None) == (name != "lvvit_t")
    assert len(ckpt[0].maps or ()) == len(plain[0].maps or ()) == (spec.depth if fields else 0)
    for a, b in zip(plain, ckpt):
        torch.testing.assert_close(b.logits, a.logits, rtol=0, atol=0)
    assert grads[0].keys() == grads[1].keys()
    for key, g in grads[0].items():
        torch.testing.assert_close(grads[1][key], g, rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("name, fields", [("conformer_ti", {}), ("dhvt_tiny_cifar_p4", {}), ("refined_vit_s", {}),
                                          ("deit_tiny", {"block.norm": "batchnorm"})])
def test_grad_checkpointing_updates_batchnorm_statistics_once_a_step(name, fields):
    """Every family with a BatchNorm in its blocks (Conformer's CNN branch, DHVT's DAFF, Refiner's DLA; a block's
    norm as batchnorm): the recomputation in the backward pass updates no running statistics, so the buffers and
    the trained model's eval logits after 3 steps are those of the run without checkpointing, bit for bit."""
    spec = vspec.override(small_spec(name), {"drop_path": 0.1, **fields})
    (plain, plain_grads, plain_logits), (ckpt, ckpt_grads, ckpt_logits) = (train_steps(spec, c) for c in (False, True))
    counts = {n: int(b) for n, b in ckpt.items() if n.endswith("num_batches_tracked")}
    assert any(".blocks." in n for n in counts) and set(counts.values()) == {3}, counts  # once a step
    assert plain.keys() == ckpt.keys()
    for key, b in plain.items():
        torch.testing.assert_close(ckpt[key], b, rtol=0, atol=0, msg=key)
    torch.testing.assert_close(ckpt_logits, plain_logits, rtol=0, atol=0)
    for a, b in zip(plain_grads, ckpt_grads):
        assert a.keys() == b.keys()
        for key, g in a.items():
            torch.testing.assert_close(b[key], g, rtol=0, atol=0, msg=key)


def layer_groups(model, caplog) -> list[tuple[float, set[str]]]:
    """timm's layer-decay groups of `model` (lr scale, parameter names), lowest scale first; no timm warning."""
    names = {id(p): n for n, p in model.named_parameters()}
    with caplog.at_level(logging.WARNING):
        opt = timm.optim.create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.75)
    assert "no effect" not in caplog.text
    groups: dict[float, set[str]] = {}
    for g in opt.param_groups:
        groups.setdefault(g["lr_scale"], set()).update(names[id(p)] for p in g["params"])
    assert sum(map(len, groups.values())) == len(names)
    return sorted(groups.items())


def test_layer_decay_makes_one_group_per_block(caplog):
    model = vspec.create_model("deit_tiny", depth=3, img_size=32, num_classes=3)
    groups = layer_groups(model, caplog)
    # timm's ViT: the stem, each block (the final norm with the last, as timm's), the head; scale 0.75 ^ (4 - layer)
    assert [scale for scale, _ in groups] == pytest.approx([0.75 ** k for k in (4, 3, 2, 1, 0)])
    (_, stem), *body, (_, head) = groups
    assert stem == {n for n, _ in model.named_parameters() if n.split(".")[0] in ("embedder", "cls_token", "pos_embed")}
    for j, (_, names) in enumerate(body):
        assert {n.split(".")[3] for n in names if n.startswith("stages.")} == {str(j)}
    assert {n for n in body[-1][1] if not n.startswith("stages.")} == {"norm.weight", "norm.bias"}
    assert head == {n for n, _ in model.named_parameters() if n.startswith("head.")}


def test_layer_decay_groups_a_hierarchical_models_blocks_in_forward_order(caplog):
    dims = {f"stages.{i}.{k}": v for i in range(4) for k, v in (("depth", 2 if i == 2 else 1),
                                                                ("block.attention.window", 4))}
    model = vspec.create_model("swin_tiny", img_size=128, num_classes=3, **dims)
    groups = layer_groups(model, caplog)
    assert len(groups) == 1 + 5 + 1  # the stem, blocks 1 + 1 + 2 + 1, the head
    assert [scale for scale, _ in groups] == pytest.approx([0.75 ** k for k in range(6, -1, -1)])
    # each block in forward order, a stage's entry (patch merging) with its first block
    order = [sorted({".".join(n.split(".")[:3]) for n in names if n.startswith("stages.")}) for _, names in groups]
    assert order == [[], ["stages.0.blocks"], ["stages.1.blocks", "stages.1.entry"],
                     ["stages.2.blocks", "stages.2.entry"], ["stages.2.blocks"], ["stages.3.blocks", "stages.3.entry"],
                     []]
    assert [sorted({n.split(".")[3] for n in names if ".blocks." in n}) for _, names in groups][1:-1] == [
        ["0"], ["0"], ["0"], ["1"], ["0"]]
    coarse = timm.models.group_parameters(model, model.group_matcher(coarse=True))
    assert len(coarse) == 1 + 4 + 1  # a stage each
