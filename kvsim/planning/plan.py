"""`kvsim plan`: the highest SLO-meeting request rate per configuration, and what a target rate costs.

Configurations are GPU types x allocators, or the variants of a built-in study:
- ``block-size``: paged blocks of 8, 16, 32, 64, 128 tokens (internal waste vs block-table size vs,
  given ``--kernel-bench``, measured kernel time);
- ``gpu-mem-util``: --gpu-memory-utilization 0.80, 0.85, 0.90, 0.95.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass, field

from kvsim.errors import ConfigError
from kvsim.planning.capacity import Evaluation, find_capacity
from kvsim.planning.slo import Slo, check_slos

BLOCK_SIZES = (8, 16, 32, 64, 128)
MEM_UTILS = (0.80, 0.85, 0.90, 0.95)
REPORT_METRICS = (
    "throughput_tok_s",
    "throughput_req_s",
    "mean_batch",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p99_s",
    "preemptions",
    "mem_token_states",
    "mem_reserved",
    "mem_internal_frag",
    "mem_external_frag",
    "mem_free",
    "kv_efficiency",
    "prefix_hit_rate_tokens",
    "rejected",
)


@dataclass
class PlanJob:
    label: str
    point: dict  # simulation options (no rate)
    slos: list[Slo]
    cost_per_hour: float | None  # $ per GPU-hour
    tol: float
    max_steps: int
    extra: dict = field(default_factory=dict)  # study columns


MAX_GPU_TYPES = 64  # --gpus: each type is planned on its own


def parse_gpus(text: str) -> list[tuple[str, float | None]]:
    """``h100-80gb:4.5,a100-80gb`` -> [('h100-80gb', 4.5), ('a100-80gb', None)]."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, cost = part.partition(":")
        try:  # ASCII only: float() also reads other scripts' digits ('٣' is 3.0)
            c = (float(cost) if cost.isascii() else float("nan")) if cost else None
        except ValueError:
            c = float("nan")
        if c is not None and not (math.isfinite(c) and c >= 0):
            raise ConfigError(f"--gpus {reprlib.repr(part)}: cost must be a finite number >= 0 of $ per GPU-hour")
        out.append((name, c))
    if not out:
        raise ConfigError("--gpus is empty")
    if len(out) > MAX_GPU_TYPES:
        raise ConfigError(f"--gpus: {len(out):,} GPU types; at most {MAX_GPU_TYPES}")
    from kvsim.hardware import get_gpu

    named = [get_gpu(name).name for name, _ in out]
    twice = sorted({n for n in named if named.count(n) > 1})
    if twice:
        raise ConfigError(f"--gpus names {', '.join(twice)} more than once (one price per GPU)")
    return out


def make_jobs(
    base: dict,
    gpus,
    allocators: list,
    slos,
    study: str | None,
    tol: float,
    max_steps: int,
    kernel_bench: str | None = None,
) -> list[PlanJob]:
    jobs = []
    for gpu, cost in gpus:
        if study == "block-size":
            from kvsim.allocators import parse_allocator

            kernel = _kernel_times(kernel_bench) if kernel_bench else {}
            for alloc in allocators:
                spec = parse_allocator(str(alloc))
                if not spec.has_blocks:
                    continue
                for b in BLOCK_SIZES:
                    name = str(spec.with_block_size(b))
                    extra = {"block_size": b}
                    if b in kernel:
                        extra["kernel_us"] = kernel[b]
                    jobs.append(
                        PlanJob(
                            f"{gpu} {name}", {**base, "gpu": gpu, "allocator": name}, slos, cost, tol, max_steps, extra
                        )
                    )
            if not jobs:
                raise ConfigError("--study block-size needs a paged or radix allocator in --allocators")
        elif study == "gpu-mem-util":
            for alloc in allocators:
                for u in MEM_UTILS:
                    jobs.append(
                        PlanJob(
                            f"{gpu} {alloc} util={u:.2f}",
                            {**base, "gpu": gpu, "allocator": str(alloc), "gpu_memory_utilization": u},
                            slos,
                            cost,
                            tol,
                            max_steps,
                            {"gpu_memory_utilization": u},
                        )
                    )
        elif study is None:
            for alloc in allocators:
                jobs.append(
                    PlanJob(f"{gpu} {alloc}", {**base, "gpu": gpu, "allocator": str(alloc)}, slos, cost, tol, max_steps)
                )
        else:
            raise ConfigError(f"unknown --study '{study}' (block-size, gpu-mem-util)")
    return jobs


def _kernel_times(path: str) -> dict[int, float]:
    """Per block size, the decode kernel time (us) at the bench point with the most KV."""
    from kvsim.trace.csv_read import csv_rows, num_field

    best: dict[int, tuple[float, float]] = {}  # block size -> (KV bytes, seconds) of its largest point
    for line, row in csv_rows(path, ("block_size", "kv_bytes", "time_s")):
        b = num_field(row, "block_size", path, line)
        kv, t = num_field(row, "kv_bytes", path, line, float), num_field(row, "time_s", path, line, float)
        if b < 1 or t <= 0:
            raise ConfigError(f"{path}:{line}: a kernel bench row needs block_size >= 1 and time_s > 0")
        if b not in best or kv >= best[b][0]:
            best[b] = (kv, t)
    if not best:
        raise ConfigError(f"{path}: no kernel bench rows (write them with `kvsim kernels bench`)")
    return {b: t * 1e6 for b, (_, t) in best.items()}


def _evaluate(built, slos, rate: float) -> Evaluation:
    """A built point (planning.point.BuiltPoint) run at ``rate`` requests/s, judged by the SLOs."""
    from kvsim.planning.point import evaluate_requests

    s = evaluate_requests(built.cfg, built.spec, built.at_rate(rate))
    why = check_slos(s, slos)
    if not s["stable"]:
        why.append("queue keeps growing (unstable)")
    if s["sustain"] != "ok":  # a rate counts only when the run sustains it (point.sustained)
        why.append(s["sustain_note"])
    return Evaluation(rate, not why, why, s)


def _why_never(built, slos, reason: str) -> str:
    """Explain an infeasible configuration with what a single request costs on its own."""
    from kvsim.latency import StepShape, build_latency

    import numpy as np

    cfg, reqs = built.cfg, built.requests
    lat = build_latency(cfg)
    budget = cfg.engine_scheduler().max_num_batched_tokens  # as the engine chunks (speculative: / tau)
    notes = [reason]
    for s in slos:
        if s.metric == "ttft":
            p = int(np.percentile([r.prompt_tokens for r in reqs], s.pct))
            t, done = 0.0, 0
            while done < p:  # the prompt alone, in budget-sized chunks
                n = min(budget, p - done)
                t += lat.step_time(StepShape.of([(n, done)]))
                done += n
            if t > s.limit_s:
                notes.append(f"the p{s.pct} prompt ({p} tokens) alone takes {t:.3g} s to prefill > {s.limit_s:g} s")
        if s.metric == "tpot":
            ctx = int(np.percentile([r.total_tokens for r in reqs], 50))
            t = lat.step_time(StepShape.decode(1, ctx))
            if t > s.limit_s:
                notes.append(f"one decode step of a single sequence takes {t:.3g} s > {s.limit_s:g} s")
    return "; ".join(notes)


def run_job(job: PlanJob) -> tuple[dict, list[dict]]:
    """Capacity search for one configuration: (capacity row, rows of every evaluation)."""
    from kvsim.planning.point import build_point

    built = build_point(job.point)  # once: the search varies only the rate
    cfg, reqs, base_rate = built.cfg, built.requests, built.rate
    if not math.isfinite(base_rate):
        from kvsim.planning.point import no_gaps_message

        raise ConfigError(
            no_gaps_message(str(job.point["trace"]), len(reqs)) + "; capacity planning needs arrivals spread over time"
        )
    cap = find_capacity(lambda r: _evaluate(built, job.slos, r), base_rate, job.tol, job.max_steps)
    cfg_cols = {"config": job.label, "gpu": job.point["gpu"], "allocator": job.point["allocator"], **job.extra}
    best = max((e for e in cap.evaluations if e.ok), key=lambda e: e.rate, default=None)
    reason = _why_never(built, job.slos, cap.reason) if cap.status == "never" else cap.reason
    short = [e for e in cap.evaluations if not e.ok and e.summary.get("sustain") == "too-short"]
    if short:  # above some rate the trace cannot show whether the server keeps up
        first = min(short, key=lambda e: e.rate)
        note = f"at {first.rate:.3g} req/s and above, the trace is {first.summary['sustain_note']}"
        reason = f"{reason}; {note}" if reason else note
    row = {
        **cfg_cols,
        "max_rate_req_s": cap.max_rate,
        "meets_slo": cap.max_rate is not None,
        "search": cap.status,
        "search_steps": cap.steps,
        "bracket_lo": cap.bracket[0],
        "bracket_hi": cap.bracket[1],
        "tolerance": cap.tolerance,
        "reason": reason,
        "cost_per_gpu_hour": job.cost_per_hour,
    }
    if best is not None:
        row.update({f"at_max_{k}": best.summary.get(k) for k in REPORT_METRICS})
        row["mean_output_tokens"] = best.summary["mean_output_tokens"]
        row["mean_prompt_tokens"] = best.summary.get("mean_prompt_tokens")
        row["tp"] = cfg.tp
        row["gpus_per_replica"] = cfg.gpus
        if "block_size" in job.extra:
            row["table_entries_per_seq"] = _mean_blocks(reqs, job.extra["block_size"])
    points = [
        {
            **cfg_cols,
            "rate": e.rate,
            "ok": e.ok,
            "why": "; ".join(e.why),
            **{k: e.summary.get(k) for k in REPORT_METRICS},
        }
        for e in cap.evaluations
    ]
    return row, points


def window_trace(trace: str, n: int, folder, skip_invalid: bool = False) -> tuple[str, float, str] | None:
    """For a trace of more than ``n`` requests: its busiest ``n`` consecutive arrivals (window.trace_window);
    (path, the whole trace's mean rate over the window's, note). None for shorter traces, or one without arrival
    gaps (the search refuses it with its own message)."""
    from kvsim.planning.window import trace_window

    w = trace_window(trace, n, folder, skip_invalid=skip_invalid)
    if w is None:
        return None
    return (
        w.path,
        w.rate_ratio,
        (
            f"searched on the busiest {n:,} of the trace's {w.total:,} requests (--plan-requests {n:,}; they arrive "
            f"{1 / w.rate_ratio:.2f}x as fast as the whole trace); rates are the whole trace's mean rate at the same "
            "scaling, and each configuration's capacity was then run on the whole trace"
        ),
    )


def _whole_trace_check(args: tuple) -> Evaluation:
    from kvsim.planning.point import build_point

    point, slos, rate = args
    return _evaluate(build_point(point), slos, rate)


def on_whole_trace(
    rows: list[dict],
    points: list[dict],
    jobs: list[PlanJob],
    trace: str,
    ratio: float,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
) -> None:
    """Turn a window's capacity search (:func:`window_trace`) into the whole trace's terms, in place: every rate
    times ``ratio`` (the same scaling of the gaps), then each capacity simulated on the whole ``trace``
    (``whole_trace``: met, or what it missed; the at_max_* figures become the whole trace's when met)."""
    from kvsim.planning.parallel import run_jobs

    for r in rows:
        for k in ("max_rate_req_s", "bracket_lo", "bracket_hi"):
            if r.get(k) is not None and math.isfinite(r[k]):
                r[k] *= ratio
    for p in points:
        p["rate"] *= ratio
    todo = [(r, j) for r, j in zip(rows, jobs) if r.get("max_rate_req_s")]
    checks = run_jobs(
        _whole_trace_check,
        [({**j.point, "trace": trace}, j.slos, r["max_rate_req_s"]) for r, j in todo],
        workers,
        backend,
        address,
        label="whole trace",
    )
    for (r, _), e in zip(todo, checks):
        r["whole_trace"] = "met" if e.ok else "missed: " + "; ".join(e.why)
        if e.ok:
            r.update({f"at_max_{k}": e.summary.get(k) for k in REPORT_METRICS})
        else:
            note = f"on the whole trace at that rate it missed: {'; '.join(e.why)}"
            r["reason"] = f"{r['reason']}; {note}" if r.get("reason") else note


def _mean_blocks(reqs, block: int) -> float:
    return sum(-(-r.total_tokens // block) for r in reqs) / len(reqs)


def add_costs(rows: list[dict], target_rate: float | None) -> None:
    """Replicas and $ per million output tokens, at the target rate (or one replica at its max rate)."""
    for r in rows:
        cap = r.get("max_rate_req_s")
        if not cap:
            continue
        gpus_per_replica = r.get("gpus_per_replica") or r.get("tp", 1)  # tables written before pipeline stages
        rate = target_rate if target_rate else cap
        replicas = math.ceil(rate / cap - 1e-9) if target_rate else 1
        r["replicas"] = replicas
        r["gpus"] = replicas * gpus_per_replica
        if r.get("cost_per_gpu_hour") is not None:
            per_hour = r["gpus"] * r["cost_per_gpu_hour"]
            tokens_per_hour = rate * r["mean_output_tokens"] * 3600
            r["cost_per_hour"] = per_hour
            r["cost_per_m_output_tokens"] = per_hour / tokens_per_hour * 1e6
            if r.get("mean_prompt_tokens"):
                # providers quote input and output prices apart; with one GPU-hour serving both, the blended
                # price per million tokens processed (prompt + output) is the comparable figure
                all_tokens = rate * (r["mean_prompt_tokens"] + r["mean_output_tokens"]) * 3600
                r["cost_per_m_tokens"] = per_hour / all_tokens * 1e6
