"""`kvsim plan --fleet-max-gpus N`: the cheapest fleet layout that serves a trace within its SLOs, by simulation.

For each GPU type the search tries fleets of G GPUs: aggregated (G / tp replicas behind each router, for
every tensor-parallel size tp of ``--fleet-tp`` that divides G) and disaggregated (P prefill replicas of
tp_p GPUs and D decode replicas of tp_d GPUs, P x tp_p + D x tp_d = G, every pair of sizes and every split,
or a spread of splits for large fleets; prefill router first of the list, decode least-requests). It
doubles G until some layout meets every SLO, then bisects between the last size where none did and the
first where one did, so it simulates O(log N) fleet sizes rather than assuming n replicas carry n times one
replica's rate. Sizes step by the gcd of the TP sizes. Every layout of a probed size runs as an
independent job (local processes or Ray, as sweeps).

A trace longer than ``--plan-requests`` (20,000) is searched on a window of it: the busiest stretch of that
many consecutive arrivals (at the planned rate; the first ones when clients or --request-rate set the load),
and the cheapest layouts found are then simulated on the whole trace, cheapest first, until one meets the
SLOs there (:func:`verify_on_whole_trace`): a 1M-request trace is planned in minutes, sized for its peak.

Bounds: ``--fleet-max-gpus`` is at most MAX_FLEET_GPUS (4,096) per GPU type. The doubling stops early when a
fleet twice as large (every tensor-parallel size already in both) brings no SLO metric closer to its limit (by
under NO_GAIN, 2%): the SLOs are then beyond what one request takes however few share a replica, and more GPUs
cannot meet them; the plan says so rather than simulate fleets up to the maximum.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvsim.errors import ConfigError
from kvsim.planning.slo import Slo, check_slos, within_slos
from kvsim.planning.window import busiest_window, trace_window  # noqa: F401 (busiest_window: re-exported)


@dataclass(frozen=True)
class Layout:
    gpu: str
    tp: int  # GPUs per decode replica, or per replica of an aggregated fleet
    prefill: int  # prefill replicas (0: aggregated)
    decode: int  # decode replicas, or the replicas of an aggregated fleet
    router: str
    prefill_tp: int = 0  # GPUs per prefill replica (0: as ``tp``)
    pp: int = 1  # pipeline stages of every replica (each stage ``tp`` GPUs)
    dp: int = 1  # data-parallel ranks of every replica (each rank ``tp`` x ``pp`` GPUs)
    ep: bool | None = None  # expert parallelism (MoE) for every replica; None: as the simulation options say

    @property
    def ptp(self) -> int:
        return self.prefill_tp or self.tp

    @property
    def replicas(self) -> int:
        return self.prefill + self.decode

    @property
    def gpus(self) -> int:
        return (self.prefill * self.ptp + self.decode * self.tp) * self.pp * self.dp

    @property
    def name(self) -> str:
        tp = f" tp{self.tp}" if self.tp > 1 else ""
        if not self.prefill:
            name = f"{self.decode}x {self.gpu}{tp}"
        elif self.ptp == self.tp:
            name = f"{self.prefill}P{self.decode}D {self.gpu}{tp}"
        else:
            name = f"{self.prefill}P(tp{self.ptp}){self.decode}D(tp{self.tp}) {self.gpu}"
        return (
            name
            + (f" pp{self.pp}" if self.pp > 1 else "")
            + (f" dp{self.dp}" if self.dp > 1 else "")
            + (" ep" if self.ep else "")
        )


@dataclass(frozen=True)
class FleetJob:
    trace: str
    values: dict  # simulation options (the GPU is the layout's)
    layout: Layout
    rate: float | None  # req/s the trace's arrivals are rescaled to (None: as recorded)
    slos: tuple[Slo, ...]
    link: str
    cost_per_gpu_hour: float | None
    allocator: str = "paged+prefix"
    shared_link: bool = False  # each engine's links carry one KV transfer at a time (kvsim cluster --kv-link-shared)


VERIFY_TRIES = 3  # cheapest layouts of the window re-run on the whole trace, at most
MAX_FLEET_GPUS = 4096  # --fleet-max-gpus: GPUs of one type a fleet plan may size (as `kvsim cluster`'s replicas)
NO_GAIN = 0.02  # a fleet twice as large that brings the SLO metrics less than 2% closer ends the doubling


def plan_window(
    trace: str, rate: float | None, n: int, retimed: bool, folder, skip_invalid: bool = False
) -> tuple[str, float | None, str]:
    """The trace the search simulates when ``trace`` has more than ``n`` requests (window.trace_window: its
    busiest ``n``, or with ``retimed``, when clients or --request-rate set the load, its first ``n``) and the
    rate its jobs scale it to: ``rate`` x the window's rate / the whole trace's, the same scaling of the gaps
    as ``rate`` gives the whole trace; (path, rate for the jobs, note). Shorter traces: (trace, rate, '').
    ``skip_invalid``: the trace's bad lines are left out (--skip-invalid)."""
    w = trace_window(trace, n, folder, first=retimed, skip_invalid=skip_invalid)
    if w is None:
        return trace, rate, ""
    if retimed:
        how = f"the first {n:,}"
    else:
        rate = None if rate is None else rate / w.rate_ratio
        how = (
            f"the busiest {n:,} ({1 / w.rate_ratio:.2f}x the whole trace's rate: "
            f"{w.rate if rate is None else rate:,.2f} req/s at the planned one)"
        )
    return (
        w.path,
        rate,
        (
            f"searched on {how} of the trace's {w.total:,} requests (--plan-requests {n:,}); the "
            "cheapest layouts found then ran on the whole trace"
        ),
    )


def verify_on_whole_trace(
    rows: list[dict],
    jobs: dict,
    trace: str,
    rate: float | None,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
) -> list[dict]:
    """The cheapest layouts that met the SLOs on the window (:func:`cheapest` of ``rows``), simulated on the
    whole ``trace``, cheapest first, ``workers`` at a time, until one meets them there (VERIFY_TRIES at most);
    their rows (``probe`` 'whole trace'), cheapest first. ``jobs``: each row's job, by (gpu, layout, router)."""
    from kvsim.planning.parallel import run_jobs

    todo, out = cheapest(rows)[:VERIFY_TRIES], []
    step = max(1, workers)
    for i in range(0, len(todo), step):
        batch = todo[i : i + step]
        got = run_jobs(
            evaluate,
            [replace(jobs[(r["gpu"], r["layout"], r["router"])], trace=trace, rate=rate) for r in batch],
            workers,
            backend,
            address,
            label="on the whole trace",
        )
        for r, g in zip(batch, got):
            g["layout"], g["probe"] = r["layout"], "whole trace"
        out += got
        if any(g["meets_slo"] for g in got):
            break
    return out


def rescaled(requests: list, rate: float | None) -> list:
    """The requests with inter-arrival times scaled so that they arrive at ``rate`` req/s on average."""
    if rate is None or len(requests) < 2:
        return requests
    t0 = min(r.arrival_s for r in requests)
    span = max(r.arrival_s for r in requests) - t0
    if span <= 0:
        return requests
    k = (len(requests) - 1) / span / rate
    return [replace(r, arrival_s=t0 + (r.arrival_s - t0) * k) for r in requests]


def evaluate(job: FleetJob) -> dict:
    """Simulate one layout; its row: size, latency, throughput per GPU, SLO attainment, cost."""
    from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
    from kvsim.fleet.disagg import parse_link, simulate_disagg
    from kvsim.options import config_from_options
    from kvsim.runner import resolve_allocator
    from kvsim.trace import load_trace

    L = job.layout
    shape = {
        "gpu": L.gpu,
        "pipeline_parallel_size": L.pp,
        "data_parallel_size": L.dp,
        **({} if L.ep is None else {"enable_expert_parallel": L.ep}),
    }
    cfg = config_from_options({**job.values, **shape, "tensor_parallel_size": L.tp})
    spec = resolve_allocator(job.allocator, cfg)
    reqs = rescaled(load_trace(job.trace, skip_invalid=bool(job.values.get("skip_invalid"))).requests, job.rate)
    if L.prefill:
        pcfg = cfg if L.ptp == L.tp else config_from_options({**job.values, **shape, "tensor_parallel_size": L.ptp})
        f = simulate_disagg(
            reqs,
            [ReplicaGroup(L.gpu, pcfg, spec, L.prefill)],
            [ReplicaGroup(L.gpu, cfg, spec, L.decode)],
            L.router,
            "least-requests",
            link=parse_link(job.link),
            shared_link=job.shared_link,
        )
    else:
        f = simulate_fleet(reqs, [ReplicaGroup(L.gpu, cfg, spec, L.decode)], L.router)
    s, req = f.summary, f.requests
    bad = check_slos(s, list(job.slos))
    if s["rejected"]:
        bad.append(f"{s['rejected']} requests rejected")
    ok = within_slos(req, list(job.slos))
    duration = max(s["duration_s"], 1e-12)
    row = {
        "gpu": L.gpu,
        "layout": L.name,
        "mode": "disaggregated" if L.prefill else "aggregated",
        "prefill": L.prefill,
        "decode": L.decode,
        "tp": L.tp,
        "prefill_tp": L.ptp if L.prefill else 0,
        "pp": L.pp,
        "dp": L.dp,
        "ep": cfg.enable_expert_parallel,
        "router": L.router,
        "gpus": L.gpus,
        "meets_slo": not bad,
        "violations": "; ".join(bad),
        "slo_attainment": float(ok.mean()) if len(req) else 0.0,
        "finished": s["finished"],
        "ttft_p99_s": s["ttft_p99_s"],
        "tpot_p99_s": s["tpot_p99_s"],
        "ttft_p50_s": s["ttft_p50_s"],
        "throughput_tok_s": s["throughput_tok_s"],
        "tok_s_per_gpu": s["throughput_tok_s"] / L.gpus,
        "req_s_per_gpu": s["throughput_req_s"] / L.gpus,
        "prefix_hit_rate_tokens": s["prefix_hit_rate_tokens"],
        "api_server_busy": f.api_server_busy,
        "requests": len(reqs),
        "sim_wall_s": s["wall_s"],
        "slo_ratio": slo_ratio(s, job.slos),
    }
    if job.cost_per_gpu_hour is not None:
        row["cost_per_hour"] = L.gpus * job.cost_per_gpu_hour
        out_tokens = float(req.generated_tokens.sum())
        row["cost_per_m_output_tokens"] = (
            row["cost_per_hour"] * duration / 3600 / out_tokens * 1e6 if out_tokens else float("nan")
        )
    return row


def slo_ratio(summary: dict, slos) -> float:
    """The worst SLO metric over its limit (at most 1: every SLO holds; inf: a metric without finished requests),
    what the search watches to tell that more GPUs no longer help."""
    worst = 0.0
    for slo in slos:
        v = summary.get(slo.key)
        if v is None or v != v:
            return float("inf")
        worst = max(worst, v / slo.limit_s if slo.limit_s > 0 else (float("inf") if v > 0 else 0.0))
    return worst


def layouts_of(
    gpu: str,
    tps: int | list[int],
    gpus: int,
    routers: list[str],
    by_gpus: bool = False,
    pp: int = 1,
    dp: int = 1,
    ep: bool | None = None,
) -> list[Layout]:
    """The layouts of a fleet: aggregated behind each router; disaggregated behind the first router, every
    split up to 8 replicas and 1:3, 1:1, 3:1 of the GPUs (rounded) beyond, for every pair of TP sizes.
    With one TP size and ``by_gpus`` False, ``gpus`` counts replicas (the fleet of ``gpus`` x tp x pp x dp GPUs).
    Every replica has ``pp`` pipeline stages and ``dp`` data-parallel ranks: the splits are made in units of
    pp x dp (``gpus`` / (pp x dp))."""
    tps = [tps] if isinstance(tps, int) else sorted(set(tps))
    unit = pp * dp
    if not by_gpus:
        gpus *= tps[0] * unit
    if gpus % unit:
        return []
    return [replace(L, pp=pp, dp=dp, ep=ep) for L in _layouts_of_stages(gpu, tps, gpus // unit, routers)]


def _layouts_of_stages(gpu: str, tps: list[int], gpus: int, routers: list[str]) -> list[Layout]:
    """:func:`layouts_of` for replicas of one stage (``gpus``: the GPUs of one stage of every replica)."""
    out = [Layout(gpu, tp, 0, gpus // tp, r) for tp in tps if gpus % tp == 0 for r in routers]
    for ptp in tps:
        for dtp in tps:
            splits = [p for p in range(1, gpus // ptp + 1) if (gpus - p * ptp) >= dtp and (gpus - p * ptp) % dtp == 0]
            if len(splits) > 7:  # a spread: the prefill pool a quarter, half and three quarters of the GPUs
                splits = sorted(
                    {
                        min(splits, key=lambda p: (abs(p - gpus * f / ptp), abs(p - round(gpus * f / ptp))))
                        for f in (0.25, 0.5, 0.75)
                    }
                )
            out += [Layout(gpu, dtp, p, (gpus - p * ptp) // dtp, routers[0], ptp if ptp != dtp else 0) for p in splits]
    return out


def fits(gpu: str, tp: int, values: dict) -> bool:
    """Whether a replica of ``tp`` GPUs holds the model with a KV pool (the search skips sizes that do not)."""
    from kvsim.options import config_from_options

    try:
        config_from_options({**values, "gpu": gpu, "tensor_parallel_size": tp}).pool_plan()
    except ConfigError:
        return False
    return True


def plan_fleet(
    trace: str,
    values: dict,
    gpus: list[tuple[str, float | None]],
    slos: list[Slo],
    max_gpus: int,
    routers: list[str],
    rate: float | None,
    link: str = "rdma",
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    allocator: str = "paged+prefix",
    tps: list[int] | None = None,
    notes: list[str] | None = None,
    pps: list[int] | None = None,
    shared_link: bool = False,
    dps: list[int] | None = None,
    eps: list[bool] | None = None,
    jobs: dict | None = None,
) -> list[dict]:
    """Every layout simulated, each row with ``probe`` (the search step that simulated its fleet size); the
    cheapest that meets every SLO is the first row of :func:`cheapest`. ``tps``: the tensor-parallel sizes
    tried for each pool (default: the configured one); ``pps`` and ``dps``: the pipeline stage counts and
    data-parallel rank counts tried, ``eps``: with and/or without expert parallelism (default: the configured
    ones; each combination is searched on its own, every replica of a layout alike); sizes a replica cannot
    hold the model at are skipped and said in ``notes``; ``jobs`` (given) collects each row's job by (gpu,
    layout, router)."""
    import math

    from kvsim.planning.parallel import run_jobs

    if not 1 <= max_gpus <= MAX_FLEET_GPUS:
        raise ConfigError(f"--fleet-max-gpus {max_gpus}: must be from 1 to {MAX_FLEET_GPUS:,} (GPUs of one type)")
    pps = sorted(set(pps or [int(values.get("pipeline_parallel_size") or 1)]))
    dps = sorted(set(dps or [int(values.get("data_parallel_size") or 1)]))
    tps = sorted(set(tps or [int(values.get("tensor_parallel_size") or 1)]))
    eps = sorted(set(eps or [bool(values.get("enable_expert_parallel"))]))
    shapes = [(pp, dp, ep) for ep in eps for dp in dps for pp in pps]
    rows: list[dict] = []
    too_big, searched = [], False
    for gpu, cost in gpus:
        for pp, dp, ep in shapes:
            vals = {**values, "pipeline_parallel_size": pp, "data_parallel_size": dp, "enable_expert_parallel": ep}
            unit = pp * dp  # the search sizes fleets in steps of whole replicas' stages and ranks
            what = ", ".join(
                w
                for w in (
                    f"{pp} pipeline stages" if len(pps) > 1 else "",
                    f"{dp} data-parallel ranks" if len(dps) > 1 else "",
                    ("" if ep else "no ") + "expert parallelism" if len(eps) > 1 else "",
                )
                if w
            )
            ok = [tp for tp in tps if fits(gpu, tp, vals)]
            if notes is not None and len(ok) < len(tps):
                notes.append(
                    f"{gpu}: skipped tensor parallel {', '.join(str(t) for t in tps if t not in ok)}"
                    f"{' with ' + what if what else ''} (the model and a KV pool do not fit, or the "
                    "heads, layers or experts do not split)"
                )
            if not ok:
                continue
            smallest = min(ok) * unit  # GPUs of the smallest replica
            if max_gpus < smallest:
                if len(shapes) == 1:
                    raise ConfigError(f"--fleet-max-gpus {max_gpus} is less than one replica of {smallest} GPUs")
                too_big.append(smallest)
                if notes is not None:
                    notes.append(
                        f"{gpu}: skipped {what} (a replica spans {smallest} GPUs, more than "
                        f"--fleet-max-gpus {max_gpus})"
                    )
                continue
            searched = True
            named_ep = ep if len(eps) > 1 else None  # layouts name EP only when the search varies it

            def simulate(n: int) -> list[dict]:  # every layout of a fleet of n GPUs (called before the loop moves on)
                todo = [
                    FleetJob(trace, vals, L, rate, tuple(slos), link, cost, allocator, shared_link)
                    for L in layouts_of(gpu, ok, n, routers, by_gpus=True, pp=pp, dp=dp, ep=named_ep)
                ]
                got = run_jobs(evaluate, todo, workers, backend, address, label=f"{gpu} {n} GPUs")
                if jobs is not None:
                    jobs.update({(j.layout.gpu, r["layout"], r["router"]): j for j, r in zip(todo, got)})
                return got

            def stopped(n: int, gpu=gpu, what=what) -> None:
                if notes is not None:
                    notes.append(
                        f"{gpu}{' with ' + what if what else ''}: stopped at {n} GPUs: doubling the fleet "
                        "brought no SLO metric closer to its limit, so no larger fleet meets the SLOs (they "
                        "are below what a request takes on a replica of its own)"
                    )

            rows.extend(_search(simulate, math.gcd(*ok) * unit, smallest, max_gpus, max(ok) * unit, stopped))
    if too_big and not searched:
        raise ConfigError(f"--fleet-max-gpus {max_gpus} is less than one replica of {min(too_big)} GPUs")
    return rows


def _search(simulate, step: int, smallest: int, max_gpus: int, largest: int | None = None, stopped=None) -> list[dict]:
    """Fleets of one GPU type and replica shape, sized in steps of ``step`` GPUs from the ``smallest`` replica:
    doubling until a layout meets every SLO, then bisection down to the smallest fleet that does; every layout
    simulated (``simulate(gpus)``: the rows of a fleet of that many GPUs) is a row. The doubling ends early when
    a fleet of at least two of the ``largest`` replicas, doubled, brings the best layout's worst SLO metric
    (``slo_ratio``) less than NO_GAIN closer: ``stopped(gpus)`` is then told the size it stopped at."""
    import math

    rows: list[dict] = []
    probes = []
    best: dict[int, float] = {}  # per probed size (in steps), its best layout's slo_ratio

    def run(units: int) -> bool:
        probes.append(units)
        got = simulate(units * step)
        for r in got:
            r["probe"] = len(probes)
        rows.extend(got)
        best[units] = min((r.get("slo_ratio", math.inf) for r in got), default=math.inf)
        return any(r["meets_slo"] for r in got)

    top = max_gpus // step
    lo, hi, n = 0, None, max(1, smallest // step)
    while n <= top:
        if run(n):
            hi = n
            break
        if (
            lo
            and lo * step >= 2 * (largest or smallest)
            and best[lo] < math.inf
            and best[n] >= (1 - NO_GAIN) * best[lo]
        ):
            if stopped is not None:
                stopped(n * step)
            return rows
        lo = n
        if n == top:
            break
        n = min(2 * n, top)
    if hi is None:
        return rows
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid):
            hi = mid
        else:
            lo = mid
    return rows


def cheapest(rows: list[dict]) -> list[dict]:
    """Layouts that meet every SLO, cheapest first (cost per hour when known, else GPUs), then by TTFT p99."""
    ok = [r for r in rows if r["meets_slo"]]
    return sorted(ok, key=lambda r: (r.get("cost_per_hour", r["gpus"]), r["gpus"], r["ttft_p99_s"]))


def pareto(rows: list[dict]) -> list[dict]:
    """Rows no other row beats on both output tokens/s per GPU and TTFT p99."""
    out = []
    for r in rows:
        if not any(
            o is not r
            and o["tok_s_per_gpu"] >= r["tok_s_per_gpu"]
            and o["ttft_p99_s"] <= r["ttft_p99_s"]
            and (o["tok_s_per_gpu"] > r["tok_s_per_gpu"] or o["ttft_p99_s"] < r["ttft_p99_s"])
            for o in rows
        ):
            out.append(r)
    return sorted(out, key=lambda r: -r["tok_s_per_gpu"])


def vllm_commands(row: dict, model: str, values: dict, prefix_caching: bool = True) -> list[str]:
    """The `vllm serve` command lines of a layout (one per replica kind), with the scheduler options set
    (``prefix_caching``: whether the planned replicas cached prefixes)."""
    import shlex

    from kvsim.output.table import printable

    flags = []
    for key, flag in (
        ("max_num_seqs", "--max-num-seqs"),
        ("max_num_batched_tokens", "--max-num-batched-tokens"),
        ("max_model_len", "--max-model-len"),
        ("gpu_memory_utilization", "--gpu-memory-utilization"),
        ("block_size", "--block-size"),
        ("kv_cache_dtype", "--kv-cache-dtype"),
        ("quantization", "--quantization"),
        ("api_server_count", "--api-server-count"),
        ("stream_interval", "--stream-interval"),
    ):
        if values.get(key) is not None:
            flags.append(f"{flag} {shlex.quote(str(values[key]))}")
    if values.get("speculative_config"):  # JSON: one shell word
        flags.append(f"--speculative-config {shlex.quote(values['speculative_config'])}")
    if row.get("ep", values.get("enable_expert_parallel")):
        flags.append("--enable-expert-parallel")
    if row.get("pp", 1) > 1:
        flags.append(f"--pipeline-parallel-size {row['pp']}")
    if row.get("dp", 1) > 1:
        flags.append(f"--data-parallel-size {row['dp']}")
    if values.get("async_scheduling") is not None:  # as planned (vLLM's own default follows its release)
        flags.append("--async-scheduling" if values["async_scheduling"] else "--no-async-scheduling")

    def serve(tp: int) -> str:
        # the model (a config.json's _name_or_path or folder: any text) one inert shell word, on one line
        return printable(
            f"vllm serve {shlex.quote(str(model))} "
            + " ".join([f"--tensor-parallel-size {tp}", *flags])
            + (" --enable-prefix-caching" if prefix_caching else " --no-enable-prefix-caching")
        )

    if row["mode"] == "aggregated":
        n = row["decode"]
        return [
            f"# {n} replica{'s' if n > 1 else ''} on {row['gpu']}, behind a {row['router']} router",
            serve(row["tp"]),
        ]
    nixl = """ --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'"""
    return [
        f"# {row['prefill']} prefill replicas on {row['gpu']} ({row['router']} router), "
        f"{row['decode']} decode replicas (least-requests), behind a P/D proxy (llm-d, Dynamo, or vLLM's "
        "disagg proxy)",
        serve(row.get("prefill_tp") or row["tp"]) + nixl + "   # prefill",
        serve(row["tp"]) + nixl + "   # decode",
    ]
