"""The options table: one definition serves the CLI, plan/sweep grids and the Python API."""

import pytest

from kvsim.errors import ConfigError
from kvsim.options import OPTIONS, config_from_args, config_from_options


def test_flags_aliases_and_grid_keys_give_the_same_config():
    cli = config_from_args(
        [
            "--max-num-batched-tokens",
            "4096",
            "--tensor-parallel-size",
            "2",
            "--model",
            "llama-2-70b",
            "--gpu",
            "a100-80gb",
            "--victim-policy",
            "fifo",
            "--swap-space",
            "2",
            "--preemption-mode",
            "swap",
            "--max-model-len",
            "2048",
        ]
    )
    old = config_from_args(
        [
            "--max-batched-tokens",
            "4096",
            "--tp",
            "2",
            "--model",
            "llama-2-70b",
            "--gpu",
            "a100-80gb",
            "--eviction",
            "fifo",
            "--cpu-swap-gb",
            "2",
            "--preemption",
            "swap",
            "--max-seq-len",
            "2048",
        ]
    )
    grid = config_from_options(
        {
            "max_batched_tokens": 4096,
            "tp": 2,
            "model": "llama-2-70b",
            "gpu": "a100-80gb",
            "eviction": "fifo",
            "cpu_swap_gb": 2,
            "preemption_mode": "swap",
            "max_model_len": "2048",
        },
        naming="key",
    )
    assert cli == old == grid
    assert cli.scheduler.max_num_batched_tokens == 4096 and cli.tp == 2 and cli.victim_policy == "fifo"
    assert cli.scheduler.max_model_len == 2048 and cli.swap_space == 2.0


def test_defaults():
    cfg = config_from_args([])
    assert (cfg.model.name, cfg.gpu.name, cfg.tp, cfg.block_size) == ("llama-2-7b", "a100-40gb", 1, 16)
    assert cfg.scheduler.max_model_len == cfg.model.max_context and cfg.swap_space == 0
    assert config_from_args(["--preemption-mode", "swap"]).swap_space == 4.0  # vLLM's default swap space


@pytest.mark.parametrize(
    "values,naming,msg",
    [
        ({"max_num_seqs": 0}, "flag", "--max-num-seqs: must be >= 1, got 0"),
        ({"max_num_seqs": "x"}, "flag", "--max-num-seqs: must be an integer, got 'x'"),
        ({"gpu_memory_utilization": "nan"}, "flag", "--gpu-memory-utilization: must be finite"),
        ({"gpu_memory_utilization": 1.5}, "flag", "must be <= 1, got 1.5"),
        ({"kv_pool_gb": -1}, "key", "'kv_pool_gb': must be > 0, got -1"),
        ({"max_num_sqs": 3}, "key", "did you mean 'max_num_seqs'"),
        ({"batching": "dynamic"}, "flag", "--batching: 'dynamic' is not one of continuous, static"),
        ({"tp": 3, "model": "llama-2-70b"}, "key", "'tp' 3: must divide the model's kv_heads (8)"),
        ({"partial_eviction": "maybe"}, "key", "must be true or false"),
        ({"preemption_mode": "swap", "swap_space": 0}, "flag", "--swap-space must be > 0"),
    ],
)
def test_bad_values_name_the_option(values, naming, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        config_from_options(values, naming)


def test_every_option_has_help_and_a_primary_flag():
    for o in OPTIONS:
        assert o.help and o.flag.startswith("--") and o.key == o.flag[2:].replace("-", "_")


@pytest.mark.parametrize(
    "text,tokens", [("32k", 32000), ("32K", 32768), ("25.6k", 25600), ("1M", 1 << 20), ("8192", 8192)]
)
def test_token_counts_take_vllm_sizes(text, tokens):
    cfg = config_from_args(["--model", "llama-3-8b", "--max-model-len", text, "--max-num-batched-tokens", text])
    assert cfg.scheduler.max_model_len == tokens and cfg.scheduler.max_num_batched_tokens == max(tokens, 256)
    assert config_from_options({"max_model_len": text, "model": "llama-3-8b"}).scheduler.max_model_len == tokens


@pytest.mark.parametrize(
    "text,msg", [("0.0001k", "not a whole number"), ("xk", "a size such as 32k"), ("32q", "must be an integer")]
)
def test_bad_sizes_are_named(text, msg):
    with pytest.raises(ConfigError, match=msg):
        config_from_args(["--max-model-len", text])


def test_prefix_caching_can_be_switched_off_as_in_vllm():
    assert config_from_args(["--enable-prefix-caching"]).enable_prefix_caching
    assert not config_from_args(["--no-enable-prefix-caching"]).enable_prefix_caching


@pytest.mark.parametrize(
    "args,named,expected",
    [
        ([], None, "paged:16+prefix"),  # the default allocator caches prefixes, as vLLM V1's
        ([], "paged:16", "paged:16"),  # a named allocator runs as named
        (["--no-enable-prefix-caching"], None, "paged:16"),
        (["--enable-prefix-caching"], "paged:8", "paged:8+prefix"),
        (["--no-enable-prefix-caching"], "paged:16+prefix", "paged:16+prefix"),
        (["--model", "jamba-1.5-mini"], "hybrid", "hybrid:16"),  # mamba state: off by default, as vLLM
        (["--model", "jamba-1.5-mini"], None, "hybrid:16"),
        (["--model", "gemma-2-9b"], None, "hybrid:16+prefix"),
        ([], "max", "max"),  # nothing to switch on
    ],
)
def test_prefix_caching_is_on_for_the_default_allocators(args, named, expected):
    from kvsim.runner import resolve_allocator

    cfg = config_from_args(args)
    name = named or ("hybrid" if cfg.model.is_hybrid else "paged")
    assert str(resolve_allocator(name, cfg, named=named is not None)) == expected


def test_run_and_compare_use_prefix_caching_by_default(tmp_path):
    from kvsim.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(open("traces/mooncake_excerpt.jsonl").readlines()[:60]))
    import pandas as pd

    for extra, expected in (([], "paged:16+prefix"), (["--no-enable-prefix-caching"], "paged:16")):
        out = tmp_path / f"run{len(extra)}"
        assert (
            main(
                [
                    "run",
                    "--trace",
                    str(trace),
                    "--model",
                    "qwen2.5-7b",
                    "--gpu",
                    "a100-80gb",
                    "--no-plots",
                    "--out",
                    str(out),
                    *extra,
                ]
            )
            == 0
        )
        runs = pd.read_csv(out / "runs.csv")
        assert list(runs.allocator) == [expected]
        assert (runs.prefix_hit_rate_tokens > 0).all() == (expected.endswith("+prefix"))


def test_policies_registered_at_run_time_are_accepted_when_parsing(tmp_path):
    """Choices are read when a value is checked, not when the options table is built."""
    from kvsim.allocators.cache_eviction import CACHE_EVICTION_HELP, CACHE_EVICTION_POLICIES, register_policy
    from kvsim.options import config_from_args

    with pytest.raises(ConfigError, match="newest-first"):
        config_from_args(["--cache-eviction", "newest-first"])
    register_policy("newest-first", lambda u: (-u.created,), "newest cached block first")
    try:
        assert config_from_args(["--cache-eviction", "newest-first"]).cache_eviction == "newest-first"
    finally:
        del CACHE_EVICTION_POLICIES["newest-first"], CACHE_EVICTION_HELP["newest-first"]


def test_scheduler_limits_default_to_what_vllm_serve_picks_for_the_gpu():
    """vLLM V1's EngineArgs: 1,024 sequences and 8,192 tokens on GPUs of at least 70 GiB other than A100s, else 256
    and 2,048; what the user gives stands."""
    from kvsim.options import config_from_args

    for gpu, limits in (
        ("h100-80gb", (1024, 8192)),
        ("h200", (1024, 8192)),
        ("b200", (1024, 8192)),
        ("a100-80gb", (256, 2048)),
        ("a100-40gb", (256, 2048)),
        ("l40s", (256, 2048)),
    ):
        s = config_from_args(["--gpu", gpu]).scheduler
        assert (s.max_num_seqs, s.max_num_batched_tokens) == limits, gpu
    s = config_from_args(["--gpu", "h100-80gb", "--max-num-seqs", "64"]).scheduler
    assert (s.max_num_seqs, s.max_num_batched_tokens) == (64, 8192)
    s = config_from_args(["--gpu", "a100-40gb", "--max-num-seqs", "4096"]).scheduler
    assert s.max_num_batched_tokens == 4096  # a full batch of decodes fits one iteration
    # from vLLM 0.28 GPUs of 160 GiB or more get 16,384 tokens (EngineArgs' largest tier; not in 0.27.1)
    for gpu, release, tokens in (
        ("b200", "0.28.0", 16384),
        ("b300", "0.31.0", 16384),
        ("b200", "0.27.1", 8192),
        ("h200", "0.31.0", 8192),
        ("a100-80gb", "0.31.0", 2048),
    ):
        s = config_from_args(["--gpu", gpu, "--vllm-version", release]).scheduler
        assert (s.max_num_seqs, s.max_num_batched_tokens) == (1024 if tokens > 2048 else 256, tokens), gpu


def test_every_option_sets_something():
    """An option row fills the configuration field of its name, or is read where the configuration is built
    (the model and its formats, the drafter), by the workload generator, or when the trace is read: a row
    that nothing reads is a flag that silently does nothing."""
    import dataclasses
    import inspect
    import re

    from kvsim import options
    from kvsim.config import MemoryConfig, SchedulerConfig, SimConfig
    from kvsim.latency.roofline import RooflineParams
    from kvsim.trace.bench_load import DATASET_KEYS

    fields = {
        f.name
        for cls in (SimConfig, SchedulerConfig, MemoryConfig, RooflineParams)
        for f in dataclasses.fields(cls)
        if not f.metadata.get("derived")
    }
    read = set(re.findall(r'v\["(\w+)"\]', inspect.getsource(options._build)))
    trace_reading = {"skip_invalid"}  # planning.point and the commands pass it to load_trace
    idle = [o.key for o in OPTIONS if o.key not in fields | read | set(DATASET_KEYS) | trace_reading]
    assert not idle, f"options nothing reads: {idle}"


def test_configs_are_filled_by_name():
    """A field that is an option takes the option's value without a line of its own in config_from_options."""
    from kvsim.config import SchedulerConfig
    from kvsim.options import fill

    values = {o.key: o.default for o in OPTIONS}
    s = fill(SchedulerConfig, {**values, "max_num_seqs": 8, "max_num_batched_tokens": 64}, max_model_len=64)
    assert (s.max_num_seqs, s.max_num_batched_tokens, s.scheduling_policy) == (8, 64, "fcfs")
    assert s.async_scheduling is False  # derived fields are left to the builder


@pytest.mark.parametrize(
    "values, flag_msg, key_msg",
    [
        (
            {"max_num_seqs": 64, "max_num_batched_tokens": 32},
            "--max-num-batched-tokens (32) must be >= --max-num-seqs (64)",
            "'max_num_batched_tokens' (32) must be >= 'max_num_seqs' (64)",
        ),
        (
            {"num_scheduler_steps": 4},
            "--num-scheduler-steps 4: multi-step scheduling is the V0 engine's",
            "'num_scheduler_steps' 4: multi-step",
        ),
    ],
)
def test_a_rule_is_stated_once_and_names_options_as_written(values, flag_msg, key_msg):
    """The rules between options live on the configuration dataclasses; the command line sees flags, a grid
    file its own keys and Python the field names."""
    import dataclasses

    from kvsim.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        config_from_options(values)
    assert flag_msg in str(e.value)
    with pytest.raises(ConfigError) as e:
        config_from_options(values, naming="key")
    assert key_msg in str(e.value)
    cfg = config_from_options({})
    with pytest.raises(ConfigError, match=r"^(max_num_batched_tokens|num_scheduler_steps)"):
        if "num_scheduler_steps" in values:
            dataclasses.replace(cfg, scheduler=dataclasses.replace(cfg.scheduler, num_scheduler_steps=4))
        else:
            dataclasses.replace(cfg.scheduler, max_num_seqs=64, max_num_batched_tokens=32)
