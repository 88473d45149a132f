"""Fleets: replicas behind routers on one clock.

One replica is the single-engine run bit for bit; a decode run cut when an arrival reaches its engine
(what a fleet does) equals one planned knowing the arrival; every request is accounted for exactly once
across the fleet; routers never pick a replica that could never hold the request; cache-aware routers
keep prefixes together (hand-computed)."""

import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from helpers import assert_same_run, sched
from kvsim.allocators import make_allocator
from kvsim.engine.clock import drive
from kvsim.engine.preemption import get_victim_policy
from kvsim.engine.simulator import Simulation
from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
from kvsim.fleet.routers import ROUTERS, RouterOptions
from kvsim.latency.roofline import RooflineModel
from kvsim.hardware import get_gpu, get_model
from kvsim.options import config_from_args
from kvsim.runner import simulate
from kvsim.trace import load_trace
from kvsim.trace.request import Request

CHAT = load_trace("traces/chat.jsonl").requests


def _frames_equal(a, b):
    assert_same_run(a, b)
    assert a.timeline.equals(b.timeline)


@pytest.mark.parametrize(
    "args,alloc",
    [
        ([], "paged:16"),
        (["--kv-pool-gb", "2"], "paged:16+prefix"),
        (["--preemption-mode", "swap", "--swap-space", "4", "--kv-pool-gb", "3"], "paged:16"),
        (
            ["--model", "gemma-2-9b", "--gpu", "h100-80gb", "--kv-pool-gb", "3", "--horizon-s", "300"],
            "hybrid:16+prefix",
        ),
    ],
)
def test_one_replica_is_the_single_engine_run_bit_for_bit(args, alloc):
    cfg = config_from_args(args)
    reqs = CHAT[:800]
    single = simulate(reqs, cfg, alloc)
    for router in ("round-robin", "prefix+load"):
        fleet = simulate_fleet(reqs, [ReplicaGroup("g", cfg, alloc, 1)], router)
        _frames_equal(single, fleet.replicas[0])
        assert fleet.summary["finished"] == single.summary["finished"]


request = st.tuples(
    st.floats(0, 5), st.integers(1, 300), st.integers(1, 120), st.integers(0, 2), st.sampled_from([1, 1, 1, 2])
)
setup = st.fixed_dictionaries(
    {
        "spec": st.sampled_from(["paged:16", "paged:8+prefix", "radix:8", "max", "oracle", "hybrid:8+prefix"]),
        "mode": st.sampled_from(["recompute", "swap", "partial"]),
        "budget": st.sampled_from([32, 128, 4096]),
        "max_seqs": st.sampled_from([2, 8, 64]),
        "pool": st.integers(300, 3000),
        "horizon": st.one_of(st.none(), st.floats(0.5, 8)),
    }
)


def _requests(items):
    out = []
    for i, (t, p, o, f, n) in enumerate(items):
        nb = -(-p // 8)
        ids = tuple([9000 + 100 * f + j for j in range(nb // 2)] + [10**6 + 100 * i + j for j in range(nb - nb // 2)])
        out.append(Request(str(i), t, p, o, hash_ids=ids, hash_block_tokens=8, n=n))
    return out


def _engine_run(reqs, s, hints):
    cfg = sched(
        max_model_len=512,
        max_num_seqs=s["max_seqs"],
        max_num_batched_tokens=max(s["budget"], s["max_seqs"]),
        horizon_s=s["horizon"],
        preemption_mode="swap" if s["mode"] == "swap" else "recompute",
        partial_preemption=s["mode"] == "partial",
    )
    alloc = make_allocator(s["spec"], s["pool"], 512, 320 if s["mode"] == "swap" else 0)
    sim = Simulation(
        reqs, alloc, RooflineModel(get_model("llama-2-7b"), get_gpu("a100-40gb")), cfg, get_victim_policy("lifo")
    )
    eng = sim.engine
    arrived = drive([eng], sim.trace.times, sim.seqs, lambda seq, t: 0, eng.horizon, hints=hints)
    eng.close()
    return (
        [
            (x.status, x.generated, x.preemptions, x.cached_tokens, x.admitted_s, x.first_token_s, x.finish_s)
            for x in sim.seqs
        ],
        eng.steps,
        eng.memory.time_weighted_fractions(),
        arrived,
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(request, min_size=1, max_size=25), setup)
def test_a_decode_run_cut_at_arrival_equals_one_planned_knowing_it(items, s):
    """Fleets cut decode runs when a request reaches the engine; a single engine plans with the next arrival
    known. Both must give the same iterations, times and memory, to the bit."""
    reqs = _requests(items)
    assert _engine_run(reqs, s, True) == _engine_run(reqs, s, False)


@settings(max_examples=40, deadline=None)
@given(st.lists(request, min_size=1, max_size=30), setup, st.integers(1, 4), st.sampled_from(sorted(ROUTERS)))
def test_every_request_is_accounted_for_once_across_the_fleet(items, s, replicas, router):
    reqs = _requests(items)
    args = [
        "--max-model-len",
        "512",
        "--max-num-seqs",
        str(s["max_seqs"]),
        "--num-blocks",
        str(s["pool"] // 16),
        "--max-num-batched-tokens",
        str(max(s["budget"], s["max_seqs"])),
    ]
    if s["horizon"] is not None:
        args += ["--horizon-s", str(s["horizon"])]
    cfg = config_from_args(args)
    f = simulate_fleet(reqs, [ReplicaGroup("g", cfg, s["spec"], replicas)], router)
    req = f.requests
    assert sorted(req.id) == sorted(r.id for r in reqs)
    assert set(req.status) <= {"finished", "rejected", "unfinished"}
    assert f.summary["finished"] + f.summary["rejected"] + f.summary["unfinished"] == len(reqs)
    routed = req[req.replica >= 0]
    assert sum(len(o.requests) for o in f.replicas) == len(routed)  # each arrival on exactly one replica
    for i, o in enumerate(f.replicas):
        assert sorted(o.requests.id) == sorted(routed[routed.replica == i].id)
        o.result  # noqa: B018
    assert (req[req.replica < 0].status == "unfinished").all()  # never arrived: unfinished, not lost
    if s["horizon"] is None:
        assert f.summary["unfinished"] == 0


def test_routers_never_pick_a_replica_that_could_never_hold_the_request():
    """Two groups: small replicas whose pool cannot hold a 3,000-token request, large ones that can. Every
    router sends the long requests to the large group, so none is rejected."""
    small = config_from_args(["--num-blocks", "100"])  # 1,600 token slots
    large = config_from_args(["--num-blocks", "2000"])
    reqs = [Request(str(i), 0.5 * i, 2900 if i % 3 == 0 else 200, 100) for i in range(60)]
    for router in ROUTERS:
        f = simulate_fleet(
            reqs, [ReplicaGroup("small", small, "paged:16", 3), ReplicaGroup("large", large, "paged:16", 2)], router
        )
        assert f.summary["rejected"] == 0, router
        long_ids = {r.id for r in reqs if r.prompt_tokens > 1000}
        placed = f.requests.set_index("id").replica
        assert all(placed[i] >= 3 for i in long_ids), router
        assert f.summary["finished"] == len(reqs)


def _prefix_requests():
    """A, A, B, B: 64-token prompts of four 16-token blocks, far apart in time (each ends before the next)."""
    a, b = (1, 2, 3, 4), (5, 6, 7, 8)
    return [Request(str(i), 10.0 * i, 64, 2, hash_ids=ids, hash_block_tokens=16) for i, ids in enumerate((a, a, b, b))]


@pytest.mark.parametrize(
    "router,hits,placement",
    [
        # each replica sees A once and B once: nothing is ever reused
        ("round-robin", 0, [0, 1, 0, 1]),
        # the repeat goes where its prefix is cached; a new prefix goes to the least loaded, lowest index
        ("prefix", 2 * 48, [0, 0, 0, 0]),
        ("prefix-approx", 2 * 48, [0, 0, 0, 0]),
        ("prefix+load", 2 * 48, [0, 0, 0, 0]),
    ],
)
def test_cache_aware_routers_keep_a_prefix_on_one_replica(router, hits, placement):
    """Hand-computed: a repeat of a 64-token prompt hits 3 blocks (48 tokens; the last token is always
    computed, so the fourth block is not claimed). Hit tokens over looked-up prompt tokens (4 x 64)."""
    cfg = config_from_args([])
    f = simulate_fleet(_prefix_requests(), [ReplicaGroup("g", cfg, "paged:16+prefix", 2)], router)
    assert list(f.requests.replica) == placement
    assert f.summary["prefill_tokens_saved"] == hits
    assert f.summary["prefix_hit_rate_tokens"] == pytest.approx(hits / 256)


def test_session_router_is_sticky_and_the_approximate_index_forgets():
    cfg = config_from_args([])
    # overlapping requests: the first turn of each session goes to a different (least loaded) replica
    reqs = [Request(str(i), 0.001 * i, 100, 200, session=f"s{i % 3}") for i in range(12)]
    f = simulate_fleet(reqs, [ReplicaGroup("g", cfg, "paged:16", 4)], "session")
    homes = f.requests.assign(session=[r.session for r in reqs]).groupby("session").replica.nunique()
    assert (homes == 1).all() and f.requests.replica.nunique() == 3
    # prefix-approx remembers where it sent a prefix for --router-ttl seconds, then forgets it
    from types import SimpleNamespace

    from kvsim.fleet.routers import ApproxPrefix

    idle = [SimpleNamespace(outstanding=0), SimpleNamespace(outstanding=0)]
    rt = ApproxPrefix(idle, RouterOptions(approx_ttl_s=5.0))
    a = _prefix_requests()[0]
    rt.routed(a, 1, 0.0)
    assert rt.pick(a, [0, 1], 4.0) == 1  # remembered: where the prefix went
    assert rt.pick(a, [0, 1], 5.5) == 0  # forgotten: a tie on load goes to the lowest index
    assert not rt._seen[1] and not rt._expiry


def test_random_router_is_seeded():
    cfg = config_from_args([])
    runs = [
        simulate_fleet(CHAT[:300], [ReplicaGroup("g", cfg, "paged:16", 3)], "random", RouterOptions(seed=s))
        for s in (7, 7, 8)
    ]
    assert list(runs[0].requests.replica) == list(runs[1].requests.replica)
    assert list(runs[0].requests.replica) != list(runs[2].requests.replica)


def test_least_requests_balances_better_than_round_robin_under_skew():
    """Alternating long and short requests: round-robin gives every long one to the same replica."""
    cfg = config_from_args([])
    reqs = [Request(str(i), 0.2 * i, 1500 if i % 2 == 0 else 50, 400 if i % 2 == 0 else 10) for i in range(200)]
    rr = simulate_fleet(reqs, [ReplicaGroup("g", cfg, "paged:16", 2)], "round-robin")
    lr = simulate_fleet(reqs, [ReplicaGroup("g", cfg, "paged:16", 2)], "least-requests")
    assert rr.summary["imbalance_prompt_tokens"] > 1.8
    assert lr.summary["imbalance_prompt_tokens"] < rr.summary["imbalance_prompt_tokens"]


def test_prefix_and_load_beats_cache_blind_and_prefix_only_routing_on_hot_prefixes():
    """Many 6k-token prefixes, one of them in 40% of the requests (the rest Zipf 1.1), 4 replicas near capacity
    (benchmarks/fleet_skew.py at a small scale): round-robin loses the tail's hits, prefix-only routing piles the
    hot prefix onto one replica, prefix+load spills it to short queues; its TTFT p99 is the lowest."""
    import numpy as np

    rng = np.random.default_rng(0)
    n, families = 1200, 200
    times = np.cumsum(rng.exponential(1 / 50.0, n))
    tail = 1.0 / np.arange(1, families) ** 1.1
    fam = rng.choice(families, size=n, p=np.concatenate(([0.4], tail / tail.sum() * 0.6)))
    reqs = [
        Request(
            str(i),
            float(times[i]),
            12 * 512 + 256,
            128,
            hash_ids=tuple(int(fam[i]) * 1000 + j for j in range(12)) + (10**9 + i,),
            hash_block_tokens=512,
        )
        for i in range(n)
    ]
    cfg = config_from_args(["--model", "llama-3-8b", "--gpu", "h100-80gb"])
    p99 = {
        r: simulate_fleet(reqs, [ReplicaGroup("g", cfg, "paged:16+prefix", 4)], r).summary["ttft_p99_s"]
        for r in ("round-robin", "least-requests", "prefix", "prefix+load")
    }
    # (0.58 of the next best in step with the GPU, 0.80 with async scheduling, whose faster steps help prefix-only
    # routing's hot replica most)
    assert p99["prefix+load"] < 0.85 * min(p99["round-robin"], p99["least-requests"], p99["prefix"]), p99


def test_cluster_command(tmp_path):
    out = tmp_path / "c"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "cluster",
            "--trace",
            "traces/mooncake_excerpt.jsonl",
            "--model",
            "qwen2.5-7b",
            "--gpu",
            "h100-80gb",
            "--max-model-len",
            "32768",
            "--replicas",
            "3",
            "--routers",
            "round-robin,prefix",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "round-robin" in r.stdout and "prefix" in r.stdout
    for name in ("fleet.csv", "replicas.csv", "requests.csv", "summary.md"):
        assert (out / name).exists()
    import pandas as pd

    fleet = pd.read_csv(out / "fleet.csv").set_index("router")
    assert fleet.loc["prefix", "prefix_hit_rate_tokens"] > fleet.loc["round-robin", "prefix_hit_rate_tokens"]
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "cluster",
            "--trace",
            "traces/chat.jsonl",
            "--routers",
            "nearest",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "unknown router 'nearest'" in bad.stderr and "Traceback" not in bad.stderr


def test_cluster_groups_of_other_gpus_and_tensor_parallel_sizes(tmp_path):
    out = tmp_path / "h"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "cluster",
            "--trace",
            "traces/chat.jsonl",
            "--model",
            "llama-2-13b",
            "--groups",
            "h100-80gb:2,a100-40gb:1:tp2",
            "--routers",
            "least-requests",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    import pandas as pd

    reps = pd.read_csv(out / "replicas.csv")
    assert list(reps.group) == ["h100-80gb", "h100-80gb", "a100-40gbx2"]
    assert reps.routed.sum() == 3000 and (reps.routed > 0).all()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "cluster",
            "--trace",
            "traces/chat.jsonl",
            "--groups",
            "h100-80gb:2:ep2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "optionally with :tpN, :ppN and :dpN" in bad.stderr
