"""Capacity search, plan, sweeps (local and Ray) and reports."""

import base64
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from helpers import FixedLatency, sched
from kvsim.allocators import make_allocator
from kvsim.cli import main
from kvsim.engine.simulator import Simulation
from kvsim.errors import ConfigError
from kvsim.options import config_from_args
from kvsim.metrics import requests_frame, run_summary
from kvsim.planning.capacity import Evaluation, find_capacity
from kvsim.planning.point import is_stable, scale_to_rate, trace_rate
from kvsim.planning.slo import check_slos, parse_slos
from kvsim.trace.request import Request


def test_parse_and_check_slos():
    slos = parse_slos("ttft_p99=2s, tpot_p90=100ms,e2e_p50=1500ms")
    assert [(s.key, s.limit_s) for s in slos] == [("ttft_p99_s", 2.0), ("tpot_p90_s", 0.1), ("e2e_p50_s", 1.5)]
    assert check_slos({"ttft_p99_s": 1.0, "tpot_p90_s": 0.2, "e2e_p50_s": 1.0}, slos) == ["tpot_p90 = 0.2 s > 0.1 s"]
    with pytest.raises(ConfigError):
        parse_slos("ttft_p95=1s")


def test_bisection_on_a_step_function():
    cap = find_capacity(lambda r: Evaluation(r, r <= 7.3, [] if r <= 7.3 else ["too fast"]), 1.0, tol=0.001)
    assert 7.3 * (1 - 0.001) <= cap.max_rate <= 7.3 and cap.tolerance <= 0.001
    assert cap.steps == len(cap.evaluations) and cap.bracket[0] <= 7.3 < cap.bracket[1]
    never = find_capacity(lambda r: Evaluation(r, False, ["ttft_p99 = 9 s > 1 s"]), 1.0)
    assert never.max_rate is None and "ttft_p99 = 9 s" in never.reason


def test_bisection_finds_a_hand_computed_capacity():
    """One sequence at a time (max_num_seqs 1), every iteration 10 ms, 10 output tokens: each request
    occupies the engine for exactly 10 iterations = 0.1 s. With evenly spaced arrivals nobody ever
    waits up to 10 req/s, and above it the queue grows without bound, so with TTFT p99 <= 15 ms the
    capacity is exactly 10 req/s."""
    base = [Request(str(i), i * 1.0, 10, 10) for i in range(200)]
    slos = parse_slos("ttft_p99=15ms")

    def evaluate(rate):
        res = Simulation(
            scale_to_rate(base, rate),
            make_allocator("paged:16", 1600, 4096),
            FixedLatency(0.01, 0.01),
            sched(max_num_seqs=1),
        ).run()
        s = run_summary(res)
        why = check_slos(s, slos) + ([] if is_stable(requests_frame(res)) else ["unstable"])
        return Evaluation(rate, not why, why, s)

    cap = find_capacity(evaluate, start_rate=3.0, tol=0.005)
    assert 10 * (1 - 0.005) <= cap.max_rate <= 10.0 + 1e-9
    assert cap.steps < 20


def test_scale_to_rate():
    reqs = [Request(str(i), 5.0 + 2.0 * i, 1, 1) for i in range(11)]
    assert trace_rate(reqs) == pytest.approx(0.5)
    fast = scale_to_rate(reqs, 2.0)
    assert (
        trace_rate(fast) == pytest.approx(2.0) and fast[0].arrival_s == 5.0 and fast[1].arrival_s == pytest.approx(5.5)
    )


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    p = d / "small.jsonl"
    main(["trace", "generate", "-o", str(p), "-n", "250", "--rate", "5", "--seed", "4"])
    return p


def test_plan_cli_capacity_costs_and_infeasible(small_trace, tmp_path, capsys):
    out = tmp_path / "plan"
    assert (
        main(
            [
                "plan",
                "--trace",
                str(small_trace),
                "--gpus",
                "a100-40gb:2.0",
                "--allocators",
                "max,paged:16",
                "--slo",
                "ttft_p99=2s,tpot_p99=100ms",
                "--target-rate",
                "30",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    cap = pd.read_csv(out / "plan.csv")
    assert list(cap.config) == ["a100-40gb max", "a100-40gb paged:16"]
    assert cap.meets_slo.all() and (cap.search_steps > 2).all() and (cap.tolerance <= 0.02).all()
    paged, mx = cap.iloc[1], cap.iloc[0]
    assert paged.max_rate_req_s > mx.max_rate_req_s
    assert paged.replicas == -(-30 // paged.max_rate_req_s)
    assert paged.cost_per_m_output_tokens == pytest.approx(
        paged.replicas * 2.0 / (30 * paged.mean_output_tokens * 3600) * 1e6
    )
    pts = pd.read_csv(out / "plan_points.csv")
    assert len(pts) == cap.search_steps.sum()
    # an SLO no rate can meet: one request's prefill already takes longer
    assert (
        main(
            ["plan", "--trace", str(small_trace), "--slo", "ttft_p99=5ms", "--out", str(tmp_path / "p2"), "--no-report"]
        )
        == 0
    )
    row = pd.read_csv(tmp_path / "p2" / "plan.csv").iloc[0]
    assert not row.meets_slo and "alone takes" in row.reason and "to prefill" in row.reason
    assert "never" in capsys.readouterr().out


def test_plan_studies(small_trace, tmp_path):
    out = tmp_path / "bs"
    bench = tmp_path / "bench.csv"
    pd.DataFrame([{"block_size": b, "kv_bytes": 100, "time_s": 1e-5 * b} for b in (8, 16, 32, 64, 128)]).to_csv(bench)
    assert (
        main(
            [
                "plan",
                "--trace",
                str(small_trace),
                "--allocators",
                "paged:16",
                "--slo",
                "ttft_p99=2s",
                "--study",
                "block-size",
                "--kernel-bench",
                str(bench),
                "--max-steps",
                "6",
                "--no-report",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    cap = pd.read_csv(out / "plan.csv")
    assert list(cap.block_size) == [8, 16, 32, 64, 128]
    assert list(cap.kernel_us) == pytest.approx([80, 160, 320, 640, 1280])
    assert (cap.table_entries_per_seq.diff().dropna() < 0).all()  # bigger blocks, shorter tables
    assert cap.at_max_mem_internal_frag.iloc[-1] > cap.at_max_mem_internal_frag.iloc[0]  # ... more internal waste
    out2 = tmp_path / "mu"
    assert (
        main(
            [
                "plan",
                "--trace",
                str(small_trace),
                "--slo",
                "ttft_p99=2s",
                "--study",
                "gpu-mem-util",
                "--max-steps",
                "5",
                "--no-report",
                "--out",
                str(out2),
            ]
        )
        == 0
    )
    assert list(pd.read_csv(out2 / "plan.csv").gpu_memory_utilization) == [0.8, 0.85, 0.9, 0.95]


def _grid(tmp_path, trace):
    g = tmp_path / "grid.yaml"
    g.write_text(
        f"base:\n  trace: {trace}\n  model: llama-2-7b\ngrid:\n  allocator: [max, paged:16]\n"
        f"  rate: [3, 9]\npoints:\n  - {{allocator: oracle, rate: 6}}\n"
    )
    return g


def test_sweep_resumes_without_redoing(small_trace, tmp_path, capsys):
    g = _grid(tmp_path, small_trace)
    out = tmp_path / "res.csv"
    assert main(["sweep", str(g), "--out", str(out), "--workers", "2"]) == 0
    assert "5 simulated, 0 reused" in capsys.readouterr().out
    first = pd.read_csv(out)
    assert len(first) == 5 and list(first.cfg_allocator) == ["max", "max", "paged:16", "paged:16", "oracle"]
    parts = sorted((tmp_path / "res.csv.parts").glob("*.json"))
    parts[0].unlink()  # as if the sweep had been interrupted before that point finished
    assert main(["sweep", str(g), "--out", str(out)]) == 0
    assert "1 simulated, 4 reused" in capsys.readouterr().out
    again = pd.read_csv(out)
    pd.testing.assert_frame_equal(first.drop(columns="wall_s"), again.drop(columns="wall_s"))


def test_sweep_resume_recomputes_truncated_parts_and_points_whose_files_changed(small_trace, tmp_path, capsys):
    """A part cut short by a kill is recomputed, not fatal; a point reading a file (here a model config.json)
    whose content changed is recomputed, not reused."""
    import json
    import shutil

    cfg = tmp_path / "model.json"
    shutil.copy("tests/data/llama-3.1-8b-config.json", cfg)
    g = tmp_path / "grid.yaml"
    g.write_text(
        f"base:\n  trace: {small_trace}\n  model: {cfg}\n  kv_pool_gb: 2\ngrid:\n  allocator: [max, paged:16]\n"
    )
    out = tmp_path / "res.csv"
    assert main(["sweep", str(g), "--out", str(out)]) == 0
    assert "2 simulated, 0 reused" in capsys.readouterr().out
    parts = sorted((tmp_path / "res.csv.parts").glob("*.json"))
    parts[0].write_text(parts[0].read_text()[:20])  # truncated
    assert main(["sweep", str(g), "--out", str(out)]) == 0
    assert "1 simulated, 1 reused" in capsys.readouterr().out
    d = json.loads(cfg.read_text())
    d["num_hidden_layers"] = 16  # another model: every point must be simulated again
    cfg.write_text(json.dumps(d))
    assert main(["sweep", str(g), "--out", str(out)]) == 0
    assert "2 simulated, 0 reused" in capsys.readouterr().out


def test_sweep_bad_grid(tmp_path):
    g = tmp_path / "g.yaml"
    g.write_text("base: {trace: nope.jsonl}\ngrid: {allocator: [max]}\n")
    assert main(["sweep", str(g), "--out", str(tmp_path / "o.csv")]) == 2
    g.write_text("grid: {allocator: max}\n")
    assert main(["sweep", str(g), "--out", str(tmp_path / "o.csv")]) == 2


def test_sweep_local_and_ray_give_the_same_table(small_trace, tmp_path):
    pytest.importorskip("ray")
    g = _grid(tmp_path, small_trace)
    assert main(["sweep", str(g), "--out", str(tmp_path / "local.parquet"), "--workers", "2"]) == 0
    assert main(["sweep", str(g), "--out", str(tmp_path / "ray.parquet"), "--backend", "ray", "--workers", "2"]) == 0
    a = pd.read_parquet(tmp_path / "local.parquet").drop(columns="wall_s")
    b = pd.read_parquet(tmp_path / "ray.parquet").drop(columns="wall_s")
    pd.testing.assert_frame_equal(a, b)


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.tables, self.rows, self.h2 = [], 0, 0, []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src", ""))
        self.tables += tag == "table"
        self.rows += tag == "tr"
        self._in_h2 = tag == "h2"

    def handle_data(self, data):
        if self._in_h2:
            self.h2.append(data)
            self._in_h2 = False


def check_report(folder: Path, min_rows: int):
    page = _Page()
    page.feed((folder / "report.html").read_text())
    assert page.tables >= 1 and page.rows >= min_rows + 1
    assert len(page.images) == 3 and any("Capacity" in h for h in page.h2)
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"  # embedded, real PNG data
    md = (folder / "report.md").read_text()
    assert "| configuration |" in md and md.count("![") == 3
    for name in ("throughput_vs_rate.png", "latency_vs_rate.png", "memory_breakdown.png"):
        assert (folder / name).read_bytes()[:4] == b"\x89PNG"


def test_report_from_plan_results(small_trace, tmp_path):
    out = tmp_path / "p"
    assert (
        main(
            [
                "plan",
                "--trace",
                str(small_trace),
                "--allocators",
                "max,paged:16",
                "--slo",
                "ttft_p99=2s",
                "--max-steps",
                "6",
                "--no-report",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rep = tmp_path / "rep"
    assert (
        main(["report", str(out / "plan.csv"), str(out / "plan_points.csv"), "-o", str(rep), "--slo", "ttft_p99=2s"])
        == 0
    )
    check_report(rep, min_rows=2)


def test_committed_example_report_renders():
    folder = Path("reports/capacity-chat")
    check_report(folder, min_rows=4)
    assert (folder / "README.md").exists() and "kvsim plan" in (folder / "README.md").read_text()


def test_plan_on_a_short_trace_reports_only_a_rate_the_server_sustains(tmp_path):
    """150 chat requests once gave millions of req/s (every request arrives at once and the run drains). A
    rate now counts only when completions keep up with arrivals after the warm-up; above the rate where the
    trace is too short to tell, the plan says so. The rate it reports is sustained on the whole trace."""
    from kvsim.planning.point import evaluate

    short = tmp_path / "short.jsonl"
    short.write_text("".join(open("traces/chat.jsonl").readlines()[:150]))
    out = tmp_path / "p"
    assert (
        main(
            [
                "plan",
                "--trace",
                str(short),
                "--gpus",
                "h100-80gb",
                "--allocators",
                "paged:16",
                "--slo",
                "ttft_p99=2s,tpot_p99=100ms",
                "--no-report",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    row = pd.read_csv(out / "plan.csv").iloc[0]
    assert 1 < row.max_rate_req_s < 30
    assert "too short to tell" in row.reason
    s = evaluate(
        {"trace": "traces/chat.jsonl", "gpu": "h100-80gb", "allocator": "paged:16", "rate": float(row.max_rate_req_s)}
    )
    assert s["sustain"] == "ok" and s["stable"]


@settings(max_examples=25, deadline=None)
@given(st.floats(5.0, 200.0), st.integers(40, 400))
def test_an_overloaded_run_never_counts_as_sustained(rate, n):
    """Whatever the trace length, a run offered over three times what the server sustains (`max` on an
    A100-40GB sustains about 1.4 req/s of this trace: README, capacity planning) is 'unsustained' or
    'too-short', never 'ok'."""
    from kvsim.planning.point import scale_to_rate, sustained
    from kvsim.runner import simulate
    from kvsim.trace import load_trace

    reqs = scale_to_rate(load_trace("traces/chat.jsonl").requests[:n], rate)
    out = simulate(reqs, config_from_args(["--gpu", "a100-40gb"]), "max")
    verdict, why = sustained(out.requests)
    assert verdict != "ok", why


def test_a_long_trace_is_planned_on_its_busiest_window_and_checked_whole(small_trace, tmp_path):
    """--plan-requests 100 of the 250-request trace: the window is the 100 consecutive arrivals with the shortest
    span; capacities are found on it and given as the whole trace's mean rate at the same scaling of the gaps
    (the window's rate x whole / window), then each is run on the whole trace."""
    import pandas as pd

    from kvsim.planning.fleet_plan import busiest_window
    from kvsim.planning.plan import window_trace
    from kvsim.planning.point import trace_rate
    from kvsim.trace import load_trace

    reqs = load_trace(str(small_trace)).requests
    path, ratio, note = window_trace(str(small_trace), 100, tmp_path)
    window = load_trace(path).requests
    assert [r.id for r in window] == [r.id for r in busiest_window(reqs, 100)]
    spans = [reqs[i + 99].arrival_s - reqs[i].arrival_s for i in range(len(reqs) - 99)]
    assert window[-1].arrival_s - window[0].arrival_s == min(spans)
    assert ratio == pytest.approx(trace_rate(reqs) / trace_rate(window)) and ratio <= 1
    assert "busiest 100 of the trace's 250" in note
    assert window_trace(str(small_trace), 250, tmp_path) is None and window_trace(str(small_trace), 0, tmp_path) is None

    args = ["plan", "--trace", str(small_trace), "--allocators", "paged:16", "--slo", "ttft_p99=2s", "--no-report"]
    assert main([*args, "--plan-requests", "100", "--out", str(tmp_path / "w")]) == 0
    assert (
        main(
            [
                "plan",
                "--trace",
                path,
                "--allocators",
                "paged:16",
                "--slo",
                "ttft_p99=2s",
                "--no-report",
                "--out",
                str(tmp_path / "direct"),
            ]
        )
        == 0
    )
    w, direct = pd.read_csv(tmp_path / "w" / "plan.csv"), pd.read_csv(tmp_path / "direct" / "plan.csv")
    assert w.max_rate_req_s[0] == pytest.approx(direct.max_rate_req_s[0] * ratio, rel=1e-12)
    assert w.whole_trace[0] == "met"
    assert main([*args, "--plan-requests", "0", "--out", str(tmp_path / "all")]) == 0
    assert "whole_trace" not in pd.read_csv(tmp_path / "all" / "plan.csv")
