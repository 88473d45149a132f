"""kvsim against llm-d's measured vLLM runs of Llama-4-Scout in FP8 on four H100s (held out: nothing fitted to them).

    python benchmarks/validate_llmd.py [--out reports/validation-llmd]

Data (`benchmarks/data/llmd_llama4_scout_fp8_h100.csv.gz`, benchmarks/data/README.md): llm-d-benchmark's
"exp-4" baseline (github.com/llm-d/llm-d-benchmark at 8eb9ac18, Apache-2.0, `collected/data/openshift/exp-4/
vllm-llama4-tp4/`, removed from the repository later): 28 runs of LMCache's LMBench ShareGPT workload, 252
requests each at a steady 4-100 requests/s, against `vllm serve RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic
--gpu-memory-utilization 0.95 --max-model-len 10000 --tensor-parallel-size 4` on four H100-80GB-HBM3
(`vllm/vllm-openai:latest` pulled in May 2025: vLLM 0.8.5, its V1 engine with prefix caching and chunked
prefill on). The client recorded every request's send time, prompt and output tokens, TTFT and the time from
the first token to the last.

Replay: each request as recorded (send time, prompt and output tokens). Every run sent the same 252 prompts in
the same order, and the runs followed each other on one server 30-80 s apart, in two sessions ten hours apart
(4, 8, ..., 36 requests/s, then 5, 10, ..., 100), so a run's prompts were in the prefix cache from the run before
(the 280,000 prompt tokens fit in the pool many times over): the replay runs a session's runs back to back on
one engine, each prompt the same cached blocks every time it is sent (its `hash_ids`), and the first run of a
session starts with an empty cache (what the server held before it is not recorded). TPOT per request as
vLLM's client computes it: (time to the last token - TTFT) / (output tokens - 1); output tokens/s: a run's
output tokens over its span from the first send to the last token. Predicted / measured, median [p10, p90]
over runs (median |error|), in reports/validation-llmd/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "benchmarks" / "data" / "llmd_llama4_scout_fp8_h100.csv.gz"
SERVER = {
    "model": "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
    "gpu": "h100-80gb",
    "tensor_parallel_size": 4,
    "gpu_memory_utilization": 0.95,
    "max_model_len": 10000,
    "vllm_version": "0.8.5",
    # LMBench's client (LMCache's multi-round QA scripts) sends chat completions, whose template vLLM 0.8.5 parsed
    # again for every request (kvsim/chat_template.py)
    "endpoint": "chat",
}
BLOCK = 16  # tokens per hash id: vLLM's block, so a resent prompt finds every full block of itself


def load(path: Path = DATA):
    """The per-request table: session, qps, prompt (index, the same prompt in every run), launch_s (from the
    session's first send), prompt_tokens, generation_tokens, ttft_s, generation_time_s."""
    import pandas as pd

    return pd.read_csv(path)


def session_requests(d) -> list:
    """kvsim requests of one session's runs in send order, ids 'qps/prompt', each prompt's blocks named alike."""
    from kvsim.trace.request import Request

    d = d.sort_values("launch_s", kind="stable")
    return [
        Request(
            f"{r.qps:g}/{r.prompt}",
            float(r.launch_s),
            int(r.prompt_tokens),
            int(r.generation_tokens),
            hash_ids=tuple(int(r.prompt) * 100_000 + j for j in range(max(1, r.prompt_tokens // BLOCK))),
            hash_block_tokens=BLOCK,
            line=i + 1,
        )
        for i, r in enumerate(d.itertuples())
    ]


def run_metrics(ttft, tpot, tokens, first_send: float, last_token: float) -> dict:
    """A run's summary as the client's numbers give it (seconds; tokens/s)."""
    import numpy as np

    tpot = tpot[np.isfinite(tpot)]
    return {
        "ttft_p50": float(np.median(ttft)),
        "ttft_mean": float(np.mean(ttft)),
        "tpot_p50": float(np.median(tpot)),
        "tpot_mean": float(np.mean(tpot)),
        "out_tok_s": float(tokens.sum() / (last_token - first_send)),
    }


def measured(run) -> dict:
    """The client's summary of one run (a frame of its requests)."""
    import numpy as np

    g = run.generation_tokens.to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(g > 1, run.generation_time_s / (g - 1), np.nan)
    end = (run.launch_s + run.ttft_s + run.generation_time_s).max()
    return run_metrics(run.ttft_s.to_numpy(), tpot, g, run.launch_s.min(), end)


def predicted(run, out) -> dict:
    """kvsim's summary of the same run from a session's replay ``out`` (runner.simulate's output)."""

    q = out.requests.set_index("id").loc[[f"{r.qps:g}/{r.prompt}" for r in run.itertuples()]]
    if (q.status != "finished").any():
        raise SystemExit(f"run at {run.qps.iloc[0]:g} req/s: {int((q.status != 'finished').sum())} not finished")
    return run_metrics(
        q.ttft_s.to_numpy(),
        q.tpot_s.to_numpy(float),
        q.output_tokens.to_numpy(float),
        run.launch_s.min(),
        q.finish_s.max(),
    )


def replay(d) -> list[dict]:
    """One row per run: measured, predicted and their ratios, the run's session and whether it opened it."""
    from kvsim.commands.validate import add_ratios, ratio_line
    from kvsim.options import config_from_options
    from kvsim.runner import served_spec, simulate

    cfg = config_from_options(SERVER)
    rows = []
    for session, sess in d.groupby("session", sort=True):
        out = simulate(session_requests(sess), cfg, served_spec(cfg))
        first = sess.loc[sess.launch_s.idxmin(), "qps"]
        for qps, run in sess.groupby("qps", sort=False):
            row = {"session": int(session), "qps": float(qps), "cache": "empty" if qps == first else "warm"}
            rows.append(add_ratios(row, measured(run), predicted(run, out)))
            print(f"session {session}, {qps:g} req/s ({row['cache']} cache): {ratio_line(row)}", flush=True)
    return rows


def main() -> None:
    from kvsim.commands.validate import SUMMARY_METRICS, ratio_table, save_summary, save_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation-llmd"))
    a = ap.parse_args()
    out = Path(a.out)
    t = save_table(replay(load()), out)  # runs in the order they were sent: session, then rate
    warm = t[t.cache == "warm"]
    groups = [("all 28 runs", t), ("warm cache (26)", warm)]
    groups += [
        (f"warm, {lo:g}-{hi:g} req/s", warm[(warm.qps >= lo) & (warm.qps <= hi)])
        for lo, hi in ((8, 20), (24, 45), (50, 100))
    ]
    groups += [("empty cache: first run of a session (2)", t[t.cache == "empty"])]
    lines = [
        "# kvsim against llm-d's vLLM runs of Llama-4-Scout FP8 on 4 H100s (held out)",
        "",
        "28 runs of 252 ShareGPT requests at a steady 4-100 requests/s against vLLM 0.8.5 serving "
        "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic at TP4 on H100-80GB-HBM3 (llm-d-benchmark exp-4, "
        "Apache-2.0), replayed request by request, a session's runs back to back so that each run finds its prompts "
        "cached by the run before (as the server did). Nothing was fitted to them. Predicted / measured, median "
        "[p10, p90] over runs (median |error|). Command: `python benchmarks/validate_llmd.py` (its docstring has "
        "the set-up).",
        "",
    ]
    lines += ratio_table(groups, SUMMARY_METRICS)
    lines += [
        "",
        "| session | req/s | cache | TTFT p50 ms measured | ratio | TPOT p50 ms measured | ratio | out tok/s measured | ratio |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in t.itertuples():
        lines.append(
            f"| {r.session} | {r.qps:g} | {r.cache} | {1e3 * r.ttft_p50_measured:.1f} | {r.ttft_p50_ratio:.2f} | "
            f"{1e3 * r.tpot_p50_measured:.2f} | {r.tpot_p50_ratio:.2f} | {r.out_tok_s_measured:.0f} | "
            f"{r.out_tok_s_ratio:.2f} |"
        )
    save_summary(out, lines)


if __name__ == "__main__":
    main()
