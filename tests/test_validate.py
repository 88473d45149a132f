"""`kvsim validate`: a vllm bench serve result file replayed under its recorded load (tests/data/
vllm_bench_result.json is hand-written in that format: 5 requests, one failed, all sent at once by 2
clients)."""

import json
import math

import pandas as pd
import pytest

from kvsim.cli import main
from kvsim.errors import ConfigError
from kvsim.trace.bench_result import read_bench_result

RESULT = "tests/data/vllm_bench_result.json"


def run_script(path: str, *args: str) -> None:
    """Run a benchmarks/ script as its command line would, with ``args``."""
    import runpy
    import sys

    argv = sys.argv
    sys.argv = [path, *args]
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = argv


def test_the_result_file_becomes_requests_and_measured_latencies():
    run = read_bench_result(RESULT)
    assert [r.prompt_tokens for r in run.requests] == [100, 200, 50, 30]  # the failed one skipped
    assert run.skipped == 1 and run.max_concurrency == 2 and run.request_rate == math.inf
    assert run.e2e_s[0] == pytest.approx(0.05 + 9 * 0.01)
    assert run.output_tokens == 43


def test_validate_replays_under_the_recorded_load_and_reports_ratios(tmp_path):
    out = tmp_path / "v"
    assert (
        main(["validate", RESULT, "--model", "llama-3-8b", "--gpu", "a100-80gb", "--out", str(out), "--no-plots"]) == 0
    )
    row = pd.read_csv(out / "validate.csv").iloc[0]
    req = pd.read_csv(out / "requests.csv")
    assert row.requests == 4 and row.skipped == 1 and row.not_finished == 0
    # measured by hand: TTFTs 0.05, 0.06, 0.04, 0.05 -> median 0.05; TPOT = (E2E - TTFT) / (outputs - 1)
    assert row.ttft_p50_measured_s == pytest.approx(0.05)
    assert sorted(req.tpot_measured_s) == pytest.approx([0.01, 0.01, 0.011, 0.012])
    assert row.ttft_p50_ratio == pytest.approx(row.ttft_p50_predicted_s / row.ttft_p50_measured_s)
    assert row.output_tok_s_measured == pytest.approx(43 / 0.4)
    # two clients: at most two requests in flight in the replay
    assert (req.ttft_predicted_s > 0).all() and (req.status == "finished").all()
    assert "| vllm_bench_result.json | 4 | all at once, 2 clients |" in (out / "summary.md").read_text()


@pytest.mark.parametrize(
    "change,msg",
    [
        ({"ttfts": None}, "no per-request field ttfts: .*--save-detailed"),
        ({"ttfts": [0.1]}, "field 'ttfts' has 1 entries"),
        ({"request_rate": -2}, "field 'request_rate'"),
        ({"request_rate": 0}, "must be > 0"),
        ({"max_concurrency": 0}, "field 'max_concurrency'"),
        ({"itls": [[0.01], "x", [], [], []]}, "request 1: field 'itls'"),
        ({"input_lens": [1, "a", 3, 4, 5]}, "request 1: field 'input_lens'"),
        ({"errors": ["e"] * 5}, "no successful request"),
    ],
)
def test_bad_result_files_are_named(tmp_path, change, msg):
    d = json.loads(open(RESULT).read())
    d.update(change)
    f = tmp_path / "r.json"
    f.write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=msg):
        read_bench_result(str(f))


def test_validate_needs_the_model_and_keeps_the_recorded_load(tmp_path, capsys):
    assert main(["validate", RESULT, "--out", str(tmp_path / "a")]) != 0
    assert "Meta-Llama-3-8B-Instruct" in capsys.readouterr().err


def test_the_published_runs_benchmark_reads_a_results_tree(tmp_path):
    """benchmarks/validate_published.py on a results/ tree laid out as LambdaLabsML/vllm-benchmark's: A100 files of
    models with a preset are replayed, others left out."""
    import shutil

    import pandas as pd

    tree = tmp_path / "results" / "prompt_10"
    for gpu in ("1xA100-80GB-SXM", "1xH100-80GB-SXM"):
        (tree / gpu).mkdir(parents=True)
        shutil.copy("tests/data/vllm_bench_result.json", tree / gpu / "Meta-Llama-3-8B-Instruct_tp1_len2048.json")
    shutil.copy(
        "tests/data/vllm_bench_result.json", tree / "1xA100-80GB-SXM" / "Meta-Llama-3.1-8B-FP8_tp1_len2048.json"
    )
    out = tmp_path / "out"
    run_script("benchmarks/validate_published.py", str(tmp_path), "--out", str(out))
    table = pd.read_csv(out / "validate.csv")
    assert list(table.file) == ["results/prompt_10/1xA100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json"]
    assert table.preset[0] == "llama-3-8b" and 0.5 < table.tpot_p50_ratio[0] < 2
    assert "Over 1 files" in (out / "summary.md").read_text()


def test_the_load_sweep_benchmark_reads_summaries(tmp_path):
    """benchmarks/validate_load_sweep.py on runs given by their summary fields and per-request lengths: A100 runs of
    models with a preset are replayed (10 scheduler steps where the median ITL is ~10 TPOTs), failed runs left out."""

    run = {
        "date": "20240907-071536",
        "num_prompts": 4,
        "completed": 4,
        "duration": 2.0,
        "total_output_tokens": 90,
        "median_ttft_ms": 120.0,
        "mean_ttft_ms": 110.0,
        "p99_ttft_ms": 130.0,
        "median_tpot_ms": 12.0,
        "mean_tpot_ms": 12.5,
        "p99_tpot_ms": 20.0,
        "median_itl_ms": 118.0,
        "input_lens": [100, 200, 50, 30],
        "output_lens": [40, 30, 0, 20],
    }
    folder = tmp_path / "results" / "prompt_4" / "1xA100-80GB-SXM"
    folder.mkdir(parents=True)
    (folder / "Meta-Llama-3-8B-Instruct_tp1_len2048.json").write_text(json.dumps(run))
    (folder / "Mistral-7B-Instruct-v0.3_tp1_len2048.json").write_text(json.dumps({**run, "completed": 2}))
    (folder / "Unknown-Model_tp1_len2048.json").write_text(json.dumps(run))
    out = tmp_path / "out"
    run_script("benchmarks/validate_load_sweep.py", str(tmp_path), "--out", str(out))
    table = pd.read_csv(out / "validate.csv")
    assert list(table.file) == ["results/prompt_4/1xA100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json"]
    assert table.scheduler_steps[0] == 10 and table.requests[0] == 4  # the one without output replayed too
    assert 0.3 < table.tpot_p50_ratio[0] < 3 and "| all | 1 |" in (out / "summary.md").read_text()
