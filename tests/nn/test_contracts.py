"""vspec/nn/contracts.py: the block, attention and head protocols, and the check every registered kind passes
(tests/helpers/contracts.py, run by tests/spec/test_kinds.py's exercise): a module that breaks its contract fails
it, whichever part it breaks."""

import attrs
import pytest
import torch
from torch import nn

import vspec
from tests.helpers.contracts import assert_contracts
from vspec import nn as vnn
from vspec.compiler import MODULES
from vspec.nn.contracts import AttentionModule, BlockModule, HeadModule
from vspec.spec import MHSA, Block, ClassTokenHead, DenseAux, Model, PatchEmbed

SPEC = Model(embedder=PatchEmbed(patch_size=8), img_size=16, dim=16, depth=1, block=Block(attention=MHSA(heads=2)),
             num_classes=3)
DENSE = attrs.evolve(SPEC, head=ClassTokenHead(dense=DenseAux()))  # two declared outputs


def test_the_core_modules_are_their_protocols():
    model = vspec.build(SPEC)
    block = model.stages[0].blocks[0]
    assert isinstance(block, BlockModule) and isinstance(block.attn, AttentionModule)
    assert isinstance(model.head, HeadModule)
    assert not isinstance(nn.Linear(2, 2), AttentionModule) and not isinstance(nn.Linear(2, 2), HeadModule)
    assert_contracts(model)


class TupleBlock(vnn.Block):  # returns a plain tuple, not a Carry
    def forward(self, x, state={}, *, mask=None, causal=False):  # noqa: B006
        return tuple(super().forward(x, state, mask=mask, causal=causal))


class NoCausalBlock(vnn.Block):  # takes no causal keyword
    def forward(self, x, state={}, *, mask=None):  # noqa: B006
        return super().forward(x, state, mask=mask)


class HeadlessAttention(nn.Module):  # MHSA inside, no `heads` of its own
    def __init__(self, spec, ctx):
        super().__init__()
        self.inner = vnn.MHSA(spec, ctx)

    def forward(self, x, *, mask=None, causal=False):
        return self.inner(x, mask=mask, causal=causal)


class WroteAttention(vnn.MHSA):  # a kind without state returns (output, state)
    def forward(self, x, *, mask=None, causal=False):
        return super().forward(x, mask=mask, causal=causal), {}


class NoMaskAttention(vnn.MHSA):  # MHSA declares masks and causal, this takes neither
    def forward(self, x):
        return super().forward(x)


class CorelessAttention(vnn.MHSA):  # its token mixing outside an AttentionCoreBase
    def __init__(self, spec, ctx):
        super().__init__(spec, ctx)
        self.core = None

    def forward(self, x, *, mask=None, causal=False):
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in self.project(x))
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.output(z.transpose(1, 2).flatten(2))


class UnresettableHead(nn.Module):  # the class token's logits, no reset
    def __init__(self, spec, ctx):
        super().__init__()
        self.fc = nn.Linear(ctx.dim, ctx.num_classes)

    def forward(self, x, pre_logits=False):
        return x[:, 0] if pre_logits else self.fc(x[:, 0])

    def classifier(self):
        return self.fc


class FeaturesHead(vnn.ClassTokenHead):  # the pooled token, not the logits
    def forward(self, x, pre_logits=False, mask=None, box=None, outputs=False):
        return super().forward(x, pre_logits=True)


class NoOutputsHead(vnn.ClassTokenHead):  # a head that declares two outputs but takes no outputs keyword
    def forward(self, x, pre_logits=False, mask=None, box=None):
        return super().forward(x, pre_logits, mask, box)


@pytest.mark.parametrize(("kind", "module", "spec", "says"), [
    (Block, TupleBlock, SPEC, "TupleBlock returned tuple, not Carry"),
    (Block, NoCausalBlock, SPEC, "NoCausalBlock.forward does not take"),
    (MHSA, HeadlessAttention, SPEC, "HeadlessAttention: no `heads`"),
    (MHSA, WroteAttention, SPEC, "WroteAttention returned tuple"),
    (MHSA, NoMaskAttention, SPEC, "NoMaskAttention.forward does not take .*'mask': None"),
    (MHSA, CorelessAttention, SPEC, "CorelessAttention: no AttentionCoreBase inside"),
    (ClassTokenHead, UnresettableHead, SPEC, "UnresettableHead: no reset / classifier"),
    (ClassTokenHead, FeaturesHead, SPEC, "FeaturesHead returned Tensor"),
    (ClassTokenHead, NoOutputsHead, DENSE, "NoOutputsHead.forward does not take .*'outputs': True"),
], ids=lambda v: v.__name__ if isinstance(v, type) else None)
def test_a_module_that_breaks_its_contract_fails_the_check(monkeypatch, kind, module, spec, says):
    monkeypatch.setitem(MODULES, kind, module)
    model = vspec.build(spec)
    assert type(model.head if kind is ClassTokenHead else model.stages[0].blocks[0].attn if kind is MHSA
                else model.stages[0].blocks[0]) is module
    with pytest.raises(AssertionError, match=says):
        assert_contracts(model)
