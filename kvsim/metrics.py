"""Per-request and per-run metrics, as pandas DataFrames / dicts at the edge of the core."""

from __future__ import annotations

from operator import attrgetter

import numpy as np
import pandas as pd

from kvsim.allocators.base import MEMORY_CATEGORIES
from kvsim.collector import paused
from kvsim.engine.sequence import Status
from kvsim.engine.simulator import SimResult

REQUEST_COLUMNS = [
    "id",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "status",
    "reason",
    "admitted_s",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "queue_s",
    "generated_tokens",
    "preemptions",
    "cached_prompt_tokens",
    "cache_hit_tokens_all_starts",
    "frontend_s",
]


def requests_frame(res: SimResult) -> pd.DataFrame:
    """One row per trace request of the run (see :func:`sequences_frame`)."""
    return sequences_frame(res.sequences, res.t0)


_SEQUENCE_FIELDS = attrgetter(
    "status", "reason", "finish_s", "generated", "preemptions", "last_cached_tokens", "cached_tokens", "admitted_s",
    "first_token_s", "frontend_s", "req", "samples",
)  # fmt: skip
_REQUEST_FIELDS = attrgetter("id", "arrival_s", "prompt_tokens", "output_tokens")
# a request's status in the table by its (first) sequence's, as plain text; any other state is "unfinished"
_ENDED = {x: x.value for x in (Status.FINISHED, Status.REJECTED, Status.CANCELLED)}


def sequences_frame(seqs, t0: float, chunk: int = 1 << 15) -> pd.DataFrame:
    """One row per trace request (``seqs``: their sequences; times on the engines' clock, which starts at
    ``t0``); a request with n > 1 samples aggregates them (finished when all are). Built column by column,
    ``chunk`` sequences at a time: their fields read in one call each, numbers straight into numpy arrays (no
    list of a million values beside them), and only requests with samples take a loop of their own. The
    collector is paused meanwhile: rows make no cycles (kvsim/collector.py)."""
    with paused():
        return _sequences_frame(seqs, t0, chunk)


def _sequences_frame(seqs, t0: float, chunk: int) -> pd.DataFrame:
    nan = float("nan")
    n = len(seqs)
    finished, rejected, cancelled = Status.FINISHED, Status.REJECTED, Status.CANCELLED
    unfinished = Status.UNFINISHED.value
    ids: list = []
    status: list[str] = []
    reason: list[str] = []
    with_samples: list[int] = []
    arrival, admitted, first, fin, frontend = (np.empty(n) for _ in range(5))
    prompt, output, generated, preempt, cached, cached_all = (np.empty(n, np.int64) for _ in range(6))
    for start in range(0, n, chunk):
        part = slice(start, min(start + chunk, n))
        states, reasons, finish_s, gen, pre, cac, cac_all, adm, fst, front, reqs, samples = zip(
            *map(_SEQUENCE_FIELDS, seqs[part])
        )
        status += [_ENDED.get(x, unfinished) for x in states]
        reason += reasons
        fin[part] = [x if state is finished else nan for x, state in zip(finish_s, states)]
        generated[part], preempt[part], cached[part], cached_all[part], frontend[part] = gen, pre, cac, cac_all, front
        admitted[part] = [nan if x is None else x for x in adm]
        first[part] = [nan if x is None else x for x in fst]
        rid, arrival[part], prompt[part], output[part] = zip(*map(_REQUEST_FIELDS, reqs))
        ids += rid
        with_samples += [start + j for j, x in enumerate(samples) if x]
    for i in with_samples:
        s = seqs[i]
        group = [s, *s.samples]
        done = s.status is not rejected and all(g.status == finished for g in group)
        reason[i] = s.reason or next((g.reason for g in group if g.reason), "")
        fin[i] = max(g.finish_s for g in group) if done else nan
        generated[i] = sum(g.generated for g in group)
        preempt[i] = sum(g.preemptions for g in group)
        cached_all[i] = sum(g.cached_tokens for g in group)
        status[i] = _ENDED[s.status] if s.status in (rejected, cancelled) else finished.value if done else unfinished
    rel = arrival - t0  # the engine's clock starts at the first arrival; latencies come from its times
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (fin - first) / np.maximum(output - 1, 1), nan)
    return pd.DataFrame(
        {
            "id": ids,
            "arrival_s": arrival,
            "prompt_tokens": prompt,
            "output_tokens": output,
            "status": status,
            "reason": reason,
            "admitted_s": admitted + t0,
            "first_token_s": first + t0,
            "finish_s": fin + t0,
            "ttft_s": first - rel,
            "tpot_s": tpot,
            "e2e_s": fin - rel,
            "queue_s": admitted - rel,
            "generated_tokens": generated,
            "preemptions": preempt,
            # prompt tokens the cache served at the latest (re)start (<= prompt), and summed over every restart
            # and sample (what the run's hit rate counts)
            "cached_prompt_tokens": cached,
            "cache_hit_tokens_all_starts": cached_all,
            # of the TTFT, what the API server added: intake (queueing, tokenization) and delivery
            "frontend_s": frontend,
        },
        columns=REQUEST_COLUMNS,
    )


def percentile(values, q: float) -> float:
    """The ``q``-th percentile of ``values`` (a Series or array) without their NaNs; NaN when none is left."""
    v = pd.Series(values).dropna()
    return float(np.percentile(v, q)) if len(v) else float("nan")


def run_summary(res: SimResult, req: pd.DataFrame | None = None) -> dict:
    """One row of run-level metrics. Memory shares are time-weighted fractions of the KV pool."""
    req = requests_frame(res) if req is None else req
    fin = req[req.status == Status.FINISHED.value]
    # the engine's clock starts at the first arrival; a client's warm-up is not part of the measured run
    duration = max(res.end_s - res.start_s, 1e-12)
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
            out[f"{m[:-2]}_p{q}_s"] = percentile(fin[m], q)
    if res.gaps is not None:  # inter-token latency, as a streaming client times it (engine/step_gaps.py)
        for q, v in res.gaps.percentiles((50, 90, 99), res.start_s).items():
            out[f"itl_p{q}_s"] = v
    for c in MEMORY_CATEGORIES:
        out[f"mem_{c}"] = shares[c]
    # Of the memory not free-and-usable, the share holding token states (vLLM paper's measure).
    # Recurrent (mamba) states are state a later token needs, like token states.
    out["kv_efficiency"] = (
        (shares["token_states"] + shares["recurrent_state"]) / occupied if occupied > 0 else float("nan")
    )
    out["peak_held_frac"] = mem.peak_held / res.pool_tokens
    span = mem.t_last - (mem.t_first or 0.0)
    if res.shares_kv:
        # Sharing (prefix hits, forks) stores a token state once for several holders. As a share of what
        # the holders hold (bounded, < 1), and as a multiple of the pool (can exceed 1: the extra pool
        # memory that holding everything unshared would have needed).
        saved = mem.shared_integral / (span * res.pool_tokens) if span > 0 else 0.0
        held = shares["token_states"] + saved
        out["sharing_dedup_frac"] = saved / held if held > 0 else 0.0
        out["saved_by_sharing_x_pool"] = saved
        out["peak_saved_by_sharing_x_pool"] = mem.peak_shared / res.pool_tokens
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
    """Memory categories over time: ``t_s`` in seconds after the first arrival, categories as fractions of the pool."""
    cols = ["t_s", *MEMORY_CATEGORIES]
    df = pd.DataFrame(res.memory.timeline, columns=cols)
    for c in MEMORY_CATEGORIES:
        df[c] = df[c] / res.pool_tokens
    return df
