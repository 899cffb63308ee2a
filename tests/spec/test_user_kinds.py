"""Adding a kind touches nothing under vspec/: this file defines an attention kind, an FFN kind and a head kind (spec
class, module class, the compiler's table line, test strategies) and the whole machinery works for them: build,
files, profile, size guard, the `vspec` command on a saved JSON, bf16, torch.compile, forward_intermediates and
`vspec analyze --what maps`. The kinds exist only while these tests run (the fixture registers and forgets them)."""

import json
import math
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from attrs import field, frozen
from einops import rearrange
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import vspec
from tests.helpers.breakages import apply_changes
from tests.helpers.kinds import exercise
from tests.helpers.strategies import KIND_MODELS, KIND_RULES, kind_breakages
from vspec import cli
from vspec.compiler import MODULES, weights
from vspec.nn.layers import AttentionCore
from vspec.nn.vit import PoolHead
from vspec.spec import Block, MemoryBudgetError, Model, PatchEmbed, SpecError, budget, from_dict, override, to_dict
from vspec.spec.errors import check
from vspec.spec.kinds import AttentionKind, FFNKind, HeadKind, unregister


def define() -> dict[type, type]:
    """The three kinds, as a user writes them: spec class -> module class (the compiler's table lines)."""

    @frozen
    class GatedAttention(AttentionKind):
        """softmax(q k^T / sqrt(d)) v per head, its output gated by sigmoid(G x) before the projection."""

        kind: ClassVar[str] = "test_gated"
        attends_all: ClassVar[bool] = True
        heads: int = field(default=2, validator=check(int, ge=1))

        def check(self, tokens) -> None:
            if tokens.dim % self.heads:
                raise SpecError("heads", f"{self.heads} does not divide dim {tokens.dim}")

    class GatedAttentionModule(nn.Module):
        def __init__(self, spec, ctx):
            super().__init__()
            self.heads = spec.heads
            self.qkv, self.gate, self.proj = nn.Linear(ctx.dim, 3 * ctx.dim), nn.Linear(ctx.dim, ctx.dim), \
                nn.Linear(ctx.dim, ctx.dim)
            self.core = AttentionCore()

        def forward(self, x):
            q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.heads) for t in self.qkv(x).chunk(3, -1))
            z = rearrange(self.core(q, k, v), "b h n d -> b n (h d)")
            return self.proj(z * torch.sigmoid(self.gate(x)))

    @frozen
    class GLU(FFNKind):
        """(x W1 * silu(x W2)) W3, hidden int(dim x ratio)."""

        kind: ClassVar[str] = "test_glu"
        ratio: float = field(default=2.0, validator=check(float, gt=0))

        def check(self, tokens) -> None:
            if int(tokens.dim * self.ratio) < 1:
                raise SpecError("ratio", f"int({self.ratio} x dim {tokens.dim}) leaves no hidden channel")

    class GLUModule(nn.Module):
        def __init__(self, spec, ctx):
            super().__init__()
            hidden = int(ctx.dim * spec.ratio)
            self.fc1, self.fc2 = nn.Linear(ctx.dim, 2 * hidden), nn.Linear(hidden, ctx.dim)

        def forward(self, x):
            a, b = self.fc1(x).chunk(2, -1)
            return self.fc2(a * F.silu(b))

    @frozen
    class MaxHead(HeadKind):
        """Classify from the channel-wise max over the patch tokens."""

        kind: ClassVar[str] = "test_max"
        reads_prefix: ClassVar[bool] = False

    class MaxHeadModule(PoolHead):
        def __init__(self, spec, ctx):
            super().__init__(ctx, 0.0)
            self.prefix = ctx.num_prefix_tokens

        def pool(self, x):
            return x[:, self.prefix:].amax(dim=1)

    return {GatedAttention: GatedAttentionModule, GLU: GLUModule, MaxHead: MaxHeadModule}


def model_with(**parts) -> Model:
    block = Block(attention=parts.pop("attention", vspec.spec.MHSA(heads=2)), ffn=parts.pop("ffn", vspec.spec.MLP()))
    return Model(embedder=PatchEmbed(patch_size=4), img_size=16, dim=16, depth=2, block=block, num_classes=3, **parts)


@pytest.fixture(scope="module")
def kinds():
    table = define()
    attention, ffn, head = table
    strategies = {  # models using each kind, and the rule each one breaks (tests/helpers/strategies.py's tables)
        attention: st.sampled_from([1, 2, 4]).map(lambda h: model_with(attention=attention(heads=h))),
        ffn: st.floats(0.5, 3.0).map(lambda r: model_with(ffn=ffn(ratio=r))),
        head: st.booleans().map(lambda c: model_with(head=head(), class_token=c)),
    }
    rules = {attention: lambda s: [([("block.attention.heads", 3)], "block.attention.heads")],
             ffn: lambda s: [([("block.ffn.ratio", 0.01)], "block.ffn.ratio")],
             head: lambda s: [([("head.kind", "nope")], "head.kind")]}
    MODULES.update(table)
    KIND_MODELS.update(strategies)
    KIND_RULES.update(rules)
    yield attention, ffn, head
    for cls in table:
        del MODULES[cls], KIND_MODELS[cls], KIND_RULES[cls]
        unregister(cls)


@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_they_build_train_reload_and_are_fully_counted(kinds, data):
    for cls in kinds:
        exercise(data.draw(KIND_MODELS[cls]), cls)


@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_their_broken_specs_name_the_field(kinds, data):
    for cls in kinds:
        spec = data.draw(KIND_MODELS[cls])
        changes, path = data.draw(kind_breakages(spec, cls))
        for make in (lambda: from_dict(apply_changes(to_dict(spec), changes)), lambda: override(spec, dict(changes))):
            with pytest.raises(SpecError) as info:
                make()
            assert info.value.path == path


def spec_of(kinds) -> Model:
    attention, ffn, head = kinds
    return model_with(attention=attention(heads=4), ffn=ffn(ratio=1.5), head=head())


def test_the_command_builds_and_profiles_a_saved_json(kinds, tmp_path, capsys):
    path = tmp_path / "new.json"
    path.write_text(vspec.to_json(spec_of(kinds)))
    assert cli.main(["build", str(path)]) == 0
    model = vspec.build(spec_of(kinds))
    total = sum(p.numel() for p in model.parameters())
    assert f"total: {total:,} parameters" in capsys.readouterr().out
    assert cli.main(["profile", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == total


def test_bf16_compile_and_intermediates(kinds):
    torch.manual_seed(0)
    model = vspec.build(spec_of(kinds)).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model.train()(x)
        out.float().sum().backward()
    assert torch.isfinite(out.float()).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    with torch.no_grad():
        eager = model(x)
        torch._dynamo.reset()
        assert torch._dynamo.explain(model)(x).graph_break_count == 0
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert (compiled - eager).abs().max() < 1e-4
    final, feats = model.forward_intermediates(x)
    assert len(feats) == 2 and feats[0].shape == (2, 16, 4, 4) and final.shape == (2, 17, 16)


def test_analyze_draws_its_attention_maps(kinds, tmp_path):
    path = tmp_path / "new.json"
    path.write_text(vspec.to_json(spec_of(kinds)))
    assert cli.main(["analyze", str(path), "--what", "maps", "--batch-size", "2", "--out-dir", str(tmp_path)]) == 0
    maps = json.loads((tmp_path / "new.maps.json").read_text())["maps"]
    assert [(m["block"], m["tokens"], m["heads"], m["refined"]) for m in maps] == [(0, 17, [0, 1, 2, 3], False),
                                                                                  (1, 17, [0, 1, 2, 3], False)]
    assert all(0 < e <= math.log(17) + 1e-6 for m in maps for e in m["entropy_before"])  # softmax rows over 17 keys


def test_the_size_guard_counts_them(kinds, monkeypatch):
    spec = spec_of(kinds)
    model = vspec.build(spec).eval()
    assert weights(spec).params == sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    largest = []
    hooks = [m.register_forward_hook(lambda m, i, o: largest.append(o.numel() * o.element_size())
                                      if isinstance(o, torch.Tensor) else None) for m in model.modules()]
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    seen = x.numel() * 4 + max(largest)  # the bases' default working sets bound them too
    assert seen <= budget.activations(spec, batch=3)[0] <= 8 * seen
    monkeypatch.setattr(budget, "available", lambda: weights(spec).params + spec.depth * budget.HOST_PER_BLOCK - 1)
    with pytest.raises(MemoryBudgetError, match=r"^building it on cpu needs about .* of weights"):
        vspec.build(spec)


def test_a_users_entry_replaces_a_familys_module():
    """One table, one precedence: `MODULES[Kind] = Module` for a family's kind is what `vspec.build` builds and what
    `modules()` lists."""
    from vspec.compiler import modules
    from vspec.spec import DAFF

    family = vspec.spec.families.tables("MODULES")[DAFF]
    mine = type("MyDAFF", (family,), {})
    MODULES[DAFF] = mine
    try:
        model = vspec.build(model_with(ffn=DAFF()), device="meta")
        assert modules()[DAFF] is mine
    finally:
        del MODULES[DAFF]
    assert [type(b.ffn) for b in model.stages[0].blocks] == [mine, mine]
    assert modules()[DAFF] is family
