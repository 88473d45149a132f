"""End-to-end runs of the command line, as a user would type them."""

import subprocess
import sys

import pandas as pd
import pytest

from kvsim.cli import main

SMALL = ["--allocators", "max,paged:16"]
ROOT_TRACE = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "traces" / "chat.jsonl")


def small_trace(tmp_path, n=120):
    p = tmp_path / "small.jsonl"
    assert main(["trace", "generate", "-o", str(p), "-n", str(n), "--rate", "5", "--seed", "2"]) == 0
    return p


def test_compare_writes_everything(tmp_path, capsys):
    trace = small_trace(tmp_path)
    out = tmp_path / "out"
    assert main(["compare", "--trace", str(trace), *SMALL, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "paged:16" in text and "max" in text and "token%" in text
    for f in (
        "requests.csv",
        "runs.csv",
        "memory_timeline.csv",
        "memory_breakdown.png",
        "latency_cdf.png",
        "summary.md",
    ):
        assert (out / f).exists() and (out / f).stat().st_size > 0, f
    req = pd.read_csv(out / "requests.csv")
    assert len(req) == 2 * 120 and set(req.status) <= {"finished", "rejected", "unfinished"}
    runs = pd.read_csv(out / "runs.csv")
    assert list(runs.allocator) == ["max", "paged:16"]
    assert "| allocator |" in (out / "summary.md").read_text()


def test_run_single_and_parquet(tmp_path):
    trace = small_trace(tmp_path, 40)
    out = tmp_path / "o"
    assert (
        main(
            [
                "run",
                "--trace",
                str(trace),
                "--allocator",
                "oracle",
                "--out",
                str(out),
                "--no-plots",
                "--format",
                "parquet",
                "--model",
                "llama-3-8b",
                "--gpu",
                "h100-80gb",
            ]
        )
        == 0
    )
    assert len(pd.read_parquet(out / "requests.parquet")) == 40


def test_bad_trace_is_one_clear_line_not_a_traceback(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(
        '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n{"arrival_s": 1, "prompt_tokens": -3, "output_tokens": 1}\n'
    )
    r = subprocess.run(
        [sys.executable, "-m", "kvsim.cli", "compare", "--trace", str(p), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"{p}:2: field 'prompt_tokens': must be >= 1, got -3" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvsim.cli",
            "compare",
            "--trace",
            str(p),
            "--skip-invalid",
            "--no-plots",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "skipped 1 invalid line(s)" in r.stderr and "line 2" in r.stderr


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--model", "nope"], "unknown model"),
        (["--gpu", "tpu"], "unknown GPU"),
        (["--allocators", "max,buddy"], "unknown allocator"),
        (["--max-batched-tokens", "10"], "must be >= --max-num-seqs"),
        (["--model", "llama-2-70b"], "does not fit"),
        (["--eviction", "random"], "--victim-policy: 'random' is not one of"),
    ],
)
def test_bad_config_messages(tmp_path, capsys, args, msg):
    trace = small_trace(tmp_path, 5)
    assert main(["compare", "--trace", str(trace), "--out", str(tmp_path / "o"), *args]) == 2
    assert msg in capsys.readouterr().err


def test_trace_stats(tmp_path, capsys):
    trace = small_trace(tmp_path, 50)
    assert main(["trace", "stats", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "50 requests" in out and "prompt" in out and "p99" in out


def test_list_shows_every_preset_and_name(capsys):
    from kvsim.allocators import allocator_help
    from kvsim.cli import main
    from kvsim.fleet.routers import ROUTERS
    from kvsim.hardware import GPU_PRESETS, MODEL_PRESETS

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in [*MODEL_PRESETS, *GPU_PRESETS, *allocator_help(), *ROUTERS]:
        assert name in out
    assert main(["list", "gpus"]) == 0
    out = capsys.readouterr().out
    assert "h200-141gb" in out and "llama-2-7b" not in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["gb200"][-1] == "measured" and rows["gb200"][-3] == "72"  # an NVL72 rack's NVLink domain
    assert rows["rtx-4090"][-1] == "derived" and rows["rtx-pro-6000"][-3] == "-"  # PCIe cards


def test_default_output_folder_never_takes_another_configurations_results(tmp_path, monkeypatch, capsys):
    from kvsim.cli import main

    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(open(ROOT_TRACE).readlines()[:40]))
    assert main(["run", "--trace", str(trace), "--allocator", "paged", "--no-plots"]) == 0
    assert main(["run", "--trace", str(trace), "--allocator", "paged", "--no-plots"]) == 0  # same: same folder
    assert not (tmp_path / "kvsim-out" / "run-t-2").exists()
    first = (tmp_path / "kvsim-out" / "run-t" / "runs.csv").read_text()
    capsys.readouterr()
    assert main(["run", "--trace", str(trace), "--allocator", "max", "--no-plots"]) == 0  # another configuration
    assert "holds results of another configuration" in capsys.readouterr().err
    assert (tmp_path / "kvsim-out" / "run-t" / "runs.csv").read_text() == first
    assert "max" in (tmp_path / "kvsim-out" / "run-t-2" / "runs.csv").read_text()
    # an explicit --out is the user's choice: replaced
    assert main(["run", "--trace", str(trace), "--allocator", "max", "--no-plots", "--out", "kvsim-out/run-t"]) == 0
    assert "max" in (tmp_path / "kvsim-out" / "run-t" / "runs.csv").read_text()
