"""The incremental scheduler (lazy decoders, growth events, decode runs) against the stepping reference:
the same times, counts and memory shares, over every allocator, victim policy, preemption mode, forks,
prefix caches, static batching, horizons and token budgets small enough to starve decodes."""

import math

import pytest
from hypothesis import assume, given, settings, strategies as st

from helpers import sched
from kvsim.allocators import make_allocator
from kvsim.allocators.registry import KINDS, ModelMemory, parse_allocator
from kvsim.errors import ConfigError
from kvsim.frontend import FRONTEND_PRESETS
from kvsim.engine.preemption import get_victim_policy
from kvsim.engine.simulator import Simulation, SwapTiming
from kvsim.hardware import get_gpu, get_model
from kvsim.latency import build_latency
from kvsim.latency.roofline import RooflineModel
from kvsim.options import config_from_args
from kvsim.trace.request import Request

LATENCIES = {
    "roofline": RooflineModel(get_model("llama-2-7b"), get_gpu("a100-40gb")),
    "per-op": build_latency(config_from_args(["--model", "llama-2-7b", "--gpu", "a100-80gb"])),
    "per-op-async": build_latency(
        config_from_args(
            ["--model", "llama-2-70b", "--gpu", "h100-80gb", "-tp", "4", "--cpu-overhead", "vllm-v1-async"]
        )
    ),
    # layers that attend to different spans, recurrent layers and experts
    "per-op-gemma2": build_latency(config_from_args(["--model", "gemma-2-9b", "--gpu", "h100-80gb"])),
    "per-op-jamba-async": build_latency(
        config_from_args(["--model", "jamba-1.5-mini", "--gpu", "h200-141gb", "--cpu-overhead", "vllm-v1-async"])
    ),
}


def _toy(name, types, **more):
    from kvsim.hardware.models import ModelSpec

    return ModelSpec(name, len(types), 2, 1, 8, 1e6, 512, layer_types=types, **more).validate()


TOY_MODELS = {
    "toy-sliding": _toy("toy-sliding", ("sliding", "full", "sliding", "sliding"), sliding_window=40),
    "toy-chunked": _toy("toy-chunked", ("chunked", "full", "chunked"), attention_chunk=64),
    "toy-mamba": _toy(
        "toy-mamba",
        ("mamba", "full", "mamba", "sliding"),
        sliding_window=24,
        mamba_d_inner=16,
        mamba_d_state=4,
        mamba_d_conv=4,
        mamba_conv_channels=16,
    ),
}


def _toy_latency(types, cpu="vllm-v1", **more):
    """A small model with wide KV heads on a slow GPU: decode attention well above its kernel floor, so
    every windowed read shows in the step times."""
    from kvsim.hardware.models import ModelSpec
    from kvsim.latency.calibration import shipped_calibration
    from kvsim.latency.cpu import get_cpu_overhead
    from kvsim.latency.perop import PerOpModel

    model = ModelSpec("lat-toy", len(types), 32, 32, 256, 1e8, 512, layer_types=types, **more).validate()
    gpu = get_gpu("a40")
    return PerOpModel(model, gpu, shipped_calibration(gpu)[0], get_cpu_overhead(cpu))


# MLA at TP1: decode attention is FLOP-bound (absorbed scores over the latent), which decode runs must price
def _mla_tp1():
    from kvsim.latency.calibration import shipped_calibration
    from kvsim.latency.cpu import get_cpu_overhead
    from kvsim.latency.perop import PerOpModel

    gpu = get_gpu("h200-141gb")  # the latency model alone: DeepSeek-V3's weights need not fit one GPU here
    return PerOpModel(get_model("deepseek-v3"), gpu, shipped_calibration(gpu)[0], get_cpu_overhead("vllm-v1"))


LATENCIES["per-op-mla-flops"] = _mla_tp1()
# windows small enough that decodes cross them: the engine counts every context's windowed reads
LATENCIES["per-op-toy-sliding"] = _toy_latency(("sliding", "full", "sliding"), sliding_window=40)
LATENCIES["per-op-toy-chunked-async"] = _toy_latency(
    ("chunked", "full", "chunked"), "vllm-v1-async", attention_chunk=64
)
LATENCIES["per-op-toy-mamba"] = _toy_latency(
    ("mamba", "full", "sliding"),
    sliding_window=24,
    mamba_d_inner=64,
    mamba_d_state=4,
    mamba_d_conv=4,
    mamba_conv_channels=64,
)
FAMILIES = [[7000 + 100 * f + i for i in range(40)] for f in range(3)]

request = st.tuples(
    st.floats(0, 5),
    st.integers(1, 300),
    st.integers(1, 120),
    st.integers(0, 2),
    st.sampled_from([1, 1, 1, 2, 3]),
    st.integers(0, 3),
)
setup = st.fixed_dictionaries(
    {
        "spec": st.sampled_from(
            [
                "paged:16",
                "paged:8",
                "paged:4",
                "paged:16+prefix",
                "radix:8",
                "max",
                "pow2",
                "oracle",
                "hybrid:16",
                "hybrid:8+prefix",
                "static-split:8",
                "naive:16",
                "hybrid:16+prefix",
            ]
        ),
        "model": st.sampled_from(["toy-sliding", "toy-chunked", "toy-mamba"]),
        "policy": st.sampled_from(["lifo", "fifo", "lru", "priority", "prefill-first", "hybrid"]),
        "mode": st.sampled_from(["recompute", "swap", "partial"]),
        "static": st.booleans(),
        "max_seqs": st.sampled_from([2, 4, 8, 32]),
        "budget": st.sampled_from([16, 64, 128, 512, 4096]),
        "horizon": st.one_of(st.none(), st.floats(0.5, 10)),
        "pool": st.integers(200, 3000),
        "latency": st.sampled_from(sorted(LATENCIES)),
        "chunked": st.sampled_from([True, True, False]),
        "multi_step": st.sampled_from([1, 1, 1, 3, 8]),  # vLLM V0's --num-scheduler-steps
        "v0": st.booleans(),  # vLLM V0: without chunked prefill, prompts run in steps of their own
        "frontend": st.sampled_from(["none", "none", "vllm", "vllm-v0"]),  # vllm-v0 hands bursts over together
        "async": st.booleans(),  # V1's async scheduling: arrivals join a step later (V1 only: no multi-step, no v0)
    }
)


def _run(reqs, s, fast, observer=None):
    budget = max(s["budget"], s["max_seqs"], 0 if s["chunked"] else 512)
    max_len = s.get("max_len", 512)
    cfg = sched(
        max_model_len=max_len,
        max_num_seqs=s["max_seqs"],
        max_num_batched_tokens=budget,
        enable_chunked_prefill=s["chunked"],
        batching="static" if s["static"] else "continuous",
        horizon_s=s["horizon"],
        preemption_mode="swap" if s["mode"] == "swap" else "recompute",
        partial_preemption=s["mode"] == "partial",
        num_scheduler_steps=s.get("multi_step", 1),
        prompts_alone=s.get("v0", False) and not s["chunked"],
        api_server=FRONTEND_PRESETS[s.get("frontend", "none")],
        async_scheduling=s.get("async", False) and s.get("multi_step", 1) == 1 and not s.get("v0", False),
    )
    swap = s["mode"] == "swap"
    memory = None
    if KINDS[parse_allocator(s["spec"]).kind].layer_groups:  # a small model whose layers keep different caches
        m = TOY_MODELS[s.get("model", "toy-sliding")]
        memory = ModelMemory(m, 1, s["pool"] * m.kv_bytes_per_token, budget if s["chunked"] and not s["static"] else 0)
    try:
        alloc = make_allocator(s["spec"], s["pool"], max_len, 16 * 40 if swap else 0, memory=memory)
    except ConfigError:  # a split too small to give every pool a page
        assume(False)
    return Simulation(
        reqs,
        alloc,
        LATENCIES[s["latency"]],
        cfg,
        get_victim_policy(s["policy"]),
        fast_forward=fast,
        swap_timing=SwapTiming(1000, 1e6, 1e-3) if swap else None,
        observer=observer,
    ).run()


@settings(max_examples=120, deadline=None)
@given(st.lists(request, min_size=1, max_size=30), setup)
def test_incremental_scheduler_equals_stepping(items, s):
    reqs = []
    for i, (t, p, o, f, n, prio) in enumerate(items):
        nb = -(-p // 16)
        ids = tuple(FAMILIES[f][: nb // 2] + [10**6 + 100 * i + j for j in range(nb - nb // 2)])
        reqs.append(Request(str(i), t, p, o, priority=prio, hash_ids=ids, hash_block_tokens=16, n=n))
    fast, slow = _run(reqs, s, True), _run(reqs, s, False)
    assert fast.steps == slow.steps and fast.preemptions == slow.preemptions
    assert fast.extra == pytest.approx(slow.extra, rel=1e-9)
    pairs = [(a, b) for x, y in zip(fast.sequences, slow.sequences) for a, b in zip([x, *x.samples], [y, *y.samples])]
    for a, b in pairs:
        assert (a.status, a.preemptions, a.cached_tokens, a.generated, a.computed) == (
            b.status,
            b.preemptions,
            b.cached_tokens,
            b.generated,
            b.computed,
        )
        for f in ("admitted_s", "first_token_s", "finish_s"):
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None and y is None) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
    fa, fb = fast.memory.time_weighted_fractions(), slow.memory.time_weighted_fractions()
    for k in fa:
        assert math.isclose(fa[k], fb[k], abs_tol=1e-9), k
    assert math.isclose(fast.memory.shared_integral, slow.memory.shared_integral, rel_tol=1e-9, abs_tol=1e-6)
    assert fast.memory.max_batch == slow.memory.max_batch
    assert fast.memory.peak_held == slow.memory.peak_held and fast.memory.peak_shared == slow.memory.peak_shared


def test_a_long_prefill_starves_the_decodes_behind_it_as_stepping_does():
    """Budget 64. A decodes; D (3 samples, 10-token prompt) and B (600-token prompt) are admitted together,
    D first. D's samples fork after its prompt and join the batch behind B: while B's chunks take the rest of
    the budget, the samples are running but get no token, until B's prompt is done."""
    reqs = [Request("a", 0.0, 10, 60), Request("d", 0.04, 10, 20, n=3), Request("b", 0.045, 600, 5)]
    s = {
        "spec": "paged:16",
        "policy": "lifo",
        "mode": "recompute",
        "static": False,
        "max_seqs": 8,
        "budget": 64,
        "horizon": None,
        "pool": 4000,
        "latency": "roofline",
        "chunked": True,
        "max_len": 1024,
    }
    batches = {True: [], False: []}

    def observer(fast):
        return lambda start, dur, batch, steps, copies, alloc: batches[fast].extend(
            [[(seq.req.id, seq.sid, n) for seq, n in batch]] * steps
        )

    fast, slow = _run(reqs, s, True, observer(True)), _run(reqs, s, False, observer(False))
    for res in (fast, slow):  # every request ran to the end, B's 600-token prompt included
        assert [x.status for x in res.sequences] == ["finished"] * 3
        assert [x.generated for x in res.sequences] == [60, 20, 5]
        assert [c.generated for c in res.sequences[1].samples] == [20, 20]
    assert [x.finish_s for x in fast.sequences] == pytest.approx([x.finish_s for x in slow.sequences], rel=1e-12)
    assert fast.steps == slow.steps
    assert batches[True] == batches[False]  # the same sequences and tokens in every iteration
    steps = batches[False]
    forked = next(i for i, b in enumerate(steps) if ("d", 1, 10) in b) + 1  # the samples run from here
    chunks = [i for i, b in enumerate(steps) if any(r == "b" and n > 1 for r, _, n in b)]
    assert sum(n for b in steps for r, _, n in b if r == "b" and n > 1) == 600
    starved = [i for i in chunks if i >= forked and not any(r == "d" and sid != 1 for r, sid, _ in steps[i])]
    assert len(starved) >= 5  # B's full chunks left the samples behind it without a token
    assert any(r == "d" and sid != 1 for r, sid, _ in steps[chunks[-1]])  # B's last chunk left room for them
