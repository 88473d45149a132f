#!/usr/bin/env bash
# Regenerate the example outputs committed under reports/ (the README quotes their tables). The large
# per-request and timeline tables are left out of the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
export COLUMNS=${COLUMNS:-100}
# kvsim replaces only files it wrote (each --out folder's .kvsim-files lists them, and is not committed): start
# the folders the kvsim commands below write from empty
# (capacity-chat keeps its hand-written README.md)
rm -rf reports/compare-chat reports/prefix-mooncake reports/vllm-fig2 reports/hybrid-models/gemma-3-long-docs
find reports/capacity-chat -mindepth 1 ! -name README.md -delete
kvsim compare --trace traces/chat.jsonl --out reports/compare-chat
kvsim compare --trace traces/mooncake_excerpt.jsonl --model qwen2.5-7b --max-model-len 131072 --gpu h200-141gb \
    --allocators paged:16,paged:16+prefix,radix --out reports/prefix-mooncake
kvsim plan --trace traces/chat.jsonl --gpus a100-40gb:1.5,h100-80gb:4.0 --allocators max,pow2,oracle,paged:16 \
    --slo ttft_p99=2s,tpot_p99=100ms --target-rate 20 --out reports/capacity-chat
bash benchmarks/vllm_fig2.sh reports/vllm-fig2
python benchmarks/hybrid_compare.py reports/hybrid-models
kvsim compare --trace traces/long_docs.jsonl --model gemma-3-12b --gpu h100-80gb --max-model-len 131072 \
    --out reports/hybrid-models/gemma-3-long-docs
rm -f reports/*/requests.csv reports/*/memory_timeline.csv reports/*/.kvsim-files reports/*/*/.kvsim-files
