"""Disaggregated prefill/decode: a hand-computed request, back-pressure from a full decode pool, the
decode side's prefix cache shortening transfers, and every request accounted for once across both pools
with every byte of KV freed at the end."""

import pytest
from hypothesis import given, settings, strategies as st

from kvsim.errors import ConfigError
from kvsim.fleet.cluster import ReplicaGroup
from kvsim.fleet.disagg import LINKS, KVLink, parse_link, simulate_disagg
from kvsim.fleet.routers import ROUTERS
from kvsim.latency import build_latency
from kvsim.latency.base import StepShape
from kvsim.options import config_from_args
from kvsim.trace.request import Request


def _pools(args=(), p=1, d=1, spec="paged:16", p_args=(), d_args=()):
    return (
        [ReplicaGroup("p", config_from_args([*args, *p_args]), spec, p)],
        [ReplicaGroup("d", config_from_args([*args, *d_args]), spec, d)],
    )


def test_one_request_by_hand():
    """TTFT = the prefill engine's API server's intake (1.5 ms + 1,000 prompt tokens x 2.5 us) + the prefill step
    (1,000 tokens) + the delivery of its response to vLLM's proxy (8 ms) + the decode engine's API server's
    intake of the same request (the proxy sends it there) + the link (999 tokens of llama-2-7b KV (the default
    model), 524,288 bytes each, at 77 % of 50 GB/s after 0.57 ms) + the decode engine's step that computes the last
    prompt token + the delivery of its first token (8 ms). Then four decode steps."""
    pre, dec = _pools()
    cfg = pre[0].cfg
    lat = build_latency(cfg)
    f = simulate_disagg([Request("a", 0.0, 1000, 5)], pre, dec, "round-robin", link=LINKS["rdma"])
    r = f.requests.iloc[0]
    prefill = lat.step_time(StepShape.of([(1000, 0)]))
    link = 0.57e-3 + 999 * 524288 / (0.77 * 50e9)
    first = lat.step_time(StepShape.of([(1, 999)]))
    intake, deliver = 1.5e-3 + 1000 * 2.5e-6, 8e-3
    assert r.kv_transfer_bytes == 999 * 524288
    assert r.handoff_s == pytest.approx(intake + prefill, rel=1e-12)
    assert r.kv_transfer_s == pytest.approx(link, rel=1e-12)
    # the response to the proxy, then the decode side's intake; memory was free
    assert r.decode_wait_s == pytest.approx(deliver + intake, rel=1e-12)
    assert r.frontend_s == pytest.approx(2 * intake + 2 * deliver, rel=1e-12)
    assert r.ttft_s == pytest.approx(2 * intake + prefill + link + first + 2 * deliver, rel=1e-12)
    steps = sum(lat.step_time(StepShape.of([(1, 1000 + k)])) for k in range(4))
    assert r.e2e_s == pytest.approx(2 * intake + prefill + link + first + steps + 2 * deliver, rel=1e-9)
    assert (r.status, r.generated_tokens, r.prefill_replica, r.decode_replica) == ("finished", 5, 0, 1)
    # the decode side's event loop: the request's handler, then its five tokens streamed (6 + 34 us each)
    d = f.replicas[1].summary
    assert d["api_server_busy"] * d["duration_s"] == pytest.approx(1.5e-3 + 5 * 40e-6, rel=1e-9)
    assert f.summary["mode"] == "disaggregated" and f.summary["kv_transfer_gb"] == pytest.approx(999 * 524288 / 1e9)


def test_a_full_decode_pool_pushes_back_on_prefill():
    """A decode pool that holds two requests at a time: handed-off requests wait for decode memory, their KV
    stays parked on the prefill engine, and the prefill engine's own admissions wait behind it. Nothing
    stalls and everything finishes."""
    reqs = [Request(str(i), 0.01 * i, 900, 300) for i in range(40)]
    roomy = simulate_disagg(reqs, *_pools(), "round-robin")
    # prefill pool: 8 requests' prompts; decode pool: 2 requests whole
    tight = simulate_disagg(
        reqs, *_pools(p_args=["--num-blocks", "460"], d_args=["--num-blocks", "160"]), "round-robin"
    )
    for f in (roomy, tight):
        assert f.summary["finished"] == 40
    # at most the step in flight and, with async scheduling (vLLM 0.14+), the one scheduled while it came
    assert roomy.summary["decode_wait_p99_s"] < 0.1
    assert tight.summary["decode_wait_p99_s"] > 1.0
    # the prefill engine ran out of memory for new prompts: its queue grew
    assert tight.summary["queue_p99_s"] > 10 * max(roomy.summary["queue_p99_s"], 0.01)
    assert tight.summary["ttft_p99_s"] > roomy.summary["ttft_p99_s"]


def test_the_decode_side_prefix_cache_shortens_the_transfer():
    """The same 64-token prompt twice (four 16-token blocks), far apart: the second time the decode engine
    holds three of the 63 tokens' blocks (48 tokens) and loads only 15."""
    ids = (1, 2, 3, 4)
    reqs = [Request(str(i), 10.0 * i, 64, 3, hash_ids=ids, hash_block_tokens=16) for i in range(2)]
    f = simulate_disagg(reqs, *_pools(spec="paged:16+prefix"), "prefix")
    assert list(f.requests.kv_transfer_bytes) == [63 * 524288, 15 * 524288]
    assert f.replicas[1].result.extra["kv_load_local_hit_tokens"] == 48
    assert f.summary["prefill_tokens_saved"] == 48  # the prefill engine's own cache, for the repeat


def test_requests_no_decode_replica_can_hold_are_refused_at_the_proxy():
    reqs = [Request("ok", 0.0, 100, 10), Request("long", 0.1, 3000, 10)]
    f = simulate_disagg(reqs, *_pools(d_args=["--num-blocks", "100"]), "round-robin")
    row = f.requests.set_index("id")
    assert row.loc["ok", "status"] == "finished"
    assert row.loc["long", "status"] == "rejected" and "no decode replica" in row.loc["long", "reason"]
    assert row.loc["long", "prefill_replica"] == -1  # never prefilled


def test_pools_must_serve_one_model():
    pre = [ReplicaGroup("p", config_from_args([]), "paged:16", 1)]
    dec = [ReplicaGroup("d", config_from_args(["--model", "mistral-7b"]), "paged:16", 1)]
    with pytest.raises(ConfigError, match="same model"):
        simulate_disagg([Request("a", 0.0, 10, 2)], pre, dec, "round-robin")


def test_link_option():
    assert parse_link("NVLink") == LINKS["nvlink"]
    assert parse_link("nvlink5").bandwidth == 900e9  # NVLink 5: 1.8 TB/s per GPU both ways
    link = parse_link("100:0.05")
    assert (link.bandwidth, link.latency_s) == (100e9, 5e-5)
    assert KVLink(1e9, 1e-3).seconds(0, 1) == 0.0  # nothing to move costs nothing
    assert KVLink(1e9, 1e-3).seconds(2e9, 2) == pytest.approx(1.001)
    for bad in ("fast", "0", "-1:1", "1:inf", "nan"):
        with pytest.raises(ConfigError, match="--kv-link"):
            parse_link(bad)


request = st.tuples(
    st.floats(0, 5), st.integers(1, 300), st.integers(1, 80), st.integers(0, 2), st.sampled_from([1, 1, 1, 2])
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(request, min_size=1, max_size=25),
    st.sampled_from(["paged:16", "paged:8+prefix", "radix:8", "max", "hybrid:8"]),
    st.sampled_from(["recompute", "partial"]),
    st.integers(1, 2),
    st.integers(1, 2),
    st.integers(20, 200),
    st.integers(20, 200),
    st.sampled_from([16, 128, 2048]),
    st.sampled_from([2, 8, 64]),
    st.one_of(st.none(), st.floats(0.5, 6)),
    st.sampled_from(sorted(ROUTERS)),
)
def test_every_request_is_accounted_for_once_and_every_transfer_frees_its_memory(
    items, spec, mode, p, d, p_blocks, d_blocks, budget, seqs, horizon, router
):
    reqs = []
    for i, (t, pr, o, fam, n) in enumerate(items):
        nb = -(-pr // 8)
        ids = tuple([9000 + 100 * fam + j for j in range(nb // 2)] + [10**6 + 100 * i + j for j in range(nb - nb // 2)])
        reqs.append(Request(str(i), t, pr, o, hash_ids=ids, hash_block_tokens=8, n=n))
    args = ["--max-model-len", "512", "--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(max(budget, seqs))]
    if mode == "partial":
        args.append("--partial-preemption")
    if horizon is not None:
        args += ["--horizon-s", str(horizon)]
    pre, dec = _pools(args, p, d, spec, ["--num-blocks", str(p_blocks)], ["--num-blocks", str(d_blocks)])
    f = simulate_disagg(reqs, pre, dec, router, "least-kv")
    req = f.requests
    assert sorted(req.id) == sorted(r.id for r in reqs)
    s = f.summary
    assert s["finished"] + s["rejected"] + s["unfinished"] == len(reqs)
    done = req[req.status == "finished"]
    samples = {r.id: r.n for r in reqs}
    assert (done.generated_tokens == done.output_tokens * done.id.map(samples)).all()
    handed = req[req.decode_replica >= 0]
    assert (handed.prefill_replica >= 0).all() and (handed.decode_replica >= p).all()
    assert (handed.handoff_s >= handed.arrival_s).all()
    loaded = req[req.kv_transfer_s.notna()]
    assert (loaded.kv_transfer_s >= 0).all() and (loaded.decode_wait_s >= 0).all()
    assert (done.ttft_s >= done.handoff_s - done.arrival_s).all()
    if horizon is None:
        assert s["unfinished"] == 0
        for o in f.replicas:
            assert o.summary["finished"] + o.summary["rejected"] == len(o.requests)
            # every sequence's memory (parked, loading, running) was given back
            last = o.result.memory.last
            assert last["free"] + last["external_frag"] == o.result.pool_tokens, (o.summary["allocator"], last)


def test_cluster_command_compares_disaggregated_and_aggregated(tmp_path):
    import subprocess
    import sys

    import pandas as pd

    out = tmp_path / "res"
    cmd = [
        sys.executable,
        "-m",
        "kvsim",
        "cluster",
        "--trace",
        "traces/chat.jsonl",
        "--prefill",
        "a100-80gb:1",
        "--decode",
        "a100-80gb:2",
        "--also-aggregated",
        "--routers",
        "round-robin",
        "--slo",
        "ttft_p99=2s",
        "--out",
        str(out),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    fleet = pd.read_csv(out / "fleet.csv")
    assert list(fleet.layout) == ["1P2D a100-80gb", "3x a100-80gb"]
    assert list(fleet.gpus) == [3, 3] and (fleet.finished == 3000).all()
    assert fleet["mode"].iloc[0] == "disaggregated" and fleet.kv_transfer_gb.iloc[0] > 0
    reps = pd.read_csv(out / "replicas.csv")
    assert list(reps[reps.layout == "1P2D a100-80gb"].pool) == ["prefill", "decode", "decode"]
    for bad, msg in (
        (["--prefill", "a100-80gb:1"], "both --prefill and --decode"),
        (["--prefill", "a100-80gb:1", "--decode", "a100-80gb:x"], "--decode"),
        (["--prefill", "a100-80gb:1", "--decode", "a100-80gb:1", "--kv-link", "warp"], "--kv-link"),
    ):
        r = subprocess.run(cmd[:6] + bad + ["--out", str(tmp_path / "x")], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_shared_link_carries_one_transfer_at_a_time():
    """Two 1,000-token prompts prefilled together on one engine (one iteration) go to one decode engine over
    a slow link (1 GB/s, 1 ms): with lanes of their own both transfers take 1 ms + 999 x 524,288 B / 1 GB/s;
    sharing the engines' NICs, the second waits for the first, so it ends one transfer later. (No API
    server: one would hand the engine the second prompt after the first.)"""
    reqs = [Request("a", 0.0, 1000, 4), Request("b", 0.0, 1000, 4)]
    slow = KVLink(1e9, 1e-3, "slow")
    one = 1e-3 + 999 * 524288 / 1e9
    pools = _pools(["--frontend", "none"])
    alone = simulate_disagg(reqs, *pools, "round-robin", link=slow).requests
    shared = simulate_disagg(reqs, *pools, "round-robin", link=slow, shared_link=True).requests
    assert alone.kv_transfer_s.tolist() == pytest.approx([one, one], rel=1e-9)
    ends = sorted((shared.handoff_s + shared.decode_wait_s + shared.kv_transfer_s).tolist())
    assert ends[1] - ends[0] == pytest.approx(one, rel=1e-9)
    assert sorted(shared.kv_transfer_s.tolist()) == pytest.approx([one, 2 * one], rel=1e-9)


def test_the_decode_side_api_server_streams_every_token():
    """vLLM's proxy sends each request to the decode engine's own API server, which streams its output: 400
    requests of Qwen3-0.6B (300 tokens out each) keep that server's event loop almost always busy, and the first
    tokens of later requests wait behind it; one chunk every ten tokens frees it. (Sent 3 ms apart: a request a
    millisecond would keep the prefill side's event loop behind on handlers, and its responses to the proxy.)"""
    reqs = [Request(str(i), 0.003 * i, 200, 300) for i in range(400)]
    args = ["--model", "qwen3-0.6b", "--gpu", "h100-80gb", "--vllm-version", "0.12"]
    every = simulate_disagg(reqs, *_pools(args), "round-robin")
    tenth = simulate_disagg(reqs, *_pools(args, d_args=["--stream-interval", "10"]), "round-robin")
    assert every.replicas[1].summary["api_server_busy"] > 0.9
    assert tenth.replicas[1].summary["api_server_busy"] < 0.5
    assert tenth.summary["ttft_p50_s"] < 0.9 * every.summary["ttft_p50_s"]
    assert every.summary["finished"] == tenth.summary["finished"] == 400


def test_the_rdma_preset_is_the_fit_of_measured_transfers():
    """LINKS["rdma"] is what benchmarks/fit_kv_link.py fits on the Mooncake team's measured vLLM transfers (a 400
    Gb/s NIC at 77 % of line rate, 0.57 ms a transfer), and its held-out rows from 150 MB are within 6 %."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fit_kv_link.py"
    spec = importlib.util.spec_from_file_location("fit_kv_link", path)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    lat, bw = fit.fit(fit.MOONCAKE)
    rdma = LINKS["rdma"]
    assert rdma.latency_s == pytest.approx(lat, abs=0.005e-3)
    assert rdma.bandwidth / 50e9 == pytest.approx(bw / fit.LINE_RATE, abs=0.005)
    for fitting, held in ((fit.MOONCAKE[0::2], fit.MOONCAKE[1::2]), (fit.MOONCAKE[1::2], fit.MOONCAKE[0::2])):
        pred = fit.predict(held, *fit.fit(fitting))
        for row, p in zip(held, pred):
            if row[1] >= 146:  # MiB
                assert p / row[2] == pytest.approx(1.0, abs=0.06)
