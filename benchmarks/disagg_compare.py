"""Aggregated vs disaggregated prefill/decode on the same GPUs, under TTFT and TPOT limits.

    python benchmarks/disagg_compare.py [--out reports/disagg] [--requests 1500]

Llama-2-13B on four A100-80GB GPUs (the size class of DistServe's OPT-13B chatbot set-up), two workloads
(ShareGPT conversations as Vidur processed them, `traces/sharegpt_lengths_excerpt.csv`: 2,180 prompt and
480 output tokens on average, clipped to 4,096 in all; long prompts, lognormal 2,500 in / 150 out),
Poisson arrivals at a sweep of rates. Layouts: four aggregated replicas (vLLM V1: chunked prefill, 2,048
tokens per iteration, `vllm serve`'s default on A100s), four with 512-token chunks (Sarathi-Serve's remedy for prefill-decode interference),
and 1P3D, 2P2D, 3P1D pools over RDMA
(least-requests routers on both sides). A request attains its SLO when it finishes with TTFT and TPOT
within the limits; goodput is the highest rate at which at least 90 % of requests do, per GPU (DistServe's
definition).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GPUS = 4
LAYOUTS = [("agg", 0), ("agg chunk512", 0), ("1P3D", 1), ("2P2D", 2), ("3P1D", 3)]
WORKLOADS = {
    "chat": dict(lengths_csv="traces/sharegpt_lengths_excerpt.csv", max_total=4096),
    "long-prompt": dict(prompt_mean=2500, prompt_sigma=0.4, output_mean=150, output_sigma=0.6, max_total=4096),
}
SLO = {"chat": (1.0, 0.05), "long-prompt": (2.0, 0.05)}  # TTFT s, TPOT s per workload
RATES = {"chat": [1, 2, 3, 3.5, 4, 4.5, 5, 5.5, 6], "long-prompt": [2, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5]}


def run_point(workload: str, rate: float, layout: str, n_prefill: int, n: int) -> dict:
    from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
    from kvsim.fleet.disagg import simulate_disagg
    from kvsim.options import config_from_args
    from kvsim.planning.slo import Slo, within_slos
    from kvsim.trace.generate import ArrivalSpec, LengthSpec, generate

    base = ["--model", "llama-2-13b", "--gpu", "a100-80gb"]
    reqs = generate(n, ArrivalSpec(rate=rate), LengthSpec(**WORKLOADS[workload]), seed=1)
    t = time.perf_counter()
    if n_prefill == 0:
        cfg = config_from_args(base + (["--max-num-batched-tokens", "512"] if "chunk512" in layout else []))
        f = simulate_fleet(reqs, [ReplicaGroup("a100", cfg, "paged:16", GPUS)], "least-requests")
    else:
        cfg = config_from_args(base)
        f = simulate_disagg(
            reqs,
            [ReplicaGroup("a100", cfg, "paged:16", n_prefill)],
            [ReplicaGroup("a100", cfg, "paged:16", GPUS - n_prefill)],
            "least-requests",
        )
    ttft_max, tpot_max = SLO[workload]
    ok = within_slos(f.requests, [Slo("ttft", 99, ttft_max), Slo("tpot", 99, tpot_max)])
    s = f.summary
    return {
        "workload": workload,
        "rate": rate,
        "layout": layout,
        "attainment": float(ok.mean()),
        "ttft_p90_s": s["ttft_p90_s"],
        "tpot_p90_s": s["tpot_p90_s"],
        "throughput_tok_s": s["throughput_tok_s"],
        "finished": s["finished"],
        "decode_wait_p99_s": s.get("decode_wait_p99_s", float("nan")),
        "kv_transfer_p99_s": s.get("kv_transfer_p99_s", float("nan")),
        "wall_s": time.perf_counter() - t,
    }


def goodput(rows, workload: str, layout: str) -> float:
    """Highest swept rate with >= 90 % attainment at it and every lower rate, per GPU."""
    best = 0.0
    for r in sorted((r for r in rows if r["workload"] == workload and r["layout"] == layout), key=lambda r: r["rate"]):
        if r["attainment"] < 0.9:
            break
        best = r["rate"]
    return best / GPUS


def main() -> None:
    import pandas as pd

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="reports/disagg")
    ap.add_argument("--requests", type=int, default=1500)
    a = ap.parse_args()
    rows = []
    for w in WORKLOADS:
        for rate in RATES[w]:
            for layout, n_prefill in LAYOUTS:
                r = run_point(w, rate, layout, n_prefill, a.requests)
                rows.append(r)
                print(
                    f"{w:12s} {rate:5.1f} req/s {layout:13s} attain {100 * r['attainment']:5.1f}%  "
                    f"TTFT p90 {r['ttft_p90_s']:.3f}  TPOT p90 {1e3 * r['tpot_p90_s']:.1f} ms  "
                    f"D wait p99 {r['decode_wait_p99_s']:.3f}  ({r['wall_s']:.1f} s)",
                    flush=True,
                )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    df.to_csv(out / "points.csv", index=False)
    lines = [
        "# Aggregated vs disaggregated: goodput per GPU (req/s at >= 90 % SLO attainment)",
        "",
        f"Llama-2-13B, {GPUS} x A100-80GB, least-requests routers, KV over RDMA ({_rdma()}), "
        f"{a.requests} requests per point, Poisson arrivals. SLOs (TTFT, TPOT): "
        + "; ".join(f"{w} {t:g} s, {1e3 * p:g} ms" for w, (t, p) in SLO.items())
        + ".",
        "",
        "| layout | " + " | ".join(WORKLOADS) + " |",
        "|---|" + "---:|" * len(WORKLOADS),
    ]
    for layout, _ in LAYOUTS:
        lines.append(f"| {layout} | " + " | ".join(f"{goodput(rows, w, layout):.2f}" for w in WORKLOADS) + " |")
    lines += ["", "Attainment (%) by rate:", ""]
    for w in WORKLOADS:
        sub = df[df.workload == w].pivot(index="rate", columns="layout", values="attainment")[[l for l, _ in LAYOUTS]]
        lines += [f"**{w}**", "", "| req/s | " + " | ".join(sub.columns) + " |", "|---:|" + "---:|" * len(sub.columns)]
        for rate, row in sub.iterrows():
            lines.append(f"| {rate:g} | " + " | ".join(f"{100 * v:.0f}" for v in row) + " |")
        lines.append("")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _rdma() -> str:
    """The default link as the summary states it."""
    from kvsim.fleet.disagg import LINKS

    link = LINKS["rdma"]
    return f"{link.bandwidth / 1e9:g} GB/s per GPU pair after {link.latency_s * 1e3:g} ms"


if __name__ == "__main__":
    main()
