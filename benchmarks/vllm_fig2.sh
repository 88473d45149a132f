#!/usr/bin/env bash
# Reproduce the set-up of the vLLM paper's Fig. 2 (SOSP'23): OPT-13B on an A100-40GB with 12 GB of KV
# cache, max_seq_len 2048, ShareGPT-like lengths (input mean 161, output mean 338 tokens), under a load
# that keeps the cache full. Compare token-state shares with the paper's 20.4% (Orca Max), 26.8% (Pow2),
# 38.2% (Oracle) and 96.3% (vLLM).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-reports/vllm-fig2}
kvsim trace generate -o /tmp/kvsim-sharegpt-like.jsonl -n 2000 --rate 20 --seed 3 \
    --prompt-mean 161 --output-mean 338 --max-total 2048
kvsim compare --trace /tmp/kvsim-sharegpt-like.jsonl --model opt-13b --gpu a100-40gb --kv-pool-gb 12 \
    --max-seq-len 2048 --no-enable-prefix-caching --out "$OUT"  # the paper's vLLM had no prefix cache
