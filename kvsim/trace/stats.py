"""Summary statistics of a trace."""

from __future__ import annotations

import numpy as np

from kvsim.trace.request import Request


def ideal_prefix_reuse(requests: list[Request]) -> float:
    """Share of prompt tokens an infinite prefix cache could serve, at the trace's own hash-id
    granularity: each request reuses the longest leading run of its hash ids that is also the leading run
    of an earlier request's (a chained prefix: the same ids in the same positions from the start, with
    the same tokens per id). An id seen elsewhere in an earlier prompt is not a prefix and reuses nothing,
    as in the simulator's caches (block_keys.py)."""
    seen: set[int] = set()  # chained hashes of every prefix of every earlier request
    hit = total = 0
    for r in requests:
        total += r.prompt_tokens
        if not r.hash_ids:
            continue
        parent = hash((0x6B7673696D, r.hash_block_tokens))
        run, matching = 0, True
        for x in r.hash_ids:
            parent = hash((parent, x))
            if matching and parent in seen:
                run += 1
            else:
                matching = False
                seen.add(parent)
        hit += min(run * (r.hash_block_tokens or 0), r.prompt_tokens)
    return hit / total if total else 0.0


def trace_stats(requests: list[Request]) -> dict[str, float]:
    arr = np.array([r.arrival_s for r in requests])
    p = np.array([r.prompt_tokens for r in requests])
    o = np.array([r.output_tokens for r in requests])
    span = float(arr.max() - arr.min()) if len(arr) > 1 else 0.0
    out: dict[str, float] = {
        "requests": len(requests),
        "span_s": span,
        "rate_req_s": (len(requests) - 1) / span if span > 0 else float("nan"),
        "with_hash_ids": sum(r.hash_ids is not None for r in requests),
        "ideal_prefix_reuse": ideal_prefix_reuse(requests),
    }
    for name, v in (("prompt", p), ("output", o), ("total", p + o)):
        out[f"{name}_mean"] = float(v.mean())
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = float(np.percentile(v, q))
        out[f"{name}_max"] = int(v.max())
    return out
