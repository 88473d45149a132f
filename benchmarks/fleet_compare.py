"""Routers on a fleet, measured: the Mooncake excerpt replicated to fleet scale, and a multi-turn trace.

    python benchmarks/fleet_compare.py [--out reports/fleet]

Mooncake at fleet scale: K copies of `traces/mooncake_excerpt.jsonl` (393 requests over 92 s, prompts of
22k tokens on average, 512-token hash ids), each copy a different population (its hash ids shifted so
that copies share nothing) arriving over the same 92 s, on 4 x K replicas of Qwen2.5-7B on H100s. The
single-cache reference is one engine whose KV pool is the fleet's total (what one shared cache would
hit). The same fleet under closed-loop load (64 and 512 clients, all requests queued at once, each client
sending its next when the last finishes), round-robin against prefix routing. Multi-turn: `kvsim trace
generate --scenario multi-turn` (conversations with a session field), Llama-3-8B on 8 H100s.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROUTERS = [
    "round-robin",
    "random",
    "least-requests",
    "least-kv",
    "session",
    "prefix-approx",
    "prefix",
    "prefix+load",
    "sglang-cache-aware",
    "llm-d",
]


def tiled_mooncake(copies: int):
    from kvsim.trace import load_trace

    base = load_trace("traces/mooncake_excerpt.jsonl").requests
    out = []
    for c in range(copies):
        for r in base:
            ids = tuple(h + c * 10**7 for h in r.hash_ids) if r.hash_ids else None
            out.append(
                replace(r, id=f"{c}-{r.id}", arrival_s=r.arrival_s + 0.05 * c, hash_ids=ids, session=f"{c}-{r.id}")
            )
    return out


def run(requests, cfg, replicas: int, routers, label: str):
    from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet

    rows = []
    for r in routers:
        t = time.perf_counter()
        f = simulate_fleet(requests, [ReplicaGroup("g", cfg, "paged:16+prefix", replicas)], r)
        s = dict(f.summary, trace=label, wall_s=time.perf_counter() - t)
        rows.append(s)
        print(
            f"{label:22s} {r:15s} hit {100 * s['prefix_hit_rate_tokens']:5.1f}%  TTFT p50 {s['ttft_p50_s']:.3f} "
            f"p99 {s['ttft_p99_s']:.3f}  tok/s {s['throughput_tok_s']:.0f}  imbalance {s['imbalance_busy']:.2f}  "
            f"({s['wall_s']:.1f} s)",
            flush=True,
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="reports/fleet")
    ap.add_argument("--copies", type=int, default=2)
    a = ap.parse_args()
    from kvsim.options import config_from_args
    from kvsim.trace.generate import ArrivalSpec, LengthSpec
    from kvsim.trace.scenarios import ScenarioSpec, generate_scenario

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    mc_args = ["--model", "qwen2.5-7b", "--gpu", "h100-80gb", "--max-model-len", "131072"]
    cfg = config_from_args(mc_args)
    mc = tiled_mooncake(a.copies)
    n = 4 * a.copies
    label = f"mooncake x{a.copies}, {n} replicas"
    rows += run(mc, cfg, n, [r for r in ROUTERS if r != "session"], label)

    pool = cfg.pool_plan()
    one = config_from_args(mc_args + ["--kv-pool-gb", str(n * pool.pool_bytes / (1 << 30)), "--ignore-gpu-memory"])
    rows += run(mc, one, 1, ["round-robin"], f"mooncake x{a.copies}, one cache of {n} pools")
    for clients in (64, 512):  # closed loop, as benchmark clients (vllm bench serve --max-concurrency) load it
        closed = config_from_args(mc_args + ["--max-concurrency", str(clients), "--request-rate", "inf"])
        rows += run(mc, closed, n, ["round-robin", "prefix"], f"mooncake x{a.copies}, {clients} clients")
    mt = generate_scenario(
        ScenarioSpec("multi-turn", think_s=20.0), 4000, ArrivalSpec(rate=8.0), LengthSpec(max_total=8192), seed=1
    )
    rows += run(
        mt, config_from_args(["--model", "llama-3-8b", "--gpu", "h100-80gb"]), 8, ROUTERS, "multi-turn, 8 replicas"
    )
    write_results(rows, out, "# Routers on a fleet (benchmarks/fleet_compare.py)\n\n")
    return 0


COLUMNS = [
    "trace",
    "router",
    "finished",
    "prefix_hit_rate_tokens",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "throughput_tok_s",
    "imbalance_requests",
    "imbalance_busy",
]


def write_results(rows: list[dict], out: Path, head: str) -> None:
    """fleet.csv (every summary field) and summary.md (a table of COLUMNS) in ``out``."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "fleet.csv", index=False)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in COLUMNS) + " |")
    (out / "summary.md").write_text(head + "\n".join(lines) + "\n")
    print(f"wrote {out}/fleet.csv and summary.md")


if __name__ == "__main__":
    raise SystemExit(main())
