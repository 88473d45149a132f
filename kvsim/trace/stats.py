"""Summary statistics of a trace."""

from __future__ import annotations

import numpy as np

from kvsim.trace.request import Request


def ideal_prefix_reuse(requests: list[Request]) -> float:
    """Share of prompt tokens an infinite prefix cache could serve, at the trace's own hash-id
    granularity: each request reuses the leading run of its hash ids seen in any earlier request
    (ids are chained, so an id seen before means the whole prefix up to it was)."""
    seen: set[int] = set()
    hit = total = 0
    for r in requests:
        total += r.prompt_tokens
        if not r.hash_ids:
            continue
        run = 0
        for x in r.hash_ids:
            if x not in seen:
                break
            run += 1
        hit += min(run * r.hash_block_tokens, r.prompt_tokens)
        seen.update(r.hash_ids)
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
