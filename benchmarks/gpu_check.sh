#!/usr/bin/env bash
# The one prepared GPU run (issue 35): at most 8 minutes on an H100 / H200, everything written into $OUT.
#   1. the CUDA paths against the CPU (benchmarks/gpu_checks.py: every family's forward and training step);
#   2. tools/train.py for 50 steps on CUDA, on synthetic 224 px data;
#   3. torchrun --nproc_per_node 1 on CUDA (NCCL);
#   4. a checkpoint written on CUDA resumed on the CPU;
#   5. the whole loop against the bare training step (benchmarks/train_overhead.py --device cuda);
#   6. benchmarks/gpu.py: every case eager, deit_small / swin_tiny / bert_base compiled too, MSF's attention at
#      3136 tokens; then its README table (docs/gpu/<device>.json is OUT/gpu.json, committed).
# Run from the repository root: OUT=/path bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
PY=${PY:-python}
mkdir -p "$OUT"
step() { echo "== $*" | tee -a "$OUT/steps.log"; }
TRAIN=(tools/train.py specs/deit_tiny.py --set num_classes=10 --data synthetic --synthetic-size 2048 --batch-size 64
       --recipe none)

step "CUDA paths against the CPU"
$PY benchmarks/gpu_checks.py --device cuda --out "$OUT" 2>&1 | tee "$OUT/checks.log"

step "train loop, 50 steps on CUDA"
$PY "${TRAIN[@]}" --epochs 1 --max-steps 50 --device cuda --out "$OUT/loop" --overwrite 2>&1 | tail -5 | tee "$OUT/loop.log"

step "torchrun, one GPU"
timeout 300 torchrun --standalone --nproc_per_node 1 "${TRAIN[@]}" --epochs 1 --max-steps 10 --device cuda \
    --out "$OUT/torchrun" --overwrite 2>&1 | tail -5 | tee "$OUT/torchrun.log"

step "a CUDA checkpoint resumed on the CPU"
$PY tools/train.py specs/deit_tiny.py --set depth=2 --set img_size=[32,32] --set num_classes=10 --data synthetic \
    --synthetic-size 64 --batch-size 16 --recipe none --epochs 1 --device cuda --out "$OUT/resume" --overwrite \
    2>&1 | tail -2 | tee "$OUT/resume.log"
$PY tools/train.py specs/deit_tiny.py --set depth=2 --set img_size=[32,32] --set num_classes=10 --data synthetic \
    --synthetic-size 64 --batch-size 16 --recipe none --epochs 2 --device cpu --out "$OUT/resume" --resume \
    2>&1 | tail -2 | tee -a "$OUT/resume.log"

step "the whole loop against the bare step"
$PY benchmarks/train_overhead.py --device cuda --steps 30 --batch-size 128 --json "$OUT/train_overhead.json" \
    2>&1 | tee "$OUT/train_overhead.log"

step "vspec against timm, the released formulations and Hugging Face"
$PY benchmarks/gpu.py --rounds 5 --compile-cases deit_small,swin_tiny,bert_base --out "$OUT" 2>&1 | tee "$OUT/gpu.log"
$PY benchmarks/gpu.py --table "$OUT/gpu.json" | tee "$OUT/table.md"
step "done"
