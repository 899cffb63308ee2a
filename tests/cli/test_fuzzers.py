"""The fuzzer `python -m tests.helpers.fuzz_compose`: its summary line adds up on a small draw, with no dead weight
and no traceback, and it does report a model with a dead weight, an accepted one-token draft, and a traceback."""

import io
import re
from pathlib import Path

import pytest

from tests.helpers import fuzz_compose
from vspec.spec import EPN, MHSA, MLP, Block, MGCrP, PatchEmbed, SecondOrderHead

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"drawn (\d+) / refused (\d+) \(at the expected path (\d+)\) / built (\d+) / trained (\d+) / "
                     r"dead weights (\d+) / tracebacks (\d+)")


@pytest.fixture(scope="module")
def fuzz():
    return fuzz_compose


def counts(text: str) -> tuple[int, ...]:
    first = text.splitlines()[0]
    match = SUMMARY.fullmatch(first)
    assert match, first
    return tuple(int(g) for g in match.groups())


def fields(**changes):
    """One stage, a 2 x 2 grid (4 tokens), a second-order head: valid and trainable as it stands."""
    out = dict(embedder=PatchEmbed(patch_size=4), block=Block(attention=MHSA(heads=2), ffn=MLP(ratio=1.0)),
               depth=1, dim=32, num_classes=3, img_size=(8, 8), class_token=False,
               head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=2, m=3, n=3), norm=EPN(), z0="mean_token"))
    return out | changes


def test_a_small_draw_adds_up_with_no_dead_weight(fuzz, capsys):
    out = io.StringIO()
    code = fuzz.main(["-n", "12", "--seed", "3"], out=out)
    with capsys.disabled():  # the figures, in `make test`'s output
        print(f"\nfuzz_compose -n 12: {out.getvalue().splitlines()[0]}")
    drawn, refused, expected, built, trained, dead, tracebacks = counts(out.getvalue())
    assert (dead, tracebacks) == (0, 0), out.getvalue()
    assert code == 0 and out.getvalue().count("\n") == 1  # the summary, no failing case
    assert drawn == 24  # 12 per strategy
    assert expected == refused and refused + built == drawn
    assert 0 < trained <= built


def test_it_reports_a_dead_weight(fuzz):
    """A channel-centred covariance of every token (aggr_all) cannot see the final norm's bias, which is
    added to all of them: its gradient is exactly zero (tests/nn/test_compose.py leaves this case out)."""
    centred = SecondOrderHead(fusion="aggr_all", pool=MGCrP(heads=2, m=3, n=3, centering="channel"), norm=EPN())
    out = io.StringIO()
    code = fuzz.main([], cases=[("compose", fields()), ("compose", fields(head=centred))], out=out)
    text = out.getvalue()
    assert counts(text) == (2, 0, 0, 2, 2, 1, 0), text
    assert code == 1
    assert "FAIL compose #1: dead weights: " in text and "norm.bias" in text.split("dead weights: ")[1].splitlines()[0]
    assert "FAIL compose #0" not in text


def test_it_reports_a_one_token_model_accepted_and_a_traceback(fuzz, monkeypatch):
    """A one-token draft refused at the path the tests' count names passes; a draft the spec accepts where
    the count (here patched to disagree) expects a refusal fails; an exception while training is a traceback."""
    one_token = fields(img_size=(4, 4), head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=2, m=3, n=3),
                                                             norm=EPN(), z0="mean_token"))
    assert fuzz.single_token_path(one_token) == "block.attention"
    out = io.StringIO()
    assert fuzz.main([], cases=[("drafts", one_token)], out=out) == 0  # refused where the count says
    assert counts(out.getvalue()) == (1, 1, 1, 0, 0, 0, 0), out.getvalue()

    def boom(spec, seed):
        raise RuntimeError("boom")

    tally = fuzz.run([("drafts", fields())], train=boom, progress=False)
    assert (tally.tracebacks, tally.trained, tally.failed) == (1, 0, True)
    assert "training raised RuntimeError: boom" in tally.failures[0]
    monkeypatch.setattr(fuzz, "single_token_path", lambda f: "block.ffn")  # a count that disagrees with the spec
    tally = fuzz.run([("drafts", fields())], progress=False)
    assert (tally.unexpected, tally.failed) == (1, True)
    assert "accepted, but attends over one token at 'block.ffn'" in tally.failures[0]
