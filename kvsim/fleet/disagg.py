"""Disaggregated prefill/decode: a prefill pool and a decode pool on one clock, KV handed over a link.

The flow follows vLLM's P/D disaggregation (the NIXL connector behind a proxy, as llm-d and Dynamo run it):

1. A request arrives; the prefill router picks a prefill engine, which serves the prompt as a request with
   one output token (``max_tokens=1``).
2. When the prefill finishes, the engine keeps the KV (parked: it still counts in that engine's memory)
   and the decode router picks a decode engine; once the prefill side's API server has delivered the response
   to the proxy, the proxy sends the request again to that engine's own API server (its handler, the prompt
   tokenized again), and it joins the engine's queue.
3. The decode engine admits it in queue order when a seat and memory for the prompt's KV are free (that
   memory is reserved from then on), takes what its own prefix cache holds and loads the rest over the
   link: ``latency + bytes / (bandwidth x lanes)``, one lane per GPU pair (min of the two TP degrees).
   A full decode pool therefore holds handed-off requests in its queue, their KV stays parked on the
   prefill engines, and the prefill engines' admissions stall: back-pressure.
4. When the load ends the prefill engine frees the parked KV; the decode engine computes the prompt's last
   token (which emits the first output token, as vLLM's decode instance does) and decodes the rest, its API
   server streaming every token (the prefill side's streams only the one token of its response).

TTFT therefore includes both API servers' intake, prefill queueing, the prefill, the response's delivery to the
proxy, the wait for decode memory, the transfer, the first decode iteration and its delivery.
"""

from __future__ import annotations

import math
import reprlib
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from kvsim.allocators.kv_tier import TierSpec
from kvsim.collector import kept_apart
from kvsim.engine.clock import ClientLimit, Completions, close_engines
from kvsim.engine.sequence import Sequence, Status
from kvsim.engine.simulator import mark_unfinished
from kvsim.errors import ConfigError
from kvsim.fleet.cluster import (
    FleetOutput,
    ReplicaGroup,
    build_replicas,
    client_load,
    common_clock,
    common_horizon,
    fleet_summary,
    replica_outputs,
    replica_table,
    routing,
)
from kvsim.fleet.routers import RouterOptions, make_router
from kvsim.hardware.gpus import NIC_BYTES_S
from kvsim.hardware.layer_kinds import KINDS as LAYER_KINDS
from kvsim.metrics import sequences_frame
from kvsim.runner import slot_bytes
from kvsim.validation import MIN_GBS
from kvsim.trace.request import Request


@dataclass(frozen=True)
class KVLink:
    """The link KV crosses from a prefill GPU to a decode GPU: bytes/s per GPU pair, one direction, and a
    fixed cost per transfer (seconds: handshake, notification)."""

    bandwidth: float  # bytes/s
    latency_s: float
    name: str = ""

    def seconds(self, nbytes: float, lanes: int) -> float:
        """Time to move ``nbytes`` spread over ``lanes`` GPU pairs in parallel (0 bytes: nothing to move)."""
        if nbytes <= 0:
            return 0.0
        return self.latency_s + nbytes / (self.bandwidth * max(1, lanes))


# NVLink 4 (H100/H200 in one node): 900 GB/s per GPU both ways, 450 GB/s each way; NVLink 5 (Blackwell: an
# HGX B200/B300 node, or a whole GB200/GB300 NVL72 rack, where prefill and decode trays talk over NVLink): 1.8
# TB/s both ways, 900 GB/s each way; their fixed costs are orders of magnitude, not measurements. RDMA: one 400
# Gb/s ConnectX-7 NIC per GPU (GPUDirect, 50 GB/s) at the share of line rate and the fixed cost per transfer that
# vLLM's MooncakeConnector measured between two TP8 instances over RoCE (benchmarks/fit_kv_link.py: 77 % and
# 0.57 ms; on the rows held out, transfers of 150 MB and more within 6 %, smaller ones up to 1.35x slow).
RDMA_LINE_RATE_SHARE = 0.77
LINKS = {
    "nvlink": KVLink(450e9, 20e-6, "nvlink"),
    "nvlink5": KVLink(900e9, 20e-6, "nvlink5"),
    "rdma": KVLink(RDMA_LINE_RATE_SHARE * NIC_BYTES_S, 0.57e-3, "rdma"),
    "tcp": KVLink(12.5e9, 1e-3, "tcp"),
}


def parse_link(text: str) -> KVLink:
    """``nvlink``, ``nvlink5``, ``rdma``, ``tcp``, or ``GB_S[:LATENCY_MS]`` (GB/s per GPU pair, milliseconds)."""
    t = text.strip().lower()
    if t in LINKS:
        return LINKS[t]
    bw, _, lat = t.partition(":")
    try:
        if not t.isascii():  # float() also reads other scripts' digits
            raise ValueError
        gbs = float(bw)
        ms = float(lat) if lat else 0.0
    except ValueError:
        raise ConfigError(
            f"--kv-link {reprlib.repr(text)}: expected {', '.join(LINKS)} or GB_S[:LATENCY_MS], e.g. 100:0.05"
        ) from None
    if not (math.isfinite(gbs) and MIN_GBS <= gbs <= 1e6) or not (math.isfinite(ms) and 0 <= ms <= 1e6):
        raise ConfigError(
            f"--kv-link {reprlib.repr(text)}: bandwidth must be in [{MIN_GBS:g}, 1e6] GB/s and latency in [0, 1e6] ms"
        )
    return KVLink(gbs * 1e9, ms / 1e3, f"{gbs:g}GB/s")


# why a request is unfinished that its decode engine had not admitted (in that engine's API server, or waiting for
# its memory)
NOT_ADMITTED = "handed off, not yet admitted by the decode engine at end of simulation"


def take_over(ds: Sequence, ps: Sequence) -> None:
    """The decode side's record ``ds`` of a request takes what its prefill ``ps`` did: when it was admitted, its
    preemptions, the prefix cache's tokens, the prefill side's front-end time (the decode side's API server adds
    its own) and the prompt tokens whose KV it loads (all but the last, which the decode engine computes)."""
    ds.admitted_s, ds.preemptions = ps.admitted_s, ps.preemptions
    ds.cached_tokens, ds.last_cached_tokens = ps.cached_tokens, ps.last_cached_tokens
    ds.frontend_s = ps.frontend_s
    ds.remote = ps.prompt - 1


def response_transit(ps: Sequence, t: float) -> float:
    """Seconds after its prefill ended at ``t`` until vLLM's proxy has the prefill engine's response for ``ps``
    (its API server's event loop, then the delivery), and sends the request on to the decode side."""
    return max(0.0, ps.finish_s - t) if ps.finish_s is not None else 0.0


def prefill_request(r: Request) -> Request:
    """What the prefill engine serves: the prompt with one output token (vLLM's proxy sends max_tokens=1).
    Parallel samples fork on the decode engine."""
    return replace(r, output_tokens=1, n=1)


def simulate_disagg(
    requests: list[Request],
    prefill: list[ReplicaGroup],
    decode: list[ReplicaGroup],
    router: str,
    decode_router: str = "least-requests",
    options: RouterOptions = RouterOptions(),
    link: KVLink = LINKS["rdma"],
    progress: Callable[[int], None] | None = None,
    store: TierSpec | None = None,
    shared_link: bool = False,
) -> FleetOutput:
    """Serve ``requests`` with a prefill pool behind ``router`` and a decode pool behind ``decode_router``
    (``store``: a KV store shared by every engine of both pools). ``shared_link``: an engine's links carry
    one transfer at a time (a transfer waits for both its engines' NICs to be free, first come first
    served); otherwise every transfer has its GPU pairs' lanes to itself."""
    if not prefill or not decode:
        raise ConfigError("disaggregated serving needs at least one prefill and one decode replica")
    models = {g.cfg.model.name for g in prefill + decode}
    if len(models) != 1:
        raise ConfigError(f"prefill and decode pools must serve the same model, got {', '.join(sorted(models))}")
    wall0 = time.perf_counter()
    trace, limit = client_load(requests, prefill + decode)
    seqs = trace.seqs  # the decode side's sequences: each request's record (first token and finish)
    n = len(seqs)
    horizon = common_horizon(prefill + decode, trace)
    nan = float("nan")
    prefill_of = np.full(n, -1, dtype=np.int64)
    decode_of = np.full(n, -1, dtype=np.int64)
    handoff_t = np.full(n, nan)
    load_start = np.full(n, nan)
    load_end = np.full(n, nan)
    load_bytes = np.zeros(n)
    pseqs = [Sequence(s.sid, prefill_request(s.req)) for s in seqs]

    def make_handoff(i: int):
        def handoff(ps: Sequence, t: float) -> None:
            ds = seqs[ps.sid]
            take_over(ds, ps)
            if not ds.remote:  # nothing to move: the prefill engine's KV is free now
                P.engines[i].release(ps.sid, t)
                touched.append(i)
            handoff_t[ps.sid] = t
            j = to_decode(ds, t)
            D.engines[j].receive(ds, t, response_transit(ps, t))
            touched.append(np_ + j)

        return handoff

    def make_loader(j: int):
        def load(ds: Sequence, tokens: int, now: float) -> float:
            i = int(prefill_of[ds.sid])
            nbytes = transfer_bytes[i](ds.prompt, tokens)
            start = max(now, nic_free[i], nic_free[np_ + j]) if shared_link else now
            ready = start + link.seconds(nbytes, min(P.gpus[i], D.gpus[j]))
            if shared_link and nbytes > 0:
                nic_free[i] = nic_free[np_ + j] = ready
            load_start[ds.sid], load_end[ds.sid], load_bytes[ds.sid] = now, ready, nbytes
            P.engines[i].release(ds.sid, ready)
            touched.append(i)
            return ready

        return load

    touched: list[int] = []
    done = Completions(progress)  # a request is done when its decode finishes or either pool rejects it
    P = build_replicas(
        prefill,
        trace,
        horizon,
        done,
        "prefill:",
        hooks=lambda i: {"handoff": make_handoff(i)},
        store=store,
        touched=touched,
    )
    np_ = len(P.engines)
    D = build_replicas(
        decode,
        trace,
        horizon,
        done,
        "decode:",
        hooks=lambda j: {"kv_loader": make_loader(j)},
        store=P.store,
        touched=touched,
        offset=np_,
    )
    nic_free = [0.0] * (np_ + len(D.engines))  # per engine (prefill, then decode): when its links are next free
    # per prefill engine: bytes of a request's KV it hands over, on all its GPUs
    transfer_bytes = [handoff_bytes(e.alloc, pool, c, t) for e, pool, c, t in zip(P.engines, P.pools, P.cfgs, P.gpus)]
    to_decode = routing(make_router(decode_router, D.engines, options), D, decode_of, np_)
    kept = []
    for s in seqs:
        if D.holders(s.req):
            kept.append(s.sid)
        else:
            s.status = Status.REJECTED
            s.reason = "no decode replica can hold it: " + (D.engines[0].sched.rejection(s.req) or "")

    engines = P.engines + D.engines
    route = routing(make_router(router, P.engines, options), P, prefill_of)
    clients = done.clients = ClientLimit([trace.times[k] for k in kept], limit)
    routed = [pseqs[k] for k in kept]
    drive = common_clock(prefill + decode)
    with kept_apart():  # the requests and their sequences live the whole run (kvsim/collector.py)
        arrived = drive(engines, clients.times, routed, route, horizon, hints=False, touched=touched)
    mark_unfinished(seqs, close_engines(engines), n)
    for side in (routed, [seqs[k] for k in kept]):  # both records of a request were sent when its client sent it
        clients.stamp(side, trace.t0)
    for pos, k in enumerate(kept):
        ds, ps = seqs[k], pseqs[k]
        if ps.status == Status.REJECTED:
            ds.status, ds.reason = Status.REJECTED, "prefill: " + ps.reason
        elif ds.status in (Status.FINISHED, Status.REJECTED):
            continue
        elif pos >= arrived:
            ds.reason = "not arrived at end of simulation"
        elif math.isnan(handoff_t[k]):
            ds.reason = "in prefill at end of simulation"
        elif math.isnan(load_start[k]):
            ds.reason = NOT_ADMITTED
    end = max((e.now for e in engines), default=0.0)
    wall = time.perf_counter() - wall0
    outs = replica_outputs(engines, P.pools + D.pools, trace, end, wall)
    t0 = trace.t0
    req = sequences_frame(seqs, t0)
    req.insert(0, "prefill_replica", prefill_of)
    req.insert(1, "decode_replica", decode_of)
    req["handoff_s"] = handoff_t + t0
    # handed off until the decode engine had memory for it (after the prefill's response reached the proxy and the
    # decode side's API server took the request in)
    req["decode_wait_s"] = load_start - handoff_t
    req["kv_transfer_s"] = load_end - load_start  # with a shared link: its wait for the NICs too
    req["kv_transfer_bytes"] = load_bytes
    names = P.names + D.names
    table = replica_table(outs, names)
    table.insert(1, "pool", ["prefill"] * np_ + ["decode"] * len(D.engines))
    summary = fleet_summary(router, req, outs, table, end, wall)
    summary.update(disagg_summary(req, table, link), decode_router=decode_router)
    if P.store is not None:
        summary.update(P.store.counters())
    return FleetOutput(router, outs, names, req, summary, table, wall)


def handoff_bytes(alloc, pool, cfg, gpus: int) -> Callable[[int, int], int]:
    """``f(prompt, tokens)``: bytes a prefill engine (allocator ``alloc`` over ``pool``, configuration ``cfg``,
    spanning ``gpus`` GPUs) sends for a request of ``prompt`` tokens whose decode engine loads its last
    ``tokens`` of the first ``prompt`` - 1 (it holds the ones before in its own prefix cache, and computes the
    last prompt token itself): what the prefill engine holds of those tokens at hand-off, on every GPU.

    Every attention layer of an allocator that keeps every token (paged, radix, contiguous, naive) holds all of
    them: ``tokens`` x the bytes of one token's KV. An allocator that frees what a layer no longer attends to
    (hybrid, static-split) holds, in a sliding-window layer, the window's last tokens only, and in a chunked
    layer those of the current chunk (:meth:`ModelSpec.tokens_held`); a mamba layer holds one fixed state, moved
    whole. Per GPU as the engine holds it (its tensor-parallel share of the KV heads), times its GPUs."""
    model = cfg.memory_model
    mamba = model.state_layers
    if not getattr(alloc, "windows", False) and not mamba:  # every layer keeps every token
        token = slot_bytes(alloc, pool) * alloc.token_slots * gpus
        return lambda prompt, tokens: tokens * token
    tp, windows = cfg.tp, getattr(alloc, "windows", False)
    per_token = model.kv_bytes_per_token_layer(tp)
    state = mamba * model.state_bytes_per_layer(tp)
    kinds: dict[str, int] = {}  # attention layers by what they hold (all of them full without windows)
    for mixer in model.mixers:
        if LAYER_KINDS[mixer].attention:
            kind = mixer if windows else "full"
            kinds[kind] = kinds.get(kind, 0) + 1
    if model.draft_layers:  # a drafter's layers attend to everything
        kinds["full"] = kinds.get("full", 0) + model.draft_layers

    def nbytes(prompt: int, tokens: int) -> int:
        if tokens <= 0:
            return 0
        end = prompt - 1  # the decode engine computes the last prompt token
        start = end - tokens
        held = sum(n * max(0, end - max(start, prompt - model.tokens_held(kind, prompt))) for kind, n in kinds.items())
        return (held * per_token + state) * gpus

    return nbytes


def disagg_summary(req, table, link: KVLink) -> dict:
    """The pools' own figures: imbalance within each pool, KV moved and how long it took, the wait for decode
    memory (back-pressure), and each pool's mean KV use."""

    def pct(col: str, q: float) -> float:
        v = req[col].dropna()
        return float(np.percentile(v, q)) if len(v) else float("nan")

    def imbalance(pool: str, col: str) -> float:
        v = table.loc[table["pool"] == pool, col].to_numpy(dtype=float)
        return float(v.max() / v.mean()) if len(v) and v.mean() > 0 else float("nan")

    pools = {p: table[table["pool"] == p] for p in ("prefill", "decode")}
    return {
        "mode": "disaggregated",
        "prefill_replicas": len(pools["prefill"]),
        "decode_replicas": len(pools["decode"]),
        "kv_link": link.name,
        "imbalance_requests": imbalance("prefill", "routed"),
        "imbalance_prompt_tokens": imbalance("prefill", "prompt_tokens"),
        "imbalance_busy": imbalance("prefill", "busy_frac"),
        "imbalance_decode_busy": imbalance("decode", "busy_frac"),
        "kv_transfer_gb": float(req["kv_transfer_bytes"].sum()) / 1e9,
        "kv_transfer_p50_s": pct("kv_transfer_s", 50),
        "kv_transfer_p99_s": pct("kv_transfer_s", 99),
        "decode_wait_p50_s": pct("decode_wait_s", 50),
        "decode_wait_p99_s": pct("decode_wait_s", 99),
        "prefill_kv_used_frac": float(pools["prefill"].kv_used_frac.mean()),
        "decode_kv_used_frac": float(pools["decode"].kv_used_frac.mean()),
        "prefill_busy_frac": float(pools["prefill"].busy_frac.mean()),
        "decode_busy_frac": float(pools["decode"].busy_frac.mean()),
    }
