"""Data-parallel attention against tensor parallelism for a MoE model with MLA, on one node.

    python benchmarks/dp_compare.py [--out reports/data-parallel] [--rounds 3]

DeepSeek-V3 (FP8 weights, bf16 KV) on 8 H200s, expert parallel in every layout: one TP8 engine, two DP
ranks of TP4, and eight DP ranks of one GPU (DeepSeek-style serving; vLLM's balancer `dp-lb` across ranks).
Closed-loop clients (vllm bench serve --max-concurrency) send requests of lognormal lengths, 1,000 prompt
and 1,000 output tokens on average; each point runs ``rounds`` requests per client. The table gives what a
decode-throughput benchmark reports: output tokens/s of the node, TPOT and TTFT, the mean batch per engine,
and how many tokens of KV the node can hold (MLA's latent is whole on every GPU of an engine, so TP8 holds
one copy per GPU and eight DP ranks eight distinct pools).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAYOUTS = {
    "TP8": dict(tensor_parallel_size=8),
    "DP2 x TP4": dict(tensor_parallel_size=4, data_parallel_size=2),
    "DP8": dict(data_parallel_size=8),
}
CLIENTS = [64, 256, 1024, 2048]


def run_point(layout: str, clients: int, rounds: int) -> dict:
    from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
    from kvsim.options import config_from_options
    from kvsim.trace.generate import ArrivalSpec, LengthSpec, generate

    cfg = config_from_options(
        {
            "model": "deepseek-v3",
            "gpu": "h200",
            "enable_expert_parallel": True,
            "max_num_seqs": 1024,
            "max_num_batched_tokens": 8192,
            "max_concurrency": clients,
            "request_rate": float("inf"),
            **LAYOUTS[layout],
        }
    )
    reqs = generate(
        clients * rounds,
        ArrivalSpec(rate=1.0),
        LengthSpec(prompt_mean=1000, prompt_sigma=0.5, output_mean=1000, output_sigma=0.5, max_total=8192),
        seed=3,
    )
    t = time.perf_counter()
    f = simulate_fleet(reqs, [ReplicaGroup(layout, cfg, "paged:16+prefix", 1)], "dp-lb")
    s = f.summary
    return {
        "layout": layout,
        "clients": clients,
        "out_tok_s": s["throughput_tok_s"],
        "tpot_p50_s": s["tpot_p50_s"],
        "ttft_p50_s": s["ttft_p50_s"],
        "ttft_p99_s": s["ttft_p99_s"],
        "finished": s["finished"],
        "mean_batch": float(f.replica_table.mean_batch.mean()),
        "preemptions": s["preemptions"],
        "kv_tokens_node": cfg.pool_plan().pool_tokens * cfg.dp,
        "wall_s": time.perf_counter() - t,
    }


def main() -> None:
    import pandas as pd

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="reports/data-parallel")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rows = []
    for clients in CLIENTS:
        for layout in LAYOUTS:
            r = run_point(layout, clients, a.rounds)
            rows.append(r)
            print(
                f"{clients:5d} clients {layout:10s} {r['out_tok_s']:8,.0f} tok/s  TPOT p50 {1e3 * r['tpot_p50_s']:6.1f} ms"
                f"  TTFT p99 {r['ttft_p99_s']:7.2f} s  batch {r['mean_batch']:6.1f}  ({r['wall_s']:.1f} s)",
                flush=True,
            )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    df.drop(columns=["wall_s"]).to_csv(out / "points.csv", index=False)
    kv = {r["layout"]: r["kv_tokens_node"] for r in rows}
    lines = [
        "# Data-parallel attention vs tensor parallelism: DeepSeek-V3 on 8 x H200",
        "",
        "Expert parallel in every layout; closed-loop clients, lognormal lengths (1,000 in / 1,000 out on "
        f"average), {a.rounds} requests per client. KV tokens the node holds: "
        + ", ".join(f"{k} {v:,}" for k, v in kv.items())
        + ".",
        "",
        "| clients | layout | out tok/s | TPOT p50 ms | TTFT p50 s | TTFT p99 s | mean batch per engine | preemptions |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['clients']:,} | {r['layout']} | {r['out_tok_s']:,.0f} | {1e3 * r['tpot_p50_s']:.1f} | "
            f"{r['ttft_p50_s']:.2f} | {r['ttft_p99_s']:.2f} | {r['mean_batch']:.1f} | {r['preemptions']:,} |"
        )
    best = df.groupby("layout").out_tok_s.max()
    lines += [
        "",
        "Highest output tokens/s over the swept clients: "
        + ", ".join(f"{k} {v:,.0f}" for k, v in best.items())
        + f" (DP8 / TP8: {best['DP8'] / best['TP8']:.2f}x).",
        "",
    ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
