"""The hybrid-model comparison in docs/hybrid-models.md: naive vs static-split vs hybrid, BF16 vs FP8 KV.

Runs every (trace, model, KV dtype, allocator) on one H100-80GB with the derived KV pool, then the
prefix-caching variants on the Mooncake excerpt with an 8 GiB pool (memory binds there), and writes
reports/hybrid-models/results.csv and results.md. Usage: python benchmarks/hybrid_compare.py [OUT_DIR]
(about three minutes on two cores).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

from kvsim.options import config_from_options
from kvsim.runner import simulate
from kvsim.trace import load_trace

TRACES = {"long_docs": "traces/long_docs.jsonl", "mooncake": "traces/mooncake_excerpt.jsonl"}
MODELS = ["gemma-3-12b", "gpt-oss-20b"]
ALLOCATORS = ["naive", "static-split", "hybrid"]
SHARES = ["token_states", "recurrent_state", "reserved", "internal_frag", "page_padding", "external_frag", "free"]


def _sets():
    """(trace name, path, model, KV dtype, extra options, allocators)."""
    for tname, path in TRACES.items():
        for model in MODELS:
            for dtype in ("auto", "fp8"):
                yield tname, path, model, dtype, {}, ALLOCATORS
    for model in MODELS:
        yield (
            "mooncake 8 GiB",
            TRACES["mooncake"],
            model,
            "auto",
            {"kv_pool_gb": 8.0},
            [a + "+prefix" for a in ALLOCATORS],
        )
    # a mamba hybrid: recurrent state and page padding in the breakdown (51.6 B params: two GPUs)
    yield "long_docs", TRACES["long_docs"], "jamba-1.5-mini", "auto", {"tensor_parallel_size": 2}, ALLOCATORS


def run(out_dir: Path) -> pd.DataFrame:
    rows = []
    for tname, path, model, dtype, extra, allocators in _sets():
        reqs = load_trace(path).requests
        cfg = config_from_options(
            {"model": model, "gpu": "h100-80gb", "max_model_len": 131072, "kv_cache_dtype": dtype, **extra}
        )
        for alloc in allocators:
            t0 = time.perf_counter()
            s = simulate(reqs, cfg, alloc).summary
            rows.append(
                {
                    "trace": tname,
                    "model": model,
                    "kv": "fp8" if dtype == "fp8" else "bf16",
                    "allocator": alloc,
                    "finished": s["finished"],
                    "rejected": s["rejected"],
                    "tok_s": s["throughput_tok_s"],
                    "mean_batch": s["mean_batch"],
                    "max_batch": s["max_batch"],
                    "ttft_p50_s": s["ttft_p50_s"],
                    "tpot_p50_s": s["tpot_p50_s"],
                    "preemptions": s["preemptions"],
                    "prefix_hit": s.get("prefix_hit_rate_tokens", float("nan")),
                    **{c: s[f"mem_{c}"] for c in SHARES},
                    "window_freed_blocks": s.get("window_freed_blocks", 0),
                    "evictions": s.get("evictions", 0),
                    "pool_gib": s["pool_gib"],
                    "wall_s": time.perf_counter() - t0,
                }
            )
            print(
                f"{tname} {model} {dtype} {alloc}: {s['throughput_tok_s']:.1f} tok/s, max batch {s['max_batch']}",
                flush=True,
            )
    df = pd.DataFrame(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_dir / "results.csv", index=False)
    (out_dir / "results.md").write_text(markdown(df))
    return df


def markdown(df: pd.DataFrame) -> str:
    head = (
        "| trace | model | KV | allocator | done | out tok/s | batch mean | batch max | TTFT p50 s | TPOT p50 ms |"
        " preempt | hit % | token % | state % | resv % | int % | pad % | ext % | free % |\n"
    )
    # shares to two decimals: padding is small but not zero
    head += "|" + "---|" * 19 + "\n"
    body = ""
    for r in df.itertuples():
        body += (
            f"| {r.trace} | {r.model} | {r.kv} | {r.allocator} | {r.finished} | {r.tok_s:.1f} |"
            f" {r.mean_batch:.1f} | {r.max_batch} | {r.ttft_p50_s:.1f} | {1e3 * r.tpot_p50_s:.1f} |"
            f" {r.preemptions} | {'-' if r.prefix_hit != r.prefix_hit else f'{100 * r.prefix_hit:.1f}'} |"
            f" {100 * r.token_states:.1f} | {100 * r.recurrent_state:.1f} |"
            f" {100 * r.reserved:.1f} | {100 * r.internal_frag:.1f} | {100 * r.page_padding:.2f} |"
            f" {100 * r.external_frag:.1f} | {100 * r.free:.1f} |\n"
        )
    return head + body


if __name__ == "__main__":
    run(Path(sys.argv[1] if len(sys.argv) > 1 else "reports/hybrid-models"))
