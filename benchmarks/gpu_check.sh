#!/usr/bin/env bash
# One command for a CUDA machine (designed for one H200, under 8 minutes): the kernel tests natively,
# the decode bench sweep with the issue's targets checked, a replay of a recorded simulation on the
# kernels, and a calibration fitted from both. Everything lands in one folder (at most 8 files):
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]        # default: $OUT if set, else reports/gpu-check
#
# Then commit OUT_DIR's calib.json as kvsim/latency/calibrations/h200-141gb.json (it then replaces the
# calibration derived from H100 profiles) and the rest under reports/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-reports/gpu-check}}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
say() { echo "== $*" | tee -a "$LOG"; }
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

say "device"; { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"; } 2>&1 | tee -a "$LOG"
# kvsim itself (no dependencies fetched: the machine has torch/triton/pandas; simpy may be missing)
$PY -m pip install -q --no-deps --no-build-isolation -e . >>"$LOG" 2>&1 || say "pip install -e . failed; using PYTHONPATH"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
KV="$PY -m kvsim.cli"

say "kernel tests (native)"
HYPOTHESIS_PROFILE=gpu timeout 200 $PY -m pytest -q -p no:cacheprovider tests/test_kernels.py 2>&1 | tail -n 15 | tee "$OUT/kernel-tests.txt" | tee -a "$LOG"

say "decode bench: batch x context at block 16, bf16, Llama-3-8B heads (32 q / 8 kv / 128)"
timeout 150 $KV kernels bench --device cuda --batch 1,8,32,64,128 --context 512,1024,2048,4096,8192 --block-size 16 \
    --prefill 128:0,256:0,512:0,1024:0,2048:0,512:2048,256:4096,2048:2048 \
    --dtype bf16 --gpu h200-141gb -o "$OUT/bench.csv" 2>&1 | tee -a "$LOG"
say "decode bench: block sizes at batch 64, context 4096"
timeout 90 $KV kernels bench --device cuda --batch 64 --context 4096 --block-size 8,16,32,64,128 \
    --dtype bf16 --gpu h200-141gb -o "$OUT/bench-blocks.csv" 2>&1 | tee -a "$LOG"

say "targets: batch 64, context 4096, block 16, bf16 >= 70% of peak HBM bandwidth and <= 1.3x SDPA"
$PY - "$OUT/bench.csv" <<'PYEOF' 2>&1 | tee "$OUT/targets.txt" | tee -a "$LOG"
import sys, pandas as pd
df = pd.read_csv(sys.argv[1])
row = df[(df.kind == "decode") & (df.num_seqs == 64) & (df.max_context == 4096) & (df.block_size == 16)].iloc[0]
bw_ok, sdpa_ok = row.frac_of_peak >= 0.70, row.ratio_vs_sdpa <= 1.3
print(f"achieved {row.achieved_bw / 1e12:.2f} TB/s = {100 * row.frac_of_peak:.1f}% of peak: {'PASS' if bw_ok else 'FAIL'}")
print(f"kernel {1e6 * row.time_s:.1f} us vs SDPA {1e6 * row.sdpa_time_s:.1f} us = {row.ratio_vs_sdpa:.2f}x: {'PASS' if sdpa_ok else 'FAIL'}")
PYEOF

if $PY -c "import simpy" 2>/dev/null; then
  say "record a simulated run (chat trace, Llama-3-8B on H200) and replay it on the kernels"
  timeout 120 $KV run --trace traces/chat.jsonl --allocator paged:16 --model llama-3-8b --gpu h200-141gb \
      --record-batches "$OUT/record.jsonl.gz" --no-plots --out /tmp/kvsim-gpu-run >>"$LOG" 2>&1
  timeout 150 $KV kernels replay "$OUT/record.jsonl.gz" --device cuda --sample 40 --max-pool-gib 40 \
      -o "$OUT/replay.csv" 2>&1 | tee -a "$LOG"
  MEAS="$OUT/bench.csv $OUT/bench-blocks.csv $OUT/replay.csv"
else
  say "simpy is not installed here: skipping record + replay (carry its wheel to include them)"
  MEAS="$OUT/bench.csv $OUT/bench-blocks.csv"
fi

say "calibration (decode and prefill attention from the kernel timings; dense ops and all-reduce from the shipped H100 profile fit)"
$KV calibrate $MEAS --gpu h200-141gb -o "$OUT/calib.json" 2>&1 | tee -a "$LOG"
say "done: $(ls "$OUT" | tr '\n' ' ')"
