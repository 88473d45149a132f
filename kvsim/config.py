"""Run configuration and KV-pool sizing.

These dataclasses are what the simulator runs on. They are built from the options table
(kvsim/options.py) by the CLI, `plan` and `sweep` alike, each field that is an option filled from the
option of its name; built directly from Python they check their own values, naming the field. Every rule
between options is stated here once (:class:`~kvsim.option_table.OptionError` names the options as the
caller wrote them: keys from Python, flags on the command line). A field marked ``DERIVED`` is worked out from
other options, not filled from the option of its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvsim.activation_reserve import ReserveParts, vllm_reserve_parts
from kvsim.chat_template import chat_template_s
from kvsim.errors import ConfigError
from kvsim.frontend import NO_FRONTEND, FrontEnd, get_frontend
from kvsim.hardware import GpuSpec, ModelSpec
from kvsim.hardware.gpus import GiB
from kvsim.latency.roofline import RooflineParams
from kvsim.option_table import OptionError, check_fields, option_default
from kvsim.validation import NON_NEGATIVE, require

DERIVED = {"derived": True}  # field metadata: worked out from other options (kvsim.options fills it itself)


@dataclass(frozen=True)
class MemoryConfig:
    """How the KV pool is sized. Precedence: num_blocks, then kv_pool_gb, then the derived size."""

    gpu_memory_utilization: float = option_default(
        "gpu_memory_utilization"
    )  # fraction of GPU memory the engine may use
    activation_reserve_gb: float = option_default("activation_reserve_gb")  # GiB kept for activations, CUDA graphs
    activation_reserve: str = option_default("activation_reserve")  # fixed (the GiB above) or vllm (its profile)
    kv_pool_gb: float | None = None  # GiB of KV pool per GPU, set directly
    num_blocks: int | None = None  # pool of this many blocks of `num_blocks_size` tokens
    num_blocks_size: int = option_default("block_size")
    # Accept a set pool larger than the GPU's memory after weights (what-if studies: a cache that never evicts).
    ignore_gpu_memory: bool = option_default("ignore_gpu_memory")
    # the CUDA-graph capture sizes (tokens) whose memory the release's start-up profile subtracts from the KV
    # cache (vLLM 0.20 and later: kvsim/cudagraph_memory.py); None: it subtracts nothing
    cudagraph_sizes: tuple[int, ...] | None = None
    vllm_version: str | None = None  # the release whose start-up profile sizes the reserve (None: as 0.10-0.11)
    flashinfer_sampler: bool | None = None  # its sampler is FlashInfer's (None: as the release does)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class SchedulerConfig:
    max_model_len: int  # tokens: the longest request (vLLM's max_model_len), and the reservation size of `max`
    max_num_seqs: int = 256  # (the options give vLLM's per-GPU defaults: hardware.gpus.vllm_serve_defaults)
    max_num_batched_tokens: int = 8192  # token budget of one iteration
    batching: str = option_default("batching")  # "continuous" or "static"
    horizon_s: float | None = None  # stop the simulation at this time (seconds); later work is "unfinished"
    clock: str = option_default("clock")  # heap, or simpy: arrivals and engines as SimPy processes (same results)
    preemption_mode: str = option_default("preemption_mode")  # or "swap" (to the CPU pool; recompute when full)
    partial_preemption: bool = option_default("partial_preemption")  # preempt only a victim's tail blocks
    scheduling_policy: str = option_default("scheduling_policy")  # the waiting queue's order (engine/waiting.py)
    # False: a prompt is computed in one iteration (waits until the budget allows)
    enable_chunked_prefill: bool = option_default("enable_chunked_prefill")
    # > 0: lower-tier loads proceed layer by layer over this many layers alongside the prefill (0: whole first)
    kv_load_layers: int = 0
    # multi-step scheduling (vLLM V0's --num-scheduler-steps): decode steps run in windows of this many, the
    # scheduler consulted and tokens delivered once per window (kvsim.engine.engine); 1: every step
    num_scheduler_steps: int = option_default("num_scheduler_steps")
    # vLLM V0 without chunked prefill: a step that admits prompts runs them alone (the running batch waits)
    prompts_alone: bool = False
    # each step is scheduled while the one before it runs (vLLM V1's async scheduling): an arrival joins the
    # step after the one that starts next (kvsim.engine.engine); as SimConfig.runs_async resolves the option
    async_scheduling: bool = field(default=False, metadata=DERIVED)
    api_server: FrontEnd = NO_FRONTEND  # the API server's intake and delivery (kvsim/frontend.py)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise OptionError(
                f"{{max_num_batched_tokens}} ({self.max_num_batched_tokens}) must be >= {{max_num_seqs}}"
                f" ({self.max_num_seqs}), or a full batch of decodes would not fit one iteration"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise OptionError(
                f"{{max_num_batched_tokens}} ({self.max_num_batched_tokens}) is below {{max_model_len}} "
                f"({self.max_model_len}): without chunked prefill longer prompts could never be scheduled; raise"
                " it, lower the context, or enable chunked prefill"
            )

    @property
    def prefill_chunk(self) -> int:
        """Tokens a prompt is computed in at most per iteration (0: whole, without chunked prefill or with
        static batching)."""
        return self.max_num_batched_tokens if self.enable_chunked_prefill and self.batching != "static" else 0

    def validate(self) -> "SchedulerConfig":
        return self  # checked on construction; kept for callers of the earlier API


def prefix_caching(cfg: "SimConfig", named: bool) -> bool:
    """Whether allocators that can cache prefixes do: as ``--enable-prefix-caching`` says when given; else
    the default allocators do, as vLLM V1's (not for models with mamba layers, whose state vLLM did not cache
    by default), and allocators the user named run as named."""
    if cfg.enable_prefix_caching is not None:
        return cfg.enable_prefix_caching
    return not named and not cfg.model.state_layers


def served_layout(cfg: "SimConfig") -> str:
    """How vLLM lays out the KV cache of ``cfg``'s model when no allocator is named: ``paged``; for a model whose
    layers differ, its hybrid KV cache manager (``hybrid``), or ``naive`` (every attention layer keeps every
    token) where the release served the model without it (kvsim.releases) or the user turned it off
    (``--disable-hybrid-kv-cache-manager``)."""
    from kvsim.releases import hybrid_manager_on

    m = cfg.model
    if not m.is_hybrid:
        return "paged"
    on = hybrid_manager_on(m, cfg.vllm_version) and not cfg.disable_hybrid_kv_cache_manager
    return "hybrid" if on else "naive"


def state_pages(cfg: "SimConfig") -> int:
    """Recurrent-state pages a request holds per group at its peak: 2 with prefix caching (vLLM's align mode keeps
    the last block-aligned state beside the running one), else 1."""
    return 2 if cfg.model.state_layers and prefix_caching(cfg, named=False) else 1


@dataclass(frozen=True)
class PoolPlan:
    """The KV pool one GPU holds, in bytes and in token slots."""

    pool_bytes: int
    kv_bytes_per_token: int  # per GPU (KV heads are split across tensor-parallel ranks)
    source: str  # how the size was decided, for reports

    @property
    def pool_tokens(self) -> int:
        return self.pool_bytes // self.kv_bytes_per_token


MAX_POOL_TOKENS = 1 << 40  # beyond this token counts stop being exact in float64 sums over a run


def set_pool(mem: MemoryConfig, kv_bytes_per_token: int) -> PoolPlan | None:
    """The pool --num-blocks or --kv-pool-gb sets (num_blocks first), or None when it is to be derived."""
    if mem.num_blocks is not None:
        return PoolPlan(
            mem.num_blocks * mem.num_blocks_size * kv_bytes_per_token,
            kv_bytes_per_token,
            f"--num-blocks {mem.num_blocks} x {mem.num_blocks_size} tokens",
        )
    if mem.kv_pool_gb is not None:
        return PoolPlan(int(mem.kv_pool_gb * GiB), kv_bytes_per_token, f"--kv-pool-gb {mem.kv_pool_gb:g}")
    return None


def _parallel(tp: int, dp: int) -> str:
    """'tensor parallel 2', with the data-parallel ranks when there are several (messages)."""
    return f"tensor parallel {tp}" + (f" and {dp} data-parallel ranks" if dp > 1 else "")


def set_pool_problem(
    plan: PoolPlan, model: ModelSpec, gpu: GpuSpec, tp: int, ignore_gpu_memory: bool, dp: int = 1
) -> str | None:
    """Why a pool set directly (not derived) cannot be, or None. It must hold at least one block's worth of
    tokens, at most MAX_POOL_TOKENS, and fit in the GPU's memory beside the weights unless told to ignore that."""
    if plan.pool_tokens < 1:
        return (
            f"a pool of {plan.pool_bytes} bytes holds no token of {model.name} ({plan.kv_bytes_per_token} bytes each)"
        )
    if plan.pool_tokens > MAX_POOL_TOKENS:
        return f"{plan.pool_tokens:,} token slots is beyond the {MAX_POOL_TOKENS:,} kvsim can account exactly"
    weights = model.gpu_weight_bytes(tp, dp, gpu)
    room = gpu.memory_bytes - weights
    if plan.pool_bytes > room and not ignore_gpu_memory:
        return (
            f"a {plan.pool_bytes / GiB:,.1f} GiB pool does not fit on {gpu.name} ({gpu.memory_bytes / GiB:.1f} GiB,"
            f" {weights / GiB:.1f} GiB of it weights at {_parallel(tp, dp)}); use a bigger"
            " --gpu, more --tensor-parallel-size, a smaller pool, or --ignore-gpu-memory for a what-if pool"
        )
    return None


def _profile_limits(gpu: GpuSpec, sched: "SchedulerConfig | None", release: str | None) -> tuple[int, int]:
    """(sequences, tokens) of vLLM's start-up profile: the scheduler's limits (None: what `vllm serve` of
    ``release`` picks for the GPU)."""
    if sched is not None:
        return sched.max_num_seqs, sched.max_num_batched_tokens
    from kvsim.hardware.gpus import vllm_serve_defaults

    return vllm_serve_defaults(gpu, release)


def reserve_parts(
    model: ModelSpec, gpu: GpuSpec, mem: MemoryConfig, tp: int = 1, sched: "SchedulerConfig | None" = None
) -> ReserveParts | None:
    """The parts of vLLM's start-up profile on one GPU (sampler and forward peaks, non-torch memory, runner
    buffers, CUDA graphs) for the scheduler's limits (``sched``; None: what `vllm serve` picks for the GPU), or
    None with a fixed reserve (kvsim/activation_reserve.py; the graphs: kvsim/cudagraph_memory.py, 0 before vLLM
    0.20)."""
    if mem.activation_reserve != "vllm":
        return None
    seqs, tokens = _profile_limits(gpu, sched, mem.vllm_version)
    parts = vllm_reserve_parts(model, gpu, tp, seqs, tokens, mem.vllm_version, mem.flashinfer_sampler)
    if mem.cudagraph_sizes is None:
        return parts
    from kvsim.cudagraph_memory import cudagraph_estimate_bytes

    return parts._replace(graphs=cudagraph_estimate_bytes(model, tp, mem.cudagraph_sizes, seqs))


def reserve_bytes(
    model: ModelSpec,
    gpu: GpuSpec,
    mem: MemoryConfig,
    tp: int = 1,
    sched: "SchedulerConfig | None" = None,
    parts: ReserveParts | None = None,
) -> float:
    """Bytes kept from one GPU's KV pool besides the weights: --activation-reserve-gb, or (``vllm``) the
    profile's parts' total (``parts``: :func:`reserve_parts`, if already at hand)."""
    if mem.activation_reserve != "vllm":
        return mem.activation_reserve_gb * GiB
    got = parts or reserve_parts(model, gpu, mem, tp, sched)
    assert got is not None
    return got.total


def _no_pool_hint(
    weights: float,
    room: float,
    gpu: GpuSpec,
    parts: ReserveParts | None,
    sched,
    release: str | None = None,
) -> str:
    """What vLLM would do with no room for a KV cache (``weights``: bytes per GPU; ``room``: the usable bytes
    they leave) and, where the reserve is what fills that room, the flag that shrinks its largest part
    (``parts``: :func:`reserve_parts`; None with a fixed reserve)."""
    if weights >= gpu.memory_bytes:
        return "; vLLM would run out of memory loading the weights"
    said = '; vLLM would not start ("No available memory for the cache blocks")'
    if parts is None or room <= 0:
        return said
    seqs, tokens = _profile_limits(gpu, sched, release)
    if parts.graphs > max(parts.sampler, parts.forward):
        size, what, flag = parts.graphs, "its CUDA graphs", "fewer --cudagraph-capture-sizes"
    elif parts.sampler >= parts.forward:
        size, what, flag = parts.sampler, f"its sampler run over {seqs:,} sequences", "a smaller --max-num-seqs"
    else:
        size, what, flag = (
            parts.forward,
            f"its forward pass of {tokens:,} tokens",
            "a smaller --max-num-batched-tokens",
        )
    return f"{said}; {size / GiB:.1f} GiB of the reserve is {what} ({flag} lowers it)"


def plan_pool(
    model: ModelSpec, gpu: GpuSpec, mem: MemoryConfig, tp: int = 1, dp: int = 1, sched: "SchedulerConfig | None" = None
) -> PoolPlan:
    """Size the KV pool of one GPU (of one of ``dp`` data-parallel ranks of ``tp`` GPUs each).

    Derived size = gpu_memory x gpu_memory_utilization - weights per GPU - activation reserve (:func:`reserve_bytes`).
    """
    model.check_tp(tp)
    # bytes of one token in every attention layer: the slot of the token-slot allocators (a model without
    # attention layers still gets a 1-byte slot so that pool sizes stay defined)
    per_token = max(1, model.kv_bytes_per_token_gpu(tp))
    plan = set_pool(mem, per_token)
    if plan is not None:
        problem = set_pool_problem(plan, model, gpu, tp, mem.ignore_gpu_memory, dp)
        if problem:
            raise ConfigError(f"{plan.source}: {problem}")
        return plan
    usable = gpu.memory_bytes * mem.gpu_memory_utilization
    weights = model.gpu_weight_bytes(tp, dp, gpu)
    parts = reserve_parts(model, gpu, mem, tp, sched)
    reserve = reserve_bytes(model, gpu, mem, tp, sched, parts)
    pool = int(usable - weights - reserve)
    if pool < per_token * 16:
        raise ConfigError(
            f"{model.name} does not fit on {gpu.name} at {_parallel(tp, dp)}: {usable / GiB:.1f} GiB usable,"
            f" weights {weights / GiB:.1f} GiB, reserve {reserve / GiB:.1f} GiB leave no KV pool"
            f"{_no_pool_hint(weights, usable - weights, gpu, parts, sched, mem.vllm_version)}"
            " (try --tensor-parallel-size, a bigger GPU, or --kv-pool-gb)"
        )
    return PoolPlan(
        pool,
        per_token,
        f"{gpu.name} {gpu.memory_bytes / GiB:.1f} GiB x {mem.gpu_memory_utilization:g}"
        f" - weights {weights / GiB:.2f} GiB - reserve {reserve / GiB:.2f} GiB",
    )


def one_request_problem(cfg: "SimConfig", pool_bytes: int) -> str | None:
    """Why vLLM would not start with a KV pool of ``pool_bytes`` bytes per GPU, or None: at start-up it checks
    that one request of ``max_model_len`` tokens fits at its peak (V1's ``check_enough_kv_cache_memory``; V0
    had the same check), in the layout it serves the model's layers in (each kind its window or state under
    the hybrid manager), and names the longest that would."""
    m, block, length = cfg.memory_model, cfg.block_size, cfg.scheduler.max_model_len
    if m.is_hybrid:
        from kvsim.allocators.kv_groups import max_concurrency
        from kvsim.allocators.registry import ModelMemory, kind_layout

        memory = ModelMemory(m, cfg.tp, pool_bytes, cfg.scheduler.prefill_chunk)
        kind, pages = served_layout(cfg), state_pages(cfg)

        def fits(n: int) -> bool:
            lay = kind_layout(kind, memory, block, n)
            return max_concurrency(lay, n, cfg.scheduler.prefill_chunk, pages) >= 1

        if fits(length):
            return None
        lo, hi = 0, length  # the longest that fits, as vLLM's estimate_max_model_len searches for it
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        longest = lo
        need = ""
    else:
        per_block = block * max(1, m.kv_bytes_per_token_gpu(cfg.tp))
        needed = -(-length // block) * per_block
        if needed <= pool_bytes:
            return None
        longest = pool_bytes // per_block * block
        need = f" ({needed / GiB:.2f} GiB of KV cache per GPU, more than the pool's {pool_bytes / GiB:.2f} GiB)"
    return (
        f"vLLM would not start: one request of its max model len, {length:,} tokens, does not fit in the KV "
        f"cache{need}; the longest that would is {longest:,} tokens (pass --max-model-len {longest} or less, "
        "or make room: --gpu-memory-utilization, --tensor-parallel-size, a bigger GPU)"
        if longest > 0
        else f"vLLM would not start: one request of {length:,} tokens does not fit in the KV cache{need}, nor "
        "would any (make room: --gpu-memory-utilization, --tensor-parallel-size, a bigger GPU)"
    )


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulation needs besides the trace and the allocator. Fields that are options carry the
    options' names, defaults, rules and units (kvsim/options.py)."""

    model: ModelSpec
    gpu: GpuSpec
    scheduler: SchedulerConfig
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    roofline: RooflineParams = field(default_factory=RooflineParams)
    tensor_parallel_size: int = option_default("tensor_parallel_size")
    enable_expert_parallel: bool = option_default("enable_expert_parallel")  # MoE experts spread whole over TP ranks
    pipeline_parallel_size: int = option_default("pipeline_parallel_size")
    # data-parallel ranks of one replica, each its own engine of tp x pp GPUs; MoE expert layers span all ranks
    data_parallel_size: int = option_default("data_parallel_size")
    # GiB of host memory for swapped-out KV (with preemption_mode swap; the option's default depends on it)
    swap_space: float = field(default=0.0, metadata=DERIVED)
    swap_block_latency_s: float = 10e-6  # fixed cost of one block copy (one cudaMemcpyAsync)
    latency: str = option_default("latency")  # "per-op", "roofline", or a path to a calibration JSON
    vllm_version: str | None = option_default("vllm_version")  # per-op: whose kernel tables (None: the newest)
    cpu_overhead: str = option_default("cpu_overhead")  # the serving engine's CPU time per iteration (latency/cpu.py)
    # schedule each step while the previous one runs (None: as the vLLM release does; see runs_async)
    async_scheduling: bool | None = option_default("async_scheduling")
    frontend: str = option_default("frontend")  # the API server in front of the engine (kvsim/frontend.py)
    moe_backend: str = option_default("moe_backend")  # per-op: whose fused-MoE kernels price the experts
    moe_routing: str = option_default("moe_routing")  # per-op: how tokens spread over experts (latency/routing.py)
    vllm_engine: str = option_default("vllm_engine")  # v1, or v0 (its scheduler, defaults and API server)
    api_server_count: int = option_default("api_server_count")  # API server processes
    stream_interval: int = option_default("stream_interval")  # tokens per streamed chunk after the first
    endpoint: str = option_default("endpoint")  # where clients send: completions or chat (kvsim/chat_template.py)
    cudagraph_capture_sizes: str = option_default("cudagraph_capture_sizes")  # per-op: CUDA-graph padding
    interconnect: str = option_default("interconnect")  # how tensor-parallel GPUs are linked
    victim_policy: str = option_default("victim_policy")  # preemption victim policy (engine/preemption.py)
    block_size: int = option_default("block_size")  # tokens per block of allocators named without one
    # True: every allocator that can caches prefixes; False: none by default; None: the default allocators
    # do (vLLM V1), named ones run as named (runner.prefix_caching)
    enable_prefix_caching: bool | None = option_default("enable_prefix_caching")
    # vLLM's --disable-hybrid-kv-cache-manager: a model whose layers differ served in the naive layout (served_layout)
    disable_hybrid_kv_cache_manager: bool = option_default("disable_hybrid_kv_cache_manager")
    cache_eviction: str = option_default("cache_eviction")  # which cached block a prefix cache drops first
    kv_offloading_size: float = option_default("kv_offloading_size")  # GiB per GPU of a CPU tier (0: none)
    kv_offloading_bandwidth: float | None = None  # GB/s from the CPU tier into one GPU (None: the GPU's PCIe)
    kv_load_layerwise: bool = option_default("kv_load_layerwise")  # lower-tier loads overlap the prefill by layer
    max_concurrency: int | None = None  # clients keep at most this many requests in flight (None: open loop)
    request_rate: float | None = None  # re-time the trace: Poisson at this rate (requests/s), inf: all at once
    speculative: object = None  # kvsim.speculative.SpeculativeConfig, or None: no speculative decoding

    def __post_init__(self) -> None:
        check_fields(self)
        require(self.swap_block_latency_s, NON_NEGATIVE, "swap_block_latency_s")
        model, sched, spec = self.model, self.scheduler, self.speculative
        if self.disable_hybrid_kv_cache_manager and model.state_layers:
            raise OptionError(
                f"{{disable_hybrid_kv_cache_manager}}: {model.name}'s mamba layers need vLLM's hybrid KV cache "
                "manager (without it vLLM cannot lay out their state beside the attention layers' KV)"
            )
        tp, pp, dp = self.tensor_parallel_size, self.pipeline_parallel_size, self.data_parallel_size
        for key, n, problem in (
            ("tensor_parallel_size", tp, model.tp_problem(tp)),
            ("pipeline_parallel_size", pp, model.pp_problem(pp)),
        ):
            if problem:
                raise OptionError(f"{{{key}}} {n}: {problem}")
        steps = sched.num_scheduler_steps
        if steps > 1 and self.vllm_engine != "v0":
            raise OptionError(
                f"{{num_scheduler_steps}} {steps}: multi-step scheduling is the V0 engine's (vLLM 0.6-0.10); add "
                "{vllm_engine} v0"
            )
        if steps > 1:
            other = (
                "speculative_config"
                if spec is not None
                else "pipeline_parallel_size"
                if pp > 1
                else "data_parallel_size"
                if dp > 1
                else "batching"
                if sched.batching != "continuous"
                else None
            )
            if other:
                raise OptionError(
                    f"{{num_scheduler_steps}} {steps}: multi-step scheduling is modelled for one engine of "
                    "tensor-parallel GPUs, continuous batching and no speculative decoding; "
                    f"drop {{{other}}} or the multi-step"
                )
        if spec is not None and pp > 1:
            raise OptionError(
                f"{{speculative_config}} with {{pipeline_parallel_size}} {pp}: not modelled; use one or the other"
            )
        if spec is not None and self.vllm_engine == "v0":
            raise OptionError("{speculative_config}: modelled as vLLM V1 runs it; drop {vllm_engine} v0")
        if spec is not None and (not sched.enable_chunked_prefill or sched.batching != "continuous"):
            raise OptionError(
                "{speculative_config}: modelled with chunked prefill and continuous batching (vLLM V1's way); drop "
                + ("{enable_chunked_prefill}" if not sched.enable_chunked_prefill else "{batching}")
            )
        if spec is not None and self.latency == "roofline":
            raise OptionError(
                "{speculative_config}: the roofline model does not price verify and draft passes; use the "
                "per-operation model"
            )
        problem = model.dp_problem(dp, pp)
        if problem:
            raise OptionError(f"{{data_parallel_size}} {dp}: {problem}")
        stage = self.memory_model
        pool = set_pool(self.memory, max(1, stage.kv_bytes_per_token_gpu(tp)))
        problem = pool and set_pool_problem(pool, stage, self.gpu, tp, self.memory.ignore_gpu_memory, dp)
        if problem:  # a set pool must fit the GPU
            raise OptionError(f"{{{'num_blocks' if self.memory.num_blocks is not None else 'kv_pool_gb'}}}: {problem}")
        if self.enable_expert_parallel and model.is_moe and model.num_experts % (tp * dp):
            ranks = (
                f"{tp * dp} GPUs ({{data_parallel_size}} x {{tensor_parallel_size}})"
                if dp > 1
                else f"{tp} GPUs ({{tensor_parallel_size}})"
            )
            raise OptionError(
                f"{{enable_expert_parallel}}: {model.num_experts} experts of {model.name} do not spread evenly "
                f"over {ranks}"
            )
        problem = model.block_problem(tp, dp, self.enable_expert_parallel)
        if problem:  # expert parallelism keeps the experts whole: say so where that alone would load it
            ep_loads = not self.enable_expert_parallel and model.block_problem(tp, dp, True) is None
            fix = "{enable_expert_parallel} or a " if ep_loads else "a "
            raise OptionError(f"{{tensor_parallel_size}} {tp}: {problem}; use {fix}smaller {{tensor_parallel_size}}")
        if self.async_scheduling and self.vllm_engine == "v0":
            raise OptionError(
                "{async_scheduling}: the V0 engine schedules in step with the GPU (async scheduling "
                "is V1's, vLLM 0.10 and later); drop one"
            )
        if self.moe_backend != "auto" and (not model.is_moe or self.latency == "roofline"):
            raise OptionError(
                f"{{moe_backend}} {self.moe_backend}: "
                + (
                    f"{model.name} has no MoE layers"
                    if not model.is_moe
                    else "{latency} roofline prices no measured kernels; use the per-operation model"
                )
            )
        from kvsim.releases import STREAM_INTERVAL_FROM, has_stream_interval

        if self.stream_interval > 1 and not has_stream_interval(self.vllm_version):
            raise OptionError(
                f"{{stream_interval}}: vLLM {self.vllm_version} streams every token (--stream-interval came with "
                f"{STREAM_INTERVAL_FROM}); drop it or give a later {{vllm_version}}"
            )
        if self.async_scheduling is False and self.cpu_overhead == "vllm-v1-async":
            raise OptionError(
                "{cpu_overhead} vllm-v1-async is the V1 engine with async scheduling: drop "
                "--no-async-scheduling, or use {cpu_overhead} vllm-v1"
            )

    @property
    def runs_async(self) -> bool:
        """Whether the engine schedules each step while the previous one runs (vLLM's ``--async-scheduling``):
        as told; else on with ``--cpu-overhead vllm-v1-async``, off for the V0 engine and static batching, and
        otherwise as the vLLM release does (kvsim.releases.async_scheduling_default)."""
        if self.async_scheduling is not None:
            return self.async_scheduling
        if self.cpu_overhead == "vllm-v1-async":
            return True
        if self.vllm_engine == "v0" or self.scheduler.batching != "continuous":
            return False
        from kvsim.releases import async_scheduling_default

        drafter = self.speculative.method if self.speculative is not None else None
        return async_scheduling_default(self.vllm_version, self.pipeline_parallel_size, drafter)

    @property
    def tp(self) -> int:
        """Tensor parallelism (``tensor_parallel_size``): GPUs one pipeline stage spans."""
        return self.tensor_parallel_size

    @property
    def pp(self) -> int:
        """Pipeline stages (``pipeline_parallel_size``)."""
        return self.pipeline_parallel_size

    @property
    def dp(self) -> int:
        """Data-parallel ranks (``data_parallel_size``): engines one replica is made of."""
        return self.data_parallel_size

    @property
    def gpus(self) -> int:
        """GPUs one engine (one data-parallel rank) spans: tensor x pipeline parallel."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def memory_model(self) -> ModelSpec:
        """What one GPU holds the weights and KV of: the model, or its largest pipeline stage."""
        return self.model.pipeline_stage(self.pipeline_parallel_size)

    def pool_plan(self) -> PoolPlan:
        """The KV pool of one GPU of this configuration (of its largest pipeline stage)."""
        return plan_pool(self.memory_model, self.gpu, self.memory, self.tp, self.dp, self.scheduler)

    def start_problem(self) -> str | None:
        """Why vLLM would refuse to start with this configuration's KV pool although there is one: no room for
        one request of max_model_len (:func:`one_request_problem`), or None. Only a pool sized from the GPU's
        memory is checked: --kv-pool-gb and --num-blocks are what-ifs (tight pools are how memory pressure is
        studied). A warning, not an error: a served configuration can set a --max-model-len its description
        leaves out (GPUStack sets 8,192 unless told)."""
        if self.memory.num_blocks is not None or self.memory.kv_pool_gb is not None:
            return None
        return one_request_problem(self, self.pool_plan().pool_bytes)

    def serving_frontend(self) -> FrontEnd:
        """The API server in front of each engine; ``auto`` follows the latency model (none where it prices
        the GPU alone: roofline, or no CPU overhead)."""
        return get_frontend(
            self.frontend,
            self.api_server_count,
            stream_interval=self.stream_interval,
            engine_only=self.latency == "roofline" or self.cpu_overhead == "none",
            v0=self.vllm_engine == "v0",
            template_s=chat_template_s(self.vllm_version, self.model.chat_renderer, self.endpoint),
        )

    def engine_scheduler(self) -> SchedulerConfig:
        """The scheduler as the engine runs it: with pipeline stages, one simulated iteration is a rotation of
        as many micro-batches, each with its own token budget (vLLM V1 schedules each within
        max_num_batched_tokens), so the iteration's budget is stages x the budget."""
        s = replace(self.scheduler, api_server=self.serving_frontend(), async_scheduling=self.runs_async)
        if self.kv_load_layerwise:
            s = replace(s, kv_load_layers=self.memory_model.layers)
        if self.speculative is not None:  # an iteration is 1/tau of a verify step (kvsim.speculative)
            s = replace(
                s, max_num_batched_tokens=max(s.max_num_seqs, int(s.max_num_batched_tokens / self.speculative.tau))
            )
        if self.pipeline_parallel_size == 1:
            return s
        return replace(s, max_num_batched_tokens=s.max_num_batched_tokens * self.pipeline_parallel_size)
