"""The options table: every simulation option once, with its flags, default, units and rules.

The CLI builds its arguments from it, and the CLI, `kvsim plan`, `kvsim sweep` grids and the Python API
all turn option values into a :class:`~kvsim.config.SimConfig` through :func:`config_from_options`.
Flags follow vLLM's names where vLLM has the option (``--max-num-batched-tokens``, ``--max-model-len``,
``--tensor-parallel-size``, ...); kvsim's earlier spellings stay as aliases, in flags and grid keys.

To add an option: one :class:`Option` row here, and where its value goes in :func:`config_from_options`.
"""

from __future__ import annotations

import argparse
import difflib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kvsim.allocators.cache_eviction import CACHE_EVICTION_POLICIES, get_eviction_key
from kvsim.engine.preemption import VICTIM_ALIASES, VICTIM_POLICIES, get_victim_policy
from kvsim.hardware.models import KV_CACHE_DTYPES
from kvsim.latency.cpu import CPU_PRESETS
from kvsim.errors import ConfigError
from kvsim.validation import FRACTION, GIB, GIB_OR_ZERO, NON_NEGATIVE, POSITIVE, POSITIVE_INT, Number, request_rate

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
    rule: Callable[[Any], str | None] | None = None
    choices: tuple[str, ...] | None = None
    negatable: bool = False  # bool: --x / --no-x
    default_text: str | None = None  # how --help describes a None default
    sizes: bool = False  # int: vLLM's human-readable sizes, 32k = 32,000 and 32K = 32,768 (also m/M, g/G)

    @property
    def flag(self) -> str:
        return self.flags[0]

    def alias_keys(self) -> list[str]:
        return [f.lstrip("-").replace("-", "_") for f in self.flags if f.startswith("--")]


OPTIONS: list[Option] = [
    # --- model and hardware
    Option("model", ("--model",), "model preset (`kvsim list models`), a Hugging Face config.json path, or "
           "custom:layers=..,kv_heads=..,head_dim=..,params=..", "model and hardware", DEFAULT_MODEL),
    Option("gpu", ("--gpu",), "GPU preset (`kvsim list gpus`)", "model and hardware", DEFAULT_GPU),
    Option("tensor_parallel_size", ("--tensor-parallel-size", "-tp", "--tp"),
           "GPUs one replica spans with tensor parallelism (weights, heads and KV split across them)",
           "model and hardware", 1, int, POSITIVE_INT),
    Option("kv_cache_dtype", ("--kv-cache-dtype",), "data type of the KV cache: auto (the model's) or fp8 (1 byte:"
           " twice the tokens per GiB, half the bytes decode attention reads)", "model and hardware", "auto",
           choices=KV_CACHE_DTYPES),
    # --- KV pool
    Option("gpu_memory_utilization", ("--gpu-memory-utilization",),
           "fraction of each GPU's memory the engine may use (weights, activations, KV)", "KV pool", 0.90, float,
           FRACTION),
    Option("activation_reserve_gb", ("--activation-reserve-gb",),
           "GiB per GPU kept for activations, CUDA graphs and workspace", "KV pool", 2.0, float, GIB_OR_ZERO),
    Option("kv_pool_gb", ("--kv-pool-gb",), "KV pool per GPU in GiB, instead of the derived size", "KV pool",
           None, float, GIB, default_text="derived from GPU memory"),
    Option("num_blocks", ("--num-blocks", "--num-gpu-blocks-override"),
           "KV pool of this many blocks (of --num-blocks-size tokens), instead of the derived size", "KV pool",
           None, int, POSITIVE_INT, default_text="derived from GPU memory"),
    Option("num_blocks_size", ("--num-blocks-size",), "tokens per block that --num-blocks counts", "KV pool",
           None, int, POSITIVE_INT, default_text="--block-size"),
    Option("ignore_gpu_memory", ("--ignore-gpu-memory",),
           "accept a --kv-pool-gb/--num-blocks pool larger than the GPU's memory after weights (what-if studies, "
           "e.g. a cache that never evicts)", "KV pool", False, bool),
    Option("block_size", ("--block-size",), "tokens per KV block of allocators named without one (paged, radix)",
           "KV pool", 16, int, POSITIVE_INT),
    Option("swap_space", ("--swap-space", "--cpu-swap-gb"),
           "GiB of host memory per GPU for swapped-out KV (with --preemption-mode swap)", "KV pool", None, float,
           GIB_OR_ZERO, default_text="4 with --preemption-mode swap, else 0"),
    Option("kv_offloading_size", ("--kv-offloading-size",),
           "GiB of host memory per GPU for a CPU tier of the prefix cache: cached blocks evicted from the GPU "
           "move there and load back on a hit (vLLM's KV offloading, LMCache)", "KV pool", 0.0, float, GIB_OR_ZERO),
    Option("kv_offloading_bandwidth", ("--kv-offloading-bandwidth",),
           "GB/s from the CPU tier into one GPU", "KV pool", None, float, Number(min=0, min_open=True, max=1e9),
           default_text="the GPU's PCIe bandwidth"),
    # --- scheduler
    Option("max_model_len", ("--max-model-len", "--max-seq-len"),
           "longest request (prompt + output tokens; 32k = 32,000, 32K = 32,768 as in vLLM); also what `max` "
           "reserves per request", "scheduler", None, int, POSITIVE_INT, default_text="the model's context length",
           sizes=True),
    Option("max_num_seqs", ("--max-num-seqs",), "most sequences in the running batch", "scheduler", 256, int,
           POSITIVE_INT),
    Option("max_num_batched_tokens", ("--max-num-batched-tokens", "--max-batched-tokens"),
           "token budget of one iteration, tokens (prefill chunks + decodes; without chunked prefill at least "
           "--max-model-len, and raised to it when not given; 8k = 8,000, 8K = 8,192)", "scheduler", 8192, int,
           POSITIVE_INT, sizes=True),
    Option("enable_chunked_prefill", ("--enable-chunked-prefill",),
           "split long prompts into chunks that share iterations with decodes (vLLM V1's default); with "
           "--no-enable-chunked-prefill a prompt is prefilled in one iteration or waits", "scheduler", True, bool,
           negatable=True),
    Option("batching", ("--batching",), "continuous (iteration-level) or static (whole batches) batching",
           "scheduler", "continuous", choices=("continuous", "static")),
    Option("preemption_mode", ("--preemption-mode", "--preemption"),
           "what happens to a preempted sequence's KV: dropped and recomputed, or swapped to host memory",
           "scheduler", "recompute", choices=("recompute", "swap")),
    Option("victim_policy", ("--victim-policy", "--eviction"),
           "which running sequence is preempted when memory runs out (hybrid: the older name of prefill-first; "
           "--eviction: an older spelling of this flag, not cache eviction)", "scheduler", "lifo",
           choices=tuple(VICTIM_POLICIES) + tuple(VICTIM_ALIASES)),
    Option("partial_preemption", ("--partial-preemption", "--partial-eviction"),
           "preempt only a victim's tail blocks, as many as needed (paged allocators)",
           "scheduler", False, bool),
    Option("enable_prefix_caching", ("--enable-prefix-caching",),
           "automatic prefix caching: every allocator that can runs with +prefix (paged -> paged+prefix); "
           "--no-enable-prefix-caching: the default allocators run without it. Unset: on for the default "
           "allocators as in vLLM V1 (not for models with mamba layers), allocators you name run as named",
           "scheduler", None, bool, negatable=True),
    Option("cache_eviction", ("--cache-eviction",), "which cached prefix block a prefix cache drops first",
           "scheduler", "lru", choices=tuple(CACHE_EVICTION_POLICIES)),
    Option("horizon_s", ("--horizon-s",), "stop at this simulated time (seconds); later work is reported unfinished",
           "scheduler", None, float, POSITIVE, default_text="run until every request is done"),
    # --- latency
    Option("latency", ("--latency",), "iteration-time model: 'per-op' (operation by operation, calibrated on "
           "measured vLLM kernels and Vidur's GPU profiles, shipped for a100-80gb, h100-80gb, b200 and a40 and "
           "derived for the same chips; see README: Latency), "
           "'roofline' (uncalibrated), or a calibration JSON from `kvsim calibrate`", "latency", "per-op"),
    Option("cpu_overhead", ("--cpu-overhead",), "the serving engine's CPU time per iteration: vllm-v1 (current "
           "vLLM), vllm-v0 (the vLLM paper's generation), vllm-v1-async, none (GPU only); sources in the README",
           "latency", "vllm-v1", choices=tuple(CPU_PRESETS)),
    Option("interconnect", ("--interconnect",), "how tensor-parallel GPUs are linked (all-reduce times)", "latency",
           "nvswitch", choices=("nvswitch", "pairwise")),
    Option("flops_efficiency", ("--flops-efficiency",), "roofline: achievable fraction of peak FLOP/s", "latency",
           0.6, float, FRACTION),
    Option("bandwidth_efficiency", ("--bandwidth-efficiency",), "roofline: achievable fraction of HBM bandwidth",
           "latency", 0.8, float, FRACTION),
    Option("step_overhead_ms", ("--step-overhead-ms",), "roofline: fixed time per iteration, milliseconds",
           "latency", 2.0, float, NON_NEGATIVE),
    # --- load (the clients that send the trace)
    Option("max_concurrency", ("--max-concurrency",),
           "clients keep at most this many requests in flight, as `vllm bench serve --max-concurrency`: each "
           "request is sent at its trace time or when an earlier one finishes, whichever is later; latencies count "
           "from sending", "load", None, int, POSITIVE_INT, default_text="no limit (the trace's times)"),
    Option("request_rate", ("--request-rate",),
           "re-time the trace's requests (in trace order) as `vllm bench serve --request-rate`: Poisson arrivals at "
           "this many requests/s (seed 0), or inf: all at once (with --max-concurrency N: N clients in a closed "
           "loop)", "load", None, float, request_rate, default_text="the trace's own times"),
    # --- trace
    Option("skip_invalid", ("--skip-invalid",), "skip bad trace lines (and report how many) instead of stopping",
           "trace", False, bool),
]

BY_KEY: dict[str, Option] = {o.key: o for o in OPTIONS}
ALIASES: dict[str, str] = {alias: o.key for o in OPTIONS for alias in o.alias_keys()}


def _help(o: Option) -> str:
    text = o.help
    if o.choices:
        text += f" ({', '.join(o.choices)})"
    if o.type is bool:
        return f"{text} [default: {'on' if o.default else 'off'}]" if o.negatable else text
    default = o.default_text if o.default is None else (f"{o.default:g}" if isinstance(o.default, float) else o.default)
    if o.rule is not None and isinstance(o.rule, Number) and o.rule.describe():
        text += f"; {o.rule.describe()}"
    return f"{text} [default: {default}]"


def add_options(parser: argparse.ArgumentParser, groups_wanted: tuple[str, ...] | None = None,
                keys: tuple[str, ...] = ()) -> None:
    """Add the options (of ``groups_wanted`` plus the single options ``keys``, or all), grouped, with defaults
    left unset (so explicit values can be told apart)."""
    groups: dict[str, Any] = {}
    for o in OPTIONS:
        if groups_wanted is not None and o.group not in groups_wanted and o.key not in keys:
            continue
        g = groups.get(o.group) or groups.setdefault(o.group, parser.add_argument_group(o.group))
        if o.type is bool:
            action = argparse.BooleanOptionalAction if o.negatable else "store_true"
            g.add_argument(*o.flags, dest=o.key, action=action, default=None, help=_help(o))
        else:
            metavar = o.type.__name__.upper() if o.type is not str else ("NAME" if not o.choices else "{" + ",".join(o.choices) + "}")
            g.add_argument(*o.flags, dest=o.key, default=None, metavar=metavar, help=_help(o))


def values_from_namespace(ns: argparse.Namespace) -> dict:
    """The options given on the command line (others unset)."""
    return {o.key: getattr(ns, o.key) for o in OPTIONS if getattr(ns, o.key, None) is not None}


_SIZE_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(text: str, name: str) -> int:
    """``32k`` -> 32,000, ``32K`` -> 32,768, ``25.6k`` -> 25,600 (vLLM's human-readable integers)."""
    try:
        x = float(text[:-1]) * _SIZE_UNITS[text[-1]]
    except ValueError:
        raise ConfigError(f"{name}: must be an integer or a size such as 32k (32,000) or 32K (32,768), "
                          f"got {text!r}") from None
    if not x.is_integer():
        raise ConfigError(f"{name}: {text!r} is not a whole number of tokens")
    return int(x)


def _coerce(o: Option, v, name: str):
    """A value from the command line (text) or a grid file (YAML scalar) as the option's type."""
    if o.type is bool:
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.lower() in ("true", "false", "yes", "no", "1", "0"):
            return v.lower() in ("true", "yes", "1")
        raise ConfigError(f"{name}: must be true or false, got {v!r}")
    if o.type in (int, float):
        if o.sizes and isinstance(v, str) and v.strip()[-1:] in _SIZE_UNITS:
            v = _size(v.strip(), name)
        if isinstance(v, str):
            try:
                v = float(v) if any(c in v.lower() for c in ".en") else int(v)
            except ValueError:
                raise ConfigError(f"{name}: must be {'an integer' if o.type is int else 'a number'}, got {v!r}") from None
        if o.type is int and isinstance(v, float) and v.is_integer():
            v = int(v)
        if o.type is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        problem = o.rule(v) if o.rule else None
        if problem:
            raise ConfigError(f"{name}: {problem}")
        return v
    if not isinstance(v, str):
        raise ConfigError(f"{name}: must be text, got {v!r}")
    if o.choices and v not in o.choices:
        close = difflib.get_close_matches(v, o.choices, n=1)
        raise ConfigError(f"{name}: '{v}' is not one of {', '.join(o.choices)}"
                          + (f"; did you mean '{close[0]}'?" if close else ""))
    return v


def normalize(values: Mapping[str, Any], naming: str = "flag") -> dict[str, Any]:
    """Canonical keys and checked values. ``naming``: how errors name an option, 'flag' (--max-num-seqs)
    or 'key' (the key as written, for grid files)."""
    out: dict[str, Any] = {}
    for raw_key, v in values.items():
        key = ALIASES.get(raw_key, raw_key)
        o = BY_KEY.get(key)
        if o is None:
            known = sorted(set(ALIASES) | set(BY_KEY))
            close = difflib.get_close_matches(raw_key, known, n=1)
            raise ConfigError(f"unknown option '{raw_key}'" + (f"; did you mean '{close[0]}'?" if close else ""))
        name = o.flag if naming == "flag" else f"'{raw_key}'"
        if key in out:
            raise ConfigError(f"{name}: given twice (as an alias too)")
        if v is None:
            continue
        out[key] = _coerce(o, v, name)
    return out


def config_from_options(values: Mapping[str, Any], naming: str = "flag"):
    """Build a checked SimConfig from option values (keys as in OPTIONS or their aliases; unset keys take
    their defaults)."""
    from kvsim.config import MemoryConfig, RooflineParams, SchedulerConfig, SimConfig
    from kvsim.hardware import get_gpu, get_model

    given = normalize(values, naming)
    v = {o.key: o.default for o in OPTIONS}
    v.update(given)
    written = {ALIASES.get(k, k): k for k in values}  # canonical key -> as the user wrote it

    def name(key: str) -> str:
        return BY_KEY[key].flag if naming == "flag" else f"'{written.get(key, key)}'"

    model = get_model(v["model"]).with_kv_cache_dtype(v["kv_cache_dtype"]).validate()
    gpu = get_gpu(v["gpu"])
    tp = v["tensor_parallel_size"]
    problem = model.tp_problem(tp)
    if problem:
        raise ConfigError(f"{name('tensor_parallel_size')} {tp}: {problem}")
    if v["max_num_batched_tokens"] < v["max_num_seqs"]:
        raise ConfigError(f"{name('max_num_batched_tokens')} ({v['max_num_batched_tokens']}) must be >= "
                          f"{name('max_num_seqs')} ({v['max_num_seqs']}), or a full batch of decodes would not fit "
                          "one iteration")
    swap = v["swap_space"]
    if v["preemption_mode"] == "swap":
        swap = 4.0 if swap is None else swap
        if swap <= 0:
            raise ConfigError(f"{name('preemption_mode')} swap needs host memory: {name('swap_space')} must be > 0")
    else:
        swap = 0.0 if swap is None else swap
    get_victim_policy(v["victim_policy"])
    get_eviction_key(v["cache_eviction"])
    max_len = v["max_model_len"] or model.max_context
    budget = v["max_num_batched_tokens"]
    if not v["enable_chunked_prefill"]:
        # as vLLM: without chunking every prompt must fit one iteration's budget
        if "max_num_batched_tokens" not in given:
            budget = max(budget, max_len)
        elif budget < max_len:
            raise ConfigError(f"{name('max_num_batched_tokens')} ({budget}) is below {name('max_model_len')} "
                              f"({max_len}): without chunked prefill longer prompts could never be scheduled; raise"
                              " it, lower the context, or enable chunked prefill")
    sched = SchedulerConfig(
        max_seq_len=max_len,
        max_num_seqs=v["max_num_seqs"],
        max_num_batched_tokens=budget,
        chunked_prefill=v["enable_chunked_prefill"],
        batching=v["batching"],
        horizon_s=v["horizon_s"],
        preemption_mode=v["preemption_mode"],
        partial_preemption=v["partial_preemption"],
    )
    mem = MemoryConfig(v["gpu_memory_utilization"], v["activation_reserve_gb"], v["kv_pool_gb"], v["num_blocks"],
                       v["num_blocks_size"] or v["block_size"], v["ignore_gpu_memory"])
    from kvsim.config import set_pool, set_pool_problem

    plan = set_pool(mem, max(1, model.kv_bytes_per_token_gpu(tp)))
    problem = plan and set_pool_problem(plan, model, gpu, tp, mem.ignore_gpu_memory)
    if problem:  # a set pool must fit the GPU: fail here, naming the key as the user wrote it
        raise ConfigError(f"{name('num_blocks' if mem.num_blocks is not None else 'kv_pool_gb')}: {problem}")
    roof = RooflineParams(v["flops_efficiency"], v["bandwidth_efficiency"], v["step_overhead_ms"] / 1000)
    latency = v["latency"]
    if latency not in ("per-op", "roofline"):
        from kvsim.latency.calibration import load_calibration

        load_calibration(latency)  # a bad file fails here, before any simulation
    return SimConfig(model, gpu, sched, mem, roof, tp=tp, swap_space_gb=swap, latency=latency,
                     cpu_overhead=v["cpu_overhead"], interconnect=v["interconnect"],
                     victim_policy=v["victim_policy"], block_size=v["block_size"],
                     enable_prefix_caching=v["enable_prefix_caching"], cache_eviction=v["cache_eviction"],
                     kv_offload_gb=v["kv_offloading_size"], max_concurrency=v["max_concurrency"],
                     request_rate=v["request_rate"],
                     kv_offload_bandwidth=(gpu.pcie_bandwidth if v["kv_offloading_bandwidth"] is None
                                           else v["kv_offloading_bandwidth"] * 1e9))


def config_from_args(args: list[str]):
    """A SimConfig from command-line style arguments, e.g. ``["--model", "opt-13b", "--kv-pool-gb", "12"]``."""
    p = argparse.ArgumentParser(prog="kvsim", add_help=False)
    add_options(p)
    ns, extra = p.parse_known_args(args)
    if extra:
        raise ConfigError(f"unknown argument(s): {' '.join(extra)}")
    return config_from_options(values_from_namespace(ns))
