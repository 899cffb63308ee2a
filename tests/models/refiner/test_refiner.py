"""Refiner's identities and ablations (Zhou et al., Secs. 3.2-3.4, Tables 1-4, 13, Fig. 6).

The references are float64 and written from the paper's equations in this file (shifts, sums,
concatenations), never computed with the code under test; vspec's modules only supply their
parameters. DLA convolutions use TensorFlow's "same" padding: a kernel of size k reads offsets
-(k-1)//2 .. k//2 (the extra zero of an even kernel after)."""

import attrs
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import vspec
from vspec.models.refiner.modules import DLA, MapAttention, Refiner
from vspec.models.refiner.spec import released_blocks
from vspec.nn.layers import AttentionCore
from vspec.spec import MHSA, MLP, Block, ConvStem, Model, PatchEmbed, Refine, RefinerAttention, SpecError, Stage
from vspec.spec.layout import Tokens

F64 = torch.float64
CONSTRAINTS = ("none", "spatial", "row_col")


# ---------------------------------------------------------------- references from the equations
def shift(x: torch.Tensor, offset: int, dim: int) -> torch.Tensor:
    """y[..., j, ...] = x[..., j + offset, ...] along `dim`, zero where j + offset falls outside."""
    y, n = torch.zeros_like(x), x.shape[dim]
    if abs(offset) < n:
        if offset >= 0:
            y.narrow(dim, 0, n - offset).copy_(x.narrow(dim, offset, n - offset))
        else:
            y.narrow(dim, -offset, n + offset).copy_(x.narrow(dim, 0, n + offset))
    return y


def correlate(x: torch.Tensor, w: torch.Tensor, dims: tuple[int, ...], adjoint: bool = False) -> torch.Tensor:
    """The DLA equation, A*_ij = sum_ab w_ab A_{i + a - (kh-1)//2, j + b - (kw-1)//2} (zero outside), one kernel
    per map: x (B, C, ...), w (C, k_1, ..., k_len(dims)) over the axes `dims` of x. `adjoint`: the flipped
    kernel, v'_m = sum_a w_a v_{m + (k-1)//2 - a}, what the values get (Sec. 3.3: sum_j A*_ij v_j = sum_m A_im v'_m)."""
    out = torch.zeros_like(x)
    for taps in torch.cartesian_prod(*(torch.arange(k) for k in w.shape[1:])).reshape(-1, len(dims)).tolist():
        y = x
        for a, k, d in zip(taps, w.shape[1:], dims):
            y = shift(y, (k - 1) // 2 - a if adjoint else a - (k - 1) // 2, d)
        out += w[(slice(None), *taps)].reshape(1, -1, *[1] * (x.dim() - 2)) * y
    return out


def dla_reference(a: torch.Tensor, dla: DLA, constraint: str, tokens: Tokens) -> torch.Tensor:
    """A* under each constraint of Table 4, from the equation and the module's kernels."""
    if constraint == "none":
        return correlate(a, dla.conv.weight[:, 0], (2, 3))
    if constraint == "row_col":  # a 1 x k conv along the keys plus a k x 1 conv along the queries
        return correlate(a, dla.row.weight[:, 0, 0], (3,)) + correlate(a, dla.col.weight[:, 0, :, 0], (2,))
    p, (h, w) = tokens.prefix, tokens.grid
    keys = a[..., p:].reshape(*a.shape[:3], h, w)
    keys = correlate(keys, dla.conv.weight[:, 0], (3, 4)).reshape(*a.shape[:3], h * w)
    return torch.cat((a[..., :p], keys), dim=-1)


def refine_reference(a: torch.Tensor, refiner: Refiner, spec: Refine, tokens: Tokens) -> torch.Tensor:
    """Fig. 3a: A~^h = sum_i W_A(h, i) A^i (Sec. 3.2), DLA on each expanded map, reduction back to H."""
    if spec.expand:
        a = torch.einsum("oi,bijk->bojk", refiner.expand.weight[:, :, 0, 0], a)
    if spec.kernel:
        a = dla_reference(a, refiner.dla, spec.constraint, tokens)
    return a if not spec.reduction else torch.einsum("oi,bijk->bojk", refiner.reduce.weight[:, :, 0, 0], a)


def test_dla_alone_has_no_map_over_the_heads():
    """Table 2's "+ DLA" (no attention expansion): `expand` false convolves the H maps as they are."""
    tokens = Tokens(8, (3, 3), 1)
    spec = Refine(expansion=1, kernel=3, reduction=False, expand=False)
    refiner = Refiner(spec, 4, tokens).double()
    assert [n for n, _ in refiner.named_parameters()] == ["dla.conv.weight"]
    a = torch.rand(2, 4, 10, 10, dtype=torch.float64)
    torch.testing.assert_close(refiner(a), dla_reference(a, refiner.dla, "none", tokens), rtol=1e-12, atol=1e-12)
    for bad in (dict(expansion=2), dict(reduction=True), dict(form="released")):
        with pytest.raises(SpecError, match="Refine.expand"):
            Refine(**{**attrs.asdict(spec), **bad})


# ---------------------------------------------------------------- DLA (Sec. 3.3)
@st.composite
def grids(draw, kernel: int):
    """A token grid at least `kernel` on each side, and 0 or 1 prefix tokens."""
    return Tokens(dim=8, grid=(draw(st.integers(max(kernel, 1), 5)), draw(st.integers(max(kernel, 1), 5))),
                  prefix=draw(st.integers(0, 1)))


def dla_module(maps: int, kernel: int, constraint: str, tokens: Tokens) -> DLA:
    torch.manual_seed(kernel * 7 + maps)
    dla = DLA(maps, kernel, constraint, tokens).to(F64)
    with torch.no_grad():
        for p in dla.parameters():
            p.normal_()
    return dla


@given(kernel=st.integers(1, 5), data=st.data(), maps=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_dla_follows_the_equation_under_each_constraint(kernel, data, maps, seed):
    """DLA's output equals A*_ij = sum_ab w_ab A_{i-(k-1)//2+a, j-(k-1)//2+b} (zero outside) on the N x N
    map (none), on each query's keys laid on the grid with prefix keys untouched (spatial), and as a
    1 x k plus a k x 1 conv (row_col): odd and even kernels, with and without a class token."""
    tokens, constraint = data.draw(grids(kernel)), data.draw(st.sampled_from(CONSTRAINTS))
    dla = dla_module(maps, kernel, constraint, tokens)
    a = torch.randn(2, maps, tokens.length, tokens.length, dtype=F64, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(dla(a), dla_reference(a, dla, constraint, tokens), rtol=1e-12, atol=1e-12)


@given(kernel=st.integers(1, 6), n=st.integers(1, 8), maps=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_dla_1d_aggregates_locally_convolved_values(kernel, n, maps, seed):
    """Sec. 3.3, 1-D: a length-k kernel w along the keys of A (DLA's row conv, the column conv zeroed),
    then A* v, equals A v' with v'_m = sum_a w_a v_{m + (k-1)//2 - a}: the values convolved along the
    tokens with the adjoint kernel, zero-padded. Kernels longer than the map included."""
    tokens = Tokens(dim=8, grid=(1, n))
    dla = dla_module(maps, kernel, "row_col", tokens)
    with torch.no_grad():
        dla.col.weight.zero_()
    g = torch.Generator().manual_seed(seed)
    a, v = torch.randn(2, maps, n, n, dtype=F64, generator=g), torch.randn(2, maps, n, 3, dtype=F64, generator=g)
    expected = a @ correlate(v, dla.row.weight[:, 0, 0], (2,), adjoint=True)
    torch.testing.assert_close(dla(a) @ v, expected, rtol=1e-10, atol=1e-10)


@given(kernel=st.integers(1, 4), data=st.data(), maps=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_dla_2d_spatial_aggregates_values_convolved_on_the_grid(kernel, data, maps, seed):
    """Sec. 3.3 on the token grid: the spatial constraint's k x k conv over each query's keys, then A* v,
    equals A applied to the values convolved over the h x w grid with the adjoint kernel (zero-padded),
    the prefix values passing through unconvolved."""
    tokens = data.draw(grids(kernel))
    p, (h, w) = tokens.prefix, tokens.grid
    dla = dla_module(maps, kernel, "spatial", tokens)
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(2, maps, tokens.length, tokens.length, dtype=F64, generator=g)
    v = torch.randn(2, maps, tokens.length, 3, dtype=F64, generator=g)
    on_grid = correlate(v[:, :, p:].reshape(2, maps, h, w, 3), dla.conv.weight[:, 0], (2, 3), adjoint=True)
    on_grid = on_grid.reshape(2, maps, h * w, 3)
    expected = a @ torch.cat((v[:, :, :p], on_grid), dim=2)
    torch.testing.assert_close(dla(a) @ v, expected, rtol=1e-10, atol=1e-10)


@given(kernel=st.integers(1, 4), n=st.integers(4, 7), seed=st.integers(0, 2**16))
def test_dla_none_aggregates_neighbouring_queries_over_convolved_values(kernel, n, seed):
    """The unconstrained k x k conv (what Refiner does): (A* v)_i = sum_a (A_{i + a - (k-1)//2} v'^a), row a
    of the kernel convolving the values along the tokens (adjoint, zero-padded), neighbouring queries' rows."""
    tokens = Tokens(dim=8, grid=(1, n))
    dla = dla_module(2, kernel, "none", tokens)
    g = torch.Generator().manual_seed(seed)
    a, v = torch.randn(2, 2, n, n, dtype=F64, generator=g), torch.randn(2, 2, n, 3, dtype=F64, generator=g)
    w = dla.conv.weight[:, 0]
    expected = sum(shift(a, r - (kernel - 1) // 2, 2) @ correlate(v, w[:, r], (2,), adjoint=True)
                   for r in range(kernel))
    torch.testing.assert_close(dla(a) @ v, expected, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- expansion (Sec. 3.2), linearity
@given(heads=st.integers(1, 4), ratio=st.integers(1, 4), reduction=st.booleans(), seed=st.integers(0, 2**16))
def test_expansion_of_logits_is_attention_with_reweighted_queries(heads, ratio, reduction, seed):
    """Sec. 3.2 without softmax: A~^h = sum_i W_A(h, i) q_i k_i^T = [w_1 q_1, ..., w_H q_H] [k_1, ..., k_H]^T,
    for the expansion (1 x 1 conv over heads) alone and, with the reduction W_R and no DLA, for the whole
    refiner (the weights W_R W_A)."""
    n, d = 5, 3
    tokens = Tokens(dim=heads * d, grid=(1, n))
    spec = Refine(expansion=ratio, kernel=0, reduction=reduction)
    torch.manual_seed(seed)
    refiner = Refiner(spec, heads, tokens).to(F64)
    q, k = torch.randn(2, 2, heads, n, d, dtype=F64).unbind(0)
    logits = q @ k.transpose(-2, -1)
    keys = torch.cat(k.unbind(1), dim=-1)  # (B, N, H d): K, undivided

    def reweighted(weights):  # one map per row of weights (H', H)
        return torch.stack([torch.cat([wi * qi for wi, qi in zip(row, q.unbind(1))], dim=-1) @ keys.transpose(-2, -1)
                            for row in weights], dim=1)

    w_a = refiner.expand.weight[:, :, 0, 0]
    torch.testing.assert_close(refiner.expand(logits), reweighted(w_a), rtol=1e-10, atol=1e-10)
    combined = w_a if not reduction else refiner.reduce.weight[:, :, 0, 0] @ w_a
    torch.testing.assert_close(refiner(logits), reweighted(combined), rtol=1e-10, atol=1e-10)


@given(expansion=st.integers(1, 3), kernel=st.integers(0, 3), constraint=st.sampled_from(CONSTRAINTS),
       reduction=st.booleans(), data=st.data(), seed=st.integers(0, 2**16))
def test_refiner_is_linear_in_the_maps(expansion, kernel, constraint, reduction, data, seed):
    """Expansion -> DLA -> reduction (paper form) is linear: f(a A + b B) = a f(A) + b f(B), so it commutes
    with scaling and sums of maps, and it equals the pipeline written from Fig. 3a."""
    tokens, heads = data.draw(grids(kernel)), data.draw(st.integers(1, 3))
    spec = Refine(expansion=expansion, kernel=kernel, constraint=constraint, reduction=reduction)
    torch.manual_seed(seed)
    refiner = Refiner(spec, heads, tokens).to(F64)
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(2, 2, heads, tokens.length, tokens.length, dtype=F64, generator=g).unbind(0)
    x, y = torch.randn(2, dtype=F64, generator=g).tolist()
    torch.testing.assert_close(refiner(x * a + y * b), x * refiner(a) + y * refiner(b), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(refiner(a), refine_reference(a, refiner, spec, tokens), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- Refiner reduces to MHSA
def tiny(block, depth: int = 2) -> Model:
    """16 px, 4 px patches: a 4x4 grid and the class token (17 tokens) x 16, heads of 4 channels."""
    return Model(embedder=PatchEmbed(patch_size=4), img_size=16, dim=16, depth=depth, block=block, num_classes=5)


def copy_shared(src: nn.Module, dst: nn.Module) -> list[str]:
    """Load src's parameters into dst where names and shapes agree; returns dst's names left as they were."""
    theirs, ours = src.state_dict(), dst.state_dict()
    take = {n: t for n, t in theirs.items() if n in ours and ours[n].shape == t.shape}
    dst.load_state_dict(take, strict=False)
    return sorted(set(ours) - set(take))


def image(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 16, 16, dtype=F64, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("reduction", [True, False], ids=["reduction", "no-reduction"])
def test_identity_expansion_without_dla_is_mhsa(reduction):
    """r = 1, expansion (and reduction) the identity, no DLA: the refined model computes MHSA's outputs
    from MHSA's weights (qkv, proj), through the materialised maps."""
    torch.manual_seed(0)
    mhsa = vspec.build(tiny(Block(attention=MHSA(heads=4)))).to(F64).eval()
    spec = tiny(Block(attention=RefinerAttention(heads=4, refine=Refine(expansion=1, kernel=0, reduction=reduction))))
    refined = vspec.build(spec).to(F64).eval()
    left = copy_shared(mhsa, refined)
    assert left == sorted(f"stages.0.blocks.{j}.attn.core.refine.{m}.weight" for j in range(2)
                          for m in (["expand", "reduce"] if reduction else ["expand"]))
    with torch.no_grad():
        for name in left:
            refined.get_parameter(name).copy_(torch.eye(4, dtype=F64)[:, :, None, None])
    assert all(isinstance(b.attn.core, MapAttention) for b in refined.stages[0].blocks)
    with torch.no_grad():
        torch.testing.assert_close(refined(image()), mhsa(image()), rtol=1e-12, atol=1e-12)


def test_unrefined_unlinked_refiner_attention_is_mhsa_on_sdpa():
    """Without refine, reuse, add_incoming and no block taking its maps, RefinerAttention runs on SDPA
    (AttentionCore) and gives MHSA's outputs exactly, from the same weights."""
    torch.manual_seed(0)
    mhsa = vspec.build(tiny(Block(attention=MHSA(heads=4)))).to(F64).eval()
    plain = vspec.build(tiny(Block(attention=RefinerAttention(heads=4)))).to(F64).eval()
    assert copy_shared(mhsa, plain) == []
    assert all(type(b.attn.core) is AttentionCore for b in plain.stages[0].blocks)
    with torch.no_grad():
        assert torch.equal(plain(image()), mhsa(image()))


def test_unrefined_block_handing_its_maps_on_is_still_mhsa():
    """A block whose maps the next one reuses materialises them (MapAttention), and its output is still
    MHSA's: the maps are softmax(q k^T * scale) whichever path computes them."""
    torch.manual_seed(0)
    mhsa = vspec.build(tiny(Block(attention=MHSA(heads=4)))).to(F64).eval()
    spec = tiny((Block(attention=RefinerAttention(heads=4)), Block(attention=RefinerAttention(heads=4, reuse=True))))
    linked = vspec.build(spec).to(F64).eval()
    assert copy_shared(mhsa, linked) == ["stages.0.blocks.1.attn.qkv.bias", "stages.0.blocks.1.attn.qkv.weight"]
    first = linked.stages[0].blocks[0]
    assert isinstance(first.attn.core, MapAttention) and first.hands_on == {"maps"}
    with torch.no_grad():
        ours = linked.forward_intermediates(image(), indices=[0], output_fmt="NLC", intermediates_only=True)
        theirs = mhsa.forward_intermediates(image(), indices=[0], output_fmt="NLC", intermediates_only=True)
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- maps handed on (Table 13, Refined-ViT)
R = Refine(expansion=2, kernel=3)
STACKS = {
    "compute-reuse-reuse": [dict(refine=R), dict(reuse=True), dict(reuse=True)],
    "compute-reuse_refining-reuse": [dict(refine=R), dict(reuse=True, refine=R), dict(reuse=True)],
    "compute-add_incoming-reuse": [dict(refine=R), dict(add_incoming=True, refine=R), dict(reuse=True)],
    "sa-reuse-add_incoming": [dict(), dict(reuse=True), dict(add_incoming=True)],
}


def stack_reference(model, links: list[dict], x: torch.Tensor) -> torch.Tensor:
    """The blocks from the equations: x + attn(LN(x)), x + fc2(gelu(fc1(LN(x)))); attention A =
    softmax(q k^T * s) (+ s M_in with add_incoming) or M_in (reuse: values only), refined if the block
    refines (Fig. 3a), out = proj(A' v). The map handed on: M_in unchanged after a reuse, else A'."""
    incoming = None
    for blk, link in zip(model.stages[0].blocks, links):
        attn, heads = blk.attn, 2
        h = F.layer_norm(x, (x.shape[-1],), blk.norm1.weight, blk.norm1.bias, blk.norm1.eps)
        y = h @ attn.qkv.weight.T + attn.qkv.bias
        if link.get("reuse"):
            v, a = y, incoming
        else:
            q, k, v = y.split([8, 8, y.shape[-1] - 16], dim=-1)
            q, k = (t.reshape(*t.shape[:2], heads, 4).transpose(1, 2) for t in (q, k))
            a = torch.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-1)
            if link.get("add_incoming"):
                a = a + 0.5 * incoming
        if "refine" in link:
            used = refine_reference(a, attn.core.refine, link["refine"], Tokens(dim=8, grid=(2, 2), prefix=1))
        else:
            used = a
        v = v.reshape(*v.shape[:2], used.shape[1], 4).transpose(1, 2)
        z = (used @ v).transpose(1, 2).reshape(*x.shape[:2], -1)
        x = x + z @ attn.proj.weight.T + attn.proj.bias
        h = F.layer_norm(x, (x.shape[-1],), blk.norm2.weight, blk.norm2.bias, blk.norm2.eps)
        x = x + F.gelu(h @ blk.ffn.fc1.weight.T + blk.ffn.fc1.bias) @ blk.ffn.fc2.weight.T + blk.ffn.fc2.bias
        incoming = incoming if link.get("reuse") else used
    return x


@pytest.mark.parametrize("links", list(STACKS.values()), ids=list(STACKS))
def test_maps_handed_on_match_a_hand_written_stack(links):
    """Reuse aggregates with the previous block's maps and hands them on unchanged (a compute block's
    refined map serves the next n blocks, Table 13; a reusing block's own refinement stays its own);
    add_incoming adds scale x the incoming maps after the softmax; against a float64 forward of the
    stack written from the equations (8 wide, 2 heads, 2x2 grid + class token)."""
    spec = Model(embedder=PatchEmbed(patch_size=4), img_size=8, dim=8, num_classes=3,
                 block=tuple(Block(attention=RefinerAttention(heads=2, **link), ffn=MLP(ratio=2.0)) for link in links))
    torch.manual_seed(0)
    model = vspec.build(spec).to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():  # away from the init's zero biases and unit norms
            p.add_(0.3 * torch.randn_like(p))
        x = torch.randn(2, 5, 8, dtype=F64)
        torch.testing.assert_close(model.stages[0](x)[0], stack_reference(model, links, x), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- the side channel's rules
def refiner_block(**fields) -> Block:
    return Block(attention=RefinerAttention(heads=fields.pop("heads", 4), **fields))


@pytest.mark.parametrize("build, path, words", [
    (lambda: tiny((refiner_block(reuse=True), refiner_block())), "block.0.attention", "first of its stage"),
    (lambda: tiny(refiner_block(add_incoming=True)), "block.attention", "first of its stage"),
    (lambda: tiny((Block(attention=MHSA(heads=4)), refiner_block(reuse=True))), "block.1.attention",
     "block 1 needs the attention maps of block 0, whose mhsa attention hands none on"),
    (lambda: tiny((refiner_block(heads=2), refiner_block(heads=4, reuse=True))), "block.1.attention",
     "block 1 takes 4 maps (its heads), block 0 hands on 2"),
    (lambda: tiny((refiner_block(heads=2, refine=Refine(expansion=2, kernel=0, reduction=False)),
                   refiner_block(heads=2, add_incoming=True))), "block.1.attention", "block 0 hands on 4"),
    (lambda: Model(embedder=PatchEmbed(patch_size=4), img_size=16, stages=[
        Stage(depth=1, dim=16, block=refiner_block()), Stage(depth=1, dim=16, block=(refiner_block(reuse=True),))]),
     "stages.1.block.0.attention", "first of its stage"),
    (lambda: tiny(refiner_block(reuse=True, add_incoming=True), depth=1), "block.attention.add_incoming",
     "no maps of its own"),
], ids=["first-block-reuses", "repeated-block-adds-incoming", "after-mhsa", "head-count-mismatch",
        "unreduced-maps-to-fewer-heads", "across-a-stage-boundary", "reuse-and-add"])
def test_side_channel_errors_name_the_block(build, path, words):
    """A block that takes maps must follow, in its stage, a RefinerAttention handing on as many maps as
    it has heads: otherwise one SpecError naming the consuming block's attention."""
    with pytest.raises(SpecError) as e:
        build()
    assert e.value.path == path and words in e.value.message, str(e.value)


def test_unreduced_maps_count_as_heads():
    """Without reduction a computing block hands on r x H maps, which a block with r x H heads may reuse
    (Table 3 with Table 13); a reusing block that refines without reduction aggregates r x H value heads
    but hands on the H maps it received, so a block of H heads may reuse them after it."""
    unreduced = Refine(expansion=2, kernel=3, reduction=False)
    for blocks, value_heads in (((refiner_block(heads=2, refine=unreduced), refiner_block(heads=4, reuse=True)),
                                 [4, 4]),
                                ((refiner_block(heads=2), refiner_block(heads=2, reuse=True, refine=unreduced),
                                  refiner_block(heads=2, reuse=True)), [2, 4, 2])):
        model = vspec.build(tiny(blocks, depth=len(blocks)))
        assert [b.attn.value_heads for b in model.stages[0].blocks] == value_heads
        assert model(torch.randn(1, 3, 16, 16)).shape == (1, 5)


def test_blocks_without_maps_pay_nothing():
    """In a plain MHSA model no block takes or hands on maps (each returns Carry(x, {})), and an unlinked,
    unrefined RefinerAttention block is on SDPA; in a mixed stack only the linked pair materialises maps."""
    plain = vspec.build(tiny(Block(attention=MHSA(heads=4)), depth=3))
    stage = plain.stages[0]
    x = torch.randn(2, 17, 16)
    assert all(block(x).state == {} for block in stage.blocks)
    assert not any(b.carries or b.reads or b.hands_on for b in stage.blocks)
    mixed = vspec.build(tiny((refiner_block(), refiner_block(reuse=True), Block(attention=MHSA(heads=4)),
                              refiner_block(), refiner_block(refine=R)), depth=5))
    blocks = mixed.stages[0].blocks
    assert [sorted(b.hands_on) for b in blocks] == [["maps"], [], [], [], []]
    assert [b.reads for b in blocks] == [(), ("maps",), (), (), ()]
    assert [type(b.attn.core) for b in blocks] == [MapAttention, MapAttention, AttentionCore, AttentionCore,
                                                   MapAttention]


# ---------------------------------------------------------------- ablations: build and train one step
def refined(refine: Refine | None = None, depth: int = 2, dim: int = 32, **links) -> Model:
    """A tiny ViT (16 px, 4 px patches, class token) whose every block is RefinerAttention."""
    return Model(embedder=PatchEmbed(patch_size=4), img_size=16, dim=dim, depth=depth, num_classes=10,
                 block=Block(attention=RefinerAttention(heads=4, refine=refine, **links), ffn=MLP(ratio=2.0)))


def shared(n: int, refine: Refine | None, depth: int = 8) -> Model:
    """Table 13: a block computing its maps (refined or plain SA), then n blocks reusing them, repeated."""
    pattern = [RefinerAttention(heads=4, refine=refine) if j % (n + 1) == 0 else RefinerAttention(heads=4, reuse=True)
               for j in range(depth)]
    return attrs.evolve(refined(depth=depth, dim=16), block=tuple(Block(attention=a, ffn=MLP(ratio=2.0))
                                                                     for a in pattern))


ABLATIONS = {
    **{f"table1-expansion{r}": refined(Refine(expansion=r, kernel=3)) for r in (1, 2, 3, 4, 6)},
    **{f"table2-vit{d}-dla3": refined(Refine(expansion=1, kernel=3, reduction=False, expand=False), depth=d, dim=16)
       for d in (12, 16, 24, 32)},
    **{f"table3-reduction-{'on' if red else 'off'}": refined(Refine(expansion=3, kernel=3, reduction=red))
       for red in (True, False)},
    **{f"table4-{c}": refined(Refine(expansion=3, kernel=3, constraint=c)) for c in CONSTRAINTS},
    **{f"table13-{name}-shared{n}": shared(n, refine) for name, refine in (("sa", None), ("refiner", R))
       for n in range(4)},
    **{f"fig6-kernel{k}": refined(Refine(expansion=3, kernel=k)) for k in (0, 1, 3, 5, 7)},
    "refined-vit-released": Model(embedder=ConvStem(patch_size=4, width=4), img_size=16, dim=32, num_classes=10,
                                  block=released_blocks([False, True] * 2, heads=4)),
}


@pytest.mark.parametrize("spec", list(ABLATIONS.values()), ids=list(ABLATIONS))
def test_ablation_row_builds_and_trains_one_step(spec):
    """Each ablation row of Tables 1-4, 13 and the kernel sizes of Fig. 6 is a spec that builds, gives a
    finite loss, a gradient to every parameter, and one AdamW step changes every parameter. The one
    exception, by an invariance of the released DLA: in training, adapt_bn subtracts each map's batch mean,
    which cancels the bias of the bn3 before it (its gradient is zero up to rounding, which Adam may follow)."""
    torch.manual_seed(0)
    model = vspec.build(spec).train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    loss = F.cross_entropy(model(torch.randn(4, 3, 16, 16)), torch.randint(0, 10, (4,)))
    assert torch.isfinite(loss)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(torch.isfinite(g).all() for g in grads.values())
    top = max(g.abs().max().item() for g in grads.values())
    cancelled = [n for n in grads if n.endswith(".attn.core.refine.bn3.bias")]
    dead = [n for n, g in grads.items() if g.abs().max().item() <= 1e-8 * top]
    assert set(dead) <= set(cancelled), dead  # a cancelled bias keeps its rounding noise
    opt.step()
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert set(unchanged) <= set(cancelled), unchanged  # Adam may move a cancelled bias by that noise
