"""Parsing simulation options and building a configuration from them.

The CLI builds its arguments from the options table (kvsim/option_table.py), and the CLI, `kvsim plan`, `kvsim sweep` grids and the Python API
all turn option values into a :class:`~kvsim.config.SimConfig` through :func:`config_from_options`.
Flags follow vLLM's names where vLLM has the option (``--max-num-batched-tokens``, ``--max-model-len``,
``--tensor-parallel-size``, ...); kvsim's earlier spellings stay as aliases, in flags and grid keys.

To add an option: one :class:`Option` row in the table (kvsim/option_table.py), and where its value goes in
:func:`config_from_options`.
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any, Mapping

from kvsim.allocators.cache_eviction import get_eviction_key
from kvsim.engine.preemption import get_victim_policy
from kvsim.errors import ConfigError
from kvsim.option_table import (
    ALIASES,
    BY_KEY,
    DEFAULT_GPU,
    DEFAULT_MODEL,
    OPTIONS,
    Option,
    check_fields,
    option_default,
)
from kvsim.validation import Number, shown

__all__ = [
    "ALIASES",
    "BY_KEY",
    "DEFAULT_GPU",
    "DEFAULT_MODEL",
    "OPTIONS",
    "Option",
    "add_options",
    "check_fields",
    "config_from_args",
    "config_from_options",
    "normalize",
    "option_default",
    "values_from_namespace",
]


def _help(o: Option) -> str:
    text = o.help
    if o.choices:
        text += f" ({', '.join(o.allowed())})"
    if o.type is bool:
        return f"{text} [default: {'on' if o.default else 'off'}]" if o.negatable else text
    default = o.default_text if o.default is None else (f"{o.default:g}" if isinstance(o.default, float) else o.default)
    if o.rule is not None and isinstance(o.rule, Number) and o.rule.describe():
        text += f"; {o.rule.describe()}"
    return f"{text} [default: {default}]"


def add_options(
    parser: argparse.ArgumentParser, groups_wanted: tuple[str, ...] | None = None, keys: tuple[str, ...] = ()
) -> None:
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
            metavar = o.metavar or (
                o.type.__name__.upper()
                if o.type is not str
                else ("NAME" if not o.choices else "{" + ",".join(o.allowed()) + "}")
            )
            g.add_argument(*o.flags, dest=o.key, default=None, metavar=metavar, help=_help(o))


def values_from_namespace(ns: argparse.Namespace) -> dict:
    """The options given on the command line (others unset)."""
    return {o.key: getattr(ns, o.key) for o in OPTIONS if getattr(ns, o.key, None) is not None}


SIZE_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(text: str, name: str) -> int:
    """``32k`` -> 32,000, ``32K`` -> 32,768, ``25.6k`` -> 25,600 (vLLM's human-readable integers)."""
    try:
        x = float(text[:-1]) * SIZE_UNITS[text[-1]]
    except ValueError:
        raise ConfigError(
            f"{name}: must be an integer or a size such as 32k (32,000) or 32K (32,768), got {shown(text)}"
        ) from None
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
        raise ConfigError(f"{name}: must be true or false, got {shown(v)}")
    if o.type in (int, float):
        if o.sizes and isinstance(v, str) and v.strip()[-1:] in SIZE_UNITS:
            v = _size(v.strip(), name)
        if isinstance(v, str):
            try:
                v = float(v) if any(c in v.lower() for c in ".en") else int(v)
            except ValueError:
                raise ConfigError(
                    f"{name}: must be {'an integer' if o.type is int else 'a number'}, got {shown(v)}"
                ) from None
        if o.type is int and isinstance(v, float) and v.is_integer():
            v = int(v)
        if o.type is float and isinstance(v, int) and not isinstance(v, bool):
            try:
                v = float(v)
            except OverflowError:
                raise ConfigError(f"{name}: {shown(v)} is beyond any number kvsim can use") from None
        problem = o.rule(v) if o.rule else None
        if problem:
            raise ConfigError(f"{name}: {problem}")
        return v
    if not isinstance(v, str):
        raise ConfigError(f"{name}: must be text, got {shown(v)}")
    allowed = o.allowed()
    if allowed and v not in allowed:
        close = difflib.get_close_matches(v, allowed, n=1)
        raise ConfigError(
            f"{name}: {shown(v)} is not one of {', '.join(allowed)}"
            + (f"; did you mean '{close[0]}'?" if close else "")
        )
    problem = o.rule(v) if o.rule else None
    if problem:
        raise ConfigError(f"{name}: {problem}")
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
    from kvsim.config import MemoryConfig, SchedulerConfig, SimConfig
    from kvsim.latency import LATENCY_MODELS
    from kvsim.latency.roofline import RooflineParams
    from kvsim.hardware import get_gpu, get_model

    given = normalize(values, naming)
    v = {o.key: o.default for o in OPTIONS}
    v.update(given)
    written = {ALIASES.get(k, k): k for k in values}  # canonical key -> as the user wrote it

    def name(key: str) -> str:
        return BY_KEY[key].flag if naming == "flag" else f"'{written.get(key, key)}'"

    model = get_model(v["model"]).with_quantization(v["quantization"])  # before the KV dtype: formats declare one
    model = model.with_kv_cache_dtype(v["kv_cache_dtype"]).validate()
    from kvsim.speculative import parse_speculative

    spec = parse_speculative(v["speculative_config"], v["acceptance_length"])
    if spec is not None:
        model = spec.with_draft(model)
    gpu = get_gpu(v["gpu"])
    tp = v["tensor_parallel_size"]
    problem = model.tp_problem(tp)
    if problem:
        raise ConfigError(f"{name('tensor_parallel_size')} {tp}: {problem}")
    pp = v["pipeline_parallel_size"]
    problem = model.pp_problem(pp)
    if problem:
        raise ConfigError(f"{name('pipeline_parallel_size')} {pp}: {problem}")
    if spec is not None and pp > 1:
        raise ConfigError(
            f"--speculative-config with {name('pipeline_parallel_size')} {pp}: not modelled; use one or the other"
        )
    if spec is not None and (not v["enable_chunked_prefill"] or v["batching"] != "continuous"):
        raise ConfigError(
            "--speculative-config: modelled with chunked prefill and continuous batching (vLLM V1's "
            f"way); drop {name('enable_chunked_prefill') if not v['enable_chunked_prefill'] else name('batching')}"
        )
    if spec is not None and v["latency"] == "roofline":
        raise ConfigError(
            "--speculative-config: the roofline model does not price verify and draft passes; use the "
            "per-operation model"
        )
    steps = v["num_scheduler_steps"]
    v0 = v["vllm_engine"] == "v0"
    if steps > 1 and not v0:
        raise ConfigError(
            f"{name('num_scheduler_steps')} {steps}: multi-step scheduling is the V0 engine's (vLLM "
            f"0.6-0.10); add {name('vllm_engine')} v0"
        )
    if steps > 1:
        other = (
            "speculative_config"
            if spec is not None
            else "pipeline_parallel_size"
            if pp > 1
            else "data_parallel_size"
            if v["data_parallel_size"] > 1
            else "batching"
            if v["batching"] != "continuous"
            else None
        )
        if other:
            raise ConfigError(
                f"{name('num_scheduler_steps')} {steps}: multi-step scheduling is modelled for one "
                "engine of tensor-parallel GPUs, continuous batching and no speculative decoding; "
                f"drop {name(other)} or the multi-step"
            )
    dp = v["data_parallel_size"]
    problem = model.dp_problem(dp, pp)
    if problem:
        raise ConfigError(f"{name('data_parallel_size')} {dp}: {problem}")
    from kvsim.hardware.gpus import vllm_serve_defaults

    seqs, tokens = vllm_serve_defaults(gpu)  # what `vllm serve` picks for this GPU when not told
    max_len = v["max_model_len"] or model.max_context
    if v0:  # the V0 engine's defaults (vLLM 0.6's EngineArgs and SchedulerConfig) and its CPU time
        if "enable_chunked_prefill" not in given:
            v["enable_chunked_prefill"] = max_len > 32768
        if "cpu_overhead" not in given:
            v["cpu_overhead"] = "vllm-v0"
        seqs = 256
        tokens = 512 if v["enable_chunked_prefill"] else max(max_len, 2048)
    if v["max_num_seqs"] is None:
        v["max_num_seqs"] = seqs
    if v["max_num_batched_tokens"] is None:
        v["max_num_batched_tokens"] = max(tokens, v["max_num_seqs"])
    if v["max_num_batched_tokens"] < v["max_num_seqs"]:
        raise ConfigError(
            f"{name('max_num_batched_tokens')} ({v['max_num_batched_tokens']}) must be >= "
            f"{name('max_num_seqs')} ({v['max_num_seqs']}), or a full batch of decodes would not fit "
            "one iteration"
        )
    swap = v["swap_space"]
    if v["preemption_mode"] == "swap":
        swap = 4.0 if swap is None else swap
        if swap <= 0:
            raise ConfigError(f"{name('preemption_mode')} swap needs host memory: {name('swap_space')} must be > 0")
    else:
        swap = 0.0 if swap is None else swap
    if v["scheduling_policy"] == "priority" and "victim_policy" not in given:
        v["victim_policy"] = "priority"  # vLLM's priority policy preempts the least important request
    get_victim_policy(v["victim_policy"])
    get_eviction_key(v["cache_eviction"])
    budget = v["max_num_batched_tokens"]
    if not v["enable_chunked_prefill"]:
        # as vLLM: without chunking every prompt must fit one iteration's budget
        if "max_num_batched_tokens" not in given:
            budget = max(budget, max_len)
        elif budget < max_len:
            raise ConfigError(
                f"{name('max_num_batched_tokens')} ({budget}) is below {name('max_model_len')} "
                f"({max_len}): without chunked prefill longer prompts could never be scheduled; raise"
                " it, lower the context, or enable chunked prefill"
            )
    sched = SchedulerConfig(
        max_model_len=max_len,
        max_num_seqs=v["max_num_seqs"],
        max_num_batched_tokens=budget,
        enable_chunked_prefill=v["enable_chunked_prefill"],
        batching=v["batching"],
        horizon_s=v["horizon_s"],
        preemption_mode=v["preemption_mode"],
        partial_preemption=v["partial_preemption"],
        scheduling_policy=v["scheduling_policy"],
        num_scheduler_steps=steps,
        prompts_alone=v0 and not v["enable_chunked_prefill"] and v["batching"] == "continuous",
    )
    reserve = v["activation_reserve"]
    if "activation_reserve" not in given and "activation_reserve_gb" in given:
        reserve = "fixed"  # a reserve given in GiB is meant to be used
    utilization = v["gpu_memory_utilization"]
    if "gpu_memory_utilization" not in given:
        from kvsim.releases import default_gpu_memory_utilization

        utilization = default_gpu_memory_utilization(v["vllm_version"], utilization)
    mem = MemoryConfig(
        utilization,
        v["activation_reserve_gb"],
        reserve,
        v["kv_pool_gb"],
        v["num_blocks"],
        v["num_blocks_size"] or v["block_size"],
        v["ignore_gpu_memory"],
    )
    from kvsim.config import set_pool, set_pool_problem

    stage = model.pipeline_stage(pp)
    plan = set_pool(mem, max(1, stage.kv_bytes_per_token_gpu(tp)))
    problem = plan and set_pool_problem(plan, stage, gpu, tp, mem.ignore_gpu_memory, dp)
    if problem:  # a set pool must fit the GPU: fail here, naming the key as the user wrote it
        raise ConfigError(f"{name('num_blocks' if mem.num_blocks is not None else 'kv_pool_gb')}: {problem}")
    roof = RooflineParams(v["flops_efficiency"], v["bandwidth_efficiency"], v["step_overhead_ms"] / 1000)
    latency = v["latency"]
    if latency not in LATENCY_MODELS:
        from kvsim.latency.calibration import load_calibration

        load_calibration(latency)  # a bad file fails here, before any simulation
    if v["enable_expert_parallel"] and model.is_moe and model.num_experts % (tp * dp):
        ranks = (
            f"{tp * dp} GPUs ({name('data_parallel_size')} x {name('tensor_parallel_size')})"
            if dp > 1
            else f"{tp} GPUs ({name('tensor_parallel_size')})"
        )
        raise ConfigError(
            f"{name('enable_expert_parallel')}: {model.num_experts} experts of {model.name} do not "
            f"spread evenly over {ranks}"
        )
    return SimConfig(
        model,
        gpu,
        sched,
        mem,
        roof,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        swap_space=swap,
        data_parallel_size=dp,
        enable_expert_parallel=v["enable_expert_parallel"],
        latency=latency,
        vllm_version=v["vllm_version"],
        cpu_overhead=v["cpu_overhead"],
        async_scheduling=v["async_scheduling"],
        moe_backend=v["moe_backend"],
        moe_routing=v["moe_routing"],
        interconnect=v["interconnect"],
        frontend=v["frontend"],
        api_server_count=v["api_server_count"],
        vllm_engine=v["vllm_engine"],
        cudagraph_capture_sizes=v["cudagraph_capture_sizes"],
        victim_policy=v["victim_policy"],
        block_size=v["block_size"],
        enable_prefix_caching=v["enable_prefix_caching"],
        cache_eviction=v["cache_eviction"],
        kv_offloading_size=v["kv_offloading_size"],
        max_concurrency=v["max_concurrency"],
        request_rate=v["request_rate"],
        kv_offloading_bandwidth=v["kv_offloading_bandwidth"],
        kv_load_layerwise=v["kv_load_layerwise"],
        speculative=spec,
    )


def config_from_args(args: list[str]):
    """A SimConfig from command-line style arguments, e.g. ``["--model", "opt-13b", "--kv-pool-gb", "12"]``."""
    p = argparse.ArgumentParser(prog="kvsim", add_help=False)
    add_options(p)
    ns, extra = p.parse_known_args(args)
    if extra:
        raise ConfigError(f"unknown argument(s): {' '.join(extra)}")
    return config_from_options(values_from_namespace(ns))
