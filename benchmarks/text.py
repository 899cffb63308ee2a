"""vspec's bert_base body against Hugging Face's BertModel (SDPA attention), the same weights, on the CPU.

A padded batch (default 16 sequences of random lengths up to 128 tokens, right-padded to 128, HF's
attention_mask) runs forward (eval, no grad) and forward+backward (train mode, dropout on, the pooled output's
sum as the loss) through both; within each round the two run back to back, order alternating. Prints
sequences/s (medians over rounds) and the ratio vspec / HF in speed (> 1: vspec is faster), the median of the
rounds' ratios with its range.

    python -m benchmarks.text [--batch-size 16] [--seq-len 128] [--rounds 15] [--threads N] [--json FILE]
"""

import argparse
import platform
import statistics
from pathlib import Path

import attrs
import torch
import transformers

import vspec
from vspec.convert.hf import from_hf, spec_from_hf

from .common import ROOT, machine, race
from .models import row, write  # the JSON rows of benchmarks/models.py (its --table prints both)


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


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON (docs/cpu/)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ref = hf_bert()
    ours = from_hf(ref).eval()
    preset = vspec.load_spec(ROOT / "specs" / "bert_base.py")  # the preset's body, with BertModel's pooler output
    assert ours.spec == attrs.evolve(preset, num_classes=0, head=vspec.FirstTokenHead(pooler="tanh"))
    assert ours.spec == spec_from_hf(ref.config)
    inputs = batch(args.batch_size, args.seq_len, ref.config.vocab_size)
    with torch.no_grad():
        diff = (pooled(ref, inputs) - pooled(ours, inputs)).abs().max().item()
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, torch "
          f"{torch.__version__}, transformers {transformers.__version__}, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}")
    print(f"bert_base vs HF BertModel (attention: {ref.config._attn_implementation}): same weights, max |pooled "
          f"diff| {diff:.1e}; batch {args.batch_size} x {args.seq_len} tokens, "
          f"{inputs['attention_mask'].float().mean():.0%} real, {args.rounds} rounds")

    def forward(model, x):
        with torch.no_grad():
            pooled(model, x)

    def forward_backward(model, x):
        model.zero_grad(set_to_none=True)
        pooled(model, x).sum().backward()

    rows = []
    real = f"{args.batch_size} x {args.seq_len} tokens, {inputs['attention_mask'].float().mean():.0%} real"
    for label, step, train in (("forward", forward, False), ("forward+backward", forward_backward, True)):
        for m in (ref, ours):
            m.train(train)
        t = race({"hf": ref, "vspec": ours}, step, inputs, args.rounds)
        per_s = {k: args.batch_size / statistics.median(v) for k, v in t.items()}
        ratios = sorted(a / b for a, b in zip(t["hf"], t["vspec"]))  # per round: vspec speed / HF speed
        print(f"  {label:17s} HF {per_s['hf']:6.2f} seq/s  vspec {per_s['vspec']:6.2f} seq/s  ratio vspec/HF "
              f"{statistics.median(ratios):.3f} (median of rounds; range {ratios[0]:.3f}-{ratios[-1]:.3f})")
        rows.append(row("bert_base", "HF BertModel (SDPA)", real, label, "seq/s", per_s["hf"], per_s["vspec"], ratios))
    write(args.json, {"machine": machine({"transformers": transformers.__version__}), "rows": rows})


if __name__ == "__main__":
    main()
