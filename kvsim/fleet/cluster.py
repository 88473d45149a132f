"""A fleet: replicas behind a router, every engine on one simulated clock.

Each replica is a whole engine (its own allocator, prefix cache, scheduler and latency model); replicas
come in groups that share a configuration (GPU, TP, model, pool). The router picks a replica when a
request arrives, seeing the engines as they are then. One replica gives exactly the single-engine run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from kvsim.allocators import AllocatorSpec
from kvsim.collector import kept_apart
from kvsim.config import PoolPlan, SimConfig
from kvsim.engine.clock import ClientLimit, Completions, TraceArrivals, close_engines, driver
from kvsim.engine.engine import Engine
from kvsim.engine.preemption import get_victim_policy
from kvsim.engine.sequence import Sequence, Status
from kvsim.engine.simulator import SimResult, mark_unfinished
from kvsim.fleet.routers import Router, RouterOptions, make_router
from kvsim.errors import ConfigError
from kvsim.metrics import percentile, sequences_frame
from kvsim.allocators.kv_tier import KVTier, TierSpec
from kvsim.runner import RunOutput, attach_tier, block_bytes, build_allocator, finish_run, swap_timing
from kvsim.trace.request import Request
from kvsim.trace.retime import retime


@dataclass(frozen=True)
class ReplicaGroup:
    """``count`` identical replicas: one configuration (model, GPU, TP, scheduler, pool) and one allocator. A
    replica of data-parallel ranks (``cfg.dp`` > 1) is that many engines, each routed to on its own (every
    rank an endpoint, as vLLM's external load balancing and llm-d's wide-EP deployments serve them)."""

    name: str
    cfg: SimConfig
    allocator: AllocatorSpec | str
    count: int
    pool: PoolPlan | None = None

    def plan(self) -> PoolPlan:
        return self.pool or self.cfg.pool_plan()

    @property
    def engines(self) -> int:
        """Engines the group runs: one per data-parallel rank of each replica."""
        return self.count * self.cfg.dp

    @property
    def gpus(self) -> int:
        """GPUs the group spans: replicas x data-parallel ranks x tensor x pipeline parallel."""
        return self.engines * self.cfg.gpus


@dataclass
class FleetOutput:
    router: str
    replicas: list[RunOutput]  # one per replica, in replica order
    groups: list[str]  # each replica's group name
    requests: pd.DataFrame  # every trace request once, with the replica that served it (-1: never arrived)
    summary: dict  # the fleet's row
    replica_table: pd.DataFrame  # one row per replica
    wall_s: float

    @property
    def api_server_busy(self) -> float:
        """The busiest replica's API server: the share of the run its event loop worked (0 without one)."""
        return max((o.summary.get("api_server_busy", 0.0) for o in self.replicas), default=0.0)


@dataclass
class Replicas:
    """The engines of some replica groups, in group order, with what their results need."""

    engines: list[Engine]
    pools: list[PoolPlan]  # each replica's KV pool
    gpus: list[int]  # the GPUs each engine spans (tensor x pipeline parallel; a data-parallel rank's)
    names: list[str]  # each replica's group name
    members: list[list[int]]  # per group: the indices of its replicas in ``engines``
    every: list[int] = field(default_factory=list)  # 0 .. len(engines) - 1
    store: KVTier | None = None  # the KV store the replicas share, if any
    cfgs: list[SimConfig] = field(default_factory=list)  # each engine's configuration (its group's)

    def holders(self, request: Request) -> list[int]:
        """The replicas of the groups that could ever hold ``request`` (each group answers once)."""
        eng = self.engines
        return [i for m in self.members if eng[m[0]].can_hold(request) for i in m]

    def candidates(self, request: Request) -> list[int]:
        """:meth:`holders`, or every replica if none could (the chosen one then rejects it)."""
        if len(self.members) == 1:
            return self.every
        return self.holders(request) or self.every


def build_replicas(
    groups: list[ReplicaGroup],
    trace: TraceArrivals,
    horizon: float | None,
    on_complete: Callable[[int, float], None] | None,
    prefix: str = "",
    hooks: Callable[[int], dict] | None = None,
    store: TierSpec | KVTier | None = None,
    touched: list[int] | None = None,
    offset: int = 0,
    first_sample_id: int | None = None,
) -> Replicas:
    """One engine per replica of ``groups`` on the trace's clock (per data-parallel rank). ``hooks(i)``: extra
    Engine arguments of replica ``i`` (a role in disaggregated serving); ``prefix`` goes before each group's
    name; ``store``: a KV store every replica's prefix cache spills into and loads from (a spec: sized in
    the first replica's blocks; a tier: one that other replicas share too). The data-parallel ranks of a MoE
    model's replica step in lockstep, reporting moved events in ``touched`` (the driver's list; these
    engines start at index ``offset`` of the driver's). ``first_sample_id``: the id of the first parallel sample
    an engine forks (default: after the trace's requests)."""
    from kvsim.engine.lockstep import Lockstep
    from kvsim.latency import build_latency

    out = Replicas([], [], [], [], [])
    for g in groups:
        pool = g.plan()
        latency = build_latency(g.cfg)  # stateless: one per group
        sched, victim = g.cfg.engine_scheduler(), get_victim_policy(g.cfg.victim_policy)
        coupled = g.cfg.dp > 1 and g.cfg.model.is_moe  # a MoE replica's ranks step together
        if coupled and touched is None:
            raise ValueError("data-parallel MoE ranks need the driver's touched list")
        out.members.append(list(range(len(out.engines), len(out.engines) + g.engines)))
        for _ in range(g.count):
            lockstep = Lockstep(touched) if coupled else None
            for _ in range(g.cfg.dp):
                alloc = build_allocator(g.cfg, g.allocator, pool)
                if isinstance(store, TierSpec):
                    store = KVTier(store, block_bytes(alloc, pool))
                if store is not None:
                    if block_bytes(alloc, pool) != store.block_bytes:
                        raise ConfigError(
                            f"--shared-kv-store: group {g.name} has blocks of "
                            f"{block_bytes(alloc, pool):,} bytes, the store {store.block_bytes:,}; "
                            "replicas sharing a store must store the same blocks (model, TP, block size)"
                        )
                    attach_tier(alloc, store)
                extra = hooks(len(out.engines)) if hooks is not None else {}
                engine = Engine(
                    alloc,
                    latency,
                    sched,
                    victim,
                    first_sample_id=len(trace.seqs) if first_sample_id is None else first_sample_id,
                    resolution_s=trace.resolution_s,
                    horizon=horizon,
                    swap_timing=swap_timing(g.cfg, alloc, pool),
                    on_complete=on_complete,
                    **extra,
                )
                if lockstep is not None:
                    lockstep.add(engine, offset + len(out.engines))
                out.engines.append(engine)
                out.pools.append(pool)
                out.gpus.append(g.cfg.gpus)
                out.cfgs.append(g.cfg)
                out.names.append(prefix + g.name)
    out.every = list(range(len(out.engines)))
    out.store = store
    return out


def routing(rt: Router, reps: Replicas, placed: np.ndarray, offset: int = 0) -> Callable[[Sequence, float], int]:
    """A route function: the router picks among the replicas that could hold the request and learns its
    choice; the choice (+ ``offset``) is recorded in ``placed[sid]``."""

    def route(seq: Sequence, t: float) -> int:
        r = seq.req
        i = rt.pick(r, reps.candidates(r), t)
        rt.routed(r, i, t)
        placed[seq.sid] = offset + i
        return i

    return route


def client_load(requests: list[Request], groups: list[ReplicaGroup]) -> tuple[TraceArrivals, int | None]:
    """The trace as the fleet's clients send it (re-timed by ``request_rate``), and their in-flight limit
    (``max_concurrency``): options of the whole run, which every group carries."""
    loads = {(g.cfg.max_concurrency, g.cfg.request_rate) for g in groups}
    if len(loads) > 1:
        raise ConfigError(
            "--max-concurrency and --request-rate describe the clients of the whole fleet: give "
            "them once, not per replica group"
        )
    limit, rate = loads.pop() if loads else (None, None)
    return TraceArrivals(retime(requests, rate)), limit


def common_horizon(groups: list[ReplicaGroup], trace: TraceArrivals) -> float | None:
    horizons = {g.cfg.scheduler.horizon_s for g in groups}
    if len(horizons) != 1:
        raise ConfigError("every replica group must run to the same --horizon-s")
    return trace.horizon(horizons.pop())


def common_clock(groups: list[ReplicaGroup]) -> Callable[..., int]:
    """The driver of the fleet's one clock (``--clock``, which every group carries: kvsim.engine.clock.driver)."""
    clocks = {g.cfg.scheduler.clock for g in groups}
    if len(clocks) > 1:
        raise ConfigError("--clock drives the whole fleet: give it once, not per replica group")
    return driver(clocks.pop() if clocks else "heap")


def replica_outputs(
    engines: list[Engine], pools: list[PoolPlan], trace: TraceArrivals, end: float, wall: float
) -> list[RunOutput]:
    """Each replica's tables, as a single-engine run gives them (``e.received`` is in arrival order)."""
    outs = []
    for e, pool in zip(engines, pools):
        alloc = e.alloc
        res = SimResult(
            alloc.name,
            alloc.pool_tokens,
            e.received,
            e.memory,
            end,
            e.steps,
            e.events,
            e.sched.preemptions,
            wall / len(engines),
            extra=e.counters(),
            shares_kv=alloc.shares_kv,
            t0=trace.t0,
            gaps=e.gaps,
        )
        outs.append(finish_run(res, alloc, pool))
    return outs


def simulate_fleet(
    requests: list[Request],
    groups: list[ReplicaGroup],
    router: str,
    options: RouterOptions = RouterOptions(),
    progress: Callable[[int], None] | None = None,
    store: TierSpec | None = None,
) -> FleetOutput:
    """Serve ``requests`` with the replicas of ``groups`` behind ``router`` (``store``: a KV store shared by
    every replica, below their own prefix caches and CPU tiers)."""
    wall0 = time.perf_counter()
    trace, limit = client_load(requests, groups)
    seqs = trace.seqs
    horizon = common_horizon(groups, trace)
    clients = ClientLimit(trace.times, limit)
    touched: list[int] = []
    reps = build_replicas(groups, trace, horizon, Completions(progress, clients), store=store, touched=touched)
    engines = reps.engines
    rt = make_router(router, engines, options)
    replica_of = np.full(len(seqs), -1, dtype=np.int64)

    drive = common_clock(groups)
    with kept_apart():  # the requests and their sequences live the whole run (kvsim/collector.py)
        arrived = drive(engines, clients.times, seqs, routing(rt, reps, replica_of), horizon, touched=touched)
    mark_unfinished(seqs, close_engines(engines), arrived)
    clients.stamp(seqs, trace.t0)
    end = max((e.now for e in engines), default=0.0)
    wall = time.perf_counter() - wall0
    outs = replica_outputs(engines, reps.pools, trace, end, wall)
    req = sequences_frame(seqs, trace.t0)
    req.insert(0, "replica", replica_of)
    table = replica_table(outs, reps.names)
    summary = fleet_summary(router, req, outs, table, end, wall)
    if reps.store is not None:
        summary.update(reps.store.counters())
    return FleetOutput(router, outs, reps.names, req, summary, table, wall)


def replica_table(outs: list[RunOutput], names: list[str]) -> pd.DataFrame:
    """Per replica: load, queue, hit rate, latency, memory."""
    rows = []
    for i, (o, name) in enumerate(zip(outs, names)):
        s, req = o.summary, o.requests
        fin = req[req.status == Status.FINISHED.value]
        busy = o.result.memory.busy_s
        rows.append(
            {
                "replica": i,
                "group": name,
                "routed": len(req),
                "finished": s["finished"],
                "rejected": s["rejected"],
                "unfinished": s["unfinished"],
                "prompt_tokens": int(req.prompt_tokens.sum()),
                "output_tokens": int(req.generated_tokens.sum()),
                "throughput_tok_s": s["throughput_tok_s"],
                "busy_frac": busy / s["duration_s"] if s["duration_s"] > 0 else 0.0,
                "mean_batch": s["mean_batch"],
                "max_batch": s["max_batch"],
                "queue_p50_s": percentile(fin.queue_s, 50),
                "queue_p99_s": percentile(fin.queue_s, 99),
                "ttft_p50_s": s["ttft_p50_s"],
                "ttft_p99_s": s["ttft_p99_s"],
                "tpot_p50_s": s["tpot_p50_s"],
                "tpot_p99_s": s["tpot_p99_s"],
                "preemptions": s["preemptions"],
                "prefix_hit_rate_tokens": s.get("prefix_hit_rate_tokens", float("nan")),
                "kv_used_frac": 1.0 - s["mem_free"],
            }
        )
    return pd.DataFrame(rows)


def fleet_summary(
    router: str, req: pd.DataFrame, outs: list[RunOutput], table: pd.DataFrame, end: float, wall: float
) -> dict:
    """The fleet's row: totals and latency percentiles over every request, hit rate over every lookup, and
    imbalance as max/mean over replicas."""
    fin = req[req.status == Status.FINISHED.value]
    duration = max(end, 1e-12)
    lookup = sum(o.result.extra.get("lookup_tokens", 0) for o in outs)
    hit = sum(o.result.extra.get("hit_tokens", 0) for o in outs)

    def imbalance(col: str) -> float:
        v = table[col].to_numpy(dtype=float)
        return float(v.max() / v.mean()) if len(v) and v.mean() > 0 else float("nan")

    out = {
        "router": router,
        "replicas": len(outs),
        "requests": len(req),
        "finished": int((req.status == Status.FINISHED.value).sum()),
        "rejected": int((req.status == Status.REJECTED.value).sum()),
        "unfinished": int((req.status == Status.UNFINISHED.value).sum()),
        "duration_s": duration,
        "throughput_tok_s": float(req.generated_tokens.sum()) / duration,
        "throughput_req_s": len(fin) / duration,
        "preemptions": int(sum(o.summary["preemptions"] for o in outs)),
        "prefix_hit_rate_tokens": hit / lookup if lookup else float("nan"),
        "prefill_tokens_saved": hit,
        "imbalance_requests": imbalance("routed"),
        "imbalance_prompt_tokens": imbalance("prompt_tokens"),
        "imbalance_busy": imbalance("busy_frac"),
        "kv_used_frac": float(table.kv_used_frac.mean()) if len(table) else float("nan"),
    }
    for m in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
        for q in (50, 90, 99):
            out[f"{m[:-2]}_p{q}_s"] = percentile(fin[m], q)
    out["wall_s"] = wall
    return out
