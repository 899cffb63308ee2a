#!/usr/bin/env bash
# The one prepared GPU run (issue 35): one call of at most 8 minutes on an H100 / H200, everything written into $OUT.
#   1. the CUDA paths against the CPU (benchmarks/gpu_checks.py: every family's forward and training step, LV-ViT's
#      MixToken and token-labeling step among them);
#   2. tools/train.py for 50 steps on CUDA, on synthetic 224 px data;
#   3. torchrun --nproc_per_node 1 on CUDA (NCCL);
#   4. a checkpoint written on CUDA resumed on the CPU;
#   5. the whole loop against the bare training step (python -m benchmarks.train_overhead --device cuda), synthetic data
#      and generated JPEGs, images normalised on the device (the CUDA default), then on the host (synthetic);
#   6. the device pipeline against the CPU (benchmarks/decode_check.py: nvJPEG's pixels against Pillow's, the
#      training and validation pipelines against themselves on the CPU), then benchmarks/loader.py (issue 47): the
#      bare step, timm's loader, then the whole loop decoding on the host and on the device (ahead in the main
#      process, then in the workers), on 2,560 generated ImageNet-shaped JPEGs, each path under 60 s, the JSON
#      (OUT/loader.json) written after each (issue 55: cut at its limit, it kept nothing); then (loader_hf, issue 61)
#      each data source's host path alone on 1,280 of them, two rounds: the folder, the shards, a save_to_disk
#      folder (--data hf) and parquet files streamed (--data hf --streaming), OUT/loader_hf.json;
#   7. benchmarks/loop_defaults.py (issue 55): the bare step with AdamW's foreach / fused kernel, eager / compiled,
#      and its MFU; the whole loop with and without the prefetcher, each AdamW kernel, compiled, on synthetic data
#      and JPEGs decoded on the device (by the main process or the workers: the first batch's seconds) and on the
#      host, each row under its own limit, OUT/loop_defaults.json written after each (DEFAULTS_ARGS: --groups ...);
#   8. benchmarks/gpu.py: every case eager, MSF's attention at 3136 tokens, then deit_small / swin_tiny's training
#      step compiled (COMPILE_CASES, COMPILE_MODES); then its docs/speed.md table (OUT/gpu.json is what
#      docs/gpu/<device>.json commits).
# Each step runs under a time limit and the next runs whatever it returned; BUDGET (seconds, default 450) bounds the
# whole run, the last step (the longest) taking what is left. OUT/steps.log says how each step ended; the exit code
# is the number of steps that failed or were cut short. STEPS (comma-separated names) runs only those steps.
# Run from the repository root: OUT=/path PY=python3 bash benchmarks/gpu_check.sh
# The lent machines' image lacks some of vspec's pure-Python dependencies: download their wheels here into the
# git-ignored .whl (pip download --no-deps attrs cattrs fvcore iopath yacs termcolor tomli_w typing_extensions
# tqdm tabulate webdataset braceexpand), carry .whl, and install them first there: pip install --no-index --no-deps
# --target /tmp/site .whl/*.whl, then PYTHONPATH=/tmp/site.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
PY=${PY:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's vspec, installed or not
BUDGET=${BUDGET:-450}
COMPILE_CASES=${COMPILE_CASES:-deit_small,swin_tiny}
COMPILE_MODES=${COMPILE_MODES:-train}
DEVICE=${DEVICE:-cuda}  # cpu: a dry run of the script itself
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
failed=0
# step NAME LIMIT_S COMMAND...: runs COMMAND under min(LIMIT_S, the budget left), its output into OUT/NAME.log
step() {
    local name=$1 limit=$2 left=$((BUDGET - SECONDS)); shift 2
    [[ -z ${STEPS:-} || ",$STEPS," == *",$name,"* ]] || return 0
    ((limit > left)) && limit=$left
    if ((limit < 10)); then
        echo "== $name: skipped (budget spent)" | tee -a "$OUT/steps.log"; failed=$((failed + 1)); return
    fi
    local t0=$SECONDS rc=0
    echo "== $name (limit ${limit} s)"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
    tail -n 25 "$OUT/$name.log"
    echo "== $name: rc $rc in $((SECONDS - t0)) s" | tee -a "$OUT/steps.log"
    ((rc == 0)) || failed=$((failed + 1))
}
TRAIN=(tools/train.py specs/deit_tiny.py --set num_classes=10 --data synthetic --synthetic-size 3200 --batch-size 64
       --recipe none --epochs 1)
SMALL=(tools/train.py specs/deit_tiny.py --set depth=2 --set img_size=[32,32] --set num_classes=10 --data synthetic
       --synthetic-size 64 --batch-size 16 --recipe none)

step env 30 bash -c "nvidia-smi; $PY -c 'import torch, timm, transformers, vspec; print(torch.__version__, \
torch.version.cuda, torch.cuda.is_available(), timm.__version__, transformers.__version__)'"
step checks 90 $PY -m benchmarks.gpu_checks --device $DEVICE --out "$OUT"
step loop 60 $PY "${TRAIN[@]}" --max-steps 50 --device $DEVICE --out "$OUT/runs/loop" --overwrite
step torchrun 60 $PY -m torch.distributed.run --standalone --nproc_per_node 1 "${TRAIN[@]}" --max-steps 10 \
    --device $DEVICE --out "$OUT/runs/torchrun" --overwrite
step resume 60 bash -c "set -f; $PY ${SMALL[*]} --epochs 1 --device $DEVICE --out $OUT/runs/resume --overwrite && \
$PY ${SMALL[*]} --epochs 2 --device cpu --out $OUT/runs/resume --resume"
step overhead 90 $PY -m benchmarks.train_overhead --device $DEVICE --steps 30 --batch-size 128 --data both \
    --json "$OUT/train_overhead.json"
step overhead_host 60 $PY -m benchmarks.train_overhead --device $DEVICE --steps 30 --batch-size 128 --data synthetic \
    --normalise-on host --json "$OUT/train_overhead_host.json"
step decode 60 $PY -m benchmarks.decode_check --device $DEVICE --out "$OUT"
step loader 180 $PY -m benchmarks.loader --device $DEVICE --images 2560 --path-limit 60 --ahead main,workers \
    ${LOADER_ARGS:-} --json "$OUT/loader.json"
step loader_hf 60 $PY -m benchmarks.loader --device $DEVICE --images 1280 --path-limit 20 --paths host --no-timm \
    --no-loop --rounds 2 --sources folder,shards,hf,hf_stream --json "$OUT/loader_hf.json"
step defaults 300 $PY -m benchmarks.loop_defaults --device $DEVICE --limit 120 ${DEFAULTS_ARGS:-} --out "$OUT"
step bench 600 $PY -m benchmarks.gpu --rounds 5 --compile-cases "$COMPILE_CASES" --compile-modes "$COMPILE_MODES" \
    --device "$DEVICE" ${BENCH_ARGS:-} --out "$OUT"
[ -f "$OUT/gpu.json" ] && $PY -m benchmarks.gpu --table "$OUT/gpu.json" | tee "$OUT/table.md"
rm -rf "$OUT/runs"  # checkpoints: what came back is the logs
echo "== done: $failed step(s) failed or cut short, $SECONDS s" | tee -a "$OUT/steps.log"
exit $failed
