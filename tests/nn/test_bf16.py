"""Mixed precision on the CPU (the path tools/train.py takes on CUDA): every preset and every component
kind runs forward and backward under bf16 autocast with finite values, the numerically sensitive ops
compute in float32 inside, and `tools/train.py --precision bf16` trains."""

import json
from pathlib import Path

import attrs
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import vspec
from tests.helpers.shrunk import small
from tests.helpers.strategies import KIND_MODELS
from vspec import ops as core_ops
from vspec.cli.train import main as train_main
from vspec.models.sot import ops
from vspec.nn.head_outputs import as_outputs
from vspec.ops import precision as precision_ops
from vspec.train import engine

ROOT = Path(__file__).resolve().parents[2]
SPEC_FILES = sorted((ROOT / "specs").glob("*.py"))


def bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def kinds(spec) -> set[type]:
    """The component classes anywhere in a spec tree."""
    if isinstance(spec, tuple):
        return set().union(*map(kinds, spec))
    if not attrs.has(type(spec)):
        return set()
    return {type(spec)}.union(*(kinds(getattr(spec, f.name)) for f in attrs.fields(type(spec))))


def assert_trains_under_bf16(spec: vspec.Model) -> None:
    """Training mode: forward + backward under autocast, finite outputs and gradients for every
    parameter, the logits in bfloat16 (autocast reached the classifier); eval mode: finite too."""
    torch.manual_seed(0)
    model = vspec.build(spec).train().set_training_outputs(True)
    x = vspec.example_input(spec, 2)
    with bf16():
        out = model(x)
    outs = [o.logits for o in as_outputs(out)]
    assert all(o.dtype == torch.bfloat16 and torch.isfinite(o).all() for o in outs)
    sum((o.float() * torch.randn_like(o, dtype=torch.float32)).sum() for o in outs).backward()
    bad = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not bad, f"missing or non-finite gradients: {bad}"
    with torch.no_grad(), bf16(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(precision_ops, "_NATIVE_BF16", True)  # the bf16 token stream of inference, on any CPU
        assert torch.isfinite(model.eval()(x)).all()


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_every_preset_trains_under_bf16_autocast(path):
    spec = vspec.load_spec(path)
    tiny = small(spec)
    assert kinds(tiny) == kinds(spec)
    assert_trains_under_bf16(tiny)


@pytest.mark.parametrize("cls", sorted(KIND_MODELS, key=lambda c: c.__name__), ids=lambda c: c.__name__)
@settings(max_examples=3)
@given(data=st.data())
def test_every_kind_trains_under_bf16_autocast(cls, data):
    assert_trains_under_bf16(data.draw(KIND_MODELS[cls]))


# ---------------------------------------------------------------------------------------------
# the sensitive ops: float32 inside, whatever autocast and the inputs say

def _q(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


SENSITIVE = {
    "cross_covariance": (lambda a, b: ops.cross_covariance(a, b), (_q(2, 9, 4), _q(2, 9, 3))),
    "covariance": (lambda a: ops.covariance(a), (_q(2, 9, 4),)),
    "svpn_exact": (lambda q: ops.svpn_exact(q), (_q(2, 5, 4),)),
    "power_iteration": (lambda q, v: ops.power_iteration(q, v, iters=2), (_q(2, 5, 4), _q(4))),
    "svpn_approx": (lambda q: ops.svpn_approx(q, num_sv=2, iters=3), (_q(2, 5, 4),)),
    "epn": (lambda r: ops.epn(r), (_q(2, 20),)),
    "isqrt_cov": (lambda s: ops.isqrt_cov(s), (_q(2, 5, 5) @ _q(2, 5, 5).mT + torch.eye(5),)),  # SPD
}


def _outputs_and_grads(fn, inputs, autocast: bool, backward_inside: bool = False):
    """fn's outputs (a tuple) and the gradients of its inputs for a fixed weighting of the outputs."""
    xs = [x.detach().clone().requires_grad_() for x in inputs]

    def backward(outs):
        sum((o * torch.linspace(-1, 1, o.numel()).view_as(o)).sum() for o in outs).backward()

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        outs = fn(*xs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        if backward_inside:
            backward(outs)
    if not backward_inside:
        backward(outs)
    return [o.detach() for o in outs], [x.grad for x in xs]


@pytest.mark.parametrize("name", SENSITIVE)
@pytest.mark.parametrize("in_dtype", [torch.float32, torch.bfloat16])
def test_sensitive_ops_compute_in_float32_under_autocast(name, in_dtype):
    """Under autocast, from float32 or bfloat16 inputs: a float32 result equal to the float32
    computation on the same (upcast) inputs, and so are the input gradients; for the exact svPN's own
    backward also when it runs inside the autocast region (autograd's backward of the other ops takes
    the autocast state it runs in, which is why PyTorch advises backward outside autocast)."""
    fn, inputs = SENSITIVE[name]
    given = [x.to(in_dtype) for x in inputs]
    ref_outs, ref_grads = _outputs_and_grads(fn, [x.float() for x in given], autocast=False)
    for inside in (False, True) if name == "svpn_exact" else (False,):
        outs, grads = _outputs_and_grads(fn, given, autocast=True, backward_inside=inside)
        for o, r in zip(outs, ref_outs):
            assert o.dtype == torch.float32
            torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-6)
        for g, r in zip(grads, ref_grads):
            assert g.dtype == in_dtype  # a bfloat16 input's gradient: the float32 one, rounded (summands apart)
            torch.testing.assert_close(g, r.to(in_dtype))  # float32 / bfloat16 tolerances


def test_sensitive_ops_follow_the_input_dtype_without_autocast():
    """Outside autocast nothing is cast: float64 stays float64 (and float32 stays float32)."""
    q = _q(2, 5, 4).double()
    assert ops.svpn_exact(q).dtype == torch.float64 and ops.svpn_approx(q.float()).dtype == torch.float32
    with bf16():
        assert ops.svpn_exact(q).dtype == torch.float64  # autocast upcasts half inputs only


@pytest.mark.parametrize("act", [None, "gelu", "relu"])
def test_linear_follows_autocast(act):
    """The oneDNN-fused linear gives way to autocast: bfloat16 matmuls, as F.linear under autocast,
    with and without autograd."""
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 3, 8), torch.randn(6, 8, requires_grad=True), torch.randn(6, requires_grad=True)
    with bf16():
        expected = F.linear(x, w, b)
        expected = expected if act is None else {"gelu": F.gelu, "relu": F.relu}[act](expected)
        for grad in (True, False):
            with torch.set_grad_enabled(grad):
                y = core_ops.linear(x, w, b, act)
            assert y.dtype == torch.bfloat16
            torch.testing.assert_close(y, expected.detach())


# ---------------------------------------------------------------------------------------------
# tools/train.py --precision


@pytest.fixture(scope="module")
def exact_svpn_spec(tmp_path_factory):
    """A 16 px, 16-wide DHVT body with SoT's head and the exact (SVD) svPN, the issue's failing case."""
    spec = vspec.override(vspec.load_spec(ROOT / "specs/demo_digits.py"), {
        "depth": 1, "dim": 16, "block.attention.heads": 2, "img_size": 16, "head.kind": "second_order",
        "head.pool.heads": 2, "head.pool.m": 4, "head.pool.n": 4, "head.norm.method": "exact"})
    path = tmp_path_factory.mktemp("spec") / "exact.json"
    path.write_text(vspec.to_json(spec))
    return path


@pytest.mark.parametrize("precision, native, dtype", [
    ("bf16", None, torch.bfloat16), ("fp16", None, torch.float16), ("auto", None, None),
    ("auto", "AMX", torch.bfloat16), ("fp32", "AMX", None)])
def test_train_cli_precision_on_the_cpu(exact_svpn_spec, tmp_path, monkeypatch, precision, native, dtype):
    """`--precision bf16` trains under CPU autocast with a finite loss; fp32 does not autocast, and auto does on a
    CPU with native bf16 only (`native_bf16` monkeypatched both ways)."""
    monkeypatch.setattr(precision_ops, "native_bf16", lambda: native)
    seen = []
    loss_fn = engine.head_loss

    def spy(criterion, outputs, target, **options):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return loss_fn(criterion, outputs, target, **options)

    monkeypatch.setattr(engine, "head_loss", spy)
    out = tmp_path / "run"
    assert train_main([str(exact_svpn_spec), "--data", "digits", "--out", str(out), "--batch-size", "16",
                       "--max-steps", "2", "--epochs", "1", "--device", "cpu", "--precision", precision]) == 0
    assert seen == [dtype, dtype]
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert all(torch.isfinite(torch.tensor(record[k])) for k in ("train_loss", "val_loss"))


# ---------------------------------------------------------------------------------------------
# bf16-autocast inference carries its token stream in bf16 (vspec.ops.precision.bf16_stream)

def stream_dtypes(model: torch.nn.Module, x: torch.Tensor) -> list[torch.dtype]:
    """The dtype of every block's input in one forward of `model` on `x`, under the caller's modes."""
    seen = []
    hooks = [m.register_forward_pre_hook(lambda _, args: seen.append(args[0].dtype)) for m in model.stages[0].blocks]
    try:
        model(x)
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.mark.parametrize("name", ["deit_tiny", "bert_base"])
def test_bf16_inference_carries_the_stream_in_bf16_only_there(name, monkeypatch):
    monkeypatch.setattr(precision_ops, "_NATIVE_BF16", True)  # the CPU's answer, taken on any CPU
    spec = small(vspec.load_spec(ROOT / f"specs/{name}.py"))
    model = vspec.build(spec).eval()
    x = vspec.example_input(spec, 2)
    with torch.no_grad(), bf16():
        assert set(stream_dtypes(model, x)) == {torch.bfloat16}
        with core_ops.fast.fast_paths(False):
            assert torch.bfloat16 not in stream_dtypes(model, x)
    with bf16():  # autograd on: training's float32 stream, as autocast gives it
        assert torch.bfloat16 not in stream_dtypes(model, x)
    with torch.no_grad():
        assert set(stream_dtypes(model, x)) == {torch.float32}
    monkeypatch.setattr(precision_ops, "_NATIVE_BF16", False)
    with torch.no_grad(), bf16():
        assert torch.bfloat16 not in stream_dtypes(model, x)


@pytest.mark.parametrize("name", ["deit_tiny", "gpt", "bert_base", "t2t_vit_24"])
def test_bf16_streams_logits_are_about_as_close_to_float64_as_the_model_cast_to_bf16(name, monkeypatch):
    """The relative error of the bf16-stream logits against the float64 model's is within 1.5x that of the model cast
    wholesale to bf16 (timm's `--model-dtype bfloat16`), the plain bf16 inference: DeiT-Ti at full size, the text
    bodies and T2T shrunk. The features and hidden states come out in float32 as without the stream."""
    monkeypatch.setattr(precision_ops, "_NATIVE_BF16", True)
    torch.manual_seed(0)
    spec = vspec.load_spec(ROOT / f"specs/{name}.py")
    spec = spec if name == "deit_tiny" else small(spec)
    model = vspec.build(spec).eval()
    x = vspec.example_input(spec, 4)
    floating = x.is_floating_point()
    with torch.no_grad():
        exact = model.double()(x.double() if floating else x)
        model.float()
        with bf16():
            assert set(stream_dtypes(model, x)) == {torch.bfloat16}
            stream = model(x).double()
            assert model.forward_features(x).dtype == torch.float32
            hidden = model(x, output_hidden_states=True, return_dict=True).hidden_states
            assert {h.dtype for h in hidden} == {torch.float32}
        cast = model.bfloat16()(x.bfloat16() if floating else x).double()

    def error(y):
        return ((y - exact).norm() / exact.norm()).item()

    assert 0 < error(stream) <= 1.5 * error(cast)
