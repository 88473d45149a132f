"""Where one GPU's memory goes before any request arrives, and how many sequences its KV pool holds.

The numbers behind `kvsim memory`: GPU memory x utilization = weights / tp + activation reserve + KV
pool (the pool sizing of kvsim/config.py), KV bytes per token (2 x layers x kv_heads x head_dim x KV
dtype bytes, split over tensor-parallel ranks), blocks, and vLLM's "maximum concurrency": the pool's
blocks over the blocks one request of ``max_model_len`` tokens needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvsim.config import GiB, SimConfig, plan_pool


@dataclass(frozen=True)
class MemoryBudget:
    model: str
    gpu: str
    tp: int
    gpu_bytes: int  # one GPU's memory
    usable_bytes: float  # x gpu_memory_utilization
    weight_bytes: float  # per GPU
    reserve_bytes: float  # activations, CUDA graphs, workspace (per GPU)
    pool_bytes: int  # KV pool per GPU
    pool_source: str  # how the pool size was decided
    kv_bytes_per_token_model: int  # the whole model (all ranks)
    kv_bytes_per_token_gpu: int  # one rank's share
    kv_formula: str
    block_size: int  # tokens
    max_model_len: int  # tokens
    params: float
    weight_dtype: str
    kv_dtype: str

    @property
    def pool_tokens(self) -> int:
        return self.pool_bytes // self.kv_bytes_per_token_gpu

    @property
    def num_blocks(self) -> int:
        return self.pool_tokens // self.block_size

    @property
    def blocks_per_request(self) -> int:
        """Blocks a request of max_model_len tokens needs."""
        return -(-self.max_model_len // self.block_size)

    @property
    def max_concurrency(self) -> float:
        """vLLM's 'Maximum concurrency for max_model_len tokens per request' (a ratio, as vLLM prints it)."""
        return self.num_blocks / self.blocks_per_request

    @property
    def full_length_sequences(self) -> int:
        """Requests of max_model_len tokens that fit at once, whole."""
        return math.floor(self.max_concurrency)

    def sequences_at(self, tokens: int) -> int:
        """Requests of ``tokens`` tokens each that fit at once in paged blocks."""
        return self.num_blocks // -(-tokens // self.block_size)


def memory_budget(cfg: SimConfig) -> MemoryBudget:
    m, gpu, tp = cfg.model, cfg.gpu, cfg.tp
    pool = plan_pool(m, gpu, cfg.memory, tp)
    kv_dtype = m.kv_dtype or m.dtype
    formula = f"2 x {m.layers} layers x {m.kv_heads} KV heads x {m.head_dim} dims x {m.kv_dtype_bytes} B"
    return MemoryBudget(
        model=m.name, gpu=gpu.name, tp=tp, gpu_bytes=gpu.memory_bytes,
        usable_bytes=gpu.memory_bytes * cfg.memory.gpu_memory_utilization, weight_bytes=m.weight_bytes / tp,
        reserve_bytes=cfg.memory.activation_reserve_gb * GiB, pool_bytes=pool.pool_bytes, pool_source=pool.source,
        kv_bytes_per_token_model=m.kv_bytes_per_token, kv_bytes_per_token_gpu=pool.kv_bytes_per_token,
        kv_formula=formula, block_size=cfg.block_size, max_model_len=cfg.scheduler.max_seq_len, params=m.params,
        weight_dtype=m.dtype, kv_dtype=kv_dtype)


def _size(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (KiB, MiB, GiB)."""
    for unit, scale in (("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def describe(b: MemoryBudget) -> list[tuple[str, str]]:
    """(label, value) lines, the same in the terminal and in tests."""
    tp = f", / {b.tp}" if b.tp > 1 else ""
    is_set = b.pool_source.startswith("--")  # --kv-pool-gb / --num-blocks rather than derived
    lines = [
        ("GPU memory", f"{_size(b.gpu_bytes)} per GPU"),
        ("usable (x utilization)", f"{_size(b.usable_bytes)}"),
        ("weights", f"{_size(b.weight_bytes)} per GPU ({b.params / 1e9:.2f} B params, {b.weight_dtype}{tp})"),
        ("activation reserve", f"{_size(b.reserve_bytes)}"),
        ("KV pool", f"{_size(b.pool_bytes)} per GPU" + (f" (set: {b.pool_source})" if is_set else "")),
        ("KV per token", f"{_size(b.kv_bytes_per_token_model)} for the whole model ({b.kv_dtype})"),
        ("", f"= {b.kv_formula}"),
    ]
    if b.tp > 1:
        lines.append(("KV per token per GPU", f"{_size(b.kv_bytes_per_token_gpu)} (KV heads split over {b.tp})"))
    lines += [
        ("token slots", f"{b.pool_tokens:,} per GPU"),
        ("blocks", f"{b.num_blocks:,} of {b.block_size} tokens"),
        ("max model len", f"{b.max_model_len:,} tokens = {b.blocks_per_request:,} blocks"),
        ("maximum concurrency", f"{b.max_concurrency:,.2f}x for {b.max_model_len:,}-token requests (as vLLM)"),
    ]
    return lines
