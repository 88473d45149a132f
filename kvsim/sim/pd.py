"""Disaggregated prefill and decode pools in a fleet that changes while it runs (kvsim.sim.Fleet with ``decode=``).

The hand-off is kvsim.fleet.disagg's (vLLM's P/D flow behind a proxy): a prefill replica computes the prompt as a
request of one output token and parks its KV; the decode router picks a serving decode replica, which loads the KV
over the link when it admits the request, after which the prefill replica frees it. What a changing fleet adds:

- a prompt finished while no decode replica serves waits, its KV parked, until one does (:attr:`PrefillDecode.held`);
- a prefill replica drains until its last parked KV has been read, not only its last prompt;
- a failed prefill replica loses the KV it parked: the requests whose KV had not reached their decode replica
  start again from the prefill (``retry_failed``), or are lost; a failed decode replica loses its requests, and
  the prefill KV still parked for them is freed.

Every request is one record (the decode side's sequence, what the results show) and one prefill sequence; a retry
replaces both. A stale record left on a decode replica is dropped there at its next iteration boundary without
counting as done.
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from typing import Any, Callable

from kvsim.engine.sequence import Sequence, Status
from kvsim.fleet.disagg import NOT_ADMITTED, KVLink, handoff_bytes, prefill_request, response_transit, take_over

ROLES = ("both", "prefill", "decode")  # a replica group's role: aggregated, or one of the two pools
ENDED = (Status.FINISHED, Status.REJECTED, Status.CANCELLED)


class PrefillDecode:
    """The pools' shared state in a :class:`~kvsim.sim.fleet.Fleet`: each request's prefill sequence and where
    its KV is, the decode router, the link and the engines' hooks."""

    def __init__(self, fleet: Any, link: KVLink, shared_link: bool):  # fleet: the kvsim.sim.fleet.Fleet it serves
        self.fleet = weakref.proxy(fleet)  # the fleet holds these pools: no cycle that outlives the run
        self.link = link
        self.shared_link = shared_link
        self.pseqs: list[Sequence] = [Sequence(s.sid, prefill_request(s.req)) for s in fleet.seqs]
        n = len(self.pseqs)
        nan = math.nan
        self.decode_of: list[int] = [-1] * n  # the decode replica a request went to last
        self.handoff_t: list[float] = [nan] * n
        self.load_start: list[float] = [nan] * n
        self.load_end: list[float] = [nan] * n
        self.load_bytes: list[float] = [0.0] * n
        self.held: deque[Sequence] = deque()  # records handed off while no decode replica served (KV parked)
        self.transfer_bytes: dict[int, Callable[[int, int], int]] = {}  # per prefill engine
        self.nic_free: list[float] = []  # per engine: when its links are next free (shared_link)

    def add_request(self, seq: Sequence) -> Sequence:
        """A request sent by a process: its prefill sequence."""
        ps = Sequence(seq.sid, prefill_request(seq.req))
        self.pseqs.append(ps)
        self.decode_of.append(-1)
        for col in (self.handoff_t, self.load_start, self.load_end):
            col.append(math.nan)
        self.load_bytes.append(0.0)
        return ps

    def fresh(self, sid: int) -> Sequence:
        """Start request ``sid`` again (a retry after a failure): a new record and prefill sequence; the new
        prefill sequence is returned."""
        f = self.fleet
        f.seqs[sid] = Sequence(sid, f.seqs[sid].req)
        ps = self.pseqs[sid] = Sequence(sid, prefill_request(f.seqs[sid].req))
        nan = math.nan
        self.decode_of[sid] = -1
        self.handoff_t[sid] = self.load_start[sid] = self.load_end[sid] = nan
        self.load_bytes[sid] = 0.0
        return ps

    def hooks(self, role: str, index: int) -> dict:
        """The Engine arguments of replica ``index`` in ``role`` (prefill or decode)."""
        if role == "prefill":
            return {"handoff": lambda ps, t: self._handoff(index, ps, t), "on_dropped": self._prefill_dropped}
        f = self.fleet
        return {"kv_loader": self._loader(index), "on_finished": f._on_finished, "on_dropped": self._decode_dropped}

    def added(self, role: str, index: int, engine, pool, cfg) -> None:
        """Replica ``index`` was built: what a prefill replica's hand-off moves per request."""
        self.nic_free.append(0.0)
        if role == "prefill":
            self.transfer_bytes[index] = handoff_bytes(engine.alloc, pool, cfg, cfg.gpus)

    # --- the hand-off -------------------------------------------------------------------------------
    def _handoff(self, i: int, ps: Sequence, t: float) -> None:
        """Prefill replica ``i`` finished ``ps``'s prompt at ``t``: its record goes to a decode replica."""
        f = self.fleet
        sid = ps.sid
        if ps is not self.pseqs[sid]:  # a stale prefill (its request was retried): its KV is nobody's
            f.engines[i].release(sid, t)
            f.touched.append(i)
            return
        ds = f.seqs[sid]
        take_over(ds, ps)
        if not ds.remote:  # nothing to move: the prefill replica's KV is free now
            f.engines[i].release(sid, t)
            f.touched.append(i)
        self.handoff_t[sid] = t
        j = self.route_decode(ds, t)
        if j is None:
            self.held.append(ds)
            f._held_now()
            return
        f.engines[j].receive(ds, t, response_transit(ps, t))
        f.touched.append(j)

    def route_decode(self, ds: Sequence, t: float) -> int | None:
        """Pick a serving decode replica for ``ds`` (None: none serves; it waits)."""
        f = self.fleet
        j = f.pick_serving(f.decode_router, ds.req, t, decode=True)
        if j is not None:
            self.decode_of[ds.sid] = j
        return j

    def _loader(self, j: int) -> Callable[[Sequence, int, float], float]:
        def load(ds: Sequence, tokens: int, now: float) -> float:
            f = self.fleet
            sid = ds.sid
            if ds is not f.seqs[sid]:  # a stale record (its request was retried): it is dropped at this boundary
                return now
            i = f.replica_of[sid]
            nbytes = self.transfer_bytes[i](ds.prompt, tokens)
            nic = self.nic_free
            start = max(now, nic[i], nic[j]) if self.shared_link else now
            ready = start + self.link.seconds(nbytes, min(f.replicas[i].gpus, f.replicas[j].gpus))
            if self.shared_link and nbytes > 0:
                nic[i] = nic[j] = ready
            self.load_start[sid], self.load_end[sid], self.load_bytes[sid] = now, ready, float(nbytes)
            if f.replicas[i].state != "failed":
                f.engines[i].release(sid, ready)
                f.touched.append(i)
            return ready

        return load

    def _prefill_dropped(self, ps: Sequence) -> None:
        """A prefill replica rejected or cancelled ``ps``: so is its request."""
        f = self.fleet
        ds = f.seqs[ps.sid]
        if ps is not self.pseqs[ps.sid] or ds.status in ENDED:
            return
        ds.status, ds.reason = ps.status, ("prefill: " + ps.reason) if ps.reason else ps.reason
        f._ended(ds)

    def _decode_dropped(self, ds: Sequence) -> None:
        """A decode replica rejected or cancelled ``ds``: a KV the prefill side still parks for it is freed."""
        f = self.fleet
        sid = ds.sid
        if ds is not f.seqs[sid]:
            return
        if not math.isnan(self.handoff_t[sid]) and math.isnan(self.load_start[sid]) and ds.remote:
            i = f.replica_of[sid]
            if f.replicas[i].state != "failed":
                f.engines[i].release(sid, f.env.now)
                f.touched.append(i)
        f._ended(ds)

    # --- a replica that fails -----------------------------------------------------------------------
    def lost_with(self, index: int, now: float) -> list[int]:
        """The requests replica ``index`` (failing now) takes down with it, by sid: on a prefill replica those
        whose KV had not yet reached their decode replica; on a decode replica those it held. Their stale records
        on other decode replicas are dropped there at the next boundary (without counting as done), and KV a
        prefill replica still parks for them is freed."""
        f = self.fleet
        rep = f.replicas[index]
        out: list[int] = []
        if f.role[rep.group] == "prefill":
            for ps in f.engines[index].received:
                sid = ps.sid
                ds = f.seqs[sid]
                if ps is not self.pseqs[sid] or ds.status in ENDED:
                    continue
                if not math.isnan(self.load_end[sid]) and self.load_end[sid] <= now:
                    continue  # its KV is on the decode replica: unharmed
                j = self.decode_of[sid]
                if j >= 0 and f.replicas[j].state in ("serving", "draining"):
                    f.driver.cancel(ds, j, "its prefill replica failed", final=False)
                elif ds in self.held:
                    self.held.remove(ds)
                out.append(sid)
        else:
            for ds in f.engines[index].received:
                sid = ds.sid
                if ds is not f.seqs[sid] or ds.status in ENDED:
                    continue
                i = f.replica_of[sid]
                if (
                    not math.isnan(self.handoff_t[sid])
                    and math.isnan(self.load_start[sid])
                    and ds.remote
                    and f.replicas[i].state != "failed"
                ):
                    f.engines[i].release(sid, now)
                    f.touched.append(i)
                out.append(sid)
        return out

    def unfinished_reasons(self, arrived: int) -> None:
        """Where each request that did not end stood when the run ended (after mark_unfinished)."""
        f = self.fleet
        held = {id(ds) for ds in self.held}
        for sid, ds in enumerate(f.seqs):
            if ds.status in ENDED or (sid < len(f.trace.seqs) and sid >= arrived):
                continue
            ps = self.pseqs[sid]
            if ps.status == Status.REJECTED:
                ds.status, ds.reason = Status.REJECTED, "prefill: " + ps.reason
            elif math.isnan(self.handoff_t[sid]):
                ds.reason = "in prefill at end of simulation"
            elif id(ds) in held:
                ds.reason = "never decoded: no decode replica was serving"
            elif math.isnan(self.load_start[sid]):
                ds.reason = NOT_ADMITTED

    def columns(self, req, t0: float) -> None:
        """The hand-off's columns of the requests table (as kvsim.fleet.disagg's)."""
        import numpy as np

        handoff = np.asarray(self.handoff_t)
        start, end = np.asarray(self.load_start), np.asarray(self.load_end)
        req.columns = ["prefill_replica" if c == "replica" else c for c in req.columns]
        req.insert(1, "decode_replica", np.asarray(self.decode_of, dtype=np.int64))
        req["handoff_s"] = handoff + t0
        req["decode_wait_s"] = start - handoff
        req["kv_transfer_s"] = end - start
        req["kv_transfer_bytes"] = np.asarray(self.load_bytes, dtype=float)
