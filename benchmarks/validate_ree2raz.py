"""Replay ree2raz/inference-bench's vLLM runs (held out, 2026-12-07): Qwen2.5-7B-Instruct (bf16, AWQ) and
Qwen3-30B-A3B (bf16, AWQ) on one L4, A100-40GB or A100-80GB, vLLM 0.8.5 and 0.20.1-0.20.2, 1-64 clients.

    python benchmarks/validate_ree2raz.py [--out reports/validation-ree2raz] [--jobs 2]

The harness (its bench_lib.py, read at 6219100): one Modal container runs `vllm serve` and an asyncio client of
C clients (a semaphore over all requests: a closed loop) against /v1/chat/completions, streaming, temperature
0, `max_tokens` only (every short and long answer ran to it). It first sends the measured prompts' first 2C as a
warm-up, then the measured set, in order: 100 short prompts (49 distinct questions, 37-46 tokens with Qwen2.5's
template and its default system prompt, 16-25 with Qwen3's, 128 tokens out), 100 long ones (10 distinct RAG
prompts of 1,437-1,497 tokens, each sent 10 times, 512 out: with vLLM's prefix cache on, TTFT mostly measures
hits) or the first 10 reasoning prompts (Qwen3-8B, thousands of thinking tokens: the run's mean). TTFT: from
sending to the first content token; TPOT: (E2E - TTFT) / (tokens - 1); medians over the measured requests.

Here each run is one kvsim trace: the warm-up then the measured prompts, every one sent at t=0 behind
`--max-concurrency C` (its clients), each prompt its template's token count with `hash_ids` per 16 tokens
(identical prompts identical, Qwen2.5's system prompt's first block shared), the run's vLLM flags
(--max-num-seqs, --gpu-memory-utilization 0.9, --max-model-len, --enforce-eager, --quantization), the chat
endpoint; kvsim's medians over the measured requests. Writes summary.md and validate.csv under --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
BLOCK = 16  # tokens per hash id: vLLM's KV block


def trace_rows(prompts: pd.DataFrame, run: pd.Series) -> list[dict]:
    """The run's requests in the order the harness sends them: the warm-up (the first 2C measured prompts) then
    the measured ones."""
    regime = prompts[prompts["regime"] == run["workload"]].sort_values("index")
    measured = regime.head(10) if run["workload"] == "reasoning" else regime
    qwen25 = "Qwen2.5" in run["model_id"]
    tokens = measured["tokens_qwen25" if qwen25 else "tokens_qwen3"].to_numpy()
    order = list(range(min(2 * int(run["concurrency"]), len(measured)))) + list(range(len(measured)))
    rows, ids_of = [], {}
    for i in order:
        n = int(tokens[i])
        key = int(measured["same_as"].iloc[i])
        # identical prompts share every full block; Qwen2.5's template opens with the same system prompt
        ids = [(run["workload"], key, b) for b in range(n // BLOCK)]
        if qwen25 and ids:
            ids[0] = ("system", 0, 0)
        rows.append(
            {
                "arrival_s": 0.0,
                "prompt_tokens": n,
                "output_tokens": int(run["output_tokens_mean"]),
                "hash_ids": [ids_of.setdefault(x, len(ids_of)) for x in ids],
                "hash_block_tokens": BLOCK,
            }
        )
    return rows


def quantization(run: pd.Series) -> str:
    """The run's --quantization flag ("" when the server took the checkpoint as it is)."""
    q = run["quantization"]
    return q if isinstance(q, str) else ""


def kvsim_args(run: pd.Series) -> list[str]:
    args = [
        "--model",
        run["model_id"],
        "--gpu",
        run["gpu"],
        "--vllm-version",
        run["vllm_version"],
        "--max-num-seqs",
        str(int(run["max_num_seqs"])),
        "--gpu-memory-utilization",
        "0.9",
        "--max-concurrency",
        str(int(run["concurrency"])),
        "--endpoint",
        "chat",
    ]
    if not pd.isna(run["max_model_len"]):
        args += ["--max-model-len", str(int(run["max_model_len"]))]
    if bool(run["enforce_eager"]):
        args += ["--enforce-eager"]
    if quantization(run):
        args += ["--quantization", quantization(run)]
    return args


def replay(run: pd.Series, prompts: pd.DataFrame) -> dict:
    rows = trace_rows(prompts, run)
    warm = len(rows) - (10 if run["workload"] == "reasoning" else 100)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "kvsim", "run", "--trace", str(trace), *kvsim_args(run)]
        proc = subprocess.run([*cmd, "--out", str(out), "--no-plots"], capture_output=True, text=True)
        if proc.returncode:
            return {"error": proc.stderr.strip().splitlines()[-1]}
        req = pd.read_csv(out / "requests.csv")
    req = req.sort_values("id").iloc[warm:]  # the trace order: the warm-up first
    tpot = (req["e2e_s"] - req["ttft_s"]) / (req["output_tokens"] - 1)
    return {"kvsim_ttft_p50_ms": 1e3 * req["ttft_s"].median(), "kvsim_tpot_p50_ms": 1e3 * tpot.median()}


def label(run: pd.Series) -> str:
    model = run["model_id"].split("/")[-1].replace("-Instruct", "")
    quant = quantization(run) or "bf16"
    eager = ", eager" if bool(run["enforce_eager"]) else ""
    return f"{model} {quant}{eager}, {run['gpu']}, vLLM {run['vllm_version']}"


def med_err(r: pd.Series) -> str:
    r = r.dropna()
    return f"{np.median(r):.2f} ({100 * np.median(np.abs(np.log(r))):.0f}%)" if len(r) else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation-ree2raz"))
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    runs = pd.read_csv(DATA / "ree2raz_vllm_runs.csv")
    prompts = pd.read_csv(DATA / "ree2raz_prompts.csv")
    with ThreadPoolExecutor(a.jobs) as ex:
        got = list(ex.map(lambda r: replay(r, prompts), (r for _, r in runs.iterrows())))
    res = pd.concat([runs, pd.DataFrame(got)], axis=1)
    res["ttft_ratio"] = res["kvsim_ttft_p50_ms"] / res["ttft_p50_ms"]
    res["tpot_ratio"] = res["kvsim_tpot_p50_ms"] / res["tpot_p50_ms"]
    res["setup"] = [label(r) for _, r in res.iterrows()]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res.to_csv(out / "validate.csv", index=False)
    lines = [
        "# ree2raz/inference-bench's vLLM runs, replayed (held out)",
        "",
        "`python benchmarks/validate_ree2raz.py`: kvsim / measured, median over the runs (median |log ratio|);",
        "TTFT and TPOT are each run's medians over its measured requests. Data: benchmarks/data/README.md.",
        "",
        "| set-up | workload | runs | clients | TTFT | TPOT |",
        "|---|---|---|---|---|---|",
    ]
    for (setup, work), g in res.groupby(["setup", "workload"], sort=False):
        clients = ", ".join(str(c) for c in sorted(g["concurrency"].unique()))
        lines.append(
            f"| {setup} | {work} | {len(g)} | {clients} | {med_err(g['ttft_ratio'])} | {med_err(g['tpot_ratio'])} |"
        )
    plain = res[res["workload"] != "reasoning"]
    marlin = plain[
        [quantization(r) != "awq" for _, r in plain.iterrows()]
    ]  # kvsim warns on the others: vLLM's plain AWQ kernels
    few, many = marlin[marlin["concurrency"] <= 4], marlin[marlin["concurrency"] >= 16]
    lines += [
        "",
        f"All {len(plain)} short and long runs: TTFT {med_err(plain['ttft_ratio'])}, TPOT {med_err(plain['tpot_ratio'])}.",
        f"The {len(marlin)} of them kvsim does not warn about (not `--quantization awq` before vLLM 0.24): TTFT "
        f"{med_err(marlin['ttft_ratio'])}, TPOT {med_err(marlin['tpot_ratio'])}; at 1-4 clients ({len(few)} runs) TTFT "
        f"{med_err(few['ttft_ratio'])}, TPOT {med_err(few['tpot_ratio'])}; at 16-64 ({len(many)}) TTFT "
        f"{med_err(many['ttft_ratio'])}, TPOT {med_err(many['tpot_ratio'])}.",
        "",
        "| run | clients | measured TTFT / TPOT ms | kvsim |",
        "|---|---|---|---|",
    ]
    for _, r in res.iterrows():
        if "error" in r and isinstance(r["error"], str):
            lines.append(f"| {r['setup']}, {r['workload']} | {r['concurrency']} | - | {r['error']} |")
            continue
        lines.append(
            f"| {r['setup']}, {r['workload']} r{r['repeat']} | {r['concurrency']} | {r['ttft_p50_ms']:.1f} / "
            f"{r['tpot_p50_ms']:.1f} | {r['kvsim_ttft_p50_ms']:.1f} / {r['kvsim_tpot_p50_ms']:.1f} |"
        )
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:40]))


if __name__ == "__main__":
    main()
