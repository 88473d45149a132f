"""A run of a changing fleet in a planner's terms: GPU-hours, SLOs over time (the share of windows in which they
hold), misses caused by cold starts, and the plot of replicas and TTFT p99 over the run."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kvsim.planning.slo import Slo, add_slo_columns, check_slos, within_slos

SLO_WINDOW_S = 300.0  # windows over which the SLOs are judged (5 minutes)


def windows_meeting(requests: pd.DataFrame, slos: list[Slo], t0: float, window_s: float = SLO_WINDOW_S) -> float:
    """Of the ``window_s`` windows (by arrival, from ``t0``) that had requests, the share in which every SLO's
    percentile holds over the requests that arrived then (a request never finished counts as missing)."""
    if not slos or not len(requests):
        return math.nan
    k = np.floor((requests.arrival_s.to_numpy(dtype=float) - t0) / window_s)
    ok = total = 0
    for _, w in requests.groupby(k):
        fin = w[w.status == "finished"]
        late = len(w) - len(fin)  # an unfinished request is as late as it gets: it counts above every limit
        summary = {}
        for s in slos:
            col = fin[f"{s.metric}_s"].dropna()
            v = (
                np.concatenate([col.to_numpy(dtype=float), np.full(late, np.inf)])
                if late
                else col.to_numpy(dtype=float)
            )
            summary[s.key] = float(np.percentile(v, s.pct)) if len(v) else math.nan
        total += 1
        ok += not check_slos(summary, slos)
    return ok / total if total else math.nan


def cold_start_misses(requests: pd.DataFrame, replicas: pd.DataFrame, slos: list[Slo], t0: float) -> int:
    """Requests that missed an SLO and arrived while a replica of the fleet was starting (asked for, not yet
    serving): the misses a fleet that was already large enough would not have had."""
    if not slos or not len(requests):
        return 0
    spans = [
        (r.started_s, r.ready_s if not math.isnan(r.ready_s) else r.stopped_s)
        for r in replicas.itertuples()
        if r.started_s > 0 and not (math.isnan(r.ready_s) and math.isnan(r.stopped_s))
    ]
    if not spans:
        return 0
    missed = ~within_slos(requests, slos)
    t = requests.arrival_s.to_numpy(dtype=float) - t0
    starting = np.zeros(len(t), dtype=bool)
    for a, b in spans:
        starting |= (t >= a) & (t < b)
    return int((missed.to_numpy() & starting).sum())


def add_over_time_columns(run, layout: str, slos: list[Slo], gpus: int, t0: float) -> None:
    """A fleet run's summary gains its ``layout`` name, the SLO columns (``gpus``: of the fleet's peak), the share
    of 5-minute windows meeting the SLOs and the misses while replicas started (``t0``: the trace's first
    arrival)."""
    s = run.summary
    s["layout"] = layout
    add_slo_columns(s, run.requests, slos, gpus)
    s["slo_windows_met"] = windows_meeting(run.requests, slos, t0)
    s["cold_start_misses"] = cold_start_misses(run.requests, run.replica_table, slos, t0)


def against_fixed(changing_gpu_h: float, fixed_gpu_h: float) -> str:
    """``"41% fewer"`` (or ``"12% more"``): a changing fleet's GPU-hours against the fixed fleet's."""
    saved = 1 - changing_gpu_h / max(fixed_gpu_h, 1e-12)
    return f"{100 * abs(saved):.0f}% {'fewer' if saved >= 0 else 'more'}"


def plot_over_time(timelines: dict[str, pd.DataFrame], path, slos: list[Slo] | tuple = ()) -> None:
    """Replicas (serving and starting) and the windowed TTFT p99 over the run, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for name, tl in timelines.items():
        if not len(tl):
            continue
        hours = tl.t_s / 3600
        a1.step(hours, tl.serving + tl.starting + tl.draining, where="post", label=name)
        a2.plot(hours, tl.ttft_p99_s, label=name)
    for s in slos:
        if s.metric == "ttft":
            a2.axhline(s.limit_s, color="grey", linestyle="--", linewidth=1, label=str(s))
    a1.set_ylabel("replicas")
    a2.set_ylabel("TTFT p99 (s, window)")
    a2.set_xlabel("hours")
    a1.legend(loc="upper left", fontsize=8)
    a2.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
