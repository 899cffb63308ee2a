"""Bad checkpoints fed to every consumer (vspec.load, tools/eval.py, vspec analyze, tools/train.py --resume,
timm.create_model's checkpoint_path on a registered preset): each is refused in one line naming the file, or (for a
defect the consumer does not read) used; none gives a traceback, hangs, allocates what its file does not hold, or
runs code. Checksums catch flipped bytes and edited fields; a resume refuses a run that differs from its checkpoint.
`python tests/weights/test_checkpoint.py` prints the survey's figures (tried / clean / tracebacks /
hangs)."""

import io
import json
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
import timm
import torch

import vspec
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.spec import SpecError

ROOT = Path(__file__).resolve().parents[2]
CHECKSUM = "tensor_sha256"  # the previous release's checksum (of the tensors)
CHECKSUMS = (CHECKSUM, "sha256")  # and today's (of everything)
# The survey (down to `figures`) uses only what every release has, so that it also measures an older one:
# `PYTHONPATH=OLD_CHECKOUT python tests/weights/test_checkpoint.py [NAME]` (this checkout: PYTHONPATH=.; NAME:
# only the crafted files whose names contain it). A try that outlives HANG_S seconds counts as a hang.


class Evil:
    """Unpickling this would create the file `marker` (weights_only loading must refuse it)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


TINY = {"depth": 1, "dim": 16, "block.attention.heads": 2, "img_size": 8, "embedder.patch_size": 4, "num_classes": 4}


def _tiny_spec(folder: Path) -> Path:
    spec = vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"), TINY)
    path = folder / "tiny.json"
    path.write_text(vspec.to_json(spec))
    return path


def train_args(spec, out, *extra):
    return [str(spec), "--data", "synthetic", "--synthetic-size", "32", "--out", str(out), "--batch-size", "16",
            "--device", "cpu", "--seed", "1", "--epochs", "1", *extra]


def eval_args(path):
    return [str(path), "--data", "synthetic", "--synthetic-size", "32", "--seed", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    return train_run(tmp_path_factory.mktemp("good"))


def train_run(folder: Path) -> tuple[Path, Path]:
    """A spec file and the `last.pt` of a one-epoch run on it."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = _tiny_spec(folder)
    out = folder / "run"
    assert train_main(train_args(spec, out)) == 0
    return spec, out / "last.pt"


def _flip_tensor_bytes(data: bytes, ckpt: dict) -> bytes:
    """64 bytes inside the largest weight tensor's data, inverted."""
    big = max(ckpt["state_dict"].values(), key=lambda t: t.numel())
    raw = big.contiguous().view(torch.uint8).numpy().tobytes()
    at = data.find(raw)
    assert at >= 0 and len(raw) >= 128
    start = at + len(raw) // 2 - 32
    return data[:start] + bytes(b ^ 0xFF for b in data[start:start + 64]) + data[start + 64:]


DROP = object()  # an entry edited() leaves out
N_CRAFTED = 48  # the checkpoints craft() makes
ANY_SUM = "0" * 64  # a checksum entry of the older kind (any value makes the loader walk the file)


def _nested(leaf, levels: int, pair=lambda x: [x, x]):
    """`levels` levels of `pair` around `leaf`: 2**levels paths to one object in a file of a few KB."""
    for _ in range(levels):
        leaf = pair(leaf)
    return leaf


def _big_spec(spec_json: str, **changes) -> str:
    """The spec with top-level fields changed (e.g. a ~400 M-parameter model)."""
    return json.dumps({**json.loads(spec_json), **changes})


def _expanded(spec_json: str, **changes) -> dict[str, torch.Tensor]:
    """The state dict of the spec (with `changes`), every tensor a stride-0 view of one element."""
    model = vspec.build(vspec.from_json(_big_spec(spec_json, **changes)), device="meta")
    return {k: torch.zeros((1,) * v.dim(), dtype=v.dtype).expand(v.shape) for k, v in model.state_dict().items()}


def _deflated_bomb(spec_json: str, gib: int = 1) -> bytes:
    """A torch.save zip whose one weight's record is `gib` GiB of zeros deflated to ~1 MB per GiB (torch.save
    never compresses; a reader that inflates the record allocates all of it)."""
    small = 70_000  # a numel pickled as BININT ('J' + 4 bytes), patched to the big one
    buf = io.BytesIO()
    torch.save({"format": "vspec-checkpoint-1", "spec": spec_json, "state_dict": {"w": torch.zeros(small)}}, buf)
    src, out = zipfile.ZipFile(io.BytesIO(buf.getvalue())), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                data = data.replace(b"J" + struct.pack("<i", small), b"J" + struct.pack("<i", gib * 2**28))
            if not info.filename.endswith("/data/0"):
                dst.writestr(info, data)
                continue
            record = zipfile.ZipInfo(info.filename)
            record.compress_type = zipfile.ZIP_DEFLATED
            with dst.open(record, "w", force_zip64=True) as f:
                for _ in range(gib * 16):
                    f.write(bytes(64 * 2**20))
    return out.getvalue()


def craft(folder: Path, good: Path) -> dict[str, tuple[Path, str, bool]]:
    """Bad checkpoints made from the good training checkpoint `good`: name -> (file, needle the error line
    must contain, whether a model consumer (vspec.load, eval) must refuse it too; a training-only defect
    does not concern them). Edited dicts drop their checksum, as an older or foreign writer would."""
    folder.mkdir(parents=True, exist_ok=True)
    data = good.read_bytes()
    ckpt = torch.load(good, map_location="cpu", weights_only=True)
    plain = {k: v for k, v in ckpt.items() if k not in CHECKSUMS}

    def edited(**changes):
        out = {**plain, **changes}
        return {k: v for k, v in out.items() if v is not DROP}

    sd = dict(plain["state_dict"])
    first, second = list(sd)[:2]
    misfit = {k: v for k, v in sd.items() if k != first}
    misfit[second] = torch.zeros(3, 5)
    misfit["surplus.weight"] = torch.zeros(2)
    opt = {**plain["optimizer"], "state": {i: {**st, "exp_avg": st["exp_avg"].reshape(-1)[:1]}
                                           for i, st in plain["optimizer"]["state"].items()}}
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore")
        csr = sd[second].reshape(sd[second].shape[0], -1).to_sparse_csr()
    loop, cycle = [], {}
    loop.append(loop)
    cycle["me"] = cycle
    cases = {
        "empty": (b"", "empty file", True),
        "random_bytes": (bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0)).tolist()),
                         "not a readable checkpoint", True),
        "truncated_half": (data[: len(data) // 2], "not a readable checkpoint", True),
        "malicious_reduce": ({**plain, "state_dict": Evil(folder / "pwned")}, "nothing of it was run", True),
        "malicious_plain_pickle": (pickle.dumps(Evil(folder / "pwned"), protocol=2), "nothing of it was run", True),
        "not_a_dict": ([1, 2, 3], "not a vspec checkpoint", True),
        "no_spec": (edited(spec=DROP), "'spec'", True),
        "spec_not_string": (edited(spec=123), "spec", True),
        "spec_not_json": (edited(spec="{not json"), "spec", True),
        "state_dict_not_tensors": (edited(state_dict={"a": "b"}), "state_dict", True),
        "weights_do_not_fit": (edited(state_dict=misfit), "do not fit", True),
        "ema_not_a_dict": (edited(ema=[1, 2]), "ema", True),
        "no_optimizer": (edited(optimizer=DROP), "optimizer", False),
        "epoch_as_text": (edited(epoch="1"), "epoch", False),
        "optimizer_state_misfit": (edited(optimizer=opt), "optimizer state", False),
        "flipped_bytes": (_flip_tensor_bytes(data, ckpt), "checksum", True),
        # fields edited in place, the checksum kept: a different model (or run) must not load silently
        "spec_edited_in_place": (data.replace(b'"gelu"', b'"relu"', 1), "checksum", True),
        "data_edited_in_place": (data.replace(b"synthetic", b"Synthetic"), "checksum", True),
        # spec texts the JSON reader chokes on
        "spec_nested_1e5_deep": (edited(spec="[" * 100_000 + "]" * 100_000), "spec", True),
        "spec_object_nested_1e5_deep": (edited(spec='{"a": ' * 100_000 + "1" + "}" * 100_000), "spec", True),
        "spec_5000_digit_int": (edited(spec='{"big": ' + "9" * 5000 + ", " + plain["spec"].lstrip()[1:]), "spec",
                                True),
        "spec_5000_digit_dim": (edited(spec=_big_spec(plain["spec"], dim="DIM").replace('"DIM"', "1" * 5000)),
                                "spec", True),
        # weights of a kind load_state_dict cannot copy
        "weight_sparse_coo": (edited(state_dict={**sd, first: sd[first].to_sparse()}), "sparse", True),
        "weight_sparse_csr": (edited(state_dict={**sd, second: csr}), "sparse", True),
        "weight_on_meta": (edited(state_dict={**sd, first: torch.empty_like(sd[first], device="meta")}), "meta",
                           True),
        "weight_complex": (edited(state_dict={**sd, first: sd[first].to(torch.complex64)}), "complex", True),
        # containers that contain themselves or are reached by 2**40 paths (a 2 KB file)
        "list_contains_itself": (edited(junk=loop, **{CHECKSUM: ANY_SUM}), "contains itself", True),
        "dict_contains_itself": (edited(junk=cycle, **{CHECKSUM: ANY_SUM}), "contains itself", True),
        "metrics_contain_themselves": (edited(metrics=[*plain["metrics"], loop]), "contains itself", True),
        "list_2_40_paths": (edited(junk=_nested(torch.zeros(1), 40), **{CHECKSUM: ANY_SUM}), "paths", True),
        "dict_2_40_paths": (edited(junk=_nested(torch.zeros(1), 40, lambda x: {"a": x, "b": x}),
                                   **{CHECKSUM: ANY_SUM}), "paths", True),
        "list_2_40_paths_unsummed": (edited(junk=_nested(torch.zeros(1), 40)), "paths", True),
        "one_tensor_under_1e5_keys": (edited(junk=dict.fromkeys(map(str, range(10**5)), torch.zeros(2**18)),
                                             **{CHECKSUM: ANY_SUM}), "paths", True),
        # a resume's own fields, malformed
        "rng_python_short": (edited(rng={**plain["rng"], "python": (3, (1, 2, 3), None)}), "rng", False),
        "rng_numpy_keys_text": (edited(rng={**plain["rng"], "numpy": {**plain["rng"]["numpy"], "keys": "k"}}), "rng",
                                False),
        "rng_torch_short": (edited(rng={**plain["rng"], "torch": torch.zeros(3, dtype=torch.uint8)}), "rng", False),
        "rng_python_text": (edited(rng={**plain["rng"], "python": ("a", "b", "c")}), "rng", False),
        "epoch_loss_text": (edited(epoch_loss=["a", 1]), "epoch_loss", False),
        "epoch_loss_short": (edited(epoch_loss=[1.0]), "epoch_loss", False),
        "metrics_not_records": (edited(metrics=[1, 2]), "metrics", False),
        "metrics_record_text": (edited(metrics=[{**plain["metrics"][0], "val_top1": "x"}]), "metrics", False),
        "best_epoch_text": (edited(best_epoch="1"), "best_epoch", False),
        "batches_done_beyond_the_epoch": (edited(batches_done=2**62), "batches_done", False),
        "data_args_tensor": (edited(data_args={**plain["data_args"], "seed": torch.ones(1)}), "data_args", False),
        # a spec far bigger than the weights: refused before anything is allocated
        "spec_400M_params_tiny_weights": (edited(spec=_big_spec(plain["spec"], depth=20, dim=1280)), "describes",
                                          True),
        "spec_depth_1e6_tiny_weights": (edited(spec=_big_spec(plain["spec"], depth=10**6)), "describes", True),
        "weights_stride0_over_4_bytes": (edited(spec=_big_spec(plain["spec"], depth=20, dim=1280),
                                                state_dict=_expanded(plain["spec"], depth=20, dim=1280)),
                                         "overlap", True),
        "record_1gib_deflated": (_deflated_bomb(plain["spec"]), "compressed", True),
    }
    files = {}
    for name, (content, needle, for_models) in cases.items():
        path = folder / name / "last.pt"
        path.parent.mkdir()
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            torch.save(content, path)
        files[name] = (path, needle, for_models)
    return files


HANG_S = 60  # a try that runs longer is counted as a hang (and stopped)


class Hang(BaseException):
    """Raised in a try that outlived HANG_S."""


def _alarm(signum, frame):
    raise Hang


def _outcome(call, path: Path, capsys) -> tuple[str, str]:
    """('refused' | 'unclear' | 'accepted' | 'traceback' | 'hang', detail) of one consumer on one file: refused
    is one line naming the file (a SpecError from vspec.load or timm.create_model; exit 2 and stderr from the
    CLIs), unclear a refusal that is not, traceback anything else escaping, hang a try stopped after HANG_S
    seconds."""
    capsys.readouterr()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        code = call()
    except Hang:
        return "hang", f"stopped after {HANG_S} s"
    except SpecError as e:
        if call.__name__ not in ("via_load", "via_timm"):
            return "traceback", f"{type(e).__name__}: {e}"[:300]
        code, err = 2, f"{e}\n"
    except BaseException as e:  # noqa: BLE001 - anything escaping the consumer is a traceback
        return "traceback", f"{type(e).__name__}: {e}"[:300]
    else:
        err = capsys.readouterr().err
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if code == 0:
        return "accepted", ""
    ok = code == 2 and err.count("\n") == 1 and str(path) in err and "Traceback" not in err
    return ("refused" if ok else "unclear"), err.strip()[:300]


CONSUMERS = ("load", "eval", "analyze", "resume", "timm")


def survey(tmp: Path, capsys, spec: Path, good: Path, only: str | None = None) -> tuple[dict, dict]:
    """Every crafted checkpoint (made from the training run `spec`, `good`; `only`: the names containing it)
    x every consumer: (counts, failures)."""
    from vspec.cli import main as vspec_main

    files = craft(tmp / "bad", good)
    counts = {"tries": 0, "clean": 0, "tracebacks": 0, "hangs": 0, "accepted": 0}
    failures = {}
    for name, (path, needle, for_models) in files.items():
        if only and only not in name:
            continue

        def via_load():
            vspec.load(path)
            return 0

        def via_eval():
            return eval_main(eval_args(path))

        def via_analyze():
            return vspec_main(["analyze", str(path), "--what", "maps", "--out-dir", str(tmp / "analyzed")])

        def via_resume():
            return train_main(train_args(spec, path.parent, "--epochs", "2", "--resume"))

        def via_timm():  # timm loads checkpoint_path itself once the entrypoint returns
            vspec.register_timm()
            timm.create_model("vspec_deit_tiny", checkpoint_path=str(path), **TINY)
            return 0

        for consumer, must_refuse in ((via_load, for_models), (via_eval, for_models), (via_analyze, for_models),
                                      (via_resume, True), (via_timm, for_models)):
            outcome, detail = _outcome(consumer, path, capsys)
            counts["tries"] += 1
            counts["tracebacks"] += outcome == "traceback"
            counts["hangs"] += outcome == "hang"
            counts["accepted"] += outcome == "accepted" and must_refuse
            clean = outcome == ("refused" if must_refuse else "accepted") and (outcome != "refused" or needle in detail)
            counts["clean"] += clean
            if not clean:
                failures[f"{name} / {consumer.__name__[4:]}"] = f"{outcome}: {detail}"
        assert not (tmp / "bad" / "pwned").exists(), "the malicious checkpoint ran code"
    return counts, failures


def figures(counts: dict, consumers: int = len(CONSUMERS)) -> str:
    n = counts["tries"] // consumers
    return (f"crafted checkpoints {n} x consumers {consumers} = {counts['tries']} tried / {counts['clean']} clean / "
            f"{counts['tracebacks']} tracebacks / {counts['hangs']} hangs ({counts['accepted']} bad ones used "
            "silently)")


def test_every_crafted_checkpoint_is_refused_in_one_line_by_every_consumer(good_run, tmp_path, capsys):
    counts, failures = survey(tmp_path, capsys, *good_run)
    with capsys.disabled():
        print("\n" + figures(counts))
    assert failures == {}
    assert counts["clean"] == counts["tries"] == N_CRAFTED * len(CONSUMERS)
    assert counts["tracebacks"] == counts["hangs"] == 0


def test_the_command_lines_refuse_without_traceback_or_running_code(good_run, tmp_path):
    """tools/eval.py on a malicious pickle, tools/train.py --resume on a 0-byte last.pt, as processes."""
    spec, good = good_run
    files = craft(tmp_path / "bad", good)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    for tool, argv, path in (
            ("eval.py", eval_args(files["malicious_reduce"][0]), files["malicious_reduce"][0]),
            ("train.py", train_args(spec, files["empty"][0].parent, "--resume"), files["empty"][0])):
        done = subprocess.run([sys.executable, str(ROOT / "tools" / tool), *argv], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"{tool}: error: {path}: ") and "Traceback" not in done.stderr
    assert not (tmp_path / "bad" / "pwned").exists()


def test_first_lines_of_empty_and_blank_messages_name_the_error():
    from vspec.cli import one_line
    from vspec.spec.errors import cause

    assert one_line(EOFError()) == "EOFError" and one_line(ValueError("\n  \nsecond\nthird")) == "second third"
    assert cause(EOFError()) == "EOFError" and cause(OSError("\x1b[1mbold\x1b[0m\nmore")) == "OSError: bold"
    assert len(cause(ValueError("x" * 1000))) == 160


def test_checksum_covers_every_tensor_in_a_fixed_order():
    from vspec.weights.checksum import tensor_checksum

    state = {"b": torch.arange(4.0), "a": {"x": [torch.ones(2, 2), 3]}, "spec": "{}"}
    reordered = {"spec": "{}", "a": {"x": [torch.ones(2, 2), 3]}, "b": torch.arange(4.0)}
    assert tensor_checksum(state) == tensor_checksum(reordered)
    changed = {**state, "b": torch.tensor([0.0, 1.0, 2.0, 3.5])}
    reshaped = {**state, "b": torch.arange(4.0).reshape(2, 2)}
    assert len({tensor_checksum(state), tensor_checksum(changed), tensor_checksum(reshaped)}) == 3


def test_the_checksum_covers_the_spec_every_field_and_every_tensor():
    from vspec.weights.checksum import checksum

    t = torch.arange(4.0)
    state = {"spec": '{"act": "gelu"}', "state_dict": {"w": t}, "epoch": 1, "rng": {"python": (3, (1, 2), None)},
             "metrics": [{"val_top1": 0.5}], "best_top1": 1.0}
    variants = [{**state, "spec": '{"act": "relu"}'}, {**state, "epoch": 2}, {**state, "epoch": True},
                {**state, "epoch": 1.0}, {**state, "best_top1": 1.0000000000000002},
                {**state, "rng": {"python": (3, [1, 2], None)}}, {**state, "metrics": [{"val_top1": 0.5, "x": 0}]},
                {**state, "state_dict": {"w": t.reshape(2, 2)}}, {**state, "state_dict": {"w": t.double()}},
                {**state, "state_dict": {"w": torch.tensor([0.0, 1.0, 2.0, 3.5])}}, {**state, "extra": None},
                {**state, "epoch": 10**5000}]
    digests = {checksum(v) for v in [state, *variants]}
    assert len(digests) == len(variants) + 1
    assert checksum(state) == checksum({**state, "state_dict": {"w": t.clone()}})  # values, not identities
    shared = (0.9, 0.999)  # shared as AdamW's betas are: hashed once, then as a reference
    assert checksum({"a": [shared, shared]}) != checksum({"a": [shared, tuple([0.9, 0.999])]})


def test_written_checkpoints_carry_a_checksum_of_everything_that_load_verifies(good_run, tmp_path):
    from vspec.weights.checkpoint import read
    from vspec.weights.checksum import checksum

    spec, good = good_run
    model = vspec.build(vspec.load_spec(spec))
    saved = vspec.save(model, tmp_path / "m.pt")
    for path in (saved, good, good.with_name("best.pt")):
        raw = torch.load(path, weights_only=True)
        assert CHECKSUM not in raw and raw["sha256"] == checksum({k: v for k, v in raw.items() if k != "sha256"})
        assert read(path)["sha256"] == raw["sha256"]
    for name, edit in (("weights", lambda c: c["state_dict"]["cls_token"].add_(1)),
                       ("spec", lambda c: c.update(spec=c["spec"].replace('"gelu"', '"relu"'))),
                       ("format", lambda c: c.update(format="vspec-checkpoint-0"))):
        edited = torch.load(saved, weights_only=True)
        edit(edited)
        torch.save(edited, tmp_path / f"{name}.pt")
        with pytest.raises(SpecError, match=rf"{name}\.pt: checksum mismatch"):
            vspec.load(tmp_path / f"{name}.pt")
    del edited["sha256"]  # as the releases before checksums wrote it: loads
    torch.save(edited, tmp_path / "old.pt")
    assert isinstance(vspec.load(tmp_path / "old.pt"), torch.nn.Module)


def test_checkpoints_with_the_previous_checksum_still_load_and_it_is_verified(good_run, tmp_path):
    """today's main wrote "tensor_sha256" (the tensors only): verified; the rest of such a file is taken as it
    is, as the README says."""
    from vspec.train.checkpoints import load as load_training
    from vspec.weights.checksum import tensor_checksum

    spec, good = good_run
    raw = torch.load(good, weights_only=True)
    plain = {k: v for k, v in raw.items() if k not in CHECKSUMS}
    previous = {**plain, CHECKSUM: tensor_checksum(plain)}
    torch.save(previous, tmp_path / "previous.pt")
    assert load_training(tmp_path / "previous.pt")["epoch"] == 1
    model = vspec.load(tmp_path / "previous.pt")
    assert torch.equal(model.state_dict()["cls_token"], plain["state_dict"]["cls_token"])
    torch.save({**previous, "spec": previous["spec"].replace('"gelu"', '"relu"')}, tmp_path / "respec.pt")
    assert vspec.load(tmp_path / "respec.pt").spec.block.ffn.act == "relu"  # not covered by that checksum
    previous["state_dict"]["cls_token"] += 1
    torch.save(previous, tmp_path / "edited.pt")
    with pytest.raises(SpecError, match=r"edited\.pt: checksum mismatch.*'tensor_sha256' covers its tensors"):
        vspec.load(tmp_path / "edited.pt")


@pytest.mark.parametrize("name", ["dhvt_sot", "vit_listed", "train_last", "train_dead_reweight"])
def test_the_previous_release_checkpoints_load(name):
    from vspec.train.checkpoints import load as load_training

    path = ROOT / "tests" / "data" / "v1" / f"{name}.pt"
    model = vspec.load(path)
    assert sum(p.numel() for p in model.parameters()) > 0
    if name.startswith("train"):
        assert load_training(path)["epoch"] >= 1


MEASURE = """
import resource, sys
import torch, vspec
from vspec.spec import SpecError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    vspec.load(sys.argv[1])
    print("accepted")
except SpecError as e:
    print("refused", e)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024)
"""


@pytest.mark.parametrize("name", ["spec_400M_params_tiny_weights", "spec_depth_1e6_tiny_weights",
                                  "weights_stride0_over_4_bytes", "record_1gib_deflated"])
def test_a_spec_or_record_bigger_than_the_file_is_refused_before_allocating(good_run, tmp_path, name):
    """The peak resident memory of a process that loads the file grows by less than 64 MiB (the model
    described takes 1.5-12 GiB, the inflated record 1 GiB)."""
    path = craft(tmp_path / "bad", good_run[1])[name][0]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path)], env=env, capture_output=True, text=True,
                          timeout=300)
    verdict, grown = done.stdout.strip().splitlines()
    assert verdict.startswith(f"refused {path}: "), done.stdout + done.stderr
    assert int(grown) < 64 * 2**20, f"peak memory grew by {int(grown) / 2**20:.0f} MiB"


BUILD_UNDER_LIMIT = """
import resource, sys
import torch, vspec, vspec.compiler
from vspec.spec.budget import MemoryBudgetError
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
resource.setrlimit(getattr(resource, sys.argv[2]), (int(status[sys.argv[3]].split()[0]) * 1024 + 200 * 2**20,
                                                      resource.RLIM_INFINITY))
try:
    vspec.build(vspec.load_spec(sys.argv[1]))
    print("built")
except MemoryBudgetError as e:
    print("refused", e)
"""


@pytest.mark.parametrize("limit, field", [("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")])
def test_the_size_guard_reads_the_address_space_limits(limit, field):
    """`ulimit -v` (or -d) 200 MiB above what the process uses: a 330 MiB model is refused in one line,
    not a bad_alloc or a RuntimeError from the allocator."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", BUILD_UNDER_LIMIT, str(ROOT / "specs/vit_base.py"), limit, field],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("refused building it on cpu needs about 3"), \
        done.stdout + done.stderr[-2000:]
    free = float(done.stdout.split("only ")[1].split()[0])
    assert 150 <= free <= 200, done.stdout  # MiB: the limit's 200, less what the process took since


def _fake_cgroup(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("files, left", [
    ({"memory.max": "104857600\n", "memory.current": "31457280\n", "memory.stat": "anon 1\ninactive_file 10485760\n"},
     80 * 2**20),  # v2: 100 MiB - (30 MiB - 10 MiB of reclaimable cache)
    ({"unified/memory.max": "52428800\n", "unified/memory.current": "10485760\n"}, 40 * 2**20),  # v2, hybrid
    ({"memory/memory.limit_in_bytes": "73400320\n", "memory/memory.usage_in_bytes": "10485760\n",
      "memory/memory.stat": "cache 5\ntotal_inactive_file 0\n"}, 60 * 2**20),  # v1
    ({"memory.max": "20971520\n", "memory.current": "31457280\n"}, 0),  # over its limit already
])
def test_the_size_guard_reads_the_cgroup_memory_limit(tmp_path, monkeypatch, files, left):
    from vspec.spec import budget

    root = _fake_cgroup(tmp_path, files)
    assert budget.available(root) == left
    monkeypatch.setenv("VSPEC_CGROUP_ROOT", str(root))
    assert budget.available() == left
    with pytest.raises(budget.MemoryBudgetError, match=r"but only .* of memory is available"):
        vspec.build(vspec.load_spec(ROOT / "specs/vit_base.py"))


def test_the_size_guard_ignores_unlimited_cgroups(tmp_path):
    from vspec.spec import budget

    unlimited = _fake_cgroup(tmp_path / "a", {"memory.max": "max\n", "memory.current": "1\n",
                                              "memory/memory.limit_in_bytes": "9223372036854771712\n",
                                              "memory/memory.usage_in_bytes": "1\n"})
    assert budget._cgroups_left(str(unlimited)) == [] and budget.available(unlimited) > 64 * 2**20


def _resume(good_run, tmp_path, capsys, *extra, spec=None, drop=()):
    """train.py --resume of a copy of the good run with `extra` flags; (exit code, stderr)."""
    spec_path, good = good_run
    out = tmp_path / "run"
    shutil.copytree(good.parent, out)
    if drop:  # a checkpoint of an earlier release, without these fields
        raw = torch.load(out / "last.pt", weights_only=True)
        torch.save({k: v for k, v in raw.items() if k not in (*drop, *CHECKSUMS)}, out / "last.pt")
    capsys.readouterr()
    code = train_main(train_args(spec or spec_path, out, *extra, "--resume"))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra, differences", [
    (("--set", "dim=32"), ["dim 32 != 16"]),
    (("--set", "img_size=16", "--seed", "2"), ["img_size [16, 16] != [8, 8]", "--seed 2 != 1"]),
    (("--synthetic-size", "48", "--set", "num_classes=3"), ["num_classes 3 != 4", "--synthetic-size 48 != 32"]),
    (("--data", "digits"), ["--data digits != synthetic"]),
])
def test_resume_of_a_different_run_is_refused_listing_the_differences(good_run, tmp_path, capsys, extra,
                                                                        differences):
    code, err = _resume(good_run, tmp_path, capsys, *extra)
    assert code == 2 and err.count("\n") == 1 and str(tmp_path / "run" / "last.pt") in err
    assert all(d in err for d in differences), err
    assert torch.load(tmp_path / "run" / "last.pt", weights_only=True)["epoch"] == 1  # untouched


def test_resume_from_another_spec_file_lists_its_fields(good_run, tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(vspec.to_json(vspec.override(vspec.load_spec(good_run[0]), {"depth": 2, "dim": 24})))
    code, err = _resume(good_run, tmp_path, capsys, spec=other)
    assert code == 2 and err.count("\n") == 1 and "dim 24 != 16" in err and "depth 2 != 1" in err


def test_resume_with_the_same_arguments_goes_on(good_run, tmp_path, capsys):
    code, err = _resume(good_run, tmp_path, capsys, "--epochs", "2")
    assert code == 0, err
    from vspec.train.checkpoints import load

    ckpt = load(tmp_path / "run" / "last.pt")
    assert ckpt["epoch"] == 2 and ckpt["data_args"] == {"data": "synthetic", "seed": 1, "synthetic_size": 32}


def test_resume_of_a_checkpoint_without_data_args_compares_what_it_has(good_run, tmp_path, capsys):
    code, err = _resume(good_run, tmp_path / "a", capsys, "--epochs", "2", drop=("data_args",))
    assert code == 0, err
    code, err = _resume(good_run, tmp_path / "b", capsys, "--data", "digits", drop=("data_args",))
    assert code == 2 and "--data digits != synthetic" in err and "--seed" not in err


if __name__ == "__main__":  # the survey's figures, for the closing note
    import tempfile

    class _Capture:  # the part of pytest's capsys the survey uses
        def readouterr(self):
            err = sys.stderr.getvalue()
            sys.stderr.seek(0)
            sys.stderr.truncate()
            return type("Captured", (), {"err": err, "out": ""})()

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    real_err, sys.stderr = sys.stderr, io.StringIO()
    real_out, sys.stdout = sys.stdout, io.StringIO()  # the consumers' own reports
    try:
        with tempfile.TemporaryDirectory() as tmp:
            counts, failures = survey(Path(tmp), _Capture(), *train_run(Path(tmp) / "good"),
                                      only=sys.argv[1] if len(sys.argv) > 1 else None)
    finally:
        sys.stderr, sys.stdout = real_err, real_out
    print(figures(counts))
    for key, detail in failures.items():
        print(f"  {key}: {detail[:200]}")
