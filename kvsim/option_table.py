"""The options table: every simulation option once, with its flags, default, units, rules and choices.

Only data and the two helpers that configuration dataclasses use (:func:`option_default`,
:func:`check_fields`) live here, so that kvsim/config.py and the latency parameters can take their
defaults and rules from the table; parsing, help and building a configuration are in kvsim/options.py.

The table sits at the bottom of the package: it imports only kvsim/errors.py and kvsim/validation.py.
A choice list or rule that belongs to another module stays there (the victim policies with the engine, the
CPU presets with the latency models) and the row names it as ``"module:NAME"``, read when a value is
checked or help is written (:func:`owned`), so registering a policy at run time widens the choices and no
module is imported before it is needed.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable

from kvsim.errors import ConfigError
from kvsim.validation import (
    BANDWIDTH_GBS,
    EFFICIENCY,
    FRACTION,
    GIB,
    GIB_OR_ZERO,
    MAX_LEN,
    MAX_PROMPTS,
    MAX_TP,
    POSITIVE,
    POSITIVE_INT,
    SEED,
    Number,
    request_rate,
    require,
)

DEFAULT_MODEL = "llama-2-7b"
DEFAULT_GPU = "a100-40gb"


@dataclass(frozen=True)
class Option:
    key: str  # Python name, also the `sweep`/`plan` grid key
    flags: tuple[str, ...]  # primary first, then aliases
    help: str  # says the unit
    group: str
    default: Any = None  # None: not set (help says what applies then)
    type: type = str  # str, int, float or bool
    # the value's problem or None: a function, or "module:function" owned by another module
    rule: Callable[[Any], str | None] | str | None = None
    # the allowed values, or "module:NAME" of the module that owns them (a tuple, a registry dict whose keys
    # are the names, or a function returning them), read whenever a value is checked or help is written
    choices: tuple[str, ...] | str | None = None
    negatable: bool = False  # bool: --x / --no-x
    default_text: str | None = None  # how --help describes a None default
    sizes: bool = False  # int: vLLM's human-readable sizes, 32k = 32,000 and 32K = 32,768 (also m/M, g/G)
    metavar: str | None = None  # how --help names the value (None: from the type or the choices)
    # other spellings of a choice -> the choice (a dict, or "module:NAME" of the module that owns it), e.g. the
    # URL path a benchmark client's flag takes for kvsim's name of the same thing
    spellings: dict[str, str] | str | None = None

    @property
    def flag(self) -> str:
        return self.flags[0]

    def allowed(self) -> tuple[str, ...] | None:
        """The values the option takes now (None: any)."""
        if not isinstance(self.choices, str):
            return self.choices
        names = owned(self.choices)
        return tuple(names() if callable(names) else names)

    def respelled(self, value: Any) -> Any:
        """``value`` as the choice it spells (unchanged when it is not another spelling of one)."""
        if self.spellings is None or not isinstance(value, str):
            return value
        table = owned(self.spellings) if isinstance(self.spellings, str) else self.spellings
        return table.get(value, value)

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` by the option's rule (not its choices), or None."""
        if self.rule is None:
            return None
        rule = owned(self.rule) if isinstance(self.rule, str) else self.rule
        return rule(value)

    @property
    def bounds(self) -> Number | None:
        """The option's numeric rule, when it is a :class:`Number` (help states its range)."""
        return self.rule if isinstance(self.rule, Number) else None

    def alias_keys(self) -> list[str]:
        return [f.lstrip("-").replace("-", "_") for f in self.flags if f.startswith("--")]


def owned(ref: str) -> Any:
    """The object ``"module:NAME"`` names (a choice list or rule kept by the module that owns it)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


OPTIONS: list[Option] = [
    # --- model and hardware
    Option(
        "model",
        ("--model",),
        "model preset or its Hugging Face id (`kvsim list models`), a Hugging Face "
        "config.json path, or custom:layers=..,kv_heads=..,head_dim=..,params=..",
        "model and hardware",
        DEFAULT_MODEL,
    ),
    Option(
        "gpu",
        ("--gpu",),
        "GPU preset or nvidia-smi's name for it (`kvsim list gpus`; case and a leading "
        "NVIDIA do not matter, and H100 stands for h100-80gb), your own GPU as custom:memory_gb=..,"
        "bandwidth_gbs=..,bf16_tflops=..[,arch=..,sms=..] or a GPU YAML file with those keys (docs/gpus.md)",
        "model and hardware",
        DEFAULT_GPU,
    ),
    Option(
        "tensor_parallel_size",
        ("--tensor-parallel-size", "-tp", "--tp"),
        "GPUs one replica spans with tensor parallelism (weights, heads and KV split across them)",
        "model and hardware",
        1,
        int,
        Number(integer=True, min=1, max=MAX_TP),
    ),
    Option(
        "pipeline_parallel_size",
        ("--pipeline-parallel-size", "-pp", "--pp"),
        "pipeline stages one replica spans (layers split across them, each stage tensor-parallel over "
        "--tensor-parallel-size GPUs; as many micro-batches in flight as stages, as vLLM V1)",
        "model and hardware",
        1,
        int,
        POSITIVE_INT,
    ),
    Option(
        "data_parallel_size",
        ("--data-parallel-size", "-dp", "--dp"),
        "data-parallel ranks of one replica (kvsim cluster; each rank its own engine, scheduler and KV cache of "
        "--tensor-parallel-size GPUs); a MoE model's expert layers span all ranks' GPUs, as vLLM's DP attention",
        "model and hardware",
        1,
        int,
        Number(integer=True, min=1, max=MAX_TP),
    ),
    Option(
        "enable_expert_parallel",
        ("--enable-expert-parallel",),
        "MoE models: spread whole routed experts over the tensor-parallel GPUs (expert parallelism, EP = TP) "
        "instead of splitting every expert's width, as vLLM's flag; attention stays tensor-parallel",
        "model and hardware",
        False,
        bool,
    ),
    Option(
        "vllm_version",
        ("--vllm-version",),
        "the vLLM release you serve with, such as 0.14 or 0.19.1: per-op "
        "times come from its measured kernels (A100: 0.14; H100: 0.14, 0.19, 0.22, 0.24; B200: 0.19, 0.22, 0.24; "
        "a release between them runs the kernels of the newest measured before it; docs/latency.md), and models "
        "with chunked attention get its KV layout (0.10-0.12: no hybrid manager; docs/hybrid-models.md)",
        "model and hardware",
        None,
        rule="kvsim.releases:vllm_version_rule",
        default_text="the newest measured",
        metavar="RELEASE",
    ),
    Option(
        "kv_cache_dtype",
        ("--kv-cache-dtype",),
        "data type of the KV cache: auto (the model's) or fp8 (1 byte:"
        " twice the tokens per GiB, half the bytes decode attention reads)",
        "model and hardware",
        "auto",
        choices="kvsim.hardware.model_spec:KV_CACHE_DTYPES",
    ),
    Option(
        "quantization",
        ("--quantization", "-q"),
        "weights as vLLM's --quantization serves them, in memory and "
        "in GEMM/MoE time (measured kernels of the format where the GPU's tables have them): fp8 keeps an FP8 "
        "checkpoint's own scheme and quantizes a bf16 one on loading (per-tensor scales; embedding and LM head "
        "stay bf16); another method keeps a checkpoint of that method as it is, prices a preset as that method's "
        "published checkpoints hold it (modelopt_fp4: NVFP4 + FP8 KV cache; awq: 4-bit groups of 128; "
        "compressed-tensors: FP8 dynamic; mxfp4: MXFP4 experts; said on the terminal), and must match a "
        "config.json's own method, as vLLM checks (kvsim/hardware/checkpoints.py)",
        "model and hardware",
        None,
        choices="kvsim.hardware.checkpoints:QUANTIZATION_FLAGS",
        default_text="as the checkpoint is",
    ),
    Option(
        "language_model_only",
        ("--language-model-only",),
        "a multimodal model served without its encoders, as vLLM's flag: the vision tower's weights are not "
        "loaded (presets that hold one: gemma-3-12b, llama-4-scout, llama-4-maverick, kimi-k2.5)",
        "model and hardware",
        False,
        bool,
    ),
    # --- KV pool
    Option(
        "gpu_memory_utilization",
        ("--gpu-memory-utilization",),
        "fraction of each GPU's memory the engine may use (weights, activations, KV)",
        "KV pool",
        0.90,
        float,
        FRACTION,
    ),
    Option(
        "activation_reserve_gb",
        ("--activation-reserve-gb",),
        "GiB per GPU kept for activations, CUDA graphs and workspace with --activation-reserve fixed (giving it "
        "alone picks fixed)",
        "KV pool",
        2.0,
        float,
        GIB_OR_ZERO,
    ),
    Option(
        "activation_reserve",
        ("--activation-reserve",),
        "how the memory kept from the KV pool besides the "
        "weights is sized: fixed (--activation-reserve-gb) or vllm (as vLLM's start-up profile finds it: the "
        "larger of its sampler run over --max-num-seqs full-vocabulary rows and a forward pass of "
        "--max-num-batched-tokens tokens, plus non-torch memory; kvsim/activation_reserve.py)",
        "KV pool",
        "vllm",
        choices=("fixed", "vllm"),
    ),
    Option(
        "flashinfer_sampler",
        ("--flashinfer-sampler",),
        "vLLM samples with FlashInfer's top-k/top-p (VLLM_USE_FLASHINFER_SAMPLER=1, or before 0.11.1 wherever "
        "flashinfer is installed, as in vLLM's Docker image): its start-up profile's sampler run keeps 14 bytes "
        "per row and vocabulary entry instead of the sort's 38.9 (kvsim/activation_reserve.py)",
        "KV pool",
        None,
        bool,
        negatable=True,
        default_text="as the release does: from 0.21 on, before 0.21 off (for 0.8-0.11.0: a pip install, "
        "without flashinfer)",
    ),
    Option(
        "kv_pool_gb",
        ("--kv-pool-gb",),
        "KV pool per GPU in GiB, instead of the derived size",
        "KV pool",
        None,
        float,
        GIB,
        default_text="derived from GPU memory",
    ),
    Option(
        "num_blocks",
        ("--num-blocks", "--num-gpu-blocks-override"),
        "KV pool of this many blocks (of --num-blocks-size tokens), instead of the derived size",
        "KV pool",
        None,
        int,
        POSITIVE_INT,
        default_text="derived from GPU memory",
    ),
    Option(
        "num_blocks_size",
        ("--num-blocks-size",),
        "tokens per block that --num-blocks counts",
        "KV pool",
        None,
        int,
        POSITIVE_INT,
        default_text="--block-size",
    ),
    Option(
        "ignore_gpu_memory",
        ("--ignore-gpu-memory",),
        "accept a --kv-pool-gb/--num-blocks pool larger than the GPU's memory after weights (what-if studies, "
        "e.g. a cache that never evicts)",
        "KV pool",
        False,
        bool,
    ),
    Option(
        "block_size",
        ("--block-size",),
        "tokens per KV block of allocators named without one (paged, radix)",
        "KV pool",
        16,
        int,
        POSITIVE_INT,
    ),
    Option(
        "swap_space",
        ("--swap-space", "--cpu-swap-gb"),
        "GiB of host memory per GPU for swapped-out KV (with --preemption-mode swap)",
        "KV pool",
        None,
        float,
        GIB_OR_ZERO,
        default_text="4 with --preemption-mode swap, else 0",
    ),
    Option(
        "kv_offloading_size",
        ("--kv-offloading-size",),
        "GiB of host memory per GPU for a CPU tier of the prefix cache: cached blocks evicted from the GPU "
        "move there and load back on a hit (vLLM's KV offloading, LMCache)",
        "KV pool",
        0.0,
        float,
        GIB_OR_ZERO,
    ),
    Option(
        "kv_offloading_bandwidth",
        ("--kv-offloading-bandwidth",),
        "GB/s from the CPU tier into one GPU",
        "KV pool",
        None,
        float,
        BANDWIDTH_GBS,
        default_text="the GPU's PCIe bandwidth",
    ),
    Option(
        "kv_load_layerwise",
        ("--kv-load-layerwise",),
        "load prefix blocks found in a lower tier (--kv-offloading-size, a shared store) layer by layer "
        "alongside the prefill (LMCache's layerwise mode): the request starts once its first layer is in, and "
        "the iteration computing it ends no earlier than its last layer",
        "KV pool",
        False,
        bool,
    ),
    # --- scheduler
    Option(
        "max_model_len",
        ("--max-model-len", "--max-seq-len"),
        "longest request (prompt + output tokens; 32k = 32,000, 32K = 32,768 as in vLLM); also what `max` "
        "reserves per request",
        "scheduler",
        None,
        int,
        POSITIVE_INT,
        default_text="the model's context length",
        sizes=True,
    ),
    Option(
        "max_num_seqs",
        ("--max-num-seqs",),
        "most sequences in the running batch",
        "scheduler",
        None,
        int,
        POSITIVE_INT,
        default_text="as `vllm serve` picks it for the GPU: 1,024 on GPUs of 70 GiB or more "
        "other than A100s (H100, H200, B200), else 256",
    ),
    Option(
        "max_num_batched_tokens",
        ("--max-num-batched-tokens", "--max-batched-tokens"),
        "token budget of one iteration, tokens (prefill chunks + decodes; without chunked prefill at least "
        "--max-model-len, and raised to it when not given; 8k = 8,000, 8K = 8,192)",
        "scheduler",
        None,
        int,
        POSITIVE_INT,
        sizes=True,
        default_text="as `vllm serve` picks it for the GPU: 8,192 on GPUs of 70 GiB "
        "or more other than A100s (16,384 from --vllm-version 0.28 on GPUs of 160 GiB or more), else 2,048",
    ),
    Option(
        "enable_chunked_prefill",
        ("--enable-chunked-prefill",),
        "split long prompts into chunks that share iterations with decodes (vLLM V1's default); with "
        "--no-enable-chunked-prefill a prompt is prefilled in one iteration or waits",
        "scheduler",
        True,
        bool,
        negatable=True,
    ),
    Option(
        "batching",
        ("--batching",),
        "continuous (iteration-level) or static (whole batches) batching",
        "scheduler",
        "continuous",
        choices=("continuous", "static"),
    ),
    Option(
        "preemption_mode",
        ("--preemption-mode", "--preemption"),
        "what happens to a preempted sequence's KV: dropped and recomputed, or swapped to host memory",
        "scheduler",
        "recompute",
        choices=("recompute", "swap"),
    ),
    Option(
        "victim_policy",
        ("--victim-policy", "--eviction"),
        "which running sequence is preempted when memory runs out (hybrid: the older name of prefill-first; "
        "--eviction: an older spelling of this flag, not cache eviction)",
        "scheduler",
        "lifo",
        choices="kvsim.engine.preemption:victim_policy_names",
    ),
    Option(
        "scheduling_policy",
        ("--scheduling-policy",),
        "the waiting queue's order, as vLLM's flag: fcfs (first come, first served) or priority (the trace's "
        "`priority`, lower first, then arrival; the victim is then the least important running request unless "
        "--victim-policy says otherwise)",
        "scheduler",
        "fcfs",
        choices=("fcfs", "priority"),
    ),
    Option(
        "partial_preemption",
        ("--partial-preemption", "--partial-eviction"),
        "preempt only a victim's tail blocks, as many as needed (paged allocators)",
        "scheduler",
        False,
        bool,
    ),
    Option(
        "disable_hybrid_kv_cache_manager",
        ("--disable-hybrid-kv-cache-manager",),
        "vLLM's flag: a model whose layers differ keeps every token in every attention layer (sliding-window and "
        "chunked layers as full attention: kvsim's naive layout) instead of its hybrid KV cache manager's; "
        "models with mamba layers need the manager, as in vLLM",
        "scheduler",
        False,
        bool,
    ),
    Option(
        "enable_prefix_caching",
        ("--enable-prefix-caching",),
        "automatic prefix caching: every allocator that can runs with +prefix (paged -> paged+prefix); "
        "--no-enable-prefix-caching: the default allocators run without it. Unset: on for the default "
        "allocators as in vLLM V1 (not for models with mamba layers), allocators you name run as named",
        "scheduler",
        None,
        bool,
        negatable=True,
    ),
    Option(
        "cache_eviction",
        ("--cache-eviction",),
        "which cached prefix block a prefix cache drops first",
        "scheduler",
        "lru",
        choices="kvsim.allocators.cache_eviction:CACHE_EVICTION_POLICIES",
    ),
    Option(
        "vllm_engine",
        ("--vllm-engine",),
        "which vLLM engine schedules: v1 (the default engine since 0.8, the only one since 0.11) or v0 (the "
        "engine before it, VLLM_USE_V1=0): without chunked prefill a step that admits prompts runs them alone "
        "(its scheduler puts prompts first), and its defaults apply where not given: chunked prefill only above "
        "32K-token contexts, 256 sequences, max(--max-model-len, 2048) tokens per step (512 with chunked "
        "prefill), --cpu-overhead vllm-v0",
        "scheduler",
        "v1",
        choices=("v1", "v0"),
    ),
    Option(
        "num_scheduler_steps",
        ("--num-scheduler-steps",),
        "multi-step scheduling of the V0 engine (vLLM 0.6-0.10; needs --vllm-engine v0): decode steps run in "
        "windows of this many, back to back; the scheduler admits requests and tokens reach clients only "
        "between windows, and a sequence finishing inside one is delivered at its end; decode steps pay 1/N of "
        "the CPU overhead (docs/latency.md)",
        "scheduler",
        1,
        int,
        Number(min=1, max=1024, integer=True),
    ),
    Option(
        "horizon_s",
        ("--horizon-s",),
        "stop at this simulated time (seconds); later work is reported unfinished",
        "scheduler",
        None,
        float,
        POSITIVE,
        default_text="run until every request is done",
    ),
    Option(
        "clock",
        ("--clock",),
        "what moves simulated time: heap (kvsim's event heap, the fastest) or simpy (the arrivals and "
        "engines as SimPy processes, the same results bit for bit; the clock kvsim.sim's clients, autoscalers "
        "and failures run on)",
        "scheduler",
        "heap",
        choices=("heap", "simpy"),
    ),
    # --- latency
    Option(
        "latency",
        ("--latency",),
        "iteration-time model: 'per-op' (operation by operation, calibrated on "
        "measured vLLM kernels and Vidur's GPU profiles, shipped for every GPU preset (a100-40gb and rtx-4090 "
        "derived from the same chips); see docs/latency.md), "
        "'roofline' (uncalibrated), or a calibration JSON from `kvsim calibrate`",
        "latency",
        "per-op",
    ),
    Option(
        "cpu_overhead",
        ("--cpu-overhead",),
        "the serving engine's CPU time per iteration: vllm-v1 (current "
        "vLLM; hidden behind the GPU with async scheduling), vllm-v0 (the vLLM paper's generation), vllm-v1-async "
        "(vllm-v1 with --async-scheduling), none (GPU only); sources in docs/latency.md",
        "latency",
        "vllm-v1",
        choices="kvsim.latency.cpu:CPU_PRESETS",
    ),
    Option(
        "async_scheduling",
        ("--async-scheduling",),
        "the V1 engine schedules the next step while the GPU runs "
        "this one (vLLM's --async-scheduling): its CPU time is hidden behind the GPU, and a request that arrives "
        "while a step runs joins the step after the next one",
        "latency",
        None,
        bool,
        negatable=True,
        default_text="as the vLLM release does: on from 0.14 (with pipeline stages from 0.15; not with ngram "
        "drafts), off before it and for the V0 engine",
    ),
    Option(
        "moe_backend",
        ("--moe-backend",),
        "per-op: the fused-MoE kernels that run the experts (vLLM's "
        "--moe-backend, or the environment variables before it: VLLM_MXFP4_USE_MARLIN=1 is marlin, "
        "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 flashinfer-trtllm-mxfp8), priced from that kernel's own measured "
        "tables; auto: a fit over every kernel the tables timed for the experts' dtype",
        "latency",
        "auto",
        choices="kvsim.latency.calibration:MOE_BACKEND_CHOICES",
    ),
    Option(
        "moe_routing",
        ("--moe-routing",),
        "per-op: how the router spreads a step's tokens over the experts, "
        "which sets how many distinct experts' weights a MoE layer reads (kvsim/latency/routing.py): uniform "
        "(each token's top-k drawn at random), balanced (as evenly as possible: the most experts), "
        "power-law-1.01 / power-law-1.2 (a few hot experts take many tokens: the fewest; AIConfigurator's "
        "skewed workloads; power-law-1.2 fits measured vLLM serving best, docs/latency.md)",
        "latency",
        "power-law-1.2",
        choices="kvsim.latency.routing:ROUTINGS",
    ),
    Option(
        "frontend",
        ("--frontend",),
        "the API server between clients and the engine (kvsim/frontend.py): "
        "vllm (HTTP, chat template and tokenization before the engine sees a request, streaming after; counted "
        "in TTFT as a benchmark client measures it), none (the engine alone), auto (vllm with the per-operation "
        "model, none with roofline or --cpu-overhead none)",
        "latency",
        "auto",
        choices="kvsim.frontend:FRONTEND_CHOICES",
    ),
    Option(
        "endpoint",
        ("--endpoint",),
        "the API endpoint the clients send to: completions (/v1/completions, `vllm bench serve`'s default "
        "backend) or chat (/v1/chat/completions: --backend openai-chat, GenAI-Perf's and AIPerf's chat "
        "endpoint type), whose chat template vLLM 0.6.4-0.9.1 and 0.11.0 parsed again for every request "
        "(kvsim/chat_template.py); also as the client's URL path, /v1/completions or /v1/chat/completions",
        "latency",
        "completions",
        choices="kvsim.chat_template:ENDPOINTS",
        spellings="kvsim.chat_template:ENDPOINT_PATHS",
    ),
    Option(
        "api_server_count",
        ("--api-server-count",),
        "API server processes that take requests in parallel (vLLM's --api-server-count)",
        "latency",
        1,
        int,
        POSITIVE_INT,
    ),
    Option(
        "stream_interval",
        ("--stream-interval",),
        "tokens per streamed chunk after a request's first (vLLM's --stream-interval, from 0.11.1): the API "
        "server's event loop builds and sends a chunk every N tokens instead of every token",
        "latency",
        1,
        int,
        POSITIVE_INT,
    ),
    Option(
        "cudagraph_capture_sizes",
        ("--cudagraph-capture-sizes",),
        "per-op: token counts with captured CUDA "
        "graphs (their memory comes off the KV cache from vLLM 0.20); a step of at most the largest runs its dense layers and all-reduces padded to the next one: "
        "vllm (its default: 1, 2, 4, every 8 to 255, every 16 to min(2 x max-num-seqs, 512); 1,024 on B200/B300 "
        "from 0.28), none (eager), or a "
        "list such as 1,2,4,8,16",
        "latency",
        "vllm",
        rule="kvsim.latency.cuda_graphs:capture_sizes_rule",
    ),
    Option(
        "speculative_config",
        ("--speculative-config",),
        "speculative decoding as vLLM's flag takes it, a JSON "
        "object: method (eagle, eagle3, mtp, ngram) and num_speculative_tokens (draft_vocab_size for eagle3, "
        "default 32000; num_nextn_predict_layers for mtp, default 1); the drafter's weights and KV in memory, "
        "verify and draft passes in time (kvsim/speculative.py); needs --acceptance-length",
        "latency",
        None,
        default_text="off",
        metavar="JSON",
    ),
    Option(
        "acceptance_length",
        ("--acceptance-length",),
        "with --speculative-config: tokens a decoding sequence "
        "gains per verify step, the bonus token included (vLLM logs it as 'Mean acceptance length'), from 1 to "
        "num_speculative_tokens + 1",
        "latency",
        None,
        float,
        default_text="none (required with --speculative-config)",
    ),
    Option(
        "interconnect",
        ("--interconnect",),
        "how tensor-parallel GPUs are linked (all-reduce times)",
        "latency",
        "nvswitch",
        choices=("nvswitch", "pairwise"),
    ),
    Option(
        "flops_efficiency",
        ("--flops-efficiency",),
        "roofline: achievable fraction of peak FLOP/s",
        "latency",
        0.6,
        float,
        EFFICIENCY,
    ),
    Option(
        "bandwidth_efficiency",
        ("--bandwidth-efficiency",),
        "roofline: achievable fraction of HBM bandwidth",
        "latency",
        0.8,
        float,
        EFFICIENCY,
    ),
    Option(
        "step_overhead_ms",
        ("--step-overhead-ms",),
        "roofline: fixed time per iteration, milliseconds",
        "latency",
        2.0,
        float,
        Number(min=0, max=1e6),
    ),
    # --- load (the clients that send the trace)
    Option(
        "max_concurrency",
        ("--max-concurrency", "--concurrency"),
        "clients keep at most this many requests in flight, as `vllm bench serve --max-concurrency`: each "
        "request is sent at its trace time or when an earlier one finishes, whichever is later; latencies count "
        "from sending",
        "load",
        None,
        int,
        POSITIVE_INT,
        default_text="no limit (the trace's times)",
    ),
    Option(
        "request_rate",
        ("--request-rate",),
        "re-time the trace's requests (in trace order) as `vllm bench serve --request-rate`: Poisson arrivals at "
        "this many requests/s (seed 0), or inf: all at once (with --max-concurrency N: N clients in a closed "
        "loop); with a generated workload (--dataset-name random) its send times, as the --bench client spaces "
        "them (--burstiness)",
        "load",
        None,
        float,
        request_rate,
        default_text="the trace's own times; inf for a generated workload",
    ),
    # --- load: a generated benchmark workload instead of --trace (kvsim/trace/bench_load.py, docs/traces.md)
    Option(
        "dataset_name",
        ("--dataset-name",),
        "generate the benchmark client's workload instead of reading "
        "--trace, as `vllm bench serve --dataset-name`: random (synthetic prompts of --random-input-len tokens)",
        "load",
        None,
        choices="kvsim.trace.bench_load:DATASETS",
        default_text="none: read --trace",
    ),
    Option(
        "bench",
        ("--bench",),
        "which benchmark client the generated workload follows (docs/traces.md): "
        "vllm-random (current `vllm bench serve`), inferencemax (SemiAnalysis InferenceMAX's client: range ratio "
        "0.8 as [0.8 L, L], 10 x --max-concurrency prompts, --ignore-eos), genai-perf (GenAI-Perf's synthetic "
        "prompts, normal lengths, 100 distinct prompts sent in turn; its --concurrency is --max-concurrency), aiperf "
        "(NVIDIA AIPerf's synthetic prompts: --isl/--osl with their stddevs, --request-count requests, as many "
        "distinct prompts unless --num-dataset-entries)",
        "load",
        None,
        choices="kvsim.trace.bench_load:HARNESSES",
        default_text="inferencemax for a closed loop given by its numbers alone (--max-concurrency without "
        "--request-rate, --random-range-ratio, --burstiness or a ramp-up), else vllm-random",
    ),
    Option(
        "num_prompts",
        ("--num-prompts", "--request-count"),
        "requests the generated workload sends",
        "load",
        None,
        int,
        Number(integer=True, min=1, max=MAX_PROMPTS),
        default_text="1000 (vLLM); 10 x --max-concurrency (inferencemax); 100 (genai-perf); 10 (aiperf)",
    ),
    Option(
        "random_input_len",
        ("--random-input-len", "--input-len", "--synthetic-input-tokens-mean", "--isl"),
        "prompt tokens of the generated workload, before "
        "--random-prefix-len (genai-perf: the mean, its --synthetic-input-tokens-mean)",
        "load",
        None,
        int,
        Number(integer=True, min=1, max=MAX_LEN),
        default_text="1024 (genai-perf: 550)",
    ),
    Option(
        "random_output_len",
        ("--random-output-len", "--output-len", "--output-tokens-mean", "--osl"),
        "output tokens of the generated workload (genai-perf: "
        "the mean, its --output-tokens-mean); kvsim generates each drawn length",
        "load",
        None,
        int,
        Number(integer=True, min=1, max=MAX_LEN),
        default_text="128",
    ),
    Option(
        "random_range_ratio",
        ("--random-range-ratio",),
        "spread of the generated lengths: uniform integers in "
        "[floor(L (1 - r)), ceil(L (1 + r))], r < 1 (vLLM since April 2025, pull request 16126), or with "
        "--random-range-ratio-mode lower-bound in [int(L r), L] (older vLLM, InferenceMAX's client)",
        "load",
        None,
        float,
        Number(min=0, max=1),
        default_text="0 (inferencemax: 0.8)",
    ),
    Option(
        "random_range_ratio_mode",
        ("--random-range-ratio-mode",),
        "how --random-range-ratio spreads lengths: symmetric [L (1 - r), L (1 + r)] or lower-bound [L r, L]",
        "load",
        None,
        choices="kvsim.trace.bench_load:RANGE_RATIO_MODES",
        default_text="the --bench client's (symmetric; inferencemax: lower-bound)",
    ),
    Option(
        "random_prefix_len",
        ("--random-prefix-len",),
        "tokens of one shared prefix before every generated prompt (the same tokens: prefix-cache hits)",
        "load",
        None,
        int,
        Number(integer=True, min=0, max=MAX_LEN),
        default_text="0",
    ),
    Option(
        "synthetic_input_tokens_stddev",
        ("--synthetic-input-tokens-stddev", "--isl-stddev"),
        "genai-perf, aiperf: standard deviation of the prompt tokens",
        "load",
        None,
        float,
        Number(min=0, max=MAX_LEN),
        default_text="0",
    ),
    Option(
        "output_tokens_stddev",
        ("--output-tokens-stddev", "--osl-stddev"),
        "genai-perf, aiperf: standard deviation of the output tokens",
        "load",
        None,
        float,
        Number(min=0, max=MAX_LEN),
        default_text="0",
    ),
    Option(
        "num_dataset_entries",
        ("--num-dataset-entries",),
        "genai-perf, aiperf: distinct prompts in the client's dataset (GenAI-Perf's --num-prompts); requests "
        "beyond them send prompts again (--dataset-sampling-strategy), which a prefix cache finds whole",
        "load",
        None,
        int,
        Number(integer=True, min=1, max=MAX_PROMPTS),
        default_text="100 (genai-perf); aiperf: --request-count if given, else 100 (aiperf 0.9 on)",
    ),
    Option(
        "dataset_sampling_strategy",
        ("--dataset-sampling-strategy",),
        "genai-perf, aiperf: the order requests take the dataset's prompts: sequential (in turn: GenAI-Perf, "
        "aiperf 0.9 on), shuffle (a fresh random order each pass: aiperf 0.3-0.8), random (with replacement: "
        "aiperf 0.1-0.2)",
        "load",
        None,
        choices="kvsim.trace.bench_load:SAMPLINGS",
        default_text="sequential",
    ),
    Option(
        "warmup_request_count",
        ("--warmup-request-count", "--num-warmups"),
        "warm-up requests the client sends first (at --max-concurrency, from the same dataset) and drains before "
        "the measured ones, as aiperf's --warmup-request-count and InferenceMAX's 2 x concurrency warm-ups; they "
        "are left out of the results (kvsim run and compare)",
        "load",
        None,
        int,
        Number(integer=True, min=0, max=MAX_PROMPTS),
        default_text="0 (inferencemax: 2 x --max-concurrency)",
    ),
    Option(
        "burstiness",
        ("--burstiness",),
        "with a finite --request-rate, the gamma shape of the gaps between "
        "generated requests, as `vllm bench serve --burstiness`: 1 Poisson, < 1 burstier, > 1 more even, inf "
        "constant gaps (mean gap 1 / rate seconds either way)",
        "load",
        None,
        float,
        "kvsim.trace.bench_load:burstiness_rule",
        default_text="1",
    ),
    Option(
        "ramp_up_strategy",
        ("--ramp-up-strategy",),
        "`vllm bench serve --ramp-up-strategy`: the generated requests' rate climbs from --ramp-up-start-rps "
        "to --ramp-up-end-rps over the run, by request index (linear, or exponential: a constant ratio per "
        "request), each gap drawn at the rate of its request with --burstiness; replaces --request-rate",
        "load",
        None,
        choices=("linear", "exponential"),
    ),
    Option(
        "ramp_up_start_rps",
        ("--ramp-up-start-rps",),
        "with --ramp-up-strategy: the first request's rate, requests/s (vLLM's is a whole number)",
        "load",
        None,
        int,
        Number(integer=True, min=1, max=10**9),
    ),
    Option(
        "ramp_up_end_rps",
        ("--ramp-up-end-rps",),
        "with --ramp-up-strategy: the last request's rate, requests/s (>= the start)",
        "load",
        None,
        int,
        Number(integer=True, min=1, max=10**9),
    ),
    Option(
        "random_seed",
        ("--random-seed",),
        "seed of the generated workload's draws (numpy; the same seed gives "
        "the same requests, not vLLM's own draws; `kvsim run`/`compare` take --seed too)",
        "load",
        None,
        int,
        SEED,
        default_text="0",
    ),
    Option(
        "ignore_eos",
        ("--ignore-eos",),
        "the client sends --ignore-eos: every output runs to its drawn length "
        "(kvsim always generates the drawn length; without this flag it says a real model may stop earlier)",
        "load",
        None,
        bool,
        default_text="off (inferencemax: on)",
    ),
    # --- trace
    Option(
        "skip_invalid",
        ("--skip-invalid",),
        "skip bad trace lines (and report how many) instead of stopping",
        "trace",
        False,
        bool,
    ),
]

BY_KEY: dict[str, Option] = {o.key: o for o in OPTIONS}
ALIASES: dict[str, str] = {alias: o.key for o in OPTIONS for alias in o.alias_keys()}


_KEY = re.compile(r"\{([a-z_]+)\}")


class OptionError(ConfigError):
    """A configuration rule broken, its message naming options as ``{key}``: shown as the key when a
    configuration is built from Python, as the flag on the command line and as written in a grid file
    (:meth:`named`; kvsim/options.py), so a rule is stated once, on the configuration it guards."""

    def __init__(self, template: str) -> None:
        self.template = template
        super().__init__(self.named(lambda key: key))

    def named(self, name: Callable[[str], str]) -> str:
        """The message with each ``{key}`` of an option replaced by ``name(key)``."""
        return _KEY.sub(lambda m: name(m.group(1)) if m.group(1) in BY_KEY else m.group(0), self.template)


def option_default(key: str):
    """The options table's default of ``key`` (configuration dataclasses take theirs from here)."""
    return BY_KEY[key].default


def check_fields(obj) -> None:
    """Check the fields of a configuration dataclass that are options (they carry the options' names) by the
    options' rules and choices; ConfigError names the field. Unset (None) fields are not checked."""
    import dataclasses

    for f in dataclasses.fields(obj):
        o = BY_KEY.get(f.name)
        v = getattr(obj, f.name)
        if o is None or v is None:
            continue
        if o.rule is not None:
            require(v, o.problem, f.name)
        allowed = o.allowed()
        if allowed and v not in allowed:
            raise ConfigError(f"{f.name}: '{v}' is not one of {', '.join(allowed)}")


def option_columns() -> tuple[str, ...]:
    """Every option's key and grid-key aliases: the configuration columns of plan and sweep tables."""
    return tuple(dict.fromkeys([k for o in OPTIONS for k in (o.key, *o.alias_keys())]))


def text_option_columns() -> set[str]:
    """The configuration columns whose values are names, not numbers."""
    return {k for o in OPTIONS if o.type is str for k in (o.key, *o.alias_keys())}
