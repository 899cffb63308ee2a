"""Padding sides in a text body (vspec.nn.inputs.TokenInputs.positions): a causal body counts its positions over
the real tokens, so a left-padded row equals the row alone, and equals Hugging Face's GPT-2 given the position_ids
HF computes for left padding; right padding needs nothing. The HF model is built here from a small config."""

import pytest
import torch

import vspec
from tests.helpers import ROOT
from tests.helpers.checks import perturbed
from vspec.convert import from_hf
from vspec.spec import override

transformers = pytest.importorskip("transformers")  # the `text` extra, which `make test` installs
TINY = {"depth": 2, "dim": 32, "block.attention.heads": 4, "block.ffn.hidden": 64, "embedder.vocab_size": 100,
        "embedder.max_positions": 32, "embedder.seq_len": 16}


def padded(lengths: list[int], side: str, pad: int = 0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (B, max length) of the given lengths padded on `side` with `pad`, and HF's attention_mask."""
    g = torch.Generator().manual_seed(seed)
    n = max(lengths)
    real = torch.arange(n)[None] < torch.tensor(lengths)[:, None]
    if side == "left":
        real = real.flip(1)
    ids = torch.randint(3, 100, (len(lengths), n), generator=g)
    return torch.where(real, ids, torch.full_like(ids, pad)), real.long()


def hf_positions(mask: torch.Tensor) -> torch.Tensor:
    """The position_ids HF computes for a left-padded batch (GPT-2's generation inputs): the real tokens counted
    from 0, padding at 1."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)


@pytest.mark.parametrize("side", ["left", "right"])
def test_gpt2_padding_equals_hugging_face_given_its_position_ids(side):
    """GPT2ForSequenceClassification with HF's position_ids: vspec's hidden states (at the real tokens) and logits
    equal HF's given the same position_ids, and without them (its default counts the real tokens); right padding
    equals HF's default positions too."""
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, num_labels=3, pad_token_id=0,
                                     bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    hf = perturbed(transformers.GPT2ForSequenceClassification(config))
    ours = from_hf(hf).eval()
    ids, mask = padded([9, 4, 6, 1], side)
    positions, real = hf_positions(mask), mask.bool()
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, position_ids=positions, output_hidden_states=True)
        default = hf(input_ids=ids, attention_mask=mask).logits
        for given in (positions, None):
            got = ours(input_ids=ids, attention_mask=mask, position_ids=given, output_hidden_states=True)
            for mine, theirs in zip(got.hidden_states, want.hidden_states, strict=True):
                assert (mine[real] - theirs[real]).abs().max() < 1e-5
            assert (got.logits - want.logits).abs().max() < 1e-5
    assert ((default - want.logits).abs().max() < 1e-5) == (side == "right")  # HF's default: 0..L-1


@pytest.mark.parametrize("name", ["gpt2", "gpt_sot"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_each_padded_row_equals_the_row_alone(name, side):
    """A tiny GPT-2 (last-token head) and GPT + SoT's head (z0 the last real token): each row of a padded batch,
    either side, has the hidden states (at its real tokens) and the logits of the row run alone."""
    spec = override(vspec.load_spec(ROOT / "specs" / f"{name}.py"), TINY)
    torch.manual_seed(0)
    model = perturbed(vspec.build(spec))
    lengths = [11, 3, 7, 2]  # SoT's head pools the word tokens besides z0: two tokens at least
    ids, mask = padded(lengths, side, seed=1)
    with torch.no_grad():
        hidden, logits = model.forward_features(ids, mask), model(ids, mask)
        for row, n in enumerate(lengths):
            real = mask[row].bool()
            alone = ids[row:row + 1, real]
            assert alone.shape[1] == n
            assert (model.forward_features(alone)[0] - hidden[row, real]).abs().max() < 1e-5
            assert (model(alone)[0] - logits[row]).abs().max() < 1e-5
    assert logits.abs().max() > 1e-2


@pytest.mark.parametrize("causal", [True, False])
def test_left_padding_is_finite_everywhere_forward_and_backward(causal):
    """Left padding puts query rows before the first real token: in a causal body they would have no key (vspec's
    SDPA mask lets each token attend to itself). Every hidden state, padding included, the loss and every gradient
    are finite, in training mode (SDPA with dropout)."""
    spec = override(vspec.load_spec(ROOT / "specs" / "gpt2.py"), {**TINY, "causal": causal})
    torch.manual_seed(0)
    model = vspec.build(spec).train()
    ids, mask = padded([9, 2, 5], "left")
    out = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 1]), output_hidden_states=True)
    assert mask[1, :7].eq(0).all()
    assert all(torch.isfinite(h).all() for h in out.hidden_states) and torch.isfinite(out.loss)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
