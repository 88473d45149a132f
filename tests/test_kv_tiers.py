"""Lower tiers of the prefix cache: a hand-computed CPU-tier hit, no block in GPU memory and a private tier
at once, a tier that holds nothing changes nothing, and a store shared by a fleet's replicas."""

import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from helpers import FixedLatency, sched
from kvsim.allocators import make_allocator
from kvsim.allocators.kv_tier import KVTier, TierSpec
from kvsim.engine.simulator import Simulation
from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
from kvsim.options import config_from_args
from kvsim.trace import load_trace
from kvsim.trace.request import Request

BLOCK_BYTES = 1000


def _alloc(spec="paged:16+prefix", blocks=6, cpu_blocks=100, latency_s=0.001):
    a = make_allocator(spec, blocks * 16, 4096)
    a.attach_tier(KVTier(TierSpec("cpu", cpu_blocks * BLOCK_BYTES, 1e9, latency_s), BLOCK_BYTES))
    return a


def _abc():
    """A, then B (other content) which evicts most of A's cached blocks from a 6-block pool, then A again."""
    a, b = (1, 2, 3, 4), (5, 6, 7, 8)
    return [
        Request(n, t, 64, 2, hash_ids=ids, hash_block_tokens=16)
        for n, t, ids in (("A", 0, a), ("B", 10, b), ("C", 20, a))
    ]


@pytest.mark.parametrize("spec", ["paged:16+prefix", "radix:16"])
def test_a_cpu_tier_hit_by_hand(spec):
    """A holds 5 blocks (66 tokens). B needs 5 of the 6: one never used, then A's tail (no content) and three
    of A's cached blocks, which spill to the CPU tier; A's first block stays cached in GPU memory. C = A's
    prompt finds 1 block in GPU memory and the next 2 in the CPU tier (the 4th is never claimed: the last
    prompt token is always computed): it loads 2 blocks (1 ms + 2,000 bytes at 1 GB/s), then one prefill
    step (0.1 s) computes tokens 48-63 and emits."""
    alloc = _alloc(spec)
    sim = Simulation(
        _abc(),
        alloc,
        FixedLatency(prefill_s=0.1, decode_s=0.01),
        sched(),
        observer=lambda *args: args[-1].check_invariants(),
    )
    res = sim.run()
    c = res.sequences[2]
    assert c.last_cached_tokens == 48
    assert c.first_token_s - 20 == pytest.approx(0.001 + 2 * BLOCK_BYTES / 1e9 + 0.1, abs=1e-12)
    counters = alloc.counters()
    assert counters["tier_cpu_hit_blocks"] == 2
    assert counters["tier_cpu_loaded_gb"] == pytest.approx(2 * BLOCK_BYTES / 1e9)
    # without the tier, C finds only the block left in GPU memory
    plain = Simulation(_abc(), make_allocator(spec, 96, 4096), FixedLatency(0.1, 0.01), sched()).run()
    assert plain.sequences[2].last_cached_tokens == 16 and plain.sequences[2].first_token_s - 20 == pytest.approx(0.1)


@pytest.mark.parametrize("layers, load_s", [(4, 0.05), (32, 0.5)])
def test_a_layer_by_layer_load_overlaps_the_prefill(layers, load_s):
    """C's two CPU-tier blocks again, loaded layer by layer over ``layers`` layers: C starts its prefill once
    the first layer is in (load / layers) and that iteration (0.1 s) ends no earlier than the last layer. A
    fast load hides behind the prefill (TTFT 0.1 s + load / layers); a slow one holds it back to the load's
    end (TTFT = the load)."""
    bw = 2 * BLOCK_BYTES / (load_s - 0.001)  # 1 ms + 2 blocks at this bandwidth = load_s
    times = {}
    for n in (0, layers):
        alloc = make_allocator("paged:16+prefix", 96, 4096)
        alloc.attach_tier(KVTier(TierSpec("cpu", 100 * BLOCK_BYTES, bw, 0.001), BLOCK_BYTES))
        res = Simulation(_abc(), alloc, FixedLatency(prefill_s=0.1, decode_s=0.01), sched(kv_load_layers=n)).run()
        times[n] = res.sequences[2].first_token_s - 20
    assert times[0] == pytest.approx(load_s + 0.1, rel=1e-9)
    assert times[layers] == pytest.approx(max(load_s / layers + 0.1, load_s), rel=1e-9)


request = st.tuples(st.floats(0, 4), st.integers(1, 200), st.integers(1, 40), st.integers(0, 3))


def _requests(items):
    out = []
    for i, (t, p, o, fam) in enumerate(items):
        nb = -(-p // 8)
        ids = tuple([7000 + 100 * fam + j for j in range(nb * 2 // 3)] + [10**6 + 100 * i + j for j in range(nb)])
        out.append(Request(str(i), t, p, o, hash_ids=ids[:nb], hash_block_tokens=8))
    return out


def _fingerprint(res):
    return [
        (s.status, s.generated, s.preemptions, s.cached_tokens, s.admitted_s, s.first_token_s, s.finish_s)
        for s in res.sequences
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(request, min_size=1, max_size=25),
    st.sampled_from(["paged:8+prefix", "radix:8"]),
    st.integers(30, 120),
    st.integers(0, 30),
    st.sampled_from([16, 64, 4096]),
    st.booleans(),
    st.sampled_from([None, 0, 10, 200]),
)
def test_no_block_in_two_tiers_and_every_request_accounted(items, spec, blocks, cpu_blocks, budget, partial, store):
    reqs = _requests(items)
    cfg = sched(max_model_len=512, max_num_batched_tokens=max(budget, 8), max_num_seqs=8, partial_preemption=partial)
    alloc = make_allocator(spec, blocks * 8, 512)
    if store is not None:  # attached first: private tiers still come first in lookups
        alloc.attach_tier(KVTier(TierSpec("store", store * BLOCK_BYTES, 1e8, 1e-3, shared=True), BLOCK_BYTES))
    alloc.attach_tier(KVTier(TierSpec("cpu", cpu_blocks * BLOCK_BYTES, 1e9, 1e-4), BLOCK_BYTES))
    assert [t.name for t in alloc.tiers] == ["cpu"] + (["store"] if store is not None else [])
    res = Simulation(
        reqs, alloc, FixedLatency(0.05, 0.01), cfg, observer=lambda *args: args[-1].check_invariants()
    ).run()  # exclusivity after every step
    alloc.check_invariants()
    assert all(s.status.value in ("finished", "rejected") for s in res.sequences)
    assert alloc.used_slots == 0
    assert len(alloc.tiers[0]) <= alloc.tiers[0].capacity
    if cpu_blocks == 0 and not store:  # a tier that holds nothing changes nothing
        plain = Simulation(reqs, make_allocator(spec, blocks * 8, 512), FixedLatency(0.05, 0.01), cfg).run()
        assert _fingerprint(res) == _fingerprint(plain)


def test_a_store_shared_by_the_fleet_serves_what_other_replicas_computed():
    """Round-robin over 4 small replicas: a prefix evicted on one replica is found in the shared store by
    the others, so the hit rate rises; the store is inclusive (loads leave it in place)."""
    reqs = load_trace("traces/mooncake_excerpt.jsonl").requests
    cfg = config_from_args(["--model", "llama-3-8b", "--gpu", "h100-80gb", "--kv-pool-gb", "4"])
    groups = [ReplicaGroup("h100", cfg, "paged:16+prefix", 4)]
    plain = simulate_fleet(reqs, groups, "round-robin")
    shared = simulate_fleet(
        reqs, groups, "round-robin", store=TierSpec("store", 256 * (1 << 30), 10e9, 1e-3, shared=True)
    )
    s = shared.summary
    assert s["prefix_hit_rate_tokens"] > plain.summary["prefix_hit_rate_tokens"] + 0.2
    assert s["tier_store_loaded_blocks"] > 0
    assert s["tier_store_used_blocks"] == s["tier_store_stored_blocks"]  # nothing evicted, nothing removed
    per_replica = sum(o.result.extra.get("tier_store_hit_blocks", 0) for o in shared.replicas)
    assert per_replica == s["tier_store_loaded_blocks"]


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--allocator", "paged:16", "--kv-offloading-size", "4"], "needs a paged prefix cache"),
        (["--shared-kv-store", "0"], "--shared-kv-store"),
        (["--shared-kv-store", "10:fast"], "--shared-kv-store"),
        (["--kv-offloading-size", "-1"], "--kv-offloading-size"),
    ],
)
def test_tier_options_fail_cleanly(args, msg, tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "cluster",
            "--trace",
            "traces/chat.jsonl",
            "--replicas",
            "1",
            "--routers",
            "round-robin",
            "--out",
            str(tmp_path),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_layerwise_loads_without_a_lower_tier_are_said_to_change_nothing(tmp_path, capsys):
    from kvsim.cli import main

    assert (
        main(["run", "--trace", "traces/chat.jsonl", "--kv-load-layerwise", "--no-plots", "--out", str(tmp_path / "r")])
        == 0
    )
    assert "--kv-load-layerwise changes nothing" in capsys.readouterr().err
    assert (
        main(
            [
                "run",
                "--trace",
                "traces/chat.jsonl",
                "--kv-load-layerwise",
                "--kv-offloading-size",
                "1",
                "--allocator",
                "paged+prefix",
                "--no-plots",
                "--out",
                str(tmp_path / "s"),
            ]
        )
        == 0
    )
    assert "changes nothing" not in capsys.readouterr().err
