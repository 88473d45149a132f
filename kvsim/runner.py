"""Glue: a configuration + an allocator + requests -> a finished simulation and its tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from kvsim.allocators import AllocatorSpec, make_allocator, parse_allocator
from kvsim.allocators.base import KVAllocator
from kvsim.allocators.registry import ModelMemory
from kvsim.config import PoolPlan, SimConfig, prefix_caching, served_layout  # noqa: F401 (prefix_caching: re-exported)
from kvsim.errors import ConfigError
from kvsim.latency import LatencyModel, build_latency
from kvsim.engine.preemption import get_victim_policy
from kvsim.engine.simulator import SimResult, Simulation, StepObserver, SwapTiming
from kvsim.metrics import requests_frame, run_summary, timeline_frame
from kvsim.trace.request import Request


@dataclass
class RunOutput:
    result: SimResult
    requests: pd.DataFrame
    summary: dict
    timeline: pd.DataFrame


def resolve_allocator(allocator: AllocatorSpec | str, cfg: SimConfig, named: bool = True) -> AllocatorSpec:
    """The allocator's spec with the run's block size and prefix caching applied (``named``: the user
    chose it, else it is a command's default)."""
    spec = parse_allocator(allocator) if isinstance(allocator, str) else allocator
    return spec.resolve(cfg.block_size, prefix_caching(cfg, named))


def served_allocator(cfg: SimConfig) -> str:
    """The allocator vLLM serves ``cfg`` with when none is named: ``paged``; for a model whose layers differ,
    its hybrid KV cache manager (``hybrid``), or ``naive`` (every attention layer keeps every token) where
    the release served the model without it (kvsim.releases); with ``+prefix`` where a default allocator
    caches prefixes (:func:`kvsim.config.prefix_caching`: as vLLM V1, not for models with mamba layers, and as
    ``--enable-prefix-caching`` / ``--no-enable-prefix-caching`` say when given). Every command, plan point
    and validation harness that picks an allocator for the user picks this one."""
    return served_layout(cfg) + ("+prefix" if prefix_caching(cfg, named=False) else "")


def served_spec(cfg: SimConfig) -> AllocatorSpec:
    """:func:`served_allocator`'s spec with the run's block size (a command's default, not the user's choice)."""
    return resolve_allocator(served_allocator(cfg), cfg, named=False)


def build_allocator(cfg: SimConfig, allocator: AllocatorSpec | str, pool: PoolPlan) -> KVAllocator:
    """One engine's allocator over the planned pool (with its CPU swap pool, if any)."""
    cpu_slots = int(cfg.swap_space * (1 << 30)) // pool.kv_bytes_per_token
    alloc = make_allocator(
        resolve_allocator(allocator, cfg),
        pool.pool_tokens,
        cfg.scheduler.max_model_len,
        cpu_slots,
        cfg.cache_eviction,
        ModelMemory(cfg.memory_model, cfg.tp, pool.pool_bytes, cfg.scheduler.prefill_chunk),
    )
    if cfg.kv_offloading_size > 0:
        from kvsim.allocators.kv_tier import KVTier, TierSpec

        bandwidth = cfg.gpu.pcie_bandwidth if cfg.kv_offloading_bandwidth is None else cfg.kv_offloading_bandwidth * 1e9
        attach_tier(
            alloc, KVTier(TierSpec("cpu", cfg.kv_offloading_size * (1 << 30), bandwidth), block_bytes(alloc, pool))
        )
    return alloc


def slot_bytes(alloc: KVAllocator, pool: PoolPlan) -> int:
    """Bytes of one token slot on one GPU (the allocator's, or the model's KV bytes per token)."""
    return alloc.slot_bytes or pool.kv_bytes_per_token


def block_bytes(alloc: KVAllocator, pool: PoolPlan) -> int:
    """Bytes of one copy unit (a block) on one GPU."""
    return alloc.copy_unit * slot_bytes(alloc, pool)


def attach_tier(alloc: KVAllocator, tier) -> None:
    """Put a lower prefix-cache tier under the allocator, or say why it cannot take one."""
    try:
        alloc.attach_tier(tier)
    except ValueError as e:
        raise ConfigError(f"{e} (the {tier.name} tier)") from None


def swap_timing(cfg: SimConfig, alloc: KVAllocator, pool: PoolPlan) -> SwapTiming | None:
    """What swapping costs on this GPU, when preemption swaps."""
    return (
        SwapTiming(slot_bytes(alloc, pool), cfg.gpu.pcie_bandwidth, cfg.swap_block_latency_s)
        if cfg.scheduler.preemption_mode == "swap"
        else None
    )


def simulate(
    requests: list[Request],
    cfg: SimConfig,
    allocator: AllocatorSpec | str,
    pool: PoolPlan | None = None,
    observer: StepObserver | None = None,
    progress: Callable[[int], None] | None = None,
    latency: LatencyModel | None = None,
) -> RunOutput:
    from kvsim.trace.retime import retime

    if cfg.dp > 1:
        raise ConfigError(
            f"--data-parallel-size {cfg.dp}: a data-parallel replica is {cfg.dp} engines behind a load "
            f"balancer; simulate it with `kvsim cluster --replicas 1 --data-parallel-size {cfg.dp} "
            "--routers dp-lb` and the same workload flags (size fleets of them with `kvsim plan "
            "--fleet-max-gpus`; `kvsim memory` and `kvsim latency` show one rank)"
        )
    pool = pool or cfg.pool_plan()
    alloc = build_allocator(cfg, allocator, pool)
    sim = Simulation(
        retime(requests, cfg.request_rate),
        alloc,
        latency or build_latency(cfg),
        cfg.engine_scheduler(),
        get_victim_policy(cfg.victim_policy),
        observer=observer,
        progress=progress,
        swap_timing=swap_timing(cfg, alloc, pool),
        max_concurrency=cfg.max_concurrency,
    )
    return finish_run(sim.run(), alloc, pool)


def finish_run(res: SimResult, alloc: KVAllocator, pool: PoolPlan) -> RunOutput:
    """A finished engine's tables: its requests, its summary row (with pool and copy volumes), its timeline."""
    req = requests_frame(res)
    summary = run_summary(res, req)
    summary["kv_bytes_per_token"] = pool.kv_bytes_per_token
    summary["pool_gib"] = pool.pool_bytes / (1 << 30)
    summary.update(alloc.describe())
    unit_bytes = block_bytes(alloc, pool)
    for way in ("out", "in"):
        if f"swap_{way}_blocks" in summary:
            summary[f"swap_{way}_bytes"] = summary[f"swap_{way}_blocks"] * unit_bytes
    return RunOutput(res, req, summary, timeline_frame(res))
