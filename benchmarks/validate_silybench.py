"""kvsim against silybench's measured vLLM 0.30.0 runs of Qwen3-8B on one H100, bf16 and FP8, held out.

    python benchmarks/validate_silybench.py [--data benchmarks/data/silybench_qwen3_8b_h100.csv]

Data: silybench-data (github.com/tgarg01/silybench-data at 93e48873, data CC BY 4.0), `derived/csv/perf_points.csv`
and `runs/*/result.json` of its 2026-09-24 Qwen3-8B pipeline experiment (labelled there "pipeline validation, not
featured"; a GCP a3-highgpu-1g spot VM). Server: `vllm/vllm-openai:v0.30.0`, `vllm serve Qwen/Qwen3-8B
--max-model-len 16384 --gpu-memory-utilization 0.9` with `--dtype bfloat16`, or `--quantization fp8` (FP8 weights
quantized when loaded from the bf16 checkpoint: per-tensor scales, dynamic activation scales), vLLM's defaults
otherwise; its start-up log's KV cache size is in the table (`kv_cache_tokens`). Client: `vllm bench serve
--backend vllm --dataset-name random --random-range-ratio 0 --ignore-eos`, request rate inf,
`--max-concurrency` 1-128 (the source's bisection points and 256-512 left out), five shapes; each figure the
median of three repeats. The source publishes the median inter-token latency, p95 and p99 TPOT and TTFT, and
output tokens/s, which kvsim's figures are set against (its inter-token latency: engine/step_gaps.py). Nothing
in kvsim was fitted to these runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "silybench_qwen3_8b_h100.csv"


def server(r) -> dict:
    """kvsim's option values for run ``r``: the server's flags and the benchmark client's."""
    v = {
        "model": r.model,
        "gpu": r.gpu,
        "tensor_parallel_size": int(r.tp),
        "vllm_version": str(r.vllm),
        "max_model_len": int(r.max_model_len),
        "gpu_memory_utilization": float(r.gpu_memory_utilization),
        "bench": "vllm-random",
        "dataset_name": "random",
        "random_input_len": int(r.input_len),
        "random_output_len": int(r.output_len),
        "random_range_ratio": 0.0,
        "ignore_eos": True,
        "num_prompts": int(r.num_prompts),
        "max_concurrency": int(r.max_concurrency),
        "endpoint": "completions",
    }
    if r.precision == "fp8":
        v["quantization"] = "fp8"
    return v


def replay(r) -> dict:
    """kvsim's figures for run ``r``, as the source reports them (ms, tokens/s), and its KV cache tokens."""
    import numpy as np

    from kvsim.options import config_from_options
    from kvsim.runner import served_spec, simulate
    from kvsim.trace.bench_load import from_options

    values = server(r)
    cfg = config_from_options(values)
    out = simulate(from_options(values).requests(), cfg, served_spec(cfg))
    df = out.requests
    done = df[df.status == "finished"]
    tpot, ttft = done.tpot_s.dropna().to_numpy() * 1e3, done.ttft_s.to_numpy() * 1e3
    return {
        "itl_median_ms": float(out.summary["itl_p50_s"]) * 1e3,
        "tpot_p95_ms": float(np.percentile(tpot, 95)),
        "ttft_p95_ms": float(np.percentile(ttft, 95)),
        "output_tok_s": float(out.summary["throughput_tok_s"]),
        "kv_cache_tokens": int(out.summary["pool_tokens"]) // cfg.block_size * cfg.block_size,
    }


def main() -> None:
    import pandas as pd

    from kvsim.commands.validate import add_ratios, ratio_table, save_summary, save_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation-silybench"))
    a = ap.parse_args()
    runs = pd.read_csv(a.data)
    rows = []
    for r in runs.itertuples():
        got = replay(r)
        measured = {k: float(getattr(r, k)) for k in ("itl_median_ms", "tpot_p95_ms", "ttft_p95_ms", "output_tok_s")}
        row = {
            "precision": r.precision,
            "case": f"{r.input_len}/{r.output_len}",
            "clients": int(r.max_concurrency),
            "kv_tokens_logged": int(r.kv_cache_tokens),
            "kv_tokens_kvsim": got["kv_cache_tokens"],
        }
        rows.append(add_ratios(row, measured, got))
        print(
            f"{r.precision} {row['case']} x{row['clients']}: ITL {row['itl_median_ms_ratio']:.2f}, "
            f"TPOT p95 {row['tpot_p95_ms_ratio']:.2f}, TTFT p95 {row['ttft_p95_ms_ratio']:.2f}, "
            f"tok/s {row['output_tok_s_ratio']:.2f}"
        )
    out = Path(a.out)
    table = save_table(rows, out)
    groups = [("all", table)]
    groups += [(f"{p}, all clients", table[table.precision == p]) for p in ("bf16", "fp8")]
    groups += [(f"{p}, 1-16 clients", table[(table.precision == p) & (table.clients <= 16)]) for p in ("bf16", "fp8")]
    groups += [(f"{p}, 32-128 clients", table[(table.precision == p) & (table.clients >= 32)]) for p in ("bf16", "fp8")]
    lines = [
        "# kvsim against silybench's vLLM 0.30.0 runs of Qwen3-8B on one H100 (held out)",
        "",
        "Generated by `python benchmarks/validate_silybench.py` (source, server and client in its docstring).",
        "Ratios are kvsim / measured: median [p10, p90] (median |error|) over the runs.",
        "",
        *ratio_table(groups, ("itl_median_ms", "tpot_p95_ms", "ttft_p95_ms", "output_tok_s")),
    ]
    kv = table.drop_duplicates("precision")
    lines += [
        "",
        "KV cache at start-up (tokens): "
        + "; ".join(
            f"{r.precision}: logged {r.kv_tokens_logged:,}, kvsim {r.kv_tokens_kvsim:,} ({r.kv_tokens_kvsim / r.kv_tokens_logged:.3f})"
            for r in kv.itertuples()
        ),
        "",
        "| precision | case | clients | ITL ms measured | ratio | TPOT p95 ms measured | ratio | TTFT p95 ms measured | ratio | out tok/s measured | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table.itertuples():
        lines.append(
            f"| {r.precision} | {r.case} | {r.clients} | {r.itl_median_ms_measured:.2f} | {r.itl_median_ms_ratio:.2f} | "
            f"{r.tpot_p95_ms_measured:.2f} | {r.tpot_p95_ms_ratio:.2f} | {r.ttft_p95_ms_measured:.1f} | "
            f"{r.ttft_p95_ms_ratio:.2f} | {r.output_tok_s_measured:.0f} | {r.output_tok_s_ratio:.2f} |"
        )
    save_summary(out, lines)


if __name__ == "__main__":
    main()
