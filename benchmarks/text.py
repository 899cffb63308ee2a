"""vspec's bert_base body against Hugging Face's BertModel (SDPA attention), the same weights, on the CPU.

A padded batch (default 16 sequences of random lengths up to 128 tokens, right-padded to 128, HF's
attention_mask) runs forward (eval, no grad) and forward+backward (train mode, dropout on, the pooled output's
sum as the loss) through both, in each precision (`--precision`, as benchmarks/models.py: fp32, and bf16 under CPU
bf16 autocast; default both where the CPU computes bf16 natively); within each round they all run back to back, order
alternating. Prints sequences/s (medians over rounds), the ratio vspec / HF in speed (> 1: vspec is faster), the
median of the rounds' ratios with its range, with both precisions vspec's bf16 against its fp32, and each side's MFU
(2 x fvcore's MACs of a sequence at the padded length per forward, 6 x per forward+backward, over the CPU's measured
matmul rate in the row's precision; padding is computed, so it counts).

`--trainer` runs the Trainer row instead: Hugging Face's `Trainer` trains `BertForSequenceClassification` (a
bert_base-shaped config, `--trainer-size` layers x width, 4 x width FFN, 64-wide heads) and the vspec model holding
its weights (its body and BERT's classifier head, `vspec.register_hf()`'s `VspecForSequenceClassification`), on the
same data (sequences of random lengths up to --seq-len, padded per batch) with the same TrainingArguments
(`--steps` steps of --batch-size per round, AdamW, dropout 0.1, no saving or logging); the row is Trainer's
`train_samples_per_second`, medians over rounds, and its ratio vspec / HF; a second line counts the process's CPU
seconds instead of the wall clock's (steadier where other work shares the machine; with one thread it is the
model's and Trainer's own work).

    python -m benchmarks.text [--batch-size 16] [--seq-len 128] [--precision fp32 bf16] [--rounds 15] [--threads N]
                              [--json FILE] [--heap kept|glibc]   (the C allocator: benchmarks/models.py's)
    python -m benchmarks.text --trainer [--trainer-size 4 256] [--steps 4] [--rounds 5]
"""

import argparse
import statistics
import time
from pathlib import Path

import attrs
import torch
import transformers

import vspec
from vspec.convert.hf import from_hf, spec_from_hf

from .common import DTYPES, ROOT, apply_heap, header, heap_option, precisions
from .models import MODES, race_precisions, report, row, write  # its races and rows (its --table prints both)


def hf_bert() -> transformers.BertModel:
    """bert-base-uncased's BertModel (pooler included) with SDPA attention, random weights."""
    config = transformers.BertConfig()
    config._attn_implementation = "sdpa"
    return transformers.BertModel(config).eval()


def batch(size: int, seq_len: int, vocab: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(seq_len // 4, seq_len + 1, (size,), generator=g)
    lengths[0] = seq_len  # the batch is as long as its longest
    mask = (torch.arange(seq_len)[None] < lengths[:, None]).long()
    ids = torch.randint(1000, vocab, (size, seq_len), generator=g) * mask  # padding id 0
    return {"input_ids": ids, "attention_mask": mask}


def pooled(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    out = model(**inputs)
    return out.pooler_output if hasattr(out, "pooler_output") else out


def trainer_row(args) -> dict:
    """The Trainer row (the module's docstring): Trainer's training samples/s of BertForSequenceClassification and of
    the vspec model with its weights, round after round (order alternating), and their ratios."""
    import tempfile

    from transformers import Trainer, TrainingArguments

    from vspec.hf import VspecConfig, VspecForSequenceClassification

    vspec.register_hf()
    layers, width = args.trainer_size
    config = transformers.BertConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=width // 64,
                                     intermediate_size=4 * width, num_labels=2)
    config._attn_implementation = "sdpa"
    ref = transformers.BertForSequenceClassification(config)
    body = from_hf(ref)
    preset = vspec.load_spec(ROOT / "specs" / "bert_base.py")  # its layout and head, at this size
    assert body.spec == vspec.override(preset, {"depth": layers, "dim": width, "block.attention.heads": width // 64,
                                                "block.ffn.hidden": 4 * width})
    ours = VspecForSequenceClassification(VspecConfig(spec=body.spec))
    ours.model.load_state_dict(body.state_dict())
    n = args.steps * args.batch_size
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(args.seq_len // 4, args.seq_len + 1, (n,), generator=g).tolist()
    data = [{"input_ids": torch.randint(1000, config.vocab_size, (k,), generator=g).tolist(),
             "labels": int(torch.randint(2, (1,), generator=g))} for k in lengths]

    def collate(rows: list[dict]) -> dict[str, torch.Tensor]:  # right padding with id 0 to the batch's longest
        longest = max(len(r["input_ids"]) for r in rows)
        ids = torch.tensor([r["input_ids"] + [0] * (longest - len(r["input_ids"])) for r in rows])
        labels = torch.tensor([r["labels"] for r in rows])
        return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": labels}

    out = tempfile.mkdtemp(prefix="vspec-bench-trainer-")
    train_args = TrainingArguments(out, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
                                   save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True, seed=0,
                                   disable_tqdm=True)
    rates: dict[str, list[float]] = {"hf": [], "vspec": []}
    cpu: dict[str, list[float]] = {"hf": [], "vspec": []}  # samples per second of the process's CPU time
    for r in range(args.rounds + 1):  # round 0 warms up
        for name, model in ((("hf", ref), ("vspec", ours)) if r % 2 == 0 else (("vspec", ours), ("hf", ref))):
            trainer = Trainer(model=model, args=train_args, train_dataset=data, data_collator=collate)
            start = time.process_time()
            rate = trainer.train().metrics["train_samples_per_second"]
            if r:
                rates[name].append(rate)
                cpu[name].append(n / (time.process_time() - start))
    for label, got in (("Trainer.train", rates), ("  per CPU second", cpu)):
        ratios = sorted(v / h for v, h in zip(got["vspec"], got["hf"]))
        per_s = {k: statistics.median(v) for k, v in got.items()}
        print(f"  {label:17s} HF {per_s['hf']:6.2f} samples/s  vspec {per_s['vspec']:6.2f} samples/s  ratio "
              f"vspec/HF {statistics.median(ratios):.3f} (median of rounds; range {ratios[0]:.3f}-{ratios[-1]:.3f})")
    ratios = sorted(v / h for v, h in zip(rates["vspec"], rates["hf"]))
    per_s = {k: statistics.median(v) for k, v in rates.items()}
    inputs = f"{layers} x {width}, batch {args.batch_size}, up to {args.seq_len} tokens, {args.steps} steps"
    return row("bert_base", "HF BertForSequenceClassification + Trainer", inputs, "Trainer.train", "samples/s",
               per_s["hf"], per_s["vspec"], ratios)


def forward(model, inputs):
    with torch.no_grad():
        pooled(model, inputs)


def forward_backward(model, inputs):
    model.zero_grad(set_to_none=True)
    pooled(model, inputs).sum().backward()


def compare(ref: transformers.BertModel, ours: torch.nn.Module, batch_size: int, seq_len: int, rounds: int,
            run=("fp32",), rates: dict | None = None) -> list[dict]:
    """The rows of vspec's body `ours` against HF's `ref` (the same weights) on the padded batch, forward and
    forward+backward, in each precision of `run`; MFU where the matmul `rates` (GFLOP/s per precision) are given."""
    inputs = batch(batch_size, seq_len, ref.config.vocab_size)
    with torch.no_grad():
        diff = (pooled(ref.eval(), inputs) - pooled(ours.eval(), inputs)).abs().max().item()
    real = f"{batch_size} x {seq_len} tokens, {inputs['attention_mask'].float().mean():.0%} real"
    spec = attrs.evolve(ours.spec, embedder=attrs.evolve(ours.spec.embedder, seq_len=seq_len))
    macs = vspec.profile(spec, crosscheck=False).macs  # a sequence at the padded length
    print(f"bert_base vs HF BertModel (attention: {ref.config._attn_implementation}): {macs / 1e9:.4f} GMACs per "
          f"sequence (fvcore); same weights, max |pooled diff| {diff:.1e}; {real}, {rounds} rounds, "
          + " and ".join(run))
    rows = []
    for label, _, train, flops_per_mac in MODES:  # benchmarks/models.py's, with this file's steps
        step = forward_backward if train else forward
        for m in (ref, ours):
            m.train(train)
        times = race_precisions(ref, ours, step, inputs, rounds, list(run))
        rows += report("bert_base", "HF BertModel (SDPA)", real, label, "seq/s", batch_size, times,
                       flops_per_mac * macs, rates)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--precision", nargs="+", choices=list(DTYPES), default=None,
                    help="default: fp32 and bf16 where the CPU computes bf16 natively (AMX, AVX-512 BF16), else fp32")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON (docs/cpu/)")
    ap.add_argument("--trainer", action="store_true", help="the Trainer row instead (the module's docstring)")
    ap.add_argument("--trainer-size", type=int, nargs=2, default=(4, 256), metavar=("LAYERS", "WIDTH"))
    ap.add_argument("--steps", type=int, default=4, help="--trainer: training steps per round")
    heap_option(ap)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.trainer:
        info = header({"transformers": transformers.__version__})
        write(args.json, {"machine": info, "rows": [trainer_row(args)]})
        return
    ref = hf_bert()
    ours = from_hf(ref).eval()
    preset = vspec.load_spec(ROOT / "specs" / "bert_base.py")  # the preset's body, with BertModel's pooler output
    assert ours.spec == attrs.evolve(preset, num_classes=0, head=vspec.FirstTokenHead(pooler="tanh"))
    assert ours.spec == spec_from_hf(ref.config)
    run = precisions(args.precision)
    info = header({"transformers": transformers.__version__, **apply_heap(args.heap)}, run)
    rows = compare(ref, ours, args.batch_size, args.seq_len, args.rounds, run, info["matmul GFLOP/s"])
    write(args.json, {"machine": info, "rows": rows})


if __name__ == "__main__":
    main()
