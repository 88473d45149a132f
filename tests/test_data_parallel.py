"""Data-parallel attention (DeepSeek-style serving): a replica of dp ranks, each its own engine, whose MoE
layers span all ranks' GPUs. Memory per GPU, a rank's step time and the fleet around it, with hand-computed
numbers."""

import pytest

from kvsim.cli import main
from kvsim.errors import ConfigError
from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
from kvsim.fleet.routers import RouterOptions, make_router
from kvsim.hardware import get_gpu, get_model
from kvsim.latency import get_cpu_overhead
from kvsim.calibrate.aic import fit_aic, read_aic, validate_aic
from kvsim.latency.calibration import shipped_calibration
from kvsim.latency.perop import MoeOp, PerOpModel
from kvsim.memory_budget import memory_budget
from kvsim.options import config_from_options
from kvsim.planning.fleet_plan import Layout, layouts_of, vllm_commands
from kvsim.trace import load_trace

GiB = 1 << 30


def _cfg(**kw):
    return config_from_options({"model": "deepseek-v3", "gpu": "h200", **kw})


def test_ranks_hold_their_own_attention_and_a_share_of_the_experts():
    """DeepSeek-V3 (FP8 experts: 58 MoE layers x 256 experts x 3 x 7,168 x 2,048 x 1 B) over 8 ranks of one
    GPU: each GPU holds 1/8 of the experts and everything else whole; at TP8 every weight is split 8 ways."""
    m = get_model("deepseek-v3")
    experts = 58 * 256 * 3 * 7168 * 2048 * 1.0
    assert m.expert_weight_bytes() == pytest.approx(experts)
    dp8, tp8 = _cfg(data_parallel_size=8), _cfg(tensor_parallel_size=8)
    rope = 163840 * 64 * 2  # the rotary cos/sin table, whole on every GPU
    assert m.rope_cache_bytes == rope
    assert memory_budget(dp8).weight_bytes == pytest.approx(m.weight_bytes - experts + experts / 8 + rope)
    assert memory_budget(tp8).weight_bytes == pytest.approx(m.weight_bytes / 8 + rope)
    # the MLA latent is whole on every GPU either way, but a rank caches only its own sequences: 8 pools of
    # distinct sequences against one pool replicated 8 times
    assert dp8.pool_plan().kv_bytes_per_token == tp8.pool_plan().kv_bytes_per_token == 61 * 576 * 2
    assert 8 * dp8.pool_plan().pool_tokens > 5 * tp8.pool_plan().pool_tokens
    # a dense model's ranks are whole copies: the same weights per GPU as one engine
    llama = config_from_options({"model": "llama-3-8b", "gpu": "h100", "data_parallel_size": 4})
    assert memory_budget(llama).weight_bytes == get_model("llama-3-8b").gpu_weight_bytes(1)


def test_a_rank_prices_every_ranks_tokens_through_its_experts_and_the_exchange():
    g = get_gpu("h200")
    calib = shipped_calibration(g)[0]
    m = get_model("deepseek-v3")
    rank = PerOpModel(m, g, calib, get_cpu_overhead("none"), 1, expert_parallel=True, dp=4)
    n, experts = next((n, e) for n, _, e in rank.classes if e is not None)
    # whole experts, 64 per GPU (a shape of no split over 4 expert-parallel ranks)
    assert experts == MoeOp(7168, 2048, 256, 8, 1.0, True, 4, experts.quant, shape="7168,2048,256,8,1,4")
    # the experts see all 4 ranks' tokens; everything else only this rank's
    one = PerOpModel(m, g, calib, get_cpu_overhead("none"), 1, expert_parallel=True, dp=1)
    moe = lambda model, t: sum(k * e.seconds(calib, g, t, 2) for k, _, e in model.classes if e is not None)  # noqa: E731
    assert rank.dense_s(32, 32) - one.dense_s(32, 32) == pytest.approx(
        sum(k * e.seconds(calib, g, 128, 2) for k, _, e in rank.classes if e is not None) - moe(one, 32), rel=1e-9
    )
    # no tensor parallelism: the only communication is each MoE layer's all-gather + reduce-scatter of the
    # 4 ranks' hidden states (4 x 32 tokens x 7,168 x 2 B), priced on the measured exchange of 4 GPUs
    link = calib.exchange_link(4, "nvswitch")
    assert link is not None
    assert rank.communication_s(32, 32) == pytest.approx(58 * link.seconds(4 * 32 * 7168 * 2), rel=1e-12)
    # a prefill chunk: the other ranks decode as many sequences as this rank samples (here 2), not 3 chunks more
    assert rank.communication_s(2048, 2) == pytest.approx(58 * link.seconds((2048 + 3 * 2) * 7168 * 2), rel=1e-12)
    assert rank.dense_s(2048, 2) - one.dense_s(2048, 2) == pytest.approx(
        sum(k * e.seconds(calib, g, 2054, 2) for k, _, e in rank.classes if e is not None) - moe(one, 2048), rel=1e-9
    )
    # beyond one node (16 ranks) the rings run at most at one NIC's 50 GB/s per GPU
    wide = PerOpModel(m, g, calib, get_cpu_overhead("none"), 1, expert_parallel=True, dp=16)
    size = 16 * 512 * 7168 * 2
    assert wide.dispatch_s(16 * 512) == pytest.approx(
        max(
            calib.exchange_link(16, "nvswitch").seconds(size),
            calib.exchange_link(16, "nvswitch").latency_s + size * 2 * 15 / 16 / 50e9,
        )
    )


def test_the_exchange_is_fitted_on_measured_all_gather_and_reduce_scatter():
    """The test excerpt's H100 NCCL rows: all_gather + reduce_scatter per (GPUs, buffer); the fit predicts
    sizes it never saw within 15 % in the median (the full tables: reports/latency-validation/aic.md)."""
    d = read_aic("tests/data/aic", "h100_sxm", kinds=("all_reduce",))
    assert d.exchange is not None and set(d.exchange.num_gpus) == {2, 4, 8}
    f = fit_aic(d)
    assert set(f.exchange["nvswitch"]) == {"2", "4", "8"}
    held = validate_aic(d, f)["held_out"]["exchange"]["all"]
    assert 0.85 <= held["median"] <= 1.15 and held["n"] >= 10
    for gpu in ("a100-80gb", "h100-80gb", "b200", "h200"):
        assert shipped_calibration(get_gpu(gpu))[0].exchange_link(8, "nvswitch") is not None


def test_a_data_parallel_replica_is_its_ranks_each_routed_to():
    cfg = _cfg(data_parallel_size=8, enable_expert_parallel=True, max_num_seqs=64)
    reqs = load_trace("traces/chat.jsonl").requests[:200]
    f = simulate_fleet(reqs, [ReplicaGroup("dp", cfg, "paged:16+prefix", 1)], "dp-lb")
    assert len(f.replicas) == 8 and f.summary["finished"] == 200
    assert f.requests.replica.between(0, 7).all() and f.requests.replica.nunique() == 8
    assert ReplicaGroup("dp", cfg, "paged:16", 2).gpus == 16
    with pytest.raises(ConfigError, match="4 data-parallel ranks"):
        _cfg(data_parallel_size=4).pool_plan()


def test_vllm_balancer_weighs_waiting_four_times_running():
    class E:
        def __init__(self, waiting, running):
            self.queue_len, self.outstanding = waiting, waiting + running

    engines = [E(1, 0), E(0, 3), E(0, 5)]  # scores 4, 3, 5
    r = make_router("dp-lb", engines, RouterOptions())
    assert r.pick(None, [0, 1, 2], 0.0) == 1
    assert r.pick(None, [0, 2], 0.0) == 0
    engines[1] = E(0, 4)  # ties go to the lowest index
    assert r.pick(None, [0, 1, 2], 0.0) == 0


def test_fleet_plan_layouts_of_data_parallel_replicas():
    L = layouts_of("h200", 1, 2, ["dp-lb"], dp=8)
    agg = [x for x in L if not x.prefill]
    assert agg[0].gpus == 16 and agg[0].name == "2x h200 dp8"
    assert Layout("h200", 2, 0, 1, "dp-lb", dp=4).gpus == 8
    row = {"mode": "aggregated", "decode": 1, "tp": 1, "gpu": "h200", "router": "dp-lb", "dp": 8}
    assert "--data-parallel-size 8" in vllm_commands(row, "deepseek-v3", {"enable_expert_parallel": True})[1]


def test_what_data_parallel_ranks_refuse(tmp_path, capsys):
    with pytest.raises(ConfigError, match="spread evenly over 24 GPUs"):
        _cfg(data_parallel_size=3, tensor_parallel_size=8, enable_expert_parallel=True)
    with pytest.raises(ConfigError, match="pipeline stages"):
        _cfg(data_parallel_size=2, pipeline_parallel_size=2)
    # `kvsim run` runs the one replica as a cluster (tests/test_bench_load.py); a comparison of allocators is
    # of one engine, and says where a replica of ranks runs
    rc = main(["compare", "--trace", "traces/chat.jsonl", "-dp", "2", "--no-plots", "--out", str(tmp_path / "r")])
    assert rc != 0 and "kvsim cluster --replicas 1 --data-parallel-size 2" in capsys.readouterr().err
    rc = main(
        [
            "cluster",
            "--trace",
            "traces/chat.jsonl",
            "--model",
            "deepseek-v3",
            "--gpu",
            "h200",
            "-dp",
            "8",
            "--replicas",
            "600",
            "--out",
            str(tmp_path / "c"),
        ]
    )
    assert rc == 2 and "4,800 engines" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="roofline"):
        from kvsim.latency import build_latency

        build_latency(_cfg(data_parallel_size=2, latency="roofline"))


def _lockstep_run(lockstep: bool):
    """Two ranks: a (100-token prompt, 3 tokens) reaches rank 0 at 0, b the same at 0.005 to rank 1."""
    from helpers import FixedLatency, req, sched

    from kvsim.allocators import make_allocator
    from kvsim.engine.clock import drive
    from kvsim.engine.engine import Engine
    from kvsim.engine.lockstep import Lockstep
    from kvsim.engine.sequence import Sequence

    touched: list[int] = []
    engines = [
        Engine(
            make_allocator("paged:16", 4096, 4096),
            FixedLatency(0.1, 0.01),
            sched(),
            first_sample_id=2,
            resolution_s=0.0,
        )
        for _ in range(2)
    ]
    if lockstep:
        group = Lockstep(touched)
        for i, e in enumerate(engines):
            group.add(e, i)
    seqs = [Sequence(0, req("a", 0.0, 100, 3)), Sequence(1, req("b", 0.005, 100, 3))]
    drive(engines, [0.0, 0.005], seqs, lambda s, t: s.sid, None, touched=touched)
    return [t for s in seqs for t in (s.first_token_s, s.finish_s)]


def test_data_parallel_ranks_step_in_lockstep():
    """Alone, each rank prefills (0.1 s) then decodes (0.01 s a token). In lockstep, b's rank was idle when b
    arrived inside a's prefill step, so b starts at that step's end (0.1); its prefill then stretches a's
    first decode step to 0.2 (a rank's TPOT includes the other ranks' prefills); from there both decode
    together."""
    alone = _lockstep_run(False)
    assert alone == pytest.approx([0.1, 0.12, 0.105, 0.125])
    together = _lockstep_run(True)
    assert together == pytest.approx([0.1, 0.21, 0.2, 0.22])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_request_finishes_once_on_lockstep_ranks(seed):
    """Random arrivals and lengths on two data-parallel replicas of 4 gpt-oss-20b ranks (sliding-window and
    full layers, MoE), under each router: every request finishes exactly once, on one rank."""
    import random

    from kvsim.trace.request import Request

    rng = random.Random(seed)
    reqs = [Request(str(i), rng.uniform(0, 2), rng.randint(1, 3000), rng.randint(1, 300)) for i in range(120)]
    cfg = config_from_options(
        {
            "model": "gpt-oss-20b",
            "gpu": "h100",
            "data_parallel_size": 4,
            "enable_expert_parallel": True,
            "max_num_batched_tokens": 1024,
        }
    )
    for router in ("dp-lb", "round-robin", "least-kv"):
        f = simulate_fleet(reqs, [ReplicaGroup("dp", cfg, "hybrid+prefix", 2)], router)
        assert f.summary["finished"] == 120 and len(f.replicas) == 8
        assert f.requests.replica.between(0, 7).all()
        assert sum(o.summary["finished"] for o in f.replicas) == 120
