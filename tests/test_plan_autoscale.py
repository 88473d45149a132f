"""`kvsim plan --autoscaler`: one replica's capacity per configuration, then the whole trace autoscaled from it
against the fixed fleet of its peak."""

from pathlib import Path

import pandas as pd
import pytest

from helpers import chat_head
from kvsim.cli import main
from kvsim.commands.plan_autoscale import with_rate

ROOT = Path(__file__).resolve().parents[1]


def test_the_planners_rate_is_filled_in_only_when_left_out():
    assert with_rate("sla", 7.5) == "sla:rate=7.5"
    assert with_rate("sla:headroom=0.7", 7.5) == "sla:rate=7.5,headroom=0.7"
    assert with_rate("sla:rate=3,headroom=0.7", 7.5) == "sla:rate=3,headroom=0.7"
    assert with_rate("threshold:target=4", 7.5) == "threshold:target=4"


def test_plan_with_an_autoscaler_runs_the_whole_trace_per_configuration(tmp_path, capsys):
    trace = chat_head(tmp_path, 1200)
    out = tmp_path / "o"
    argv = ["plan", "--trace", str(trace), "--gpus", "a100-40gb:2,h100-80gb:4.5", "--slo", "ttft_p99=2s"]
    argv += ["--autoscaler", "sla:headroom=0.7", "--plan-requests", "400", "--startup-fixed-s", "20"]
    assert main(argv + ["--no-report", "--out", str(out)]) == 0
    plan = pd.read_csv(out / "plan.csv")
    table = pd.read_csv(out / "autoscale.csv")
    assert (out / "replicas_over_time.png").stat().st_size > 0
    assert "whole_trace" not in plan.columns  # the autoscaled runs are the whole-trace check
    assert list(table.fleet.str.split().str[0]) == ["autoscaled", "fixed"] * 2
    for gpu, rows in table.groupby("gpu", sort=False):
        auto, fixed = rows.iloc[0], rows.iloc[1]
        rate = plan.set_index("gpu").loc[gpu, "max_rate_req_s"]
        assert auto.replica_rate_req_s == pytest.approx(rate)
        assert auto.autoscaler == f"sla:rate={rate:.6g},headroom=0.7"
        assert fixed.fleet == f"fixed {auto.peak_replicas}x"
        price = 2.0 if gpu == "a100-40gb" else 4.5
        assert auto.cost == pytest.approx(auto.gpu_hours * price)
        assert auto.finished + auto.unfinished <= 1200 and fixed.finished == 1200
    timeline = pd.read_csv(out / "autoscale_timeline.csv")
    assert set(timeline["run"]) == {f"{g} paged:16+prefix: {k}" for g, k in zip(table.gpu, table.fleet)}
    assert "GPU-hours autoscaled" in capsys.readouterr().err


def test_plan_autoscaler_refuses_what_it_cannot_do(capsys):
    base = ["plan", "--trace", str(ROOT / "traces/chat.jsonl"), "--slo", "ttft_p99=2s"]
    assert main([*base, "--autoscaler", "sla", "--fleet-max-gpus", "2"]) == 2
    assert "give one" in capsys.readouterr().err
    assert main([*base, "--fail-at", "10"]) == 2
    assert "with --autoscaler" in capsys.readouterr().err
