"""kvsim against SemiAnalysis InferenceX's vLLM runs of MiniMax-M2.5 (block-FP8 MoE) on 8 H200s, tensor parallel
with expert parallelism (TEP8, 65 runs) and data parallel with expert parallelism (DEP8, 7 runs): closed loops of
4 to 64 clients, prompts of 1,024 to 32,768 tokens, 128 output tokens. Held out: replayed with the server's flags,
nothing fitted to them.

    python benchmarks/validate_minimax.py [--data benchmarks/data/inferencex_minimax_m25_h200.csv]
        [--out reports/validation-minimax] [--vllm-version 0.16]

Data: InferenceX (github.com/SemiAnalysisAI/InferenceX, Apache-2.0), `experimental/token_position_decode_slo/
minimax-m2.5/` of PR #709 (February 2026); benchmarks/data/README.md says what the table holds. Its README calls
the folder experimental work in progress that "likely contains errors".

How each run is replayed, from the folder's scripts: the server (`serve_minimax_tep8_sbatch.sh`) is
`vllm serve MiniMaxAI/MiniMax-M2.5 --tensor-parallel-size 8 --enable-expert-parallel` (plus tool-call and
reasoning parsers, which the completions endpoint the client uses does not run) at vLLM's defaults, a nightly
wheel of 2026-02 (commit dea6351: between the 0.15 and 0.16 releases, `--vllm-version 0.16` here; kvsim prices it
with the newest measured kernels at or before it); DEP8's server script is not in the folder, read as
`--data-parallel-size 8 --enable-expert-parallel` behind vLLM's own balancer (`dp-lb`). The client
(`benchmark_serving_random.py`, a copy of vLLM's benchmark_serving.py) sends 10 x C prompts of exactly ISL tokens
(no range: lengths fixed) to /v1/completions with `--ignore-eos`, `--max-concurrency C --request-rate inf`, after
2 x C warm-up requests of the first prompt (not replayed: they end before the measured ones start, and only the
first measured prompt repeats theirs). It reports median and p99 TTFT and TPOT and output tokens/s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

METRICS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "out_tok_s")


def server(r, vllm_version: str) -> dict:
    """kvsim options for the server and client of run ``r`` (a row of the data table)."""
    v = {
        "model": "MiniMaxAI/MiniMax-M2.5",
        "gpu": "h200",
        "enable_expert_parallel": True,
        "vllm_version": vllm_version,
        "endpoint": "completions",
        "max_concurrency": int(r.conc),
        "request_rate": "inf",
    }
    if r.parallel == "tep8":
        v["tensor_parallel_size"] = 8
    else:
        v["data_parallel_size"] = 8
    return v


def replay(r, vllm_version: str) -> dict:
    """kvsim's median and p99 TTFT and TPOT (seconds) and output tokens/s for run ``r``."""
    from kvsim.commands.validate import replay_summary
    from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
    from kvsim.options import config_from_options
    from kvsim.runner import served_spec, simulate
    from kvsim.trace.request import Request

    n = 10 * int(r.conc)
    reqs = [Request(str(i), 0.0, int(r.isl), int(r.osl), line=i + 1) for i in range(n)]
    cfg = config_from_options(server(r, vllm_version))
    if cfg.dp > 1:
        return replay_summary(simulate_fleet(reqs, [ReplicaGroup("dep8", cfg, served_spec(cfg), 1)], "dp-lb"))
    return replay_summary(simulate(reqs, cfg, served_spec(cfg)))


def main() -> None:
    import pandas as pd

    from kvsim.commands.validate import add_ratios, save_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT / "benchmarks" / "data" / "inferencex_minimax_m25_h200.csv"))
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation-minimax"))
    ap.add_argument("--vllm-version", default="0.16", help="the release kvsim prices the nightly as [0.16]")
    ap.add_argument("--only", help="a pandas query the runs must match (e.g. \"parallel == 'tep8'\")")
    a = ap.parse_args()
    runs = pd.read_csv(a.data)
    if a.only:
        runs = runs.query(a.only)
    rows = []
    for r in runs.itertuples():
        p = replay(r, a.vllm_version)
        meas = {
            "ttft_p50": r.median_ttft_s,
            "ttft_p99": r.p99_ttft_s,
            "tpot_p50": r.median_tpot_s,
            "tpot_p99": r.p99_tpot_s,
            "out_tok_s": r.output_tok_s,
        }
        row = {"parallel": r.parallel, "isl": r.isl, "osl": r.osl, "concurrency": r.conc}
        row["not_finished"] = p["not_finished"]
        rows.append(add_ratios(row, meas, p))
        print(
            f"{r.parallel} {r.isl}/{r.osl} c{r.conc}: TTFT p50 {row['ttft_p50_ratio']:.2f}, "
            f"TPOT p50 {row['tpot_p50_ratio']:.2f}, tok/s {row['out_tok_s_ratio']:.2f}",
            flush=True,
        )
    out = Path(a.out)
    write_summary(save_table(rows, out), out / "summary.md", a.vllm_version)
    print(f"wrote {out}/validate.csv and summary.md")


def write_summary(t, path: Path, vllm_version: str) -> None:
    """Median [p10, p90] (median |error|) of each ratio by group of runs, then every run."""
    from kvsim.commands.validate import ratio_table

    lines = [
        "# kvsim against InferenceX's vLLM runs of MiniMax-M2.5 on 8 H200s (held out)",
        "",
        "72 closed-loop runs of vLLM (a nightly of 2026-02, priced as "
        f"`--vllm-version {vllm_version}`) from SemiAnalysis InferenceX's experimental folder (Apache-2.0), "
        "replayed by kvsim with the server's flags; nothing fitted to them. Predicted / measured, median "
        "[p10, p90] over runs (median |error|). Command: `python benchmarks/validate_minimax.py` (its docstring "
        "has the set-up).",
        "",
    ]
    groups = [("all", t), *((f"{p}", sub) for p, sub in t.groupby("parallel"))]
    tep = t[t.parallel == "tep8"]
    groups += [
        (f"TEP8, {lo}-{hi} prompt tokens", tep[(tep.isl >= lo) & (tep.isl <= hi)])
        for lo, hi in ((1024, 4096), (6144, 16384), (18432, 32768))
    ]
    groups += [(f"TEP8, {c} clients", sub) for c, sub in tep.groupby("concurrency")]
    lines += ratio_table(groups, METRICS)
    lines += [
        "",
        "| layout | prompt | clients | TTFT p50 ms measured | ratio | TPOT p50 ms measured | ratio | "
        "TPOT p99 ratio | out tok/s ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in t.itertuples():
        lines.append(
            f"| {r.parallel} | {r.isl} | {r.concurrency} | {1e3 * r.ttft_p50_measured:.0f} | "
            f"{r.ttft_p50_ratio:.2f} | {1e3 * r.tpot_p50_measured:.2f} | {r.tpot_p50_ratio:.2f} | "
            f"{r.tpot_p99_ratio:.2f} | {r.out_tok_s_ratio:.2f} |"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
