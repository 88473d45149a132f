"""Fleets honour the simulation options as a single engine does (issue 37).

- Every option of the options table (kvsim/option_table.py): a cluster of one replica gives the same
  per-request results as `kvsim run` with that option, and the fleet plan's one-replica layout the same
  figures (parametrized over the table, so a new option is covered or named here with a reason).
- ``--enable-prefix-caching`` / ``--no-enable-prefix-caching`` switch the replicas' prefix caches as they
  switch a single engine's (the fleet once gave every replica one whatever the flag said), and the
  prefix-aware routers still route with nothing cached.
- Disaggregated prefill/decode moves what the prefill engine holds at hand-off: sliding-window and chunked
  layers only what they keep, mamba layers their fixed state (golden numbers by hand for gpt-oss-20b).
- ``--skip-invalid``: the fleet plan and the cluster skip bad trace lines and say how many.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random

import pandas as pd
import pytest

from kvsim.cli import main
from kvsim.fleet.cluster import ReplicaGroup
from kvsim.fleet.disagg import simulate_disagg
from kvsim.option_table import OPTIONS
from kvsim.options import config_from_args
from kvsim.runner import resolve_allocator, served_spec
from kvsim.trace.request import Request

# a small model on a small KV pool: the trace's requests share prefixes, queue and get preempted
BASE = ["--model", "llama-3-8b", "--gpu", "a100-40gb"]
POOL = ["--kv-pool-gb", "0.1"]

# per option: the arguments that set it away from its default (with what it needs to matter or to be legal);
# options that are booleans or take names get one automatically (the other value, the first other name) unless
# listed; a new numeric option must be listed here or in NOT_COMPARED
VALUES: dict[str, list[str]] = {
    "model": ["--model", "gemma-2-9b"],
    "gpu": ["--gpu", "h100-80gb"],
    "tensor_parallel_size": ["--tensor-parallel-size", "2"],
    "pipeline_parallel_size": ["--pipeline-parallel-size", "2"],
    "enable_expert_parallel": ["--model", "qwen3-235b-a22b", "--gpu", "h200", "-tp", "8", "--enable-expert-parallel"],
    # (with a chunked-attention model and a release of 0.10-0.12 a fleet's default allocator is naive+prefix, as
    # vLLM served it, where `kvsim run`'s stays hybrid: docs/hybrid-models.md; a named allocator agrees)
    "vllm_version": ["--vllm-version", "0.14"],
    "quantization": ["--quantization", "fp8"],
    "gpu_memory_utilization": ["--gpu-memory-utilization", "0.5"],
    "activation_reserve_gb": ["--activation-reserve-gb", "5"],
    "activation_reserve": ["--activation-reserve", "fixed"],
    "kv_pool_gb": ["--kv-pool-gb", "0.2"],
    "num_blocks": ["--num-blocks", "40"],
    "num_blocks_size": ["--num-blocks", "20", "--num-blocks-size", "32"],
    "ignore_gpu_memory": ["--kv-pool-gb", "60", "--ignore-gpu-memory"],
    "block_size": ["--block-size", "8"],
    "swap_space": ["--preemption-mode", "swap", "--swap-space", "1"],
    "kv_offloading_size": ["--kv-offloading-size", "1"],
    "kv_offloading_bandwidth": ["--kv-offloading-size", "1", "--kv-offloading-bandwidth", "2"],
    "kv_load_layerwise": ["--kv-offloading-size", "1", "--kv-load-layerwise"],
    "max_model_len": ["--max-model-len", "500"],  # rejects the longest prompts
    "max_num_seqs": ["--max-num-seqs", "3"],
    "max_num_batched_tokens": ["--max-num-batched-tokens", "256"],
    "preemption_mode": ["--preemption-mode", "swap"],
    "victim_policy": ["--victim-policy", "fifo"],
    "num_scheduler_steps": ["--vllm-engine", "v0", "--num-scheduler-steps", "4"],
    "horizon_s": ["--horizon-s", "1.5"],
    "latency": ["--latency", "roofline"],
    "moe_backend": ["--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--moe-backend", "marlin"],
    "moe_routing": ["--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--moe-routing", "uniform"],
    "api_server_count": ["--api-server-count", "4"],
    "stream_interval": ["--stream-interval", "4"],
    "cudagraph_capture_sizes": ["--cudagraph-capture-sizes", "none"],
    "speculative_config": [
        "--speculative-config",
        json.dumps({"method": "ngram", "num_speculative_tokens": 3}),
        "--acceptance-length",
        "2",
    ],
    "acceptance_length": [
        "--speculative-config",
        json.dumps({"method": "ngram", "num_speculative_tokens": 3}),
        "--acceptance-length",
        "3.5",
    ],
    "interconnect": ["-tp", "2", "--interconnect", "pairwise"],
    "flops_efficiency": ["--latency", "roofline", "--flops-efficiency", "0.3"],
    "bandwidth_efficiency": ["--latency", "roofline", "--bandwidth-efficiency", "0.5"],
    "step_overhead_ms": ["--latency", "roofline", "--step-overhead-ms", "5"],
    "max_concurrency": ["--max-concurrency", "3"],
    "request_rate": ["--request-rate", "20"],
    "skip_invalid": ["--skip-invalid"],  # the trace gets a bad line (below)
}
# more settings of some options, each its own case: (key, arguments)
EXTRA_CASES = [
    ("model", ["--model", "gpt-oss-20b", "--gpu", "h100-80gb"]),  # sliding window + MoE
    ("model", ["--model", "jamba-1.5-mini", "--gpu", "h100-80gb", "-tp", "2"]),  # mamba: no prefix cache by default
    (
        "enable_prefix_caching",
        ["--model", "jamba-1.5-mini", "--gpu", "h100-80gb", "-tp", "2", "--enable-prefix-caching"],
    ),
    ("enable_prefix_caching", ["--enable-prefix-caching"]),
    ("enable_prefix_caching", ["--no-enable-prefix-caching"]),
    ("async_scheduling", ["--async-scheduling"]),
    ("async_scheduling", ["--no-async-scheduling"]),
    ("request_rate", ["--request-rate", "inf", "--max-concurrency", "4"]),
    ("kv_cache_dtype", ["--kv-cache-dtype", "fp8", "--model", "gpt-oss-20b", "--gpu", "h100-80gb"]),
]
# options whose own flags size the KV pool: the case brings its own pool instead of POOL
SIZES_POOL = {
    "gpu_memory_utilization",
    "activation_reserve_gb",
    "activation_reserve",
    "kv_pool_gb",
    "num_blocks",
    "num_blocks_size",
    "ignore_gpu_memory",
}
# options a one-replica cluster cannot be compared with `kvsim run` on, and why
NOT_COMPARED = {
    "data_parallel_size": "`kvsim run` runs it as a one-replica cluster (a data-parallel replica is several "
    "engines behind a balancer; tests/test_bench_load.py, tests/test_data_parallel.py)",
}
try:  # a benchmark client's generated workload instead of --trace: `kvsim run` and `compare` take it
    from kvsim.trace.bench_load import DATASET_KEYS
except ImportError:  # pragma: no cover (before generated workloads)
    DATASET_KEYS = ()
NOT_COMPARED.update(
    {
        k: "describes a generated benchmark workload, which `kvsim run` and `kvsim cluster` take instead of "
        "--trace and the fleet plan refuses (`kvsim trace generate` writes it as a trace for it; "
        "tests/test_bench_load.py)"
        for k in DATASET_KEYS
    }
)
# the fleet plan refuses these (it tries disaggregated layouts, where multi-step scheduling is not modelled)
PLAN_REFUSES = {"num_scheduler_steps"}


def _auto(o) -> list[str] | None:
    """Arguments that set a boolean or a named option away from its default, or None."""
    if o.type is bool:
        if o.negatable:
            return ["--no-" + o.flag[2:]] if o.default is not False else [o.flag]
        return [o.flag] if not o.default else None
    allowed = o.allowed()
    if allowed:
        other = [c for c in allowed if c != o.default]
        return [o.flag, other[0]] if other else None
    return None


def _cases():
    out = []
    for o in OPTIONS:
        if o.key in NOT_COMPARED:
            out.append(pytest.param(o.key, None, id=o.key, marks=pytest.mark.skip(reason=NOT_COMPARED[o.key])))
            continue
        args = VALUES.get(o.key) or _auto(o)
        out.append(pytest.param(o.key, args, id=o.key))
    for n, (key, args) in enumerate(EXTRA_CASES):
        out.append(pytest.param(key, args, id=f"{key}-{n}"))
    return out


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    """24 requests in about 3 s: half share a three-block prefix, prompts of 40-600 tokens; and a copy with a
    bad line."""
    d = tmp_path_factory.mktemp("fleet_options")
    rng = random.Random(0)
    lines, t = [], 0.0
    for i in range(24):
        t += rng.expovariate(8.0)
        p, o = rng.randint(40, 600), rng.randint(5, 80)
        own = range(p // 16)
        ids = [1, 2, 3] + [100 + 10 * i + k for k in own] if i % 2 else [200 + 50 * i + k for k in own]
        lines.append(
            json.dumps(
                {
                    "id": f"r{i}",
                    "arrival_s": round(t, 4),
                    "prompt_tokens": p,
                    "output_tokens": o,
                    "hash_ids": ids[: p // 16],
                    "hash_block_tokens": 16,
                }
            )
        )
    (d / "t.jsonl").write_text("\n".join(lines) + "\n")
    (d / "bad.jsonl").write_text("\n".join(lines[:5] + ['{"id": "x", "arrival_s": 0.5}'] + lines[5:]) + "\n")
    return d


def _kvsim(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue() + err.getvalue()


def _run_and_cluster(tmp_path, trace, args):
    rc, text = _kvsim(["run", "--trace", str(trace), "--out", str(tmp_path / "run"), "--no-plots", *args])
    assert rc == 0, text
    rc, text = _kvsim(
        [
            "cluster",
            "--trace",
            str(trace),
            "--out",
            str(tmp_path / "cluster"),
            "--replicas",
            "1",
            "--routers",
            "round-robin,prefix+load",
            *args,
        ]
    )
    assert rc == 0, text
    return (
        pd.read_csv(tmp_path / "run" / "requests.csv"),
        pd.read_csv(tmp_path / "run" / "runs.csv").iloc[0],
        pd.read_csv(tmp_path / "cluster" / "requests.csv"),
        pd.read_csv(tmp_path / "cluster" / "fleet.csv"),
    )


def _args(key, args):
    return BASE + ([] if key in SIZES_POOL else POOL) + args


def test_every_option_is_compared_or_excused():
    """A new option gets a case (automatically for booleans and named choices) or a reason here."""
    for o in OPTIONS:
        assert o.key in NOT_COMPARED or VALUES.get(o.key) or _auto(o), (
            f"{o.key}: add a value to VALUES (or a reason to NOT_COMPARED) in tests/test_fleet_options.py"
        )
    assert set(VALUES) | set(NOT_COMPARED) | {k for k, _ in EXTRA_CASES} <= {o.key for o in OPTIONS}


@pytest.mark.parametrize("key,args", _cases())
def test_one_replica_cluster_equals_kvsim_run_with_each_option(tmp_path, trace_dir, key, args):
    """`kvsim cluster --replicas 1` (every router) gives every request the same record as `kvsim run` with the
    same options, and the fleet plan's one-replica layout the same latency and throughput."""
    trace = trace_dir / ("bad.jsonl" if key == "skip_invalid" else "t.jsonl")
    args = _args(key, args)
    run_req, run, cl_req, fleet = _run_and_cluster(tmp_path, trace, args)
    cols = [c for c in run_req.columns if c != "allocator"]
    for router, got in cl_req.groupby("router", sort=False):
        pd.testing.assert_frame_equal(
            got[cols].reset_index(drop=True), run_req[cols], check_exact=True, obj=f"{key}: cluster {router} vs run"
        )
    for r in fleet.itertuples():
        for k in ("finished", "rejected", "unfinished", "prefix_hit_rate_tokens", "preemptions"):
            a, b = getattr(r, k), run[k]
            assert a == b or (math.isnan(a) and math.isnan(b)), (key, r.router, k, a, b)
    if key in PLAN_REFUSES:
        return
    gpus = config_from_args(args).gpus
    rc, text = _kvsim(
        [
            "plan",
            "--trace",
            str(trace),
            "--out",
            str(tmp_path / "plan"),
            *args,
            "--fleet-max-gpus",
            str(gpus),
            "--fleet-routers",
            "round-robin",
            "--slo",
            "ttft_p99=1000s",
        ]
    )
    assert rc == 0, text
    row = pd.read_csv(tmp_path / "plan" / "fleet_plan.csv").iloc[0]
    assert row.layout.startswith("1x ") and row.gpus == gpus
    for k in ("finished", "ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "throughput_tok_s", "prefix_hit_rate_tokens"):
        assert row[k] == run[k] or (math.isnan(row[k]) and math.isnan(run[k])), (key, k, row[k], run[k])


# --- prefix caching ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], "paged:16+prefix"),
        (["--no-enable-prefix-caching"], "paged:16"),
        (["--enable-prefix-caching"], "paged:16+prefix"),
        (["--model", "gemma-2-9b", "--no-enable-prefix-caching"], "hybrid:16"),
        (["--model", "llama-4-scout", "--vllm-version", "0.11", "--no-enable-prefix-caching"], "naive:16"),
        (["--model", "jamba-1.5-mini"], "hybrid:16"),  # mamba state: not cached by default, as a single engine
        (["--model", "jamba-1.5-mini", "--enable-prefix-caching"], "hybrid:16+prefix"),
    ],
)
def test_the_fleet_default_allocator_caches_prefixes_as_a_single_engine_does(args, expected):
    cfg = config_from_args(args)
    assert str(served_spec(cfg)) == expected
    single = resolve_allocator("hybrid" if cfg.model.is_hybrid else "paged", cfg, named=False)
    assert single.prefix == expected.endswith("+prefix")


def test_no_prefix_caching_leaves_prefix_routers_nothing_to_score(tmp_path, trace_dir):
    """With --no-enable-prefix-caching no replica caches anything: every prefix-aware router still routes every
    request (by load), nothing is hit, and the command says why routing by prefix saves nothing."""
    trace = str(trace_dir / "t.jsonl")
    routers = "prefix,prefix+load,prefix-approx,round-robin"
    on = tmp_path / "on"
    rc, text = _kvsim(
        ["cluster", "--trace", trace, "--out", str(on), *BASE, *POOL, "--replicas", "3", "--routers", routers]
    )
    assert rc == 0, text
    off = tmp_path / "off"
    rc, text = _kvsim(
        [
            "cluster",
            "--trace",
            trace,
            "--out",
            str(off),
            *BASE,
            *POOL,
            "--replicas",
            "3",
            "--routers",
            routers,
            "--no-enable-prefix-caching",
        ]
    )
    assert rc == 0, text
    assert "caches no prefixes, so routing by prefix saves no prefill" in text
    f_on = pd.read_csv(on / "fleet.csv").set_index("router")
    f_off = pd.read_csv(off / "fleet.csv").set_index("router")
    assert (f_on.prefix_hit_rate_tokens > 0).all()  # the trace does share prefixes
    assert f_off.prefill_tokens_saved.eq(0).all() and f_off.finished.eq(24).all()
    req = pd.read_csv(off / "requests.csv")
    assert req.cached_prompt_tokens.eq(0).all() and req.replica.between(0, 2).all()


def test_the_fleet_plan_and_its_vllm_commands_honour_prefix_caching(tmp_path, trace_dir):
    trace = str(trace_dir / "t.jsonl")
    for flag, hit, serve in (
        ([], True, "--enable-prefix-caching"),
        (["--no-enable-prefix-caching"], False, "--no-enable-prefix-caching"),
    ):
        out = tmp_path / f"plan{len(flag)}"
        rc, text = _kvsim(
            [
                "plan",
                "--trace",
                trace,
                "--out",
                str(out),
                *BASE,
                *POOL,
                *flag,
                "--fleet-max-gpus",
                "1",
                "--fleet-routers",
                "prefix+load",
                "--slo",
                "ttft_p99=1000s",
            ]
        )
        assert rc == 0, text
        row = pd.read_csv(out / "fleet_plan.csv").iloc[0]
        assert (row.prefix_hit_rate_tokens > 0) == hit
        assert serve in (out / "summary.md").read_text()


# --- disaggregated prefill/decode: the KV handed over -------------------------------------------------------


def _handoff(args, prompt=1000, spec=None, gpus=None):
    cfg = config_from_args(["--gpu", "h100-80gb", "--kv-pool-gb", "4", *args])
    spec = spec or served_spec(cfg)
    f = simulate_disagg(
        [Request("a", 0.0, prompt, 4)],
        [ReplicaGroup("p", cfg, spec, 1)],
        [ReplicaGroup("d", cfg, spec, 1)],
        "round-robin",
    )
    r = f.requests.iloc[0]
    assert r.status == "finished"
    return r.kv_transfer_bytes


def test_disaggregated_transfer_moves_only_what_sliding_window_layers_keep():
    """gpt-oss-20b: 24 layers alternating sliding window (128 tokens) and full attention, 8 KV heads of 64,
    bf16: 2 x 8 x 64 x 2 = 2,048 bytes per token per layer. A 1,000-token prompt: the decode engine computes
    the last prompt token itself, so the 12 full layers send the other 999 tokens; the prefill engine's
    sliding layers hold the last 128 (positions 872-999: what the last token attends to), of which they send
    the 127 before the last. Without the hybrid manager's windows (naive) every layer sends 999."""
    per = 2 * 8 * 64 * 2
    assert _handoff(["--model", "gpt-oss-20b"]) == (12 * 999 + 12 * 127) * per == 27_672_576
    assert _handoff(["--model", "gpt-oss-20b"], spec="naive:16") == 24 * 999 * per
    # tensor parallel: each of 2 GPUs holds 4 of the 8 KV heads and sends its share: the same bytes in all
    assert _handoff(["--model", "gpt-oss-20b", "-tp", "2"]) == (12 * 999 + 12 * 127) * per
    # a prompt inside the window: every layer holds (and sends) all 99 tokens before the last
    assert _handoff(["--model", "gpt-oss-20b"], prompt=100) == 24 * 99 * per


def test_disaggregated_transfer_of_chunked_and_mamba_layers():
    """Llama 4 Scout: 36 chunked-attention layers (8,192-token chunks) and 12 full, 8 KV heads of 128, bf16:
    4,096 bytes per token per layer on one GPU (x 8 GPUs / 8: tensor parallel 8 splits the heads, one per GPU).
    A 10,000-token prompt: the chunked layers hold the current chunk (positions 8,192-9,999) and send its
    1,807 tokens before the last. Jamba: its 4 attention layers send every token, its 28 mamba layers one
    state each (:meth:`ModelSpec.state_bytes_per_layer`)."""
    scout = ["--model", "llama-4-scout", "--gpu", "h200", "-tp", "8", "--max-model-len", "16384"]
    per = 2 * 8 * 128 * 2
    cfg = config_from_args(["--gpu", "h100-80gb", *scout])
    assert cfg.model.kv_bytes_per_token_layer(8) * 8 == per
    assert _handoff(scout, prompt=10_000) == (12 * 9_999 + 36 * 1_807) * per
    assert _handoff(scout, prompt=10_000, spec="naive:16") == 48 * 9_999 * per
    jamba = config_from_args(["--model", "jamba-1.5-mini", "-tp", "2"]).model
    state = jamba.state_bytes_per_layer(2) * 2
    assert state > 0 and jamba.count("mamba") == 28
    expected = 4 * 999 * jamba.kv_bytes_per_token_layer(2) * 2 + 28 * state
    assert _handoff(["--model", "jamba-1.5-mini", "-tp", "2"]) == expected
    assert _handoff(["--model", "jamba-1.5-mini", "-tp", "2"], spec="naive:16") == expected  # naive keeps states too


@pytest.mark.parametrize(
    "args,spec,per_token",
    [
        ([], "paged:16", 524_288),  # llama-2-7b: 32 layers x 32 heads x 128 x 2 x 2 bytes
        (["--model", "llama-3-8b"], "paged:16+prefix", 131_072),
        (["--model", "llama-3-8b", "-tp", "2"], "paged:16", 131_072),  # 2 GPUs x half the heads each
        (["--model", "llama-2-70b", "-tp", "4", "--pp", "2"], "paged:16", 80 * 2 * 8 * 128 * 2),
        (["--model", "llama-3-8b", "--kv-cache-dtype", "fp8"], "paged:16", 65_536),
        (["--model", "llama-3-8b"], "hybrid:16", 131_072),  # a full-attention model under the hybrid allocator
        (["--model", "gemma-2-9b"], "paged:16", 42 * 2 * 8 * 256 * 2),  # paged keeps every layer's every token
    ],
)
def test_full_attention_transfers_are_unchanged(args, spec, per_token):
    """Where every layer keeps every token, a request sends its prompt but the last token, every layer's KV,
    as before."""
    assert _handoff(args, spec=spec) == 999 * per_token


# --- --skip-invalid ----------------------------------------------------------------------------------------


def test_fleet_plan_and_cluster_skip_invalid_lines_and_count_them(tmp_path, trace_dir):
    bad = str(trace_dir / "bad.jsonl")
    plan = [
        "plan",
        "--trace",
        bad,
        *BASE,
        *POOL,
        "--fleet-max-gpus",
        "1",
        "--fleet-routers",
        "round-robin",
        "--slo",
        "ttft_p99=1000s",
    ]
    rc, text = _kvsim(plan + ["--out", str(tmp_path / "p0")])
    assert rc == 2 and "bad.jsonl:6:" in text and "Traceback" not in text
    rc, text = _kvsim(plan + ["--out", str(tmp_path / "p1"), "--skip-invalid"])
    assert rc == 0, text
    assert "skipped 1 invalid line(s)" in text
    assert "skipped 1 invalid line(s)" in (tmp_path / "p1" / "summary.md").read_text()
    assert pd.read_csv(tmp_path / "p1" / "fleet_plan.csv").iloc[0].requests == 24
    cluster = ["cluster", "--trace", bad, *BASE, *POOL, "--replicas", "2", "--routers", "round-robin"]
    rc, text = _kvsim(cluster + ["--out", str(tmp_path / "c0")])
    assert rc == 2 and "bad.jsonl:6:" in text
    rc, text = _kvsim(cluster + ["--out", str(tmp_path / "c1"), "--skip-invalid"])
    assert rc == 0 and "skipped 1 invalid line(s)" in text
    assert len(pd.read_csv(tmp_path / "c1" / "requests.csv")) == 24


def test_the_fleet_plan_window_skips_invalid_lines_too(tmp_path, trace_dir):
    """A trace longer than --plan-requests is searched on a window of it, then the cheapest layouts run on the
    whole trace: both load it skipping the bad line."""
    rc, text = _kvsim(
        [
            "plan",
            "--trace",
            str(trace_dir / "bad.jsonl"),
            *BASE,
            *POOL,
            "--fleet-max-gpus",
            "1",
            "--fleet-routers",
            "round-robin",
            "--slo",
            "ttft_p99=1000s",
            "--plan-requests",
            "10",
            "--skip-invalid",
            "--out",
            str(tmp_path / "w"),
        ]
    )
    assert rc == 0, text
    table = pd.read_csv(tmp_path / "w" / "fleet_plan.csv")
    assert set(table.requests) == {10, 24}
