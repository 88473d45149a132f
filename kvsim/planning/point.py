"""One simulation described by a flat dict of options (a sweep point or a plan configuration).

Keys are the long options of `kvsim compare` with '_' for '-' (model, gpu, allocator, kv_pool_gb,
max_num_seqs, eviction, ...), plus:
- ``trace``: path of a JSONL trace (required);
- ``rate``: requests/s to scale the trace to (arrival gaps scaled; lengths unchanged), or
  ``rate_scale``: a multiplier of the trace's own rate;
- ``block_size``: with a paged allocator name without one (``paged``, ``paged+prefix``, ``radix``).
"""

from __future__ import annotations

import functools
import hashlib
import json

from kvsim.errors import ConfigError
from kvsim.trace.request import Request

SPECIAL = {"trace", "rate", "rate_scale", "allocator", "block_size", "skip_invalid"}
FLAGS = {"skip_invalid", "partial_eviction"}


def point_id(point: dict) -> str:
    """Stable id of a point: the same options give the same id (used to resume sweeps)."""
    return hashlib.sha1(json.dumps(point, sort_keys=True, default=str).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def _load(path: str, skip_invalid: bool) -> tuple[Request, ...]:
    from kvsim.trace import load_trace

    return tuple(load_trace(path, skip_invalid=skip_invalid).requests)


def trace_rate(requests) -> float:
    """Mean arrival rate of a trace, requests/s."""
    span = requests[-1].arrival_s - requests[0].arrival_s
    return (len(requests) - 1) / span if span > 0 else float("inf")


def scale_to_rate(requests, rate: float) -> list[Request]:
    """The same requests with inter-arrival gaps scaled so that the mean rate is ``rate``."""
    if rate <= 0:
        raise ConfigError(f"rate must be > 0, got {rate}")
    base = trace_rate(requests)
    if base == float("inf"):
        return list(requests)
    f = base / rate
    t0 = requests[0].arrival_s
    return [Request(r.id, t0 + (r.arrival_s - t0) * f, r.prompt_tokens, r.output_tokens, r.priority, r.hash_ids,
                    r.hash_block_tokens, r.n, r.line) for r in requests]


def allocator_name(point: dict) -> str:
    name = str(point.get("allocator", "paged:16"))
    bs = point.get("block_size")
    if bs is not None:
        head, plus, opt = name.partition("+")
        base = head.split(":")[0]
        if base not in ("paged", "radix"):
            raise ConfigError(f"block_size {bs} given for allocator '{name}', which has no blocks")
        name = f"{base}:{int(bs)}" + (plus + opt if plus else "")
    return name


def point_args(point: dict) -> list[str]:
    """The `kvsim compare` arguments equivalent to a point (for validation and config building)."""
    if "trace" not in point:
        raise ConfigError(f"point {point} has no 'trace'")
    args = ["compare", "--trace", str(point["trace"])]
    for k, v in point.items():
        if k in SPECIAL or v is None:
            continue
        flag = "--" + k.replace("_", "-")
        if k in FLAGS:
            if v:
                args.append(flag)
        else:
            args += [flag, str(v)]
    return args


def build(point: dict):
    """(SimConfig, requests, allocator name) for a point."""
    from kvsim.cli import build_config, make_parser

    try:
        ns = make_parser().parse_args(point_args(point))
    except SystemExit:
        raise ConfigError(f"point {point}: an option is not a `kvsim compare` option") from None
    cfg = build_config(ns)
    reqs = list(_load(str(point["trace"]), bool(point.get("skip_invalid", False))))
    if point.get("rate") is not None:
        reqs = scale_to_rate(reqs, float(point["rate"]))
    elif point.get("rate_scale") is not None:
        reqs = scale_to_rate(reqs, trace_rate(reqs) * float(point["rate_scale"]))
    return cfg, reqs, allocator_name(point)


def evaluate(point: dict) -> dict:
    """Simulate one point; returns its run summary (allocator name included) plus the offered rate."""
    from kvsim.runner import simulate

    cfg, reqs, name = build(point)
    out = simulate(reqs, cfg, name)
    s = dict(out.summary)
    s["offered_rate"] = trace_rate(reqs)
    s["mean_output_tokens"] = float(sum(r.output_tokens for r in reqs) / len(reqs))
    s["stable"] = is_stable(out.requests)
    return s


def is_stable(req_frame) -> bool:
    """The queue is not growing without bound: the p90 wait for admission of the last quarter of
    arrivals is at most max(1 s, 2 x that of the second quarter). Requests never admitted count as
    waiting forever."""
    import numpy as np

    df = req_frame[req_frame.status != "rejected"]
    n = len(df)
    if n < 8:
        return True
    wait = df.queue_s.to_numpy(dtype=float)
    wait = np.where(np.isnan(wait), np.inf, wait)
    q2 = np.percentile(wait[n // 4: n // 2], 90)
    q4 = np.percentile(wait[3 * n // 4:], 90)
    return bool(q4 <= max(1.0, 2 * q2))
