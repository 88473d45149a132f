"""Run configuration and KV-pool sizing."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.errors import ConfigError
from kvsim.hardware import GpuSpec, ModelSpec
from kvsim.hardware.gpus import GiB


@dataclass(frozen=True)
class MemoryConfig:
    """How the KV pool is sized. Precedence: num_blocks, then kv_pool_gb, then the derived size."""

    gpu_memory_utilization: float = 0.90  # fraction of GPU memory the engine may use
    activation_reserve_gb: float = 2.0  # GiB kept for activations, CUDA graphs and workspace
    kv_pool_gb: float | None = None  # GiB of KV pool per GPU, set directly
    num_blocks: int | None = None  # pool of this many blocks of `num_blocks_size` tokens
    num_blocks_size: int = 16


@dataclass(frozen=True)
class SchedulerConfig:
    max_seq_len: int  # tokens: model context limit, and the reservation size of `max`
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192  # token budget of one iteration (chunked prefill)
    batching: str = "continuous"  # or "static"
    horizon_s: float | None = None  # stop the simulation at this time (seconds); later work is "unfinished"
    preemption: str = "recompute"  # or "swap" (to the CPU pool; recompute when it is full)
    partial_eviction: bool = False  # evict only a victim's tail blocks, keep the rest

    def validate(self) -> "SchedulerConfig":
        if self.batching not in ("continuous", "static"):
            raise ConfigError(f"--batching must be 'continuous' or 'static', not '{self.batching}'")
        if self.max_seq_len <= 0 or self.max_num_seqs <= 0 or self.max_num_batched_tokens <= 0:
            raise ConfigError("--max-seq-len, --max-num-seqs and --max-batched-tokens must be > 0")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"--max-batched-tokens ({self.max_num_batched_tokens}) must be >= --max-num-seqs ({self.max_num_seqs}),"
                " or a full batch of decodes would not fit one iteration"
            )
        if self.horizon_s is not None and self.horizon_s <= 0:
            raise ConfigError("--horizon-s must be > 0")
        if self.preemption not in ("recompute", "swap"):
            raise ConfigError(f"--preemption must be 'recompute' or 'swap', not '{self.preemption}'")
        return self


@dataclass(frozen=True)
class PoolPlan:
    """The KV pool one GPU holds, in bytes and in token slots."""

    pool_bytes: int
    kv_bytes_per_token: int  # per GPU (KV heads are split across tensor-parallel ranks)
    source: str  # how the size was decided, for reports

    @property
    def pool_tokens(self) -> int:
        return self.pool_bytes // self.kv_bytes_per_token


def plan_pool(model: ModelSpec, gpu: GpuSpec, mem: MemoryConfig, tp: int = 1) -> PoolPlan:
    """Size the KV pool of one GPU.

    Derived size = gpu_memory x gpu_memory_utilization - weights / tp - activation reserve.
    """
    if tp <= 0 or model.kv_heads % tp:
        raise ConfigError(f"--tp {tp}: must divide the model's kv_heads ({model.kv_heads})")
    per_token = model.kv_bytes_per_token // tp
    if mem.num_blocks is not None:
        if mem.num_blocks <= 0:
            raise ConfigError("--num-blocks must be > 0")
        return PoolPlan(mem.num_blocks * mem.num_blocks_size * per_token, per_token,
                        f"--num-blocks {mem.num_blocks} x {mem.num_blocks_size} tokens")
    if mem.kv_pool_gb is not None:
        if mem.kv_pool_gb <= 0:
            raise ConfigError("--kv-pool-gb must be > 0")
        return PoolPlan(int(mem.kv_pool_gb * GiB), per_token, f"--kv-pool-gb {mem.kv_pool_gb:g}")
    if not 0 < mem.gpu_memory_utilization <= 1:
        raise ConfigError("--gpu-memory-utilization must be in (0, 1]")
    usable = gpu.memory_bytes * mem.gpu_memory_utilization
    weights = model.weight_bytes / tp
    reserve = mem.activation_reserve_gb * GiB
    pool = int(usable - weights - reserve)
    if pool < per_token * 16:
        raise ConfigError(
            f"{model.name} does not fit on {gpu.name} with tp={tp}: {usable / GiB:.1f} GiB usable,"
            f" weights {weights / GiB:.1f} GiB, reserve {reserve / GiB:.1f} GiB leave no KV pool"
            " (try --tp, a bigger GPU, or --kv-pool-gb)"
        )
    return PoolPlan(pool, per_token,
                    f"{gpu.name} {gpu.memory_bytes / GiB:.1f} GiB x {mem.gpu_memory_utilization:g}"
                    f" - weights {weights / GiB:.2f} GiB - reserve {reserve / GiB:.2f} GiB")


@dataclass(frozen=True)
class RooflineParams:
    """Achievable fractions of the datasheet peaks, and fixed per-iteration overhead."""

    flops_efficiency: float = 0.6
    bandwidth_efficiency: float = 0.8
    step_overhead_s: float = 0.002


@dataclass(frozen=True)
class SimConfig:
    model: ModelSpec
    gpu: GpuSpec
    scheduler: SchedulerConfig
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    roofline: RooflineParams = field(default_factory=RooflineParams)
    tp: int = 1
    cpu_swap_gb: float = 0.0  # GiB of host memory for swapped-out KV (with --preemption swap)
    swap_block_latency_s: float = 10e-6  # fixed cost of one block copy (one cudaMemcpyAsync)
    latency: str = "roofline"  # "roofline" or a path to a calibration JSON
    eviction: str = "lifo"
    record_batches: str | None = None  # path: write the executed batches for kernel replay
