"""Parsing simulation options and building a configuration from them.

The CLI builds its arguments from the options table (kvsim/option_table.py), and the CLI, `kvsim plan`, `kvsim sweep` grids and the Python API
all turn option values into a :class:`~kvsim.config.SimConfig` through :func:`config_from_options`.
Flags follow vLLM's names where vLLM has the option (``--max-num-batched-tokens``, ``--max-model-len``,
``--tensor-parallel-size``, ...); kvsim's earlier spellings stay as aliases, in flags and grid keys.

To add an option: one :class:`Option` row in the table (kvsim/option_table.py) and the field of the same
name on the configuration dataclass it sets (kvsim/config.py), whose default is ``option_default(key)``;
:func:`config_from_options` fills fields by name, and the CLI, plans, sweeps and the property tests read the
table (tests/test_robustness.py draws values for every row).
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any, Callable, Mapping

from kvsim.errors import ConfigError
from kvsim.option_table import (
    ALIASES,
    BY_KEY,
    DEFAULT_GPU,
    DEFAULT_MODEL,
    OPTIONS,
    Option,
    OptionError,
    check_fields,
    option_default,
)
from kvsim.validation import shown

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
    "fill",
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
    if o.bounds is not None and o.bounds.describe():
        text += f"; {o.bounds.describe()}"
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
        problem = o.problem(v)
        if problem:
            raise ConfigError(f"{name}: {problem}")
        return v
    if not isinstance(v, str):
        raise ConfigError(f"{name}: must be text, got {shown(v)}")
    v = o.respelled(v)
    allowed = o.allowed()
    if allowed and v not in allowed:
        close = difflib.get_close_matches(v, allowed, n=1)
        raise ConfigError(
            f"{name}: {shown(v)} is not one of {', '.join(allowed)}"
            + (f"; did you mean '{close[0]}'?" if close else "")
        )
    problem = o.problem(v)
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


def fill(cls, values: Mapping[str, Any], **resolved):
    """A configuration dataclass ``cls`` built by name: each field that is an option takes the option's value
    (fields marked DERIVED, kvsim/config.py, are left to ``resolved``), and ``resolved`` gives the rest."""
    import dataclasses

    named = {
        f.name: values[f.name]
        for f in dataclasses.fields(cls)
        if f.init and f.name in BY_KEY and f.name not in resolved and not f.metadata.get("derived")
    }
    return cls(**named, **resolved)


def config_from_options(values: Mapping[str, Any], naming: str = "flag"):
    """Build a checked SimConfig from option values (keys as in OPTIONS or their aliases; unset keys take
    their defaults). Options fill the configuration's fields of their names; what is worked out here is the
    defaults that depend on other options (as vLLM's engine arguments do); the rules between options are the
    configuration's own (kvsim/config.py), their messages naming the options as the caller wrote them."""
    given = normalize(values, naming)
    v = {o.key: o.default for o in OPTIONS}
    v.update(given)
    written = {ALIASES.get(k, k): k for k in values}  # canonical key -> as the user wrote it

    def name(key: str) -> str:
        return BY_KEY[key].flag if naming == "flag" else f"'{written.get(key, key)}'"

    try:
        return _build(v, given, name)
    except OptionError as e:
        raise ConfigError(e.named(name)) from None


def _build(v: dict[str, Any], given: Mapping[str, Any], name: Callable[[str], str]):
    """The SimConfig of option values ``v`` (``given``: those the caller set)."""
    from kvsim.config import MemoryConfig, SchedulerConfig, SimConfig
    from kvsim.hardware import get_gpu, get_model
    from kvsim.hardware.gpus import vllm_serve_defaults
    from kvsim.latency import LATENCY_MODELS
    from kvsim.latency.roofline import RooflineParams
    from kvsim.releases import follows_checkpoint_kv_dtype, legacy_int4_kernels
    from kvsim.speculative import parse_speculative

    model = get_model(v["model"]).with_quantization(v["quantization"])  # before the KV dtype: formats declare one
    if v["language_model_only"]:
        model = model.language_model_only()
    q = v["quantization"]
    if legacy_int4_kernels(v["vllm_version"], q):
        model = model.with_note(
            f"warning: --quantization {q} on vLLM {v['vllm_version']}: releases before 0.24 run the plain "
            f"{q.upper()} kernels when the flag names {q} (Marlin only for {q}_marlin or no flag); no table times "
            "them and kvsim prices Marlin's. Held out "
            "(Qwen2.5-7B-Instruct-AWQ, vLLM 0.8.5, with --enforce-eager, which kvsim prices without its launches): "
            "TPOT measured 1.2-1.4x kvsim's on an L4 at 1-16 clients (1.8-2.4x at 32-64), 2.1-2.3x on an A100-40GB"
        )
    model = model.with_kv_cache_dtype(v["kv_cache_dtype"], follows_checkpoint_kv_dtype(v["vllm_version"])).validate()
    spec = parse_speculative(v["speculative_config"], v["acceptance_length"])
    if spec is not None:
        model = spec.with_draft(model)
    gpu = get_gpu(v["gpu"])
    seqs, tokens = vllm_serve_defaults(gpu, v["vllm_version"])  # what `vllm serve` picks when not told
    max_len = v["max_model_len"] or model.max_context
    v0 = v["vllm_engine"] == "v0"
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
        if not v["enable_chunked_prefill"]:  # as vLLM: without chunking every prompt must fit one iteration
            v["max_num_batched_tokens"] = max(v["max_num_batched_tokens"], max_len)
    swap = v["swap_space"]
    if v["preemption_mode"] == "swap":
        swap = 4.0 if swap is None else swap
        if swap <= 0:
            raise ConfigError(f"{name('preemption_mode')} swap needs host memory: {name('swap_space')} must be > 0")
    else:
        swap = 0.0 if swap is None else swap
    if v["scheduling_policy"] == "priority" and "victim_policy" not in given:
        v["victim_policy"] = "priority"  # vLLM's priority policy preempts the least important request
    sched = fill(
        SchedulerConfig,
        v,
        max_model_len=max_len,
        prompts_alone=v0 and not v["enable_chunked_prefill"] and v["batching"] == "continuous",
    )
    reserve = v["activation_reserve"]
    if "activation_reserve" not in given and "activation_reserve_gb" in given:
        reserve = "fixed"  # a reserve given in GiB is meant to be used
    utilization = v["gpu_memory_utilization"]
    if "gpu_memory_utilization" not in given:
        from kvsim.releases import default_gpu_memory_utilization

        utilization = default_gpu_memory_utilization(v["vllm_version"], utilization)
    from kvsim.releases import subtracts_cudagraph_estimate

    graph_sizes = None
    if reserve == "vllm" and subtracts_cudagraph_estimate(v["vllm_version"]):
        from kvsim.latency.cuda_graphs import parse_capture_sizes

        graph_sizes = parse_capture_sizes(
            v["cudagraph_capture_sizes"],
            v["max_num_seqs"],
            v["max_num_batched_tokens"],
            gpu,
            v["vllm_version"],
            spec.num_speculative_tokens if spec is not None else 0,
        )
    mem = fill(
        MemoryConfig,
        v,
        gpu_memory_utilization=utilization,
        activation_reserve=reserve,
        num_blocks_size=v["num_blocks_size"] or v["block_size"],
        cudagraph_sizes=graph_sizes,
    )
    roof = fill(RooflineParams, v, step_overhead_s=v["step_overhead_ms"] / 1000)
    if v["latency"] not in LATENCY_MODELS:
        from kvsim.latency.calibration import load_calibration

        load_calibration(v["latency"])  # a bad file fails here, before any simulation
    return fill(
        SimConfig,
        v,
        model=model,
        gpu=gpu,
        scheduler=sched,
        memory=mem,
        roofline=roof,
        swap_space=swap,
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
