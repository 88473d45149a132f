"""`kvsim plan --fleet-max-gpus`: the fleet search simulates layouts (not linear scaling), finds the smallest
fleet meeting the SLOs by doubling then bisection, and writes vLLM command lines for the choice."""

import subprocess
import sys

import pytest

from kvsim.planning.fleet_plan import (
    busiest_window,
    cheapest,
    layouts_of,
    pareto,
    plan_fleet,
    plan_window,
    rescaled,
    vllm_commands,
)
from kvsim.planning.slo import parse_slos
from kvsim.trace.request import Request


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("t") / "chat400.jsonl"
    with open("traces/chat.jsonl") as f, open(path, "w") as g:
        for _ in range(400):
            g.write(f.readline())
    return str(path)


def test_rescaled_trace_arrives_at_the_target_rate():
    reqs = [Request(str(i), 100.0 + 2.0 * i, 10, 5) for i in range(11)]  # 0.5 req/s over 20 s
    out = rescaled(reqs, 5.0)
    assert out[0].arrival_s == 100.0 and out[-1].arrival_s == pytest.approx(102.0)
    assert rescaled(reqs, None) is reqs


def test_layouts_cover_every_split_then_a_spread():
    assert [(L.prefill, L.decode) for L in layouts_of("g", 1, 3, ["rr"])] == [(0, 3), (1, 2), (2, 1)]
    big = layouts_of("g", 2, 16, ["a", "b"])
    assert [(L.prefill, L.decode, L.router) for L in big] == [
        (0, 16, "a"),
        (0, 16, "b"),
        (4, 12, "a"),
        (8, 8, "a"),
        (12, 4, "a"),
    ]
    assert big[0].gpus == 32 and big[2].name == "4P12D g tp2"


def test_the_search_finds_the_smallest_fleet_that_meets_the_slo(small_trace):
    slos = parse_slos("ttft_p99=0.3s,tpot_p99=20ms")
    rows = plan_fleet(small_trace, {"model": "llama-3-8b"}, [("h100-80gb", 3.0)], slos, 16, ["least-requests"], 120.0)
    met = {r["gpus"] for r in rows if r["meets_slo"]}
    sizes = sorted({r["gpus"] for r in rows})
    best = cheapest(rows)[0]
    assert best["gpus"] == min(met)
    assert best["gpus"] - 1 in sizes and best["gpus"] - 1 not in met  # the size below was simulated and failed
    assert len(sizes) <= 2 * 4 + 1  # doubling then bisection: O(log 16) sizes, not 16
    assert best["cost_per_hour"] == pytest.approx(3.0 * best["gpus"])
    # one replica cannot carry 120 req/s, whatever a linear scaling of its capacity would say
    assert not any(r["meets_slo"] for r in rows if r["gpus"] == 1)
    front = pareto(rows)
    assert all(
        not (o["tok_s_per_gpu"] > r["tok_s_per_gpu"] and o["ttft_p99_s"] < r["ttft_p99_s"]) for r in front for o in rows
    )
    # each layout's busiest API server: working, never more than the whole run; a bigger fleet's less
    busy = {r["gpus"]: r["api_server_busy"] for r in rows if r["router"] == "least-requests" and not r["prefill"]}
    assert all(0 < b <= 1 for b in busy.values())
    assert busy[max(busy)] < busy[min(busy)]


def test_layouts_pair_every_tensor_parallel_size_per_pool():
    names = [(L.name, L.gpus) for L in layouts_of("g", [1, 2], 4, ["a"], by_gpus=True)]
    assert names == [
        ("4x g", 4),
        ("2x g tp2", 4),
        ("1P3D g", 4),
        ("2P2D g", 4),
        ("3P1D g", 4),
        ("2P(tp1)1D(tp2) g", 4),
        ("1P(tp2)2D(tp1) g", 4),
        ("1P1D g tp2", 4),
    ]
    # an odd fleet has no tp2 aggregated layout, and mixed pools only where the GPUs add up
    assert {L.name for L in layouts_of("g", [1, 2], 3, ["a"], by_gpus=True)} == {
        "3x g",
        "1P2D g",
        "2P1D g",
        "1P(tp1)1D(tp2) g",
        "1P(tp2)1D(tp1) g",
    }


def test_the_search_tries_tensor_parallel_sizes_per_pool_and_skips_those_that_do_not_fit(small_trace):
    slos = parse_slos("ttft_p99=1s")
    notes = []
    rows = plan_fleet(
        small_trace,
        {"model": "llama-2-70b", "max_num_seqs": 256, "max_num_batched_tokens": 8192},
        [("h100-80gb", None)],
        slos,
        16,
        ["least-requests"],
        40.0,
        tps=[1, 2, 4],
        notes=notes,
    )
    assert notes and "skipped tensor parallel 1" in notes[0]  # 70B of weights do not fit one 80 GB GPU
    assert {r["tp"] for r in rows} == {2, 4} and all(r["gpus"] % 2 == 0 for r in rows)
    mixed = [r for r in rows if r["mode"] == "disaggregated" and r["prefill_tp"] != r["tp"]]
    assert {r["layout"] for r in mixed} >= {"2P(tp2)1D(tp4) h100-80gb", "1P(tp4)2D(tp2) h100-80gb"}
    best = cheapest(rows)[0]
    assert best["gpus"] == min(r["gpus"] for r in rows if r["meets_slo"]) < 16


def test_a_closed_loop_fleet_plan_needs_more_gpus_for_more_clients(small_trace):
    """Clients that send a request as soon as their last one returns (vllm bench serve --max-concurrency N,
    --request-rate inf): the load is fixed, the search sizes the fleet; more clients need at least as many GPUs."""
    slos = parse_slos("ttft_p99=0.5s")
    best = {}
    for clients in (4, 64):
        rows = plan_fleet(
            small_trace,
            {"model": "llama-3-8b", "max_concurrency": clients, "request_rate": "inf"},
            [("h100-80gb", None)],
            slos,
            16,
            ["least-requests"],
            None,
        )
        best[clients] = cheapest(rows)[0]["gpus"]
    assert best[4] == 1 and best[64] > best[4]


def test_vllm_commands_of_a_disaggregated_layout():
    row = {"mode": "disaggregated", "prefill": 2, "decode": 6, "tp": 2, "gpu": "h100-80gb", "router": "prefix"}
    cmds = vllm_commands(row, "llama-3-70b", {"max_num_seqs": 128})
    assert cmds[1].startswith("vllm serve llama-3-70b --tensor-parallel-size 2 --max-num-seqs 128")
    assert all("NixlConnector" in c for c in cmds[1:]) and "2 prefill replicas" in cmds[0]
    assert "--enable-expert-parallel" in vllm_commands(row, "deepseek-v3", {"enable_expert_parallel": True})[1]
    mixed = vllm_commands(dict(row, prefill_tp=4), "llama-3-70b", {})
    assert "--tensor-parallel-size 4" in mixed[1] and "--tensor-parallel-size 2" in mixed[2]
    spec = '{"method": "eagle3", "num_speculative_tokens": 3}'
    assert f"--speculative-config '{spec}'" in vllm_commands(row, "llama-3-70b", {"speculative_config": spec})[2]
    assert "--no-async-scheduling" in vllm_commands(row, "llama-3-70b", {"async_scheduling": False})[1]
    assert "async" not in " ".join(cmds)  # unset: the release's own default, nothing to say


def test_fleet_plan_command(small_trace, tmp_path):
    out = tmp_path / "fp"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "plan",
            "--trace",
            small_trace,
            "--model",
            "llama-3-8b",
            "--gpus",
            "h100-80gb:2.5",
            "--slo",
            "ttft_p99=1s",
            "--fleet-max-gpus",
            "4",
            "--target-rate",
            "5",
            "--fleet-routers",
            "round-robin",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert (
        "cheapest layout meeting the SLOs: 1x h100-80gb" in r.stdout
        and "vllm serve meta-llama/Meta-Llama-3-8B " in r.stdout
    )
    # the printed table always holds the answer, marked
    picked = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("->")]
    assert len(picked) == 1 and "1x h100-80gb" in picked[0]
    # kvsim report on the plan: its layouts (the answer marked), routers, SLOs and plots
    rep = subprocess.run(
        [sys.executable, "-m", "kvsim", "report", str(out), "-o", str(tmp_path / "rep")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "SLOs: ttft_p99<=1s" in md and "| -> 1x h100-80gb | round-robin |" in md and "## Routers" in md
    assert (tmp_path / "rep" / "fleet_layouts.png").stat().st_size > 0 and "fleet_routers.png" in md
    assert (out / "fleet_plan.csv").exists() and "Pareto front" in (out / "summary.md").read_text()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "plan",
            "--trace",
            small_trace,
            "--slo",
            "ttft_p99=1s",
            "--fleet-max-gpus",
            "4",
            "--fleet-routers",
            "nope",
            "--out",
            str(tmp_path / "x"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "--fleet-routers" in bad.stderr and "Traceback" not in bad.stderr
    closed = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "plan",
            "--trace",
            small_trace,
            "--model",
            "llama-3-8b",
            "--gpus",
            "h100-80gb",
            "--slo",
            "ttft_p99=1s",
            "--fleet-max-gpus",
            "2",
            "--max-concurrency",
            "4",
            "--request-rate",
            "inf",
            "--fleet-routers",
            "round-robin",
            "--out",
            str(tmp_path / "closed"),
        ],
        capture_output=True,
        text=True,
    )
    assert closed.returncode == 0, closed.stderr
    assert "4 clients" in (tmp_path / "closed" / "summary.md").read_text()
    both = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "plan",
            "--trace",
            small_trace,
            "--fleet-max-gpus",
            "2",
            "--slo",
            "ttft_p99=1s",
            "--request-rate",
            "5",
            "--target-rate",
            "5",
            "--out",
            str(tmp_path / "y"),
        ],
        capture_output=True,
        text=True,
    )
    assert both.returncode != 0 and "give one" in both.stderr and "Traceback" not in both.stderr


def test_the_search_tries_pipeline_stage_counts_each_on_its_own(small_trace):
    """--fleet-pp 1,2: fleets of one-stage and of two-stage replicas, searched separately; Llama-2-70B's
    weights need two H100s either way (TP2 or two stages)."""
    slos = parse_slos("ttft_p99=2s")
    notes = []
    rows = plan_fleet(
        small_trace,
        {"model": "llama-2-70b"},
        [("h100-80gb", None)],
        slos,
        8,
        ["least-requests"],
        10.0,
        tps=[1, 2],
        notes=notes,
        pps=[1, 2],
    )
    assert {r["pp"] for r in rows} == {1, 2}
    staged = [r for r in rows if r["pp"] == 2]
    assert all(r["layout"].endswith(" pp2") and r["gpus"] % 2 == 0 for r in staged)
    assert {r["tp"] for r in rows if r["pp"] == 1} == {2}  # one GPU cannot hold 70B; two stages of one can
    assert any("skipped tensor parallel 1 with 1 pipeline stages" in n for n in notes)
    assert {r["tp"] for r in staged} == {1, 2}


def test_the_plan_can_share_each_engines_links(small_trace):
    """Three prefill engines feeding one decode engine over a 1 GB/s link: queued on the decode engine's NIC,
    transfers wait for each other, so TTFT grows."""
    from kvsim.planning.fleet_plan import FleetJob, Layout, evaluate

    L = Layout("h100-80gb", 1, 3, 1, "least-requests")
    slos = tuple(parse_slos("ttft_p99=60s"))
    own, shared = (
        evaluate(FleetJob(small_trace, {"model": "llama-3-8b"}, L, 4.0, slos, "1", None, shared_link=s))
        for s in (False, True)
    )
    # (the median: at 4 req/s few transfers overlap, and which requests make the p99 shifts with the waits)
    assert shared["ttft_p50_s"] > own["ttft_p50_s"] and shared["finished"] == own["finished"] == 400


def test_the_search_tries_data_parallel_rank_counts(small_trace):
    """--fleet-dp 1,8 for DeepSeek-V3 on H200s: one GPU cannot hold it (TP1, DP1), eight ranks of one GPU can;
    TP8 replicas are searched too. Layouts say their ranks and count every rank's GPU."""
    slos = parse_slos("ttft_p99=30s")
    notes = []
    rows = plan_fleet(
        small_trace,
        {"model": "deepseek-v3", "enable_expert_parallel": True},
        [("h200", None)],
        slos,
        8,
        ["dp-lb"],
        4.0,
        tps=[1, 8],
        notes=notes,
        dps=[1, 8],
    )
    assert {(r["tp"], r["dp"]) for r in rows} == {(8, 1), (1, 8)}
    assert all(r["gpus"] == 8 for r in rows)
    assert any(r["layout"] == "1x h200 dp8" for r in rows)
    assert any("skipped tensor parallel 1 with 1 data-parallel ranks" in n for n in notes)


def test_the_search_tries_layouts_with_and_without_expert_parallelism(small_trace):
    slos = parse_slos("ttft_p99=30s")
    rows = plan_fleet(
        small_trace,
        {"model": "deepseek-v3"},
        [("h200", None)],
        slos,
        8,
        ["least-requests"],
        4.0,
        tps=[8],
        eps=[False, True],
    )
    assert {r["layout"] for r in rows} == {"1x h200 tp8", "1x h200 tp8 ep"}
    by = {r["ep"]: r for r in rows}
    assert by[True]["tpot_p99_s"] != by[False]["tpot_p99_s"]  # whole experts per GPU, not width slices
    cmds = vllm_commands(by[True], "deepseek-v3", {})
    assert (
        "--enable-expert-parallel" in cmds[1] and "--enable-expert-parallel" not in vllm_commands(by[False], "d", {})[1]
    )


def test_the_busiest_window_is_the_stretch_of_n_arrivals_with_the_shortest_span(tmp_path):
    reqs = [Request(str(i), t, 10, 5) for i, t in enumerate([0.0, 1.0, 2.0, 2.1, 2.2, 5.0, 5.1, 5.2])]
    assert [r.id for r in busiest_window(reqs, 3)] == ["2", "3", "4"]  # 0.2 s; 5.0-5.2 ties later
    assert busiest_window(reqs, 8) is reqs and busiest_window(reqs, 20) is reqs
    from kvsim.trace import load_trace, write_trace

    path = tmp_path / "t.jsonl"
    write_trace(reqs, path)
    assert plan_window(str(path), 2.0, 8, False, tmp_path) == (str(path), 2.0, "")  # short enough: unchanged
    w, rate, note = plan_window(str(path), None, 3, False, tmp_path)
    assert rate is None and "busiest 3" in note and "of the trace's 8 requests" in note
    assert [r.id for r in load_trace(w).requests] == ["2", "3", "4"]
    w, rate, note = plan_window(str(path), 7.0, 3, True, tmp_path)  # clients / --request-rate set the load
    assert rate == 7.0 and "the first 3" in note and [r.id for r in load_trace(w).requests] == ["0", "1", "2"]


def test_a_long_trace_is_searched_on_a_window_and_the_choice_checked_on_the_whole(small_trace, tmp_path):
    """--plan-requests 150 of a 400-request trace: every searched layout ran 150 requests; the cheapest that met
    the SLOs ran all 400 too, and the choice is one that meets them there."""
    import pandas as pd

    out = tmp_path / "fp"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim",
            "plan",
            "--trace",
            small_trace,
            "--model",
            "llama-3-8b",
            "--gpus",
            "h100-80gb",
            "--slo",
            "ttft_p99=1s,tpot_p99=30ms",
            "--fleet-max-gpus",
            "4",
            "--target-rate",
            "20",
            "--fleet-routers",
            "least-requests",
            "--plan-requests",
            "150",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "busiest 150" in r.stderr and "of the trace's 400 requests" in r.stderr
    t = pd.read_csv(out / "fleet_plan.csv")
    searched, whole = t[t.probe != "whole trace"], t[t.probe == "whole trace"]
    assert (searched.requests == 150).all() and len(whole) >= 1 and (whole.requests == 400).all()
    chosen = whole[whole.meets_slo]
    assert len(chosen) == 1 and f"cheapest layout meeting the SLOs: {chosen.layout.iloc[0]}" in r.stdout
    assert "on the whole trace" in (out / "summary.md").read_text() and (out / "plan_window.jsonl").exists()
