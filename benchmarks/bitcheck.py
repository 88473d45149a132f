"""Fingerprints of simulation outputs, to check that a refactor changes nothing, bit for bit.

    python benchmarks/bitcheck.py before.json      # on the old code
    python benchmarks/bitcheck.py after.json       # on the new code
    python benchmarks/bitcheck.py --compare before.json after.json

Twelve set-ups: the chat trace with every contiguous allocator and paged, Mooncake with the hashed and radix
prefix caches, Gemma-2 with the layer-group layouts, swap preemption and a horizon. Each fingerprint covers
the requests table, the run summary (without wall time) and the memory timeline.
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


def fingerprints() -> dict[str, list[str]]:
    from kvsim.options import config_from_args
    from kvsim.runner import simulate
    from kvsim.trace import load_trace

    out = {}
    for name, trace, args, allocators in SETUPS:
        cfg = config_from_args(args)
        reqs = load_trace(trace).requests
        for a in allocators:
            o = simulate(reqs, cfg, a)
            summary = repr(sorted((k, v) for k, v in o.summary.items() if k != "wall_s"))
            parts = (o.requests.to_csv(), summary, o.timeline.to_csv())
            out[f"{name} {a}"] = [hashlib.sha256(p.encode()).hexdigest() for p in parts]
            print(f"{name:8s} {a:16s} {o.summary['finished']:6d} finished", flush=True)
    return out


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
    Path(sys.argv[1]).write_text(json.dumps(fingerprints(), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
