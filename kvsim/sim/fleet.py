"""A fleet that changes while it runs: replicas that start (loading their weights), serve, drain and fail, behind a
router, on the SimPy clock (kvsim/engine/processes.py), beside processes of the user's own.

    fleet = Fleet(requests, [ReplicaGroup("h100", cfg, "paged:16+prefix", 2)], "least-requests")

    def autoscaler(fleet):
        while True:
            yield fleet.env.timeout(30)
            m = fleet.scrape  # what Prometheus scraped last (up to scrape_interval_s old)
            if m.waiting > 20 * m.serving:
                fleet.add_replica("h100")

    fleet.process(autoscaler(fleet))
    run = fleet.run()

A replica is asked for at some time, serves once its start-up is over (its weights loaded from storage, kernels
compiled and CUDA graphs captured: :class:`~kvsim.sim.startup.Startup`), and costs GPU time from the moment it is
asked for until it stops. A replica taken away drains first (no new requests; it stops when its last one is
done); a failed replica stops at once and its requests are retried on the others or lost
(``retry_failed``). Every request of the trace is in the result once: finished, rejected or unfinished (lost
requests are unfinished, their reason says so).

With ``decode=`` the groups are two pools, prefill (``groups``) and decode, as `kvsim cluster --prefill --decode`
serves them (kvsim.sim.pd: the hand-off, and what a failure of either side loses).
"""

from __future__ import annotations

import bisect
import math
import time
import warnings
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generator

import numpy as np
import pandas as pd

from kvsim.collector import kept_apart
from kvsim.engine.clock import ClientLimit, Completions, close_engines
from kvsim.engine.engine import Engine
from kvsim.engine.processes import Clock, Driver
from kvsim.engine.sequence import Sequence, Status
from kvsim.engine.simulator import mark_unfinished
from kvsim.errors import ConfigError
from kvsim.fleet.cluster import (
    ReplicaGroup,
    build_replicas,
    client_load,
    common_horizon,
    fleet_summary,
    replica_outputs,
    replica_table,
)
from kvsim.fleet.disagg import LINKS, KVLink, disagg_summary
from kvsim.fleet.routers import RouterOptions, make_router
from kvsim.metrics import sequences_frame
from kvsim.sim.clients import Call, last_finish
from kvsim.sim.metrics import ReplicaScrape, Scrape, window_stats
from kvsim.sim.pd import ENDED, PrefillDecode
from kvsim.sim.startup import Startup
from kvsim.trace.jsonl import parse_request
from kvsim.trace.request import Request
from kvsim.validation import NON_NEGATIVE, POSITIVE, require

STATES = ("starting", "serving", "draining", "stopped", "failed")
SEND_FIELDS = frozenset({"id", "priority", "hash_ids", "hash_block_tokens", "n", "session"})  # Fleet.send's extras
# parallel samples' ids start here: never a request's, however many processes send (a request's id is its row)
SAMPLE_IDS = 1 << 48


@dataclass
class Replica:
    """One replica's life: asked for at ``started_s``, serving from ``ready_s``, stopped at ``stopped_s`` (seconds
    on the fleet's clock; None: not yet). A replica of data-parallel ranks is one entry per rank (each an engine
    routed to on its own), all with the first rank's index as ``unit``: they start, drain and fail together."""

    index: int  # its engine's position in Fleet.engines (and the router's)
    group: str
    gpus: int  # the GPUs of this engine (one data-parallel rank's)
    started_s: float
    ready_s: float | None = None
    stopped_s: float | None = None
    state: str = "starting"
    unit: int = -1  # the index of the replica's first rank (-1: this one)

    def __post_init__(self) -> None:
        if self.unit < 0:
            self.unit = self.index

    def gpu_seconds(self, end: float) -> float:
        """GPU-seconds it cost up to ``end``: from being asked for to stopping (a starting replica costs too)."""
        stop = self.stopped_s if self.stopped_s is not None else end
        return self.gpus * max(0.0, stop - self.started_s)


@dataclass
class FleetRun:
    """A finished run: every request once (``requests``: with its replica, -1 if never routed, and its
    retries), one row per replica (``replica_table``: its life and GPU-hours too), the fleet's row
    (``summary``), what the scraper saw every interval (``scrapes``: the replicas over time), the replicas."""

    requests: pd.DataFrame
    replica_table: pd.DataFrame
    summary: dict
    scrapes: pd.DataFrame
    replicas: list[Replica]
    wall_s: float
    peaks: dict[str, int] = field(default_factory=dict)  # per group: the most replicas alive at a scrape (or at start)

    @property
    def router(self) -> str:
        return self.summary["router"]


class Fleet:
    """Replica groups behind a router on the SimPy clock; see the module's docstring.

    ``requests``: the trace (may be empty when client processes send every request: :meth:`client`).
    ``groups``: the replica groups at the start (each ``count`` replicas, serving from time 0; a group of count
    0 is one replicas can be added to). ``scrape_interval_s``: how often the metrics processes read are
    taken; ``window_s``: the span their latency percentiles and rates cover. ``startup``: how long a new
    replica takes to serve. ``retry_failed``: a failed replica's requests are sent again (True) or lost.
    ``hold_grace_s``: a request held while no replica serves or starts keeps the run going this long for a
    process (an autoscaler) to ask for one; then, if none was asked for, the run may end without it.
    ``decode``: the decode pool's groups (``groups`` are then the prefill pool), behind ``decode_router``, the
    KV crossing ``kv_link`` (``shared_link``: one transfer at a time per replica, as kvsim.fleet.disagg)."""

    def __init__(
        self,
        requests: list[Request],
        groups: list[ReplicaGroup],
        router: str = "least-requests",
        *,
        router_options: RouterOptions = RouterOptions(),
        scrape_interval_s: float = 15.0,
        window_s: float = 60.0,
        startup: Startup = Startup(),
        retry_failed: bool = True,
        progress: Callable[[int], None] | None = None,
        hold_grace_s: float = 120.0,
        decode: list[ReplicaGroup] | None = None,
        decode_router: str = "least-requests",
        kv_link: KVLink = LINKS["rdma"],
        shared_link: bool = False,
    ):
        if not groups:
            raise ConfigError("a fleet needs at least one replica group")
        if decode is not None:
            if not decode:
                raise ConfigError("disaggregated serving needs at least one decode replica group")
            models = {g.cfg.model.name for g in groups + decode}
            if len(models) != 1:
                raise ConfigError(
                    f"prefill and decode pools must serve the same model, got {', '.join(sorted(models))}"
                )
        self.role = {g.name: "both" if decode is None else "prefill" for g in groups}
        self.role.update({g.name: "decode" for g in decode or []})
        groups = groups + (decode or [])
        names = [g.name for g in groups]
        if len(set(names)) != len(names):
            raise ConfigError(f"replica group names must differ, got {', '.join(names)}")
        require(scrape_interval_s, POSITIVE, "scrape_interval_s")
        require(hold_grace_s, NON_NEGATIVE, "hold_grace_s")
        self.hold_grace_s = hold_grace_s
        self._grace_until = -math.inf  # held requests with no replica starting keep the run alive until then
        require(window_s, POSITIVE, "window_s")
        self._wall0 = time.perf_counter()
        self.env = Clock()
        self.groups = {g.name: g for g in groups}
        self.router_name = router
        self.startup = startup
        self.retry_failed = retry_failed
        self.scrape_interval_s = scrape_interval_s
        self.window_s = window_s
        self.trace, limit = client_load(requests, groups)
        self.seqs: list[Sequence] = list(self.trace.seqs)
        self.horizon = common_horizon(groups, self.trace)
        self.clients = ClientLimit(self.trace.times, limit)
        self._completions = Completions(progress, self.clients)
        self.engines: list[Engine] = []
        self.replicas: list[Replica] = []
        self.pools: list = []
        self.retries: list[int] = [0] * len(self.seqs)
        self.replica_of: list[int] = [-1] * len(self.seqs)  # the replica a request went to last (-1: none)
        self._lost: dict[int, str] = {}
        self._calls: dict[int, Call] = {}  # requests processes sent and still wait for, by sid
        self._clients_alive = 0  # client processes (Fleet.client) still running: the run is not over
        self._process_error: Exception | None = None  # what a process of the user's raised (run() raises it)
        self._ran = False
        self._serving: dict[str, list[int]] = {g.name: [] for g in groups}
        self._held: deque[Sequence] = deque()  # arrived while no replica served (P/D: no prefill replica)
        self._starting = {"both": 0, "prefill": 0, "decode": 0}  # replicas starting, by role
        self._probes: dict[str, Engine] = {}  # per group: an engine that answers whether it could hold a request
        self.touched: list[int] = []  # engines moved from outside their own step (the driver reschedules them)
        self.pd = PrefillDecode(self, kv_link, shared_link) if decode is not None else None
        self._draining: list[int] = []
        self._finished: deque[tuple[float, float, float]] = deque()  # (finish, ttft, tpot) of recent finishes
        self._arrived_at: deque[float] = deque()  # recent arrival times (the arrival rate over the window)
        self._busy_before: list[float] = []
        self._scrapes: list[Scrape] = []
        for g in groups:
            for _ in range(g.count):
                self._new_replica(g, ready=True)
        self.router = make_router(router, self.engines, router_options)
        self.decode_router_name = decode_router
        self.decode_router = make_router(decode_router, self.engines, router_options) if self.pd else self.router
        self.driver = Driver(
            self.env,
            self.engines,
            self.clients.times,
            self.pd.pseqs if self.pd else self.seqs,
            self._route,
            self.horizon,
            hints=False,
            touched=self.touched,
            keep_alive=self._waits_for_replicas,
        )
        self.driver.stepped_hook = self._after_step
        self.scrape = self._take_scrape()
        self.env.process(self._scraper())

    # --- what processes use -------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Seconds on the fleet's clock (0: the trace's first arrival)."""
        return self.env.now

    def process(self, generator: Generator[Any, Any, Any]) -> Any:
        """Run ``generator`` as a SimPy process on the fleet's clock (``yield fleet.env.timeout(s)`` to wait).
        An error it raises stops the run and is raised by :meth:`run`."""
        return self.env.process(self._guarded(generator, client=False))

    def client(self, generator: Generator[Any, Any, Any]) -> Any:
        """Run ``generator`` as a client process (it sends requests: :meth:`send`); the run goes on until every
        client process has returned, even while no request is in flight (a client thinking)."""
        self._clients_alive += 1
        return self.env.process(self._guarded(generator, client=True))

    def send(self, prompt_tokens: int, output_tokens: int, **fields: Any) -> Call:
        """Send a request now (its other fields, e.g. ``hash_ids`` or ``priority``, as a trace line's):
        routed at once, or held while no replica serves. Returns its :class:`~kvsim.sim.clients.Call`. The
        request is checked as a trace line is (TraceError names the ``fleet.send`` call by its number)."""
        if self.clients.limit is not None:
            raise ConfigError(
                "a fleet whose trace has a client limit (--max-concurrency) takes no requests from processes: "
                "write the clients as processes instead"
            )
        unknown = set(fields) - SEND_FIELDS
        if unknown:
            raise ConfigError(
                f"fleet.send: unknown request field(s) {', '.join(sorted(unknown))} (fields: {', '.join(sorted(SEND_FIELDS))})"
            )
        now = self.env.now
        sid = len(self.seqs)
        line = {"id": f"sent-{sid}", **fields, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens}
        line["arrival_s"] = self.trace.t0 + now
        if isinstance(line.get("hash_ids"), tuple):
            line["hash_ids"] = list(line["hash_ids"])
        req = parse_request(line, "fleet.send", sid - len(self.trace.seqs) + 1, sid)
        seq = Sequence(sid, req)
        self.seqs.append(seq)
        times = self.clients.times
        assert isinstance(times, list)  # an open loop's send times are the trace's own list
        times.append(now)
        self.retries.append(0)
        self.replica_of.append(-1)
        call = self._calls[sid] = Call(self, sid, now)
        first = self.pd.add_request(seq) if self.pd else seq
        e = self._route(first, now)
        if e is not None:
            self.driver.deliver(first, e)
        return call

    def cancel(self, call: Call, reason: str = "cancelled by its client") -> bool:
        """Its client gives up on ``call`` now: a request still held is dropped at once, one on a replica at
        that replica's next iteration boundary, its KV freed (one that finishes first is not cancelled).
        False when it had already ended."""
        if call.ended:
            return False
        seq = call.seq
        sid = call.sid
        reason = f"{reason} at {self.env.now:.6g} s"
        pd = self.pd
        first = pd.pseqs[sid] if pd else seq
        held_here = first in self._held
        if held_here or (pd is not None and seq in pd.held):
            if held_here:
                self._held.remove(first)
            else:  # handed off while no decode replica served: the prefill side's parked KV is freed
                assert pd is not None
                pd.held.remove(seq)
                self.engines[self.replica_of[sid]].release(sid, self.env.now)
                self.touched.append(self.replica_of[sid])
                self.driver.repush_touched()
            seq.status, seq.reason = Status.CANCELLED, reason
            self._completions(1, self.env.now)
            self._ended(seq)
            self.driver.check_done()
            return True
        if pd is not None and pd.decode_of[sid] >= 0:
            self.driver.cancel(seq, pd.decode_of[sid], reason)
        else:  # aggregated, or still in its prefill (the record follows the prefill sequence's drop)
            self.driver.cancel(first, self.replica_of[sid], reason)
        return True

    @property
    def lost_requests(self) -> dict[int, str]:
        """Requests lost with a failed replica (retry_failed False), by sid: why."""
        return self._lost

    def count(self, group: str | None = None, states: tuple[str, ...] = ("starting", "serving")) -> int:
        """Replicas of ``group`` (None: all) in ``states`` (a replica of data-parallel ranks counts once)."""
        return sum(
            1 for r in self.replicas if r.state in states and r.unit == r.index and (group is None or r.group == group)
        )

    def ranks(self, rep: Replica) -> list[Replica]:
        """The entries of ``rep``'s replica: one per data-parallel rank (just ``rep`` without data parallelism)."""
        first = self.replicas[rep.unit]
        return self.replicas[first.index : first.index + self.groups[first.group].cfg.dp]

    def add_replica(self, group: str) -> Replica:
        """Ask for a replica of ``group`` now: it serves once its start-up is over (GPU time counts from now).
        Returns it (its first rank's entry, for a replica of data-parallel ranks)."""
        g = self._group(group)
        ranks = self._new_replica(g, ready=False)
        for rep in ranks:
            self.router.grow()
            if self.pd is not None:
                self.decode_router.grow()
            self.driver.add_engine(self.engines[rep.index])
        self._starting[self.role[g.name]] += 1
        self.env.process(self._start(ranks[0], self.startup.seconds(g.cfg)))
        return ranks[0]

    def remove_replica(self, group: str | None = None, index: int | None = None) -> Replica | None:
        """Take a replica away: ``index``, or the newest of ``group`` (None: any) that is starting or serving.
        A serving one drains (no new requests; it stops when its last is done), a starting one stops now.
        Returns it, or None when there was none."""
        rep = self._pick(group, index, ("starting", "serving"))
        if rep is None:
            return None
        if rep.state == "starting":
            self._starting[self.role[rep.group]] -= 1
            for r in self.ranks(rep):
                self._stop(r, "stopped")
        else:
            for r in self.ranks(rep):
                self._serving[r.group].remove(r.index)
                r.state = "draining"
            self._draining.append(rep.unit)
            self._after_step()
        return rep

    def reclaim_replica(
        self, group: str | None = None, index: int | None = None, notice_s: float = 120.0
    ) -> Replica | None:
        """A spot or preemptible replica (``index``, or the newest of ``group``) is reclaimed with ``notice_s``
        seconds' notice (AWS gives 2 minutes, GCP 30 s): it drains from now, and if its last request is not done
        by the deadline it fails then (what it still holds is retried or lost, as for a failure). Returns it."""
        require(notice_s, NON_NEGATIVE, "notice_s")
        rep = self.remove_replica(group, index)
        if rep is not None and rep.state != "stopped":
            self.env.process(self._deadline(rep, notice_s))
        return rep

    def _deadline(self, rep: Replica, notice_s: float) -> Generator[Any, Any, None]:
        yield self.env.timeout(notice_s)
        if rep.state == "draining":
            self.fail_replica(index=rep.index)

    def fail_replica(self, group: str | None = None, index: int | None = None) -> Replica | None:
        """A replica (``index``, or the newest of ``group``) fails now: it stops at once; the requests it held lose
        their KV and are sent again to the others (``retry_failed``) or lost."""
        rep = self._pick(group, index, ("starting", "serving", "draining"))
        if rep is None:
            return None
        was = rep.state
        ranks = self.ranks(rep)
        if was == "serving":
            for r in ranks:
                self._serving[r.group].remove(r.index)
        elif was == "draining":
            self._draining.remove(rep.unit)
        elif was == "starting":
            self._starting[self.role[rep.group]] -= 1
        for r in ranks:
            self._stop(r, "failed")
        now = self.env.now
        lost = []
        for r in ranks:
            if self.pd is not None:
                lost += self.pd.lost_with(r.index, now)
            else:
                lost += [
                    seq.sid
                    for seq in self.engines[r.index].received
                    if seq.status not in ENDED and seq is self.seqs[seq.sid]
                ]
        for sid in lost:
            if self.retry_failed:
                if self.pd is not None:
                    fresh = self.pd.fresh(sid)
                else:
                    fresh = self.seqs[sid] = Sequence(sid, self.seqs[sid].req)
                self.retries[sid] += 1
                e = self._route(fresh, now)
                if e is not None:
                    self.driver.deliver(fresh, e)
            else:
                if self.pd is not None:  # (its stale record may still be dropped on a decode replica)
                    self.pd.fresh(sid)
                self._lost[sid] = f"lost: replica {rep.unit} failed at {now:.6g} s"
                self._completions(1, now)  # its client hears of the failure and may send its next request
                self._ended(self.seqs[sid])
        self.driver.repush_touched()
        self.driver.check_done()
        return rep

    def set_router_options(self, **changes: Any) -> None:
        """Change the router's settings now (weights, thresholds: fields of RouterOptions)."""
        self.router.options = replace(self.router.options, **changes)

    def run(self, until_s: float | None = None) -> FleetRun:
        """Run until every request is done and every client process has returned (or the horizon, or
        ``until_s`` seconds on the fleet's clock: what is not done then is unfinished), then the tables."""
        if self._ran:
            raise ConfigError("this fleet has run: build a new Fleet to run again")
        stop: Any = self.driver.done
        if until_s is not None:
            require(until_s, POSITIVE, "until_s")
            stop = self.driver.done | self.env.timeout(until_s - self.env.now)
        self._ran = True
        try:
            with kept_apart():  # the requests and their sequences live the whole run (kvsim/collector.py)
                self.env.run(until=stop)
            if self._process_error is not None:
                raise self._process_error
            return self._results()
        finally:  # its processes end and the engines drop their hooks: the run's objects go by reference counting
            failed = self._process_error
            self.driver.close()
            if self._process_error is not failed:  # a process of the user's failed in its clean-up, after the run
                warnings.warn(
                    f"a process raised as the finished run closed it: {self._process_error!r}", RuntimeWarning, 2
                )
            for e in self.engines:
                e.detach()

    def _results(self) -> FleetRun:
        """The tables of the run that just ended."""
        end = self.env.now
        arrived = self.driver.arrived
        mark_unfinished(self.seqs, close_engines(self.engines), arrived)
        for seq in self.seqs[len(self.trace.seqs) :]:  # sent by processes: they all arrived
            if seq.reason.startswith("not arrived"):
                seq.reason = seq.reason.replace("not arrived", "waiting", 1)
        if self.pd is not None:
            self.pd.unfinished_reasons(arrived)
        for seq in self._held:  # no replica ever served them (after mark_unfinished, whose reason this replaces)
            self.seqs[seq.sid].reason = "never served: no replica was serving"
        for sid, why in self._lost.items():
            self.seqs[sid].reason = why
        self.clients.stamp(self.seqs, self.trace.t0)
        if self.pd is not None:
            self.clients.stamp(self.pd.pseqs, self.trace.t0)
        wall = time.perf_counter() - self._wall0
        outs = replica_outputs(self.engines, self.pools, self.trace, end, wall)
        req = sequences_frame(self.seqs, self.trace.t0)
        req.insert(0, "replica", np.asarray(self.replica_of, dtype=np.int64))
        if self.pd is not None:
            self.pd.columns(req, self.trace.t0)
        req["retries"] = np.asarray(self.retries, dtype=np.int64)
        names = [r.group for r in self.replicas]
        table = replica_table(outs, names)
        if self.pd is not None:
            table.insert(1, "pool", [self.role[r.group] for r in self.replicas])
        table["state"] = [r.state for r in self.replicas]
        table["started_s"] = [r.started_s for r in self.replicas]
        table["ready_s"] = [np.nan if r.ready_s is None else r.ready_s for r in self.replicas]
        table["stopped_s"] = [np.nan if r.stopped_s is None else r.stopped_s for r in self.replicas]
        table["gpu_hours"] = [r.gpu_seconds(end) / 3600 for r in self.replicas]
        summary = fleet_summary(self.router_name, req, outs, table, end, wall)
        if self.pd is not None:
            summary.update(disagg_summary(req, table, self.pd.link), decode_router=self.decode_router_name)
        summary["gpu_hours"] = float(table.gpu_hours.sum())
        summary["max_replicas"] = max((s.serving + s.starting + s.draining for s in self._scrapes), default=0)
        summary["retried"] = int(sum(self.retries))
        summary["lost"] = len(self._lost)
        summary["cancelled"] = int((req.status == Status.CANCELLED.value).sum())
        summary["sent_by_processes"] = len(self.seqs) - len(self.trace.seqs)
        peaks = {name: g.count for name, g in self.groups.items()}
        for sc in self._scrapes:
            for name in peaks:
                peaks[name] = max(peaks[name], len(sc.in_group(name)))
        return FleetRun(req, table, summary, scrapes_frame(self._scrapes), self.replicas, wall, peaks)

    # --- inside -------------------------------------------------------------------------------------
    def _group(self, name: str) -> ReplicaGroup:
        try:
            return self.groups[name]
        except KeyError:
            raise ConfigError(f"no replica group '{name}' (groups: {', '.join(self.groups)})") from None

    def _pick(self, group: str | None, index: int | None, states: tuple[str, ...]) -> Replica | None:
        """Replica ``index`` (any of its ranks names it), or the newest of ``group``, if in ``states``: the entry of
        its first rank."""
        if index is not None:
            if not 0 <= index < len(self.replicas):
                raise ConfigError(f"no replica {index} (the fleet has had {len(self.replicas)})")
            rep = self.replicas[self.replicas[index].unit]
            return rep if rep.state in states else None
        if group is not None:
            self._group(group)
        for rep in reversed(self.replicas):
            if rep.state in states and rep.unit == rep.index and (group is None or rep.group == group):
                return rep
        return None

    def _new_replica(self, g: ReplicaGroup, ready: bool) -> list[Replica]:
        """A replica of ``g`` (serving at once if ``ready``): its entries, one per data-parallel rank."""
        role = self.role[g.name]
        first = len(self.engines)

        def hooks(i: int) -> dict:
            if self.pd is None:
                return {"on_finished": self._on_finished, "on_dropped": self._ended}
            return self.pd.hooks(role, first + i)

        reps = build_replicas(
            [replace(g, count=1)],
            self.trace,
            self.horizon,
            self._completions,
            hooks=hooks,
            touched=self.touched,
            offset=first,
            first_sample_id=SAMPLE_IDS,
        )
        self._probes.setdefault(g.name, reps.engines[0])
        now = self.env.now
        out = []
        for engine, pool in zip(reps.engines, reps.pools):
            index = len(self.engines)
            if self.pd is not None:
                self.pd.added(role, index, engine, pool, g.cfg)
            rep = Replica(index, g.name, g.cfg.gpus, now, now if ready else None, unit=first)
            if ready:
                rep.state = "serving"
                self._serving[g.name].append(index)
            self.engines.append(engine)
            self.pools.append(pool)
            self.replicas.append(rep)
            self._busy_before.append(0.0)
            out.append(rep)
        return out

    def _start(self, rep: Replica, seconds: float) -> Generator[Any, Any, None]:
        yield self.env.timeout(seconds)
        if rep.state != "starting":  # removed or failed while starting
            return
        role = self.role[rep.group]
        self._starting[role] -= 1
        for r in self.ranks(rep):
            r.state, r.ready_s = "serving", self.env.now
            bisect.insort(self._serving[r.group], r.index)
        if role == "decode":
            assert self.pd is not None
            held = self.pd.held
            while held:  # prompts handed off while no decode replica served go now, in hand-off order
                ds = held.popleft()
                j = self.pd.route_decode(ds, self.env.now)
                assert j is not None
                self.driver.deliver(ds, j)
        else:
            while self._held:  # requests that waited for a replica go now, in arrival order
                seq = self._held.popleft()
                e = self._route(seq, self.env.now)
                assert e is not None
                self.driver.deliver(seq, e)
        self.driver.check_done()

    def _waits_for_replicas(self) -> bool:
        """The run is not over while requests wait for a replica that is starting (or, within the grace period,
        for one a process may still ask for), or client processes run."""
        starting = self._starting
        grace = self.env.now < self._grace_until
        if self._held and (starting["both"] or starting["prefill"] or grace):
            return True
        if self.pd is not None and self.pd.held and (starting["decode"] or grace):
            return True
        return self._clients_alive > 0

    def _held_now(self) -> None:
        """A request is held now: the run waits up to ``hold_grace_s`` for a replica to be asked for."""
        until = self.env.now + self.hold_grace_s
        if until > self._grace_until:
            self._grace_until = until
            self.env.at(until).callbacks.append(lambda _: self.driver.check_done())

    def _stop(self, rep: Replica, state: str) -> None:
        rep.state, rep.stopped_s = state, self.env.now
        self.driver.procs[rep.index].stop()

    def _route(self, seq: Sequence, t: float) -> int | None:
        """Route an arriving request (P/D: its prefill sequence) to a serving replica; None: it is held until
        one serves (or, P/D, rejected at once when no decode replica could ever hold it)."""
        self._arrived_at.append(t)
        req = seq.req
        if self.pd is not None:
            why = self._decode_rejection(self.seqs[seq.sid].req)
            if why is not None:
                ds = self.seqs[seq.sid]
                ds.status, ds.reason = Status.REJECTED, "no decode replica can hold it: " + why
                self._completions(1, t)
                self._ended(ds)
                return None
        i = self.pick_serving(self.router, req, t, decode=False)
        if i is None:
            self._held.append(seq)
            self._held_now()
            return None
        self.replica_of[seq.sid] = i
        return i

    def pick_serving(self, router, req: Request, t: float, decode: bool) -> int | None:
        """``router``'s pick for ``req`` among the serving replicas of the decode pool (``decode``) or the others,
        those of groups that could hold it (none could: all of them, the chosen one rejects it); None: none
        serves."""
        cands: list[int] = []
        anyone: list[int] = []
        for name, members in self._serving.items():
            if members and (self.role[name] == "decode") == decode:
                anyone += members
                if self.engines[members[0]].can_hold(req):
                    cands += members
        if not anyone:
            return None
        i = router.pick(req, sorted(cands or anyone), t)
        router.routed(req, i, t)
        return i

    def _decode_rejection(self, req: Request) -> str | None:
        """Why no decode group could ever hold ``req`` (None: one could)."""
        first = None
        for name, role in self.role.items():
            if role == "decode":
                probe = self._probes.get(name) or self._probe(name)
                why = probe.sched.rejection(req)
                if why is None:
                    return None
                first = why if first is None else first
        return first or ""

    def _probe(self, name: str) -> Engine:
        """An engine of group ``name`` outside the run, to ask what it could hold (a group without replicas)."""
        g = self.groups[name]
        self._probes[name] = build_replicas([replace(g, count=1)], self.trace, self.horizon, None).engines[0]
        return self._probes[name]

    def _guarded(self, generator: Generator[Any, Any, Any], client: bool) -> Generator[Any, Any, Any]:
        try:
            return (yield from generator)
        except Exception as e:
            if self._process_error is None:
                self._process_error = e
                if not self.driver.done.triggered:
                    self.driver.done.succeed(None)  # the run stops; run() raises the error
            return None
        finally:
            if client:
                self._clients_alive -= 1
                self.driver.check_done()

    def _ended(self, seq: Sequence) -> None:
        """``seq`` was rejected, cancelled or lost (or finished: :meth:`_on_finished`): its call, if a process
        sent it, ends when its client hears of it."""
        call = self._calls.pop(seq.sid, None) if self._calls and seq is self.seqs[seq.sid] else None
        if call is not None:
            t = last_finish(seq) if seq.status == Status.FINISHED else self.env.now
            if t <= self.env.now:
                call.done.succeed(call)
            else:  # (the answer reaches the client after the API server's delivery time)
                self.env.at(t).callbacks.append(lambda _: self._answer(call))

    @staticmethod
    def _answer(call: Call) -> None:
        call.done.succeed(call)

    def _on_finished(self, finished: list[Sequence]) -> None:
        times = self.clients.times
        if self._calls:
            for seq in finished:  # a call ends with its request's last sample
                head = seq.parent or seq
                if head.request_finished:
                    self._ended(head)
        for seq in finished:
            if seq.parent is not None or seq.first_token_s is None or seq.finish_s is None:
                continue
            ttft = seq.first_token_s - times[seq.sid]
            n = seq.req.output_tokens
            tpot = (seq.finish_s - seq.first_token_s) / (n - 1) if n > 1 else math.nan
            self._finished.append((seq.finish_s, ttft, tpot))

    def _after_step(self) -> None:
        """Draining replicas whose last request is done stop."""
        if self._draining:
            for i in list(self._draining):
                ranks = self.ranks(self.replicas[i])
                if all(self._idle(self.engines[r.index]) for r in ranks):
                    self._draining.remove(i)
                    for r in ranks:
                        self._stop(r, "stopped")

    @staticmethod
    def _idle(e: Engine) -> bool:
        """Nothing left for ``e`` to do: no request, and (a prefill replica) no KV parked for a decode replica."""
        return e.outstanding == 0 and not (e.handoff is not None and e.sched.transfers_pending)

    def _take_scrape(self) -> Scrape:
        now, w = self.env.now, self.window_s
        while self._finished and self._finished[0][0] < now - w:
            self._finished.popleft()
        while self._arrived_at and self._arrived_at[0] < now - w:
            self._arrived_at.popleft()
        reps = []
        for r in self.replicas:
            if r.unit != r.index:
                continue  # a later rank: counted with its replica's first
            dp = self.groups[r.group].cfg.dp
            up = r.state in ("serving", "draining")
            waiting = running = 0
            kv = busy = 0.0
            for k in range(r.index, r.index + dp):  # a replica of data-parallel ranks: their sum (kv, busy: mean)
                e = self.engines[k]
                b, self._busy_before[k] = e.memory.busy_s - self._busy_before[k], e.memory.busy_s
                busy += min(1.0, b / self.scrape_interval_s) / dp
                if up:
                    waiting += e.queue_len
                    running += e.outstanding - e.queue_len
                    kv += e.kv_usage / dp
            reps.append(ReplicaScrape(r.index, r.group, r.state, waiting, running, kv, busy))
        stats = window_stats(self._finished)
        held_decode = len(self.pd.held) if self.pd is not None else 0
        rate = len(self._arrived_at) / min(w, max(now, 1e-9))
        return Scrape(now, tuple(reps), len(self._held), rate, *stats, held_decode=held_decode)

    def _scraper(self) -> Generator[Any, Any, None]:
        while True:
            yield self.env.timeout(self.scrape_interval_s)
            self.scrape = self._take_scrape()
            self._scrapes.append(self.scrape)


@dataclass(frozen=True)
class Pools:
    """What a fleet serves with: one replica group (aggregated), or a prefill and a decode group with the
    decode router and the KV link between them."""

    groups: tuple[ReplicaGroup, ...]
    decode_router: str = "least-requests"
    kv_link: KVLink = LINKS["rdma"]
    shared_link: bool = False

    @property
    def names(self) -> list[str]:
        return [g.name for g in self.groups]

    def fleet(self, requests: list[Request], router: str, counts: dict[str, int] | None = None, **kw: Any) -> Fleet:
        """A :class:`Fleet` of these groups (``counts``: replicas per group at the start, else each group's)."""
        gs = [replace(g, count=counts[g.name]) if counts else g for g in self.groups]
        if len(gs) == 1:
            return Fleet(requests, gs, router, **kw)
        return Fleet(
            requests,
            gs[:1],
            router,
            decode=gs[1:],
            decode_router=self.decode_router,
            kv_link=self.kv_link,
            shared_link=self.shared_link,
            **kw,
        )

    def gpus(self, counts: dict[str, int]) -> int:
        """GPUs of ``counts`` replicas per group (each replica: its data-parallel ranks' GPUs)."""
        return sum(replace(g, count=counts[g.name]).gpus for g in self.groups)

    def label(self, counts: dict[str, int]) -> str:
        """``3x`` (one group) or ``2P4D`` (pools)."""
        c = [counts[g.name] for g in self.groups]
        return f"{c[0]}x" if len(c) == 1 else f"{c[0]}P{c[1]}D"


def scrapes_frame(scrapes: list[Scrape]) -> pd.DataFrame:
    """One row per scrape: the fleet over time (replicas by state, queues, latency over the window)."""
    return pd.DataFrame([s.row() for s in scrapes])
