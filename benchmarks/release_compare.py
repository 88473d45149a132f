"""How much the vLLM release changes kvsim's step times (``--vllm-version``): one decode step (64 sequences
at 2,048 tokens) and one 4,096-token prefill per model, on each release's measured kernels, as a ratio to
the newest release's time (kvsim's default).

    python benchmarks/release_compare.py [--gpus h100-80gb,b200]

Prints a markdown table (docs/latency.md): the newest release's time, the others' as a ratio to it. The GPU
time only (--cpu-overhead none, no API server).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvsim.latency import build_latency  # noqa: E402
from kvsim.latency.base import StepShape  # noqa: E402
from kvsim.releases import release_key, vllm_releases  # noqa: E402
from kvsim.options import config_from_args  # noqa: E402

MODELS = [
    ("Llama-3.1-8B", ["--model", "llama-3.1-8b"]),
    ("Llama-3.3-70B FP8, TP2", ["--model", "llama-3.3-70b", "--quantization", "fp8", "-tp", "2"]),
    ("Qwen3-235B-A22B, TP8", ["--model", "qwen3-235b-a22b", "-tp", "8"]),
    ("DeepSeek-V3 (FP8 blocks, MLA), TP8", ["--model", "deepseek-v3", "-tp", "8"]),
]
SHAPES = [("decode 64 x 2k", StepShape.decode(64, 64 * 2049)), ("prefill 4k", StepShape.of([(4096, 0)]))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="h100-80gb,b200")
    a = ap.parse_args()
    gpus = a.gpus.split(",")
    index = vllm_releases()
    rels = {g: sorted(index[g], key=release_key) for g in gpus}
    cols = [(g, r) for g in gpus for r in rels[g]]
    print("| model, step | " + " | ".join(f"{g} {r}" for g, r in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    times = {}
    for g, r in cols:
        for m, args in MODELS:
            cfg = config_from_args(
                ["--gpu", g, "--cpu-overhead", "none", "--frontend", "none", *args, "--vllm-version", r]
            )
            lat = build_latency(cfg)
            for s, shape in SHAPES:
                times[(g, r, m, s)] = lat.step_time(shape)
    for m, _ in MODELS:
        for s, _ in SHAPES:
            cells = []
            for g, r in cols:
                t, newest = times[(g, r, m, s)], times[(g, rels[g][-1], m, s)]
                cells.append(f"{1000 * t:.1f} ms" if r == rels[g][-1] else f"{t / newest:.2f}")
            print(f"| {m}, {s} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
