"""Fingerprints of simulation outputs, to check that a refactor changes nothing, bit for bit.

    python benchmarks/bitcheck.py before.json      # on the old code
    python benchmarks/bitcheck.py after.json       # on the new code
    python benchmarks/bitcheck.py --compare before.json after.json
    python benchmarks/bitcheck.py simpy.json --args "--clock simpy"   # every set-up with more options

Twelve single-engine set-ups: the chat trace with every contiguous allocator and paged, Mooncake with the
hashed and radix prefix caches, Gemma-2 with the layer-group layouts, swap preemption and a horizon; and five
fleets: four replicas behind least-requests and prefix+load, closed-loop clients, a 2P2D disaggregated
fleet, and a data-parallel MoE replica (ranks in lockstep). Each fingerprint covers the requests table, the
run summary (without wall time) and the memory timeline (a fleet's: the requests and per-replica tables).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETUPS = [
    ("chat", "traces/chat.jsonl", [], ["max", "pow2", "oracle", "paged:16"]),
    (
        "prefix",
        "traces/mooncake_excerpt.jsonl",
        ["--model", "llama-3-8b", "--gpu", "h100-80gb", "--kv-pool-gb", "4"],
        ["paged:16+prefix", "radix:16"],
    ),
    (
        "hybrid",
        "traces/chat.jsonl",
        ["--model", "gemma-2-9b", "--gpu", "h100-80gb", "--kv-pool-gb", "3"],
        ["hybrid:16", "static-split:16", "naive:16"],
    ),
    (
        "swap",
        "traces/chat.jsonl",
        ["--preemption-mode", "swap", "--swap-space", "4", "--kv-pool-gb", "4"],
        ["paged:16"],
    ),
    ("horizon", "traces/chat.jsonl", ["--horizon-s", "200", "--kv-pool-gb", "3"], ["paged:16", "max"]),
]


FLEETS = [
    # name, trace, options, replicas (prefill:decode for disaggregated), router
    ("fleet-lr", "traces/chat.jsonl", ["--kv-pool-gb", "2"], "4", "least-requests"),
    (
        "fleet-prefix",
        "traces/mooncake_excerpt.jsonl",
        ["--model", "llama-3-8b", "--kv-pool-gb", "3"],
        "4",
        "prefix+load",
    ),
    ("fleet-closed", "traces/chat.jsonl", ["--kv-pool-gb", "2", "--max-concurrency", "24"], "3", "round-robin"),
    ("fleet-pd", "traces/chat.jsonl", ["--kv-pool-gb", "2"], "2:2", "least-requests"),
    (
        "fleet-dp",
        "traces/chat.jsonl",
        ["--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--data-parallel-size", "2", "--kv-pool-gb", "2"],
        "1",
        "dp-lb",
    ),
]


def _digest(*parts: str) -> list[str]:
    return [hashlib.sha256(p.encode()).hexdigest() for p in parts]


def fleet_fingerprints(extra: list[str]) -> dict[str, list[str]]:
    from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
    from kvsim.fleet.disagg import simulate_disagg
    from kvsim.options import config_from_args
    from kvsim.trace import load_trace

    out = {}
    for name, trace, args, replicas, router in FLEETS:
        cfg = config_from_args(args + extra)
        reqs = load_trace(trace).requests
        if ":" in replicas:
            p, d = (int(x) for x in replicas.split(":"))
            f = simulate_disagg(
                reqs, [ReplicaGroup("p", cfg, "paged:16", p)], [ReplicaGroup("d", cfg, "paged:16", d)], router
            )
        else:
            f = simulate_fleet(reqs, [ReplicaGroup("r", cfg, "paged:16+prefix", int(replicas))], router)
        summary = repr(sorted((k, v) for k, v in f.summary.items() if k != "wall_s"))
        out[name] = _digest(f.requests.to_csv(), summary, f.replica_table.to_csv())
        print(f"{name:12s} {f.summary['finished']:6d} finished", flush=True)
    return out


def fingerprints(extra: list[str] = []) -> dict[str, list[str]]:
    from kvsim.options import config_from_args
    from kvsim.runner import simulate
    from kvsim.trace import load_trace

    out = {}
    for name, trace, args, allocators in SETUPS:
        cfg = config_from_args(args + extra)
        reqs = load_trace(trace).requests
        for a in allocators:
            o = simulate(reqs, cfg, a)
            summary = repr(sorted((k, v) for k, v in o.summary.items() if k != "wall_s"))
            parts = (o.requests.to_csv(), summary, o.timeline.to_csv())
            out[f"{name} {a}"] = _digest(*parts)
            print(f"{name:8s} {a:16s} {o.summary['finished']:6d} finished", flush=True)
    return {**out, **fleet_fingerprints(extra)}


def main() -> int:
    if sys.argv[1:2] == ["--compare"]:
        a, b = (json.loads(Path(p).read_text()) for p in sys.argv[2:4])
        bad = [k for k in a if a[k] != b.get(k)]
        for k in bad:
            print(
                f"differs: {k} ({', '.join(n for n, x, y in zip(('requests', 'summary', 'timeline'), a[k], b[k]) if x != y)})"
            )
        print("identical" if not bad else f"{len(bad)} of {len(a)} set-ups differ")
        return 1 if bad else 0
    extra = sys.argv[sys.argv.index("--args") + 1].split() if "--args" in sys.argv else []
    Path(sys.argv[1]).write_text(json.dumps(fingerprints(extra), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
