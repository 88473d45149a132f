"""Per-request and per-run metrics, as pandas DataFrames / dicts at the edge of the core."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvsim.allocators.base import MEMORY_CATEGORIES
from kvsim.engine.sequence import Status
from kvsim.engine.simulator import SimResult

REQUEST_COLUMNS = ["id", "arrival_s", "prompt_tokens", "output_tokens", "status", "reason", "admitted_s",
                   "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s", "queue_s", "generated_tokens",
                   "preemptions", "cached_prompt_tokens"]


def requests_frame(res: SimResult) -> pd.DataFrame:
    """One row per trace request; a request with n > 1 samples aggregates them (finished when all are)."""
    rows = []
    for s in res.sequences:
        r = s.req
        group = [s, *s.samples]
        status = Status.REJECTED if s.status == Status.REJECTED else (
            Status.FINISHED if all(g.status == Status.FINISHED for g in group) else Status.UNFINISHED)
        reason = s.reason or next((g.reason for g in group if g.reason), "")
        finish = max(g.finish_s for g in group) if status == Status.FINISHED else None
        ttft = s.first_token_s - r.arrival_s if s.first_token_s is not None else np.nan
        e2e = finish - r.arrival_s if finish is not None else np.nan
        tpot = (finish - s.first_token_s) / (r.output_tokens - 1) if finish is not None and r.output_tokens > 1 else np.nan
        rows.append((r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, status.value, reason, s.admitted_s,
                     s.first_token_s, finish, ttft, tpot, e2e,
                     (s.admitted_s - r.arrival_s) if s.admitted_s is not None else np.nan,
                     sum(g.generated for g in group), sum(g.preemptions for g in group),
                     sum(g.cached_tokens for g in group)))
    df = pd.DataFrame(rows, columns=REQUEST_COLUMNS)
    return df.astype({c: "float64" for c in ("admitted_s", "first_token_s", "finish_s")})


def _pct(values: pd.Series, q: float) -> float:
    v = values.dropna()
    return float(np.percentile(v, q)) if len(v) else float("nan")


def run_summary(res: SimResult, req: pd.DataFrame | None = None) -> dict:
    """One row of run-level metrics. Memory shares are time-weighted fractions of the KV pool."""
    req = requests_frame(res) if req is None else req
    fin = req[req.status == Status.FINISHED.value]
    start = float(req.arrival_s.min()) if len(req) else 0.0
    duration = max(res.end_s - start, 1e-12)
    mem = res.memory
    shares = mem.time_weighted_fractions()
    occupied = 1.0 - shares["free"]
    out = {
        "allocator": res.allocator,
        "requests": len(req),
        "finished": int((req.status == Status.FINISHED.value).sum()),
        "rejected": int((req.status == Status.REJECTED.value).sum()),
        "unfinished": int((req.status == Status.UNFINISHED.value).sum()),
        "duration_s": duration,
        "throughput_tok_s": float(req.generated_tokens.sum()) / duration,
        "throughput_req_s": len(fin) / duration,
        "mean_batch": mem.batch_seq_s / mem.busy_s if mem.busy_s > 0 else 0.0,
        "max_batch": mem.max_batch,
        "preemptions": res.preemptions,
    }
    for m in ("ttft_s", "tpot_s", "e2e_s"):
        for q in (50, 90, 99):
            out[f"{m[:-2]}_p{q}_s"] = _pct(fin[m], q)
    for c in MEMORY_CATEGORIES:
        out[f"mem_{c}"] = shares[c]
    # Of the memory not free-and-usable, the share holding token states (vLLM paper's measure).
    out["kv_efficiency"] = shares["token_states"] / occupied if occupied > 0 else float("nan")
    out["peak_held_frac"] = mem.peak_held / res.pool_tokens
    span = mem.t_last - (mem.t_first or 0.0)
    if res.shares_kv:
        out["mem_saved_by_sharing"] = mem.shared_integral / (span * res.pool_tokens) if span > 0 else 0.0
        out["peak_saved_by_sharing"] = mem.peak_shared / res.pool_tokens
    ex = res.extra
    if ex.get("lookup_tokens"):
        out["prefix_hit_rate_tokens"] = ex["hit_tokens"] / ex["lookup_tokens"]
        out["prefill_tokens_saved"] = ex["hit_tokens"]
    if ex.get("lookup_blocks"):
        out["prefix_hit_rate_blocks"] = ex["hit_blocks"] / ex["lookup_blocks"]
    out["pool_tokens"] = res.pool_tokens
    out["sim_steps"] = res.steps
    out["sim_events"] = res.events
    out["wall_s"] = res.wall_s
    out.update(res.extra)
    return out


def timeline_frame(res: SimResult) -> pd.DataFrame:
    cols = ["t_s", *MEMORY_CATEGORIES]
    df = pd.DataFrame(res.memory.timeline, columns=cols)
    for c in MEMORY_CATEGORIES:
        df[c] = df[c] / res.pool_tokens
    return df
