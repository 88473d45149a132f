"""Routers under skewed load: many shared prefixes, a few of them hot.

    python benchmarks/fleet_skew.py [--out reports/fleet-skew] [--requests 6000] [--rate 100] [--hot 0.4]

The workload a prefix-aware router is built for and can also be hurt by: requests start with one of
``--families`` long shared prefixes (a system prompt or document, 6,144 tokens as 12 ids of 512 tokens),
then 256 tokens of their own, and generate 128 tokens. One family is hot (``--hot``: its share of the
requests); the others split the rest with Zipf(1.1) popularity. Poisson arrivals at ``--rate`` requests/s
(seed 0) on 8 replicas of Llama-3-8B on H100-80GB, paged:16+prefix.

- Cache-blind routers (round-robin, least-requests) spread every family over 8 caches: the hot prefix hits
  everywhere, the tail misses and its 6k-token prefills dominate the GPUs.
- `prefix` sends every request of a family to the replica that caches it: the tail hits, but the hot family
  piles onto one replica.
- `prefix+load` scores cached fraction against queue and KV use (llm-d's scorers): the hot family spills to
  replicas with short queues, which then cache it too.

Writes fleet.csv and summary.md (hit rate, TTFT p50/p99, TPOT p50, throughput, imbalance per router).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROUTERS = ["round-robin", "least-requests", "least-kv", "prefix", "prefix+load"]
SHARED_IDS, ID_TOKENS, OWN_TOKENS, OUTPUT_TOKENS = 12, 512, 256, 128


def skewed_trace(n: int, rate: float, families: int, hot: float, seed: int = 0):
    """``n`` requests: family 0 takes ``hot`` of them, the others Zipf(1.1) of the rest."""
    import numpy as np

    from kvsim.trace.request import Request

    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1.0 / rate, n))
    tail = 1.0 / np.arange(1, families) ** 1.1
    tail = tail / tail.sum() * (1.0 - hot)
    p = np.concatenate(([hot], tail))
    fam = rng.choice(families, size=n, p=p)
    out = []
    for i in range(n):
        f = int(fam[i])
        ids = tuple(f * 1000 + j for j in range(SHARED_IDS)) + (10**9 + i,)  # the own part: a fresh id
        out.append(
            Request(
                str(i),
                float(times[i]),
                SHARED_IDS * ID_TOKENS + OWN_TOKENS,
                OUTPUT_TOKENS,
                hash_ids=ids,
                hash_block_tokens=ID_TOKENS,
                session=f"f{f}",
            )
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="reports/fleet-skew")
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--families", type=int, default=400)
    ap.add_argument("--hot", type=float, default=0.4)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--routers", default=",".join(ROUTERS))
    a = ap.parse_args()
    from fleet_compare import run, write_results
    from kvsim.options import config_from_args

    cfg = config_from_args(["--model", "llama-3-8b", "--gpu", "h100-80gb"])
    reqs = skewed_trace(a.requests, a.rate, a.families, a.hot)
    label = f"skewed, {a.replicas} replicas"
    rows = run(reqs, cfg, a.replicas, a.routers.split(","), label)
    head = (
        f"# Routers under skewed load (benchmarks/fleet_skew.py)\n\n{a.requests} requests at {a.rate:g} req/s, "
        f"{a.families} prefix families (the hot one {100 * a.hot:g}%, the rest Zipf 1.1), {a.replicas} x "
        f"Llama-3-8B on H100-80GB, paged:16+prefix\n\n"
    )
    write_results(rows, Path(a.out), head)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
