"""Draw random model compositions (tests' Hypothesis strategies), build and train each, and count dead weights.

    python -m tests.helpers.fuzz_compose [-n N] [--seed S] [-v]

Draws N compositions from each of `composed_models()` (tests/nn/test_compose.py) and `model_drafts()`
(tests/helpers/strategies.py), with a fixed seed and no example database, and constructs each `Model(**fields)`.
A draft whose attention runs over one token (`strategies.single_token_path`, the tests' own count) must be
refused with a SpecError naming that path; any other draft must be accepted (but for the composed
strategy's two known refusals, `head.pool` and `block.ffn.cls`, see tests/nn/test_compose.py::composed). Each
accepted spec is profiled (`vspec.profile`), round-tripped through JSON, built, and -- unless it has
another degeneracy by construction (`nondegenerate`, tests/helpers/compose.py: widths under 8, etc.) -- trained for one
float64 forward / backward on a random batch with every weight perturbed: a parameter whose largest
|gradient| is at most 1e-12 x the model's largest (conftest.assert_every_parameter_learns' rule; the q
and k thirds of a fused qkv weight on their own), or whose gradient is missing or not finite, is a dead
weight. Prints `drawn N / refused R (at the expected path E) / built B / trained T / dead weights D /
tracebacks X`, then every failing case (its spec JSON cut to 300 characters, what failed; with -v, then a
line for every case that passed). A traceback is
any exception but a SpecError while constructing, or any exception while profiling, round-tripping,
building or training an accepted spec. Exit status 1 when D, X or the refusals at an unexpected path (a
one-token draft refused elsewhere or accepted, another draft refused) are nonzero.
"""

import argparse
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import vspec  # noqa: E402
from tests.helpers.compose import (
    composed_models,  # noqa: E402
    nondegenerate,  # noqa: E402
)
from tests.helpers.strategies import model_drafts, single_token_path  # noqa: E402
from vspec.spec import Model, SpecError, from_json, to_json  # noqa: E402

REL = 1e-12  # conftest.assert_every_parameter_learns' float64 threshold
# refusals other than the one-token rule that a strategy may meet (tests/nn/test_compose.py::composed)
OTHER_REFUSALS = {"compose": ("head.pool", "block.ffn.cls"), "drafts": ()}
PROGRESS = 50  # cases between two progress lines on stderr


@dataclass
class Tally:
    drawn: int = 0
    refused: int = 0
    refused_expected: int = 0
    unexpected: int = 0  # refused at an unexpected path, or a one-token draft accepted
    built: int = 0
    trained: int = 0
    dead: int = 0
    tracebacks: int = 0
    failures: list[str] = field(default_factory=list)
    verbose: bool = False
    passed: list[str] = field(default_factory=list)  # with verbose: a line per case that did not fail

    def summary(self) -> str:
        return (f"drawn {self.drawn} / refused {self.refused} (at the expected path {self.refused_expected}) / "
                f"built {self.built} / trained {self.trained} / dead weights {self.dead} / "
                f"tracebacks {self.tracebacks}")

    @property
    def failed(self) -> bool:
        return bool(self.dead or self.tracebacks or self.unexpected)


def draw(strategy, n: int, seed_: int) -> list[dict[str, Any]]:
    """The fields of up to n examples of a (fields, single_token_path) strategy: generation only, no shrinking."""
    out = []

    @seed(seed_)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def collect(case):
        out.append(case[0])

    collect()
    return out[:n]


def dead_weights(model: torch.nn.Module) -> list[str]:
    """Parameters whose gradient is missing, not finite, or zero up to rounding (at most REL x the largest
    entry of any gradient); a fused qkv weight's q and k thirds are checked on their own."""
    grads = {name: p.grad for name, p in model.named_parameters()}
    bad = [f"{n} (no gradient)" for n, g in grads.items() if g is None]
    bad += [f"{n} (not finite)" for n, g in grads.items() if g is not None and not torch.isfinite(g).all()]
    if bad:
        return bad
    top = max(g.abs().max().item() for g in grads.values())
    dead = [n for n, g in grads.items() if g.abs().max().item() <= REL * top]
    for n, g in grads.items():
        if n.endswith("qkv.weight") and n not in dead:
            dead += [f"{n}[{part}]" for part, third in zip("qk", g.chunk(3)) if third.abs().max().item() <= REL * top]
    return dead


def train_once(spec: Model, seed_: int) -> list[str]:
    """Build, perturb every weight, one float64 forward / backward on a random batch: the dead weights."""
    torch.manual_seed(seed_)
    model = vspec.build(spec).eval().double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    out = model(vspec.example_input(spec, 4, dtype=torch.float64))
    if isinstance(out, tuple):
        out = torch.cat([o.flatten() for o in out])
    (out * torch.randn_like(out)).sum().backward()
    return dead_weights(model)


def check(tally: Tally, name: str, fields: dict[str, Any], index: int,
          train: Callable[[Model, int], list[str]] = train_once) -> None:
    """Run one drawn case through construction, profile, JSON round trip, build and training."""
    tally.drawn += 1
    single = single_token_path(fields)

    def fail(what: str, spec_text: str | None = None) -> None:
        text = spec_text if spec_text is not None else ascii(fields)
        tally.failures.append(f"FAIL {name} #{index}: {what}\n     {text[:300]}")

    def ok(what: str) -> None:
        if tally.verbose:
            tally.passed.append(f"ok   {name} #{index}: {what[:200]}")

    try:
        spec = Model(**fields)
    except SpecError as e:
        tally.refused += 1
        if (single is not None and e.path == single) or (single is None and e.path in OTHER_REFUSALS[name]):
            tally.refused_expected += 1
            ok(f"refused as expected: {e}")
        else:
            tally.unexpected += 1
            fail(f"refused at {e.path!r}, expected {single!r}: {e}")
        return
    except Exception:
        tally.tracebacks += 1
        fail(f"constructing raised {traceback.format_exc(limit=-1).strip().splitlines()[-1]}")
        return
    text = to_json(spec, indent=None)
    if single is not None:
        tally.unexpected += 1
        fail(f"accepted, but attends over one token at {single!r}", text)
    stage = "profiling"
    try:
        vspec.profile(spec)
        stage = "the JSON round trip"
        if from_json(to_json(spec)) != spec:
            raise AssertionError("from_json(to_json(spec)) != spec")
        stage = "building"
        if not nondegenerate(spec):
            vspec.build(spec)
            tally.built += 1
            if single is None:  # (an accepted one-token draft has failed already)
                ok("built (not trained: a degeneracy by construction, `nondegenerate`)")
            return
        stage = "training"
        dead = train(spec, index)
        tally.built += 1
        tally.trained += 1
    except Exception:
        tally.tracebacks += 1
        fail(f"{stage} raised {traceback.format_exc(limit=-1).strip().splitlines()[-1]}", text)
        return
    if dead:
        tally.dead += 1
        fail(f"dead weights: {', '.join(dead[:6])}{' ...' if len(dead) > 6 else ''}", text)
    elif single is None:
        ok("trained: every parameter learns")


def run(cases: Iterable[tuple[str, dict[str, Any]]], train: Callable[[Model, int], list[str]] = train_once,
        progress: bool = True, verbose: bool = False) -> Tally:
    """Check each (strategy name, fields) case; a progress line on stderr every PROGRESS cases."""
    tally = Tally(verbose=verbose)
    for i, (name, fields) in enumerate(cases):
        check(tally, name, fields, i, train)
        if progress and (i + 1) % PROGRESS == 0:
            print(f"... {i + 1} cases: {tally.summary()}", file=sys.stderr, flush=True)
    return tally


def main(argv: list[str] | None = None, cases: Iterable[tuple[str, dict[str, Any]]] | None = None,
         out=None) -> int:
    """The command; `cases` (strategy name, fields) replaces the drawn ones (for tests)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200, metavar="N", help="compositions drawn per strategy (default 200)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="Hypothesis seed (default 0)")
    p.add_argument("-v", "--verbose", action="store_true", help="also print a line for each case that passed")
    args = p.parse_args(argv)
    if args.n < 1:
        p.error(f"-n must be >= 1, got {args.n}")
    out = out or sys.stdout
    torch.set_num_threads(1)
    if cases is None:
        cases = []
        for name, strategy in (("compose", composed_models()), ("drafts", model_drafts())):
            cases += [(name, fields) for fields in draw(strategy, args.n, args.seed)]
    tally = run(cases, verbose=args.verbose)
    print("\n".join([tally.summary(), *tally.failures, *tally.passed]), file=out)
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
