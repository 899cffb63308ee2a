"""One block contract: `block(x, state={}, *, mask=None, causal=False) -> Carry(x, state)` for every block, the
stage threading masks to each; masks reach SDPA, checked against softmax written from the equation with the
masked scores at -inf, and against the same block on the unpadded tokens."""

import pytest
import torch
from einops import rearrange

import vspec
from vspec.nn.blocks import Carry
from vspec.spec import MHSA, Block, Model, PatchEmbed, RefinerAttention, Stage, WindowMHSA

F64 = torch.float64


def tiny(block, depth: int = 2, **fields) -> Model:
    return Model(embedder=PatchEmbed(patch_size=4), img_size=16, dim=16, depth=depth, block=block, num_classes=5,
                 **fields)


def reference(block, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """x + attn(norm1 x), then + mlp(norm2 x): softmax(q k^T / sqrt(d) + M) v per head, M = -inf where `keep`
    (B, N, N) is False (the fused qkv / proj layout, no layer scale or drop path)."""
    attn = block.attn
    q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=attn.heads) for t in attn.qkv(block.norm1(x)).chunk(3, -1))
    scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~keep[:, None], float("-inf"))
    h = x + attn.proj(rearrange(scores.softmax(-1) @ v, "b h n d -> b n (h d)"))
    return h + block.ffn(block.norm2(h))


@pytest.fixture
def block():
    torch.manual_seed(0)
    return vspec.build(tiny(Block(attention=MHSA(heads=2)))).to(F64).eval().stages[0].blocks[0]


def test_every_block_returns_a_carry():
    torch.manual_seed(0)
    linked = vspec.build(tiny((Block(attention=RefinerAttention(heads=4)),
                               Block(attention=RefinerAttention(heads=4, reuse=True))))).eval()
    x = torch.randn(2, 17, 16)
    first, second = linked.stages[0].blocks
    out = first(x)
    assert isinstance(out, Carry) and out.state["maps"].shape == (2, 4, 17, 17)  # handed on to the reusing block
    assert isinstance(second(out.x, out.state), Carry) and second(out.x, out.state).state == {}  # the last reader
    swin = vspec.build(Model(embedder=PatchEmbed(patch_size=4), img_size=16, class_token=False,
                             stages=[Stage(depth=2, dim=16, block=Block(attention=WindowMHSA(heads=2, window=2)))],
                             head=vspec.spec.GAPHead())).eval()
    assert all(type(b(torch.randn(1, 16, 16))) is Carry for b in swin.stages[0].blocks)


def test_a_padding_mask_hides_the_padded_keys(block):
    x = torch.randn(3, 17, 16, dtype=F64)
    real = torch.tensor([17, 9, 2])
    mask = torch.arange(17)[None] < real[:, None]  # True at real tokens
    with torch.no_grad():
        got = block(x, mask=mask).x
        ref = reference(block, x, mask[:, None, :].expand(3, 17, 17))
        assert torch.allclose(got, ref, atol=1e-12)
        for b, n in enumerate(real.tolist()):  # the real tokens as if the padding were not there
            assert torch.allclose(got[b, :n], block(x[b:b + 1, :n]).x[0], atol=1e-12)
        assert not torch.allclose(got[1], block(x[1:2]).x[0], atol=1e-3)  # the mask changes something


def test_causal_attends_to_earlier_tokens_only(block):
    x = torch.randn(2, 17, 16, dtype=F64)
    tril = torch.ones(17, 17, dtype=torch.bool).tril()
    with torch.no_grad():
        got = block(x, causal=True).x
        assert torch.allclose(got, reference(block, x, tril.expand(2, 17, 17)), atol=1e-12)
        later = x.clone()
        later[:, 9:] += 1.0
        assert torch.allclose(block(later, causal=True).x[:, :9], got[:, :9], atol=1e-12)
        mask = torch.arange(17)[None] < torch.tensor([[17], [12]])
        both = reference(block, x, (mask[:, None, :] & tril) | torch.eye(17, dtype=torch.bool))  # and itself
        assert torch.allclose(block(x, mask=mask, causal=True).x, both, atol=1e-12)


def test_the_stage_threads_masks_to_every_block():
    torch.manual_seed(0)
    model = vspec.build(tiny(Block(attention=MHSA(heads=2)), depth=3)).to(F64).eval()
    x = torch.randn(2, 17, 16, dtype=F64)
    mask = torch.arange(17)[None] < torch.tensor([[17], [5]])
    with torch.no_grad():
        y = x
        for b in model.stages[0].blocks:
            y = b(y, mask=mask, causal=True).x
        assert torch.equal(model.stages[0](x, mask=mask, causal=True)[0], y)


def test_kinds_that_cannot_honour_a_mask_say_so():
    swin = vspec.build(Model(embedder=PatchEmbed(patch_size=4), img_size=16, class_token=False,
                             stages=[Stage(depth=1, dim=16, block=Block(attention=WindowMHSA(heads=2, window=2)))],
                             head=vspec.spec.GAPHead()))
    with pytest.raises(ValueError, match="^window_mhsa attention cannot honour a key-padding mask$"):
        swin.stages[0].blocks[0](torch.randn(1, 16, 16), mask=torch.ones(1, 16, dtype=torch.bool))
    dhvt = vspec.build(tiny(vspec.spec.HeadTokenBlock(attention=MHSA(heads=2)), depth=1))
    with pytest.raises(ValueError, match="head tokens"):
        dhvt.stages[0].blocks[0](torch.randn(1, 17, 16), causal=True)
