"""The module contracts of vspec/nn/contracts.py checked on a built model: each block, attention and head module
against its protocol: its names (`isinstance`), its forward's signature (the calls its kind's declarations make
bind), what a forward returns (through hooks) and, for an attention, the core the profiler counts in.
`tests/helpers/kinds.py`'s `exercise` runs it on a model of every registered kind."""

import inspect
import random
from collections.abc import Mapping

import torch

from vspec.compiler import modules
from vspec.nn.blocks import Carry, running_statistics_kept
from vspec.nn.contracts import AttentionModule, BlockModule, HeadModule
from vspec.nn.head_outputs import HeadOutput
from vspec.nn.layers import AttentionCoreBase
from vspec.spec.kinds import LOGITS


def _binds(module, *args, **kwargs) -> None:
    """`module.forward` accepts the call `(*args, **kwargs)` (names stand for the values)."""
    try:
        inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError as e:
        raise AssertionError(f"{type(module).__name__}.forward does not take {args} {kwargs}: {e}") from None


def _fail(message: str) -> None:
    raise AssertionError(message)  # from the hook: before the caller trips over what the module returned


def _attention(block, spec, table):
    """The block's attention module: its first submodule of the attention kind's module class."""
    cls = table[type(spec.attention)]
    found = next((m for m in block.modules() if type(m) is cls), None)
    assert found is not None, f"{type(block).__name__}: no {cls.__name__} inside for its {type(spec.attention)}"
    return found


def _head_keywords(head) -> dict:
    """The keywords the model passes its head beside the tokens, by the head kind's declarations."""
    return {**({"mask": None} if head.masks else {}), **({"state": {}} if head.reads else {}),
            **({"outputs": True} if head.outputs() != LOGITS else {}), **({"box": None} if head.mixes_tokens else {})}


def assert_signatures(model) -> list[tuple]:
    """Every block, attention and head of `model` is its protocol's and takes the calls its kind's declarations
    make; returns [(block, its spec, its attention, the attention's spec)]."""
    table, found = modules(), []
    for stage, stage_spec in zip(model.stages, model.spec.stages):
        for block, spec in zip(stage.blocks, stage_spec.blocks):
            assert isinstance(block, BlockModule), type(block).__name__
            _binds(block, "x", "state", mask=None, causal=False)  # Stage.run's call
            if not spec.reads:
                _binds(block, "x")  # the profiler's, for a part that reads no state
            a = spec.attention
            attn = _attention(block, spec, table)
            assert isinstance(attn, AttentionModule), f"{type(attn).__name__}: no `heads`"
            state = ("state",) if a.reads or a.writes else ()
            _binds(attn, "x", *state)
            if a.masks or a.causal:
                _binds(attn, "x", *state, mask=None, causal=False)
            assert any(isinstance(m, AttentionCoreBase) for m in attn.modules()), \
                f"{type(attn).__name__}: no AttentionCoreBase inside (where the profiler counts attention MACs)"
            found.append((block, spec, attn, a))
    head = model.spec.head
    assert isinstance(model.head, HeadModule), f"{type(model.head).__name__}: no reset / classifier"
    keywords = _head_keywords(head)
    _binds(model.head, "x", **keywords)
    _binds(model.head, "x", pre_logits=True, **{k: v for k, v in keywords.items() if k in ("mask", "state")})
    return found


def assert_contracts(model) -> None:
    """`assert_signatures`, then a forward in eval and one asking for the training outputs, each block, attention
    and head's result checked by a hook: a Carry of tokens shaped as its input; the attention's output shaped as its
    input (with what it wrote, for a kind with state); the head's logits (B, classes), or its declared HeadOutputs."""
    found = assert_signatures(model)

    def block_hook(module, args, kwargs, out):
        if not (type(out) is Carry and out.x.shape == args[0].shape and isinstance(out.state, Mapping)):
            _fail(f"{type(module).__name__} returned {type(out).__name__}, not Carry(x as its input, state)")

    def attention_hook(carries):
        def hook(module, args, kwargs, out):
            if carries:
                ok = isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping)
                out = out[0] if ok else out
            else:
                ok = True
            if not (ok and isinstance(out, torch.Tensor) and out.shape == args[0].shape):
                _fail(f"{type(module).__name__} returned {type(out).__name__} for x "
                                f"{tuple(args[0].shape)}{' with state' if carries else ''}")
        return hook

    def head_hook(module, args, kwargs, out):
        declared = model.spec.head.outputs()
        if kwargs.get("outputs"):
            ok = isinstance(out, tuple) and [(o.name, o.target, o.weight) for o in out if isinstance(o, HeadOutput)] \
                == [tuple(o) for o in declared]
        else:
            classes = (model.num_classes,) if model.num_classes else ()  # 0: the features, whatever their width
            ok = isinstance(out, torch.Tensor) and out.shape[:1 + len(classes)] == (args[0].shape[0], *classes)
        if not ok:
            _fail(f"{type(module).__name__} returned {type(out).__name__}"
                            f"{' for outputs=True' if kwargs.get('outputs') else ''}")

    hooks = [model.head.register_forward_hook(head_hook, with_kwargs=True)]
    for block, _, attn, a in found:
        hooks.append(block.register_forward_hook(block_hook, with_kwargs=True))
        hooks.append(attn.register_forward_hook(attention_hook(bool(a.reads or a.writes)), with_kwargs=True))
    was_training, drawn = model.training, random.getstate()
    try:
        x = model.example_input(2, dtype=model.dtype)
        with torch.no_grad(), torch.random.fork_rng():  # the caller's draws go on as without the check
            model.eval()(x)
            with running_statistics_kept(model):  # BatchNorm's running statistics as they were
                model.train().set_training_outputs(True)(x)
    finally:
        for h in hooks:
            h.remove()
        model.set_training_outputs(False).train(was_training)
        random.setstate(drawn)
