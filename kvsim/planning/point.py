"""One simulation described by a flat dict of options (a sweep point or a plan configuration).

Keys are the option keys of kvsim/options.py (model, gpu, kv_pool_gb, max_num_seqs, block_size, ...;
the flags' aliases with '_' for '-' work too), plus:
- ``trace``: path of a JSONL trace (required);
- ``allocator``: an allocator name (default ``paged``); a name without a block size takes ``block_size``;
- ``rate``: requests/s to scale the trace to (arrival gaps scaled; lengths unchanged), or
  ``rate_scale``: a multiplier of the trace's own rate.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, replace
from typing import Any

from kvsim.engine.sequence import Status
from kvsim.errors import ConfigError
from kvsim.trace.request import Request

SPECIAL = ("trace", "rate", "rate_scale", "allocator")  # the rest are options (kvsim/options.py)


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


def no_gaps_message(what: str, n: int) -> str:
    """Why a trace's rate cannot be scaled: it has no arrival gaps."""
    who = f"{what} has a single request" if n == 1 else f"all {n} requests of {what} arrive at the same time"
    return f"{who}: there are no arrival gaps to scale to another rate"


def scale_to_rate(requests, rate: float) -> list[Request]:
    """The same requests with inter-arrival gaps scaled so that the mean rate is ``rate``."""
    if not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"rate must be a finite number > 0, got {rate}")
    base = trace_rate(requests)
    if not math.isfinite(base):
        raise ConfigError(no_gaps_message("the trace", len(requests)) + " (drop 'rate' / 'rate_scale' for it)")
    f = base / rate
    t0 = requests[0].arrival_s
    return [
        Request(
            r.id,
            t0 + (r.arrival_s - t0) * f,
            r.prompt_tokens,
            r.output_tokens,
            r.priority,
            r.hash_ids,
            r.hash_block_tokens,
            r.n,
            r.line,
        )
        for r in requests
    ]


def split_point(point: dict) -> tuple[dict, dict]:
    """(the point's own keys: trace, rate, rate_scale, allocator; its simulation options)."""
    if "trace" not in point:
        raise ConfigError(f"point {point} has no 'trace'")
    own = {k: point[k] for k in SPECIAL if k in point}
    return own, {k: v for k, v in point.items() if k not in SPECIAL}


def point_config(point: dict):
    """(SimConfig, resolved allocator spec, options) of a point, without loading its trace."""
    from kvsim.options import config_from_options, normalize
    from kvsim.runner import resolve_allocator, served_allocator

    own, opts = split_point(point)
    cfg = config_from_options(opts, naming="key")
    named = own.get("allocator") is not None
    allocator = own["allocator"] if named else served_allocator(cfg)
    return cfg, resolve_allocator(str(allocator), cfg, named), normalize(opts, naming="key")


@dataclass(frozen=True)
class BuiltPoint:
    """A point's configuration, allocator and trace, built once; a capacity search varies only the rate
    (:meth:`at_rate`)."""

    point: dict
    cfg: Any  # SimConfig
    spec: str  # the resolved allocator
    loaded: tuple[Request, ...]  # the trace as read
    requests: list[Request]  # at the point's own 'rate' / 'rate_scale', if it sets one

    @property
    def rate(self) -> float:
        """The mean arrival rate of :attr:`requests`, requests/s (inf: no gaps)."""
        return trace_rate(self.requests)

    def at_rate(self, rate) -> list[Request]:
        """The trace as read with its gaps scaled to ``rate`` requests/s."""
        if self.cfg.request_rate is not None:
            raise ConfigError(
                "a point sets both 'rate'/'rate_scale' (scaling the trace's gaps) and 'request_rate' "
                "(new Poisson times): give one"
            )
        if not math.isfinite(trace_rate(self.loaded)):
            raise ConfigError(
                no_gaps_message(str(self.point["trace"]), len(self.loaded)) + " (drop 'rate' / 'rate_scale' for it)"
            )
        return scale_to_rate(self.loaded, rate)


def build_point(point: dict) -> BuiltPoint:
    """Build a point: its configuration, allocator and trace (scaled to its own 'rate' or 'rate_scale')."""
    cfg, spec, opts = point_config(point)
    loaded = _load(str(point["trace"]), bool(opts.get("skip_invalid", False)))
    built = BuiltPoint(point, cfg, spec, loaded, list(loaded))
    if point.get("rate") is not None:
        return replace(built, requests=built.at_rate(_rate(point["rate"], "rate")))
    if point.get("rate_scale") is not None:
        scale = _rate(point["rate_scale"], "rate_scale")
        return replace(built, requests=built.at_rate(trace_rate(loaded) * scale))
    return built


def build(point: dict):
    """(SimConfig, requests, allocator spec) for a point."""
    b = build_point(point)
    return b.cfg, b.requests, b.spec


def _rate(v, key: str) -> float:
    from kvsim.validation import POSITIVE, require

    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise ConfigError(f"'{key}': must be a number, got {v!r}") from None
    require(v, POSITIVE, f"'{key}'")
    return float(v)


def evaluate(point: dict) -> dict:
    """Simulate one point; returns its run summary (allocator name included) plus the offered rate."""
    b = build_point(point)
    return evaluate_requests(b.cfg, b.spec, b.requests)


def evaluate_requests(cfg, spec: str, reqs: list[Request]) -> dict:
    """Simulate ``reqs`` on a built configuration: the run summary plus the offered rate, mean lengths and
    whether the run keeps up (:func:`is_stable`, :func:`sustained`)."""
    from kvsim.runner import simulate

    out = simulate(reqs, cfg, spec)
    s = dict(out.summary)
    s["offered_rate"] = trace_rate(reqs)
    s["mean_output_tokens"] = float(sum(r.output_tokens for r in reqs) / len(reqs))
    s["mean_prompt_tokens"] = float(sum(r.prompt_tokens for r in reqs) / len(reqs))
    s["stable"] = is_stable(out.requests)
    s["sustain"], s["sustain_note"] = sustained(out.requests)
    return s


def sustained(req_frame, share: float = 0.9) -> tuple[str, str]:
    """Whether the run sustains its offered rate: ("ok" | "unsustained" | "too-short", why).

    Over the window from the arrival of the first quarter's last request to the last arrival, requests
    finishing must be at least ``share`` of those arriving (Little's law: in steady state the requests in
    flight are as many at both ends, so completions match arrivals). The window must start after the
    warm-up, once a request has had time to be served (the median of end-to-end latency less queueing:
    queueing grows without bound in overload, service does not); a trace whose first quarter is shorter
    than that is too short to tell."""
    import numpy as np

    df = req_frame[req_frame.status != Status.REJECTED.value]
    n = len(df)
    if n < 8:
        return "too-short", f"only {n} requests were admitted"
    arr = np.sort(df.arrival_s.to_numpy(dtype=float))
    fin = df.finish_s.to_numpy(dtype=float)
    service = (df.e2e_s - df.queue_s).to_numpy(dtype=float)
    service = service[np.isfinite(service)]
    if not len(service):
        return "unsustained", "no request finished"
    t0, ts, te = arr[0], arr[n // 4], arr[-1]
    w = float(np.median(service))
    if ts - t0 < w:
        return "too-short", (
            f"too short to tell: its first quarter lasts {ts - t0:.3g} s at this rate, less than a "
            f"request's median service time ({w:.3g} s); use a longer trace"
        )
    arriving = int(((arr >= ts) & (arr <= te)).sum())
    finishing = int(((fin >= ts) & (fin <= te)).sum())
    if finishing < share * arriving:
        return "unsustained", (
            f"not sustained: {finishing} requests finished while {arriving} arrived "
            f"({finishing / max(te - ts, 1e-12):.3g} of {arriving / max(te - ts, 1e-12):.3g} req/s)"
        )
    return "ok", ""


def is_stable(req_frame) -> bool:
    """The queue is not growing without bound: the p90 wait for admission of the last quarter of
    arrivals is at most max(1 s, 2 x that of the second quarter). Requests never admitted count as
    waiting forever."""
    import numpy as np

    df = req_frame[req_frame.status != Status.REJECTED.value]
    n = len(df)
    if n < 8:
        return True
    wait = df.queue_s.to_numpy(dtype=float)
    wait = np.where(np.isnan(wait), np.inf, wait)
    q2 = np.percentile(wait[n // 4 : n // 2], 90)
    q4 = np.percentile(wait[3 * n // 4 :], 90)
    return bool(q4 <= max(1.0, 2 * q2))
