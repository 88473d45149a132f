"""Glue: a configuration + an allocator name + requests -> a finished simulation and its tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from kvsim.allocators import make_allocator
from kvsim.allocators.paged import PagedAllocator
from kvsim.config import PoolPlan, SimConfig, plan_pool
from kvsim.engine.eviction import get_policy
from kvsim.engine.latency import LatencyModel, RooflineModel
from kvsim.engine.simulator import SimResult, Simulation, StepObserver, SwapTiming
from kvsim.metrics import requests_frame, run_summary, timeline_frame
from kvsim.trace.request import Request


@dataclass
class RunOutput:
    result: SimResult
    requests: pd.DataFrame
    summary: dict
    timeline: pd.DataFrame


def build_latency(cfg: SimConfig) -> LatencyModel:
    if cfg.latency == "roofline":
        return RooflineModel(cfg.model, cfg.gpu, cfg.roofline, cfg.tp)
    from kvsim.calibration import load_calibrated_model  # only when asked for

    return load_calibrated_model(cfg.latency, cfg.model, cfg.gpu, cfg.roofline, cfg.tp)


def simulate(requests: list[Request], cfg: SimConfig, allocator_name: str, pool: PoolPlan | None = None,
             observer: StepObserver | None = None, progress: Callable[[int], None] | None = None,
             latency: LatencyModel | None = None) -> RunOutput:
    pool = pool or plan_pool(cfg.model, cfg.gpu, cfg.memory, cfg.tp)
    cpu_slots = int(cfg.cpu_swap_gb * (1 << 30)) // pool.kv_bytes_per_token
    alloc = make_allocator(allocator_name, pool.pool_tokens, cfg.scheduler.max_seq_len, cpu_slots)
    swap = (SwapTiming(pool.kv_bytes_per_token, cfg.gpu.pcie_bandwidth, cfg.swap_block_latency_s)
            if cfg.scheduler.preemption == "swap" else None)
    sim = Simulation(requests, alloc, latency or build_latency(cfg), cfg.scheduler, get_policy(cfg.eviction),
                     observer=observer, progress=progress, swap_timing=swap)
    res = sim.run()
    req = requests_frame(res)
    summary = run_summary(res, req)
    summary["kv_bytes_per_token"] = pool.kv_bytes_per_token
    summary["pool_gib"] = pool.pool_bytes / (1 << 30)
    if isinstance(alloc, PagedAllocator):
        summary["num_blocks"] = alloc.num_blocks
        block_bytes = alloc.block_size * pool.kv_bytes_per_token
        for way in ("out", "in"):
            if f"swap_{way}_blocks" in summary:
                summary[f"swap_{way}_bytes"] = summary[f"swap_{way}_blocks"] * block_bytes
    return RunOutput(res, req, summary, timeline_frame(res))
