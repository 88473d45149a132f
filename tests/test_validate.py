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


SUMMARY = {  # a `vllm bench serve --save-result` file without --save-detailed: 40 prompts of 1,024 / 128 tokens
    "date": "20261201-101010",
    "model_id": "meta-llama/Llama-3.1-8B-Instruct",
    "num_prompts": 40,
    "request_rate": "inf",
    "burstiness": 1.0,
    "max_concurrency": 4,
    "duration": 12.0,
    "completed": 40,
    "failed": 0,
    "total_input_tokens": 40960,
    "total_output_tokens": 5120,
    "output_throughput": 426.0,
    "mean_ttft_ms": 45.0,
    "median_ttft_ms": 40.0,
    "p99_ttft_ms": 90.0,
    "median_tpot_ms": 7.0,
    "median_itl_ms": 6.9,
    "mean_itl_ms": 7.0,
}
LOAD = ["--num-prompts", "40", "--random-input-len", "1024", "--random-output-len", "128", "--max-concurrency", "4"]


def test_a_summary_only_file_is_replayed_as_the_random_workload_of_its_numbers(tmp_path, capsys):
    """Its figures are compared with kvsim's on `kvsim run --bench vllm-random` of the same numbers (exact lengths:
    the totals are multiples of the count), figure by figure; a file of both kinds in one call."""
    f = tmp_path / "s.json"
    f.write_text(json.dumps(SUMMARY))
    out = tmp_path / "v"
    argv = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--no-plots"]
    assert main(["validate", str(f), RESULT, *argv, "--out", str(out)]) == 0
    table = pd.read_csv(out / "validate.csv")
    row = table.iloc[0]
    assert list(table.compared) == ["summary", "requests"] and row.requests == 40
    assert row.ttft_p50_measured_s == pytest.approx(0.040) and row.itl_p50_measured_s == pytest.approx(0.0069)
    assert row.output_tok_s_measured == 426.0 and "tpot_p99_ratio" not in table  # not in the file: not compared
    assert "--random-range-ratio 0 " in row.replayed_as and "--max-concurrency 4 --ignore-eos" in row.replayed_as
    run = tmp_path / "r"
    assert main(["run", *argv, "--bench", "vllm-random", *LOAD, "--ignore-eos", "--out", str(run)]) == 0
    same = pd.read_csv(run / "runs.csv").iloc[0]
    for m in ("ttft_p50", "tpot_p50", "itl_p50"):
        assert row[f"{m}_predicted_s"] == pytest.approx(same[f"{m}_s"], rel=1e-12)
        assert row[f"{m}_ratio"] == pytest.approx(row[f"{m}_predicted_s"] / row[f"{m}_measured_s"])
    assert row.output_tok_s_predicted == pytest.approx(same.throughput_tok_s, rel=1e-12)
    summary = (out / "summary.md").read_text()
    assert "| s.json | 40 | all at once, 4 clients |" in summary and "| vllm_bench_result.json | 4 |" in summary
    assert "a summary only (no per-request fields): replayed its load as vllm bench serve" in capsys.readouterr().err
    alone = tmp_path / "alone"
    assert main(["validate", str(f), *argv, "--out", str(alone)]) == 0
    assert "Summary-only files" in (alone / "summary.md").read_text()
    req = pd.read_csv(alone / "requests.csv")  # kvsim's requests, nothing measured per request
    assert len(req) == 40 and req.ttft_measured_s.isna().all() and (req.prompt_tokens == 1024).all()
    assert req.ttft_predicted_s.median() == pytest.approx(row.ttft_p50_predicted_s)


def test_a_summary_whose_lengths_varied_needs_the_range_ratio_and_bad_fields_are_named(tmp_path, capsys):
    from kvsim.trace.result_file import read_result

    f = tmp_path / "s.json"
    f.write_text(json.dumps({**SUMMARY, "total_input_tokens": 40961}))
    argv = ["validate", str(f), "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--no-plots", "--out"]
    assert main([*argv, str(tmp_path / "a")]) == 2
    assert "varied in length (mean 1,024.03 and 128.00 tokens): give the benchmark's --random-range-ratio" in (
        capsys.readouterr().err
    )
    assert main([*argv, str(tmp_path / "b"), "--random-range-ratio", "0.1"]) == 0
    assert "--random-range-ratio 0.1 " in pd.read_csv(tmp_path / "b" / "validate.csv").replayed_as[0]
    for change, msg in (
        ({"completed": 0}, "field 'completed' must be a positive whole number"),
        ({"median_ttft_ms": "x"}, "field 'median_ttft_ms': must be a finite number"),
        ({"failed": -1}, "field 'failed' must be a whole number >= 0"),
        ({"burstiness": 0}, "field 'burstiness' must be > 0"),
        (
            {
                k: None
                for k in (
                    "output_throughput",
                    "mean_ttft_ms",
                    "median_ttft_ms",
                    "p99_ttft_ms",
                    "median_tpot_ms",
                    "median_itl_ms",
                )
            },
            "no measured figure to compare",
        ),
    ):
        f.write_text(json.dumps({**SUMMARY, **change}))
        with pytest.raises(ConfigError, match=msg):
            read_result(str(f))


def test_genai_perf_and_aiperf_summary_files_are_read_as_their_clients_wrote_them(tmp_path):
    """Both tools' summary layouts (kvsim/trace/perf_export.py): AIPerf 0.13's phases and datasets, GenAI-Perf
    0.0.16's nested config, GenAI-Perf's flat one (0.0.12 and before) and AIPerf's loadgen (0.8), each figure in ms
    -> seconds, the load as the client sent it."""
    from kvsim.trace.result_file import read_result

    a = read_result("tests/data/aiperf_run/profile_export_aiperf.json")
    assert (a.harness, a.completed, a.max_concurrency, a.request_rate) == ("aiperf", 20, 4, math.inf)
    assert a.input_tokens == 1985 and a.output_tokens == 417  # 20 x the measured means 99.25 and 20.85
    assert a.measured["ttft_p50"] == pytest.approx(32.7625655e-3, rel=1e-9)  # the file writes ms
    assert a.measured["tpot_mean"] == pytest.approx(0.006029282556, rel=1e-9)  # its inter_token_latency
    assert a.load == {
        "warmup_request_count": 2,
        "synthetic_input_tokens_stddev": 5.0,
        "output_tokens_stddev": 2.0,
        "num_dataset_entries": 30,
        "dataset_sampling_strategy": "sequential",
    }
    assert a.date == "20261208" and a.duration_s == pytest.approx(0.869890816)
    g = read_result("tests/data/genai_perf_0.0.16_export.json")
    assert (g.harness, g.completed, g.max_concurrency, g.input_tokens, g.output_tokens) == (
        "genai-perf",
        4,
        4,
        800,
        400,
    )
    assert g.measured["e2e_p99"] == pytest.approx(1.097) and g.measured["output_tok_s"] == 395.0
    assert g.load["warmup_request_count"] == 2 and g.load["num_dataset_entries"] == 50
    assert g.duration_s == pytest.approx(4 / 3.9)  # request_count / request_throughput: GenAI-Perf keeps no duration
    flat = {  # GenAI-Perf 0.0.12 and before: its command's arguments, flat; a rate run
        "request_count": {"unit": "count", "avg": 30.0},
        "time_to_first_token": {"unit": "ms", "avg": 50.0, "p50": 40.0, "p99": 90.0},
        "input_sequence_length": {"unit": "tokens", "avg": 550.0},
        "output_sequence_length": {"unit": "tokens", "avg": 128.0},
        "input_config": {
            "model": ["m"],
            "concurrency": 1,
            "request_rate": 2.5,
            "warmup_request_count": 0,
            "synthetic_input_tokens_stddev": 0,
            "output_tokens_stddev": 0,
            "num_dataset_entries": 100,
        },
    }
    f = tmp_path / "g.json"
    f.write_text(json.dumps(flat))
    r = read_result(str(f))
    assert (r.request_rate, r.burstiness, r.max_concurrency) == (2.5, math.inf, None)  # constant gaps, no cap
    assert r.measured == {"ttft_mean": 0.05, "ttft_p50": 0.04, "ttft_p99": 0.09}
    loadgen = {  # AIPerf 0.8: loadgen and input.prompt
        "schema_version": "1.1",
        "aiperf_version": "0.8.0",
        "request_count": {"unit": "requests", "avg": 10.0},
        "request_latency": {"unit": "ms", "avg": 140.0, "p50": 137.0, "p99": 146.0},
        "input_sequence_length": {"unit": "tokens", "avg": 550.0},
        "output_sequence_length": {"unit": "tokens", "avg": 20.0},
        "input_config": {"loadgen": {"request_rate": 20.0, "arrival_pattern": "poisson", "request_count": 10}},
    }
    f.write_text(json.dumps(loadgen))
    r = read_result(str(f))
    assert (r.harness, r.request_rate, r.burstiness, r.load) == (
        "aiperf",
        20.0,
        1.0,
        {"dataset_sampling_strategy": "shuffle"},
    )
    values = r.load_values({})
    assert values["bench"] == "aiperf" and values["num_prompts"] == 10 and values["random_input_len"] == 550
    assert r.load_values({"dataset_sampling_strategy": "sequential"}).get("dataset_sampling_strategy") is None
    for change, msg in (
        ({"request_count": None}, "request_count.avg' missing"),
        ({"request_latency": {"unit": "furlongs", "avg": 1}}, "'request_latency.unit' is 'furlongs'"),
        ({"input_config": {"phases": [{"type": "fixed_schedule"}]}}, "a 'fixed_schedule' phase"),
    ):
        f.write_text(json.dumps({**loadgen, **change}))
        with pytest.raises(ConfigError, match=msg):
            read_result(str(f))


def test_kvsim_validate_replays_an_aiperf_summary_as_kvsim_run_does(tmp_path):
    """The replay is `kvsim run --bench aiperf` with the file's load (a test of meaning, not of the mock's
    numbers)."""
    argv = ["--model", "qwen3-8b", "--gpu", "h100-80gb", "--no-plots"]
    assert (
        main(["validate", "tests/data/aiperf_run/profile_export_aiperf.json", *argv, "--out", str(tmp_path / "v")]) == 0
    )
    row = pd.read_csv(tmp_path / "v" / "validate.csv").iloc[0]
    load = ["--bench", "aiperf", "--isl", "99", "--isl-stddev", "5", "--osl", "21", "--osl-stddev", "2"]
    load += [
        "--num-dataset-entries",
        "30",
        "--request-count",
        "20",
        "--warmup-request-count",
        "2",
        "--concurrency",
        "4",
    ]
    load += ["--ignore-eos"]
    assert main(["run", *argv, *load, "--out", str(tmp_path / "r")]) == 0
    same = pd.read_csv(tmp_path / "r" / "runs.csv").iloc[0]
    assert row.ttft_p50_predicted_s == pytest.approx(same.ttft_p50_s, rel=1e-12)
    assert row.tpot_p50_predicted_s == pytest.approx(same.tpot_p50_s, rel=1e-12)


def test_a_result_file_with_send_times_is_replayed_at_them(tmp_path):
    """vLLM 0.27+'s --save-detailed files keep start_times and queue_times: each request arrives when the
    benchmark scheduled it (start - wait), the first at 0, in send order, instead of arrivals drawn at its rate."""
    d = json.loads(open(RESULT).read())
    d.update(
        request_rate=2.0,
        max_concurrency=None,
        start_times=[105.0, 104.0, 104.9, 104.5, 106.2],  # request 1 sent first; request 3 failed
        queue_times=[0.0, 0.0, 0.3, 0.0, 0.0],
    )
    f = tmp_path / "r.json"
    f.write_text(json.dumps(d))
    run = read_bench_result(str(f))
    assert run.timed and [r.id for r in run.requests] == ["1", "2", "0", "4"]
    assert [r.arrival_s for r in run.requests] == pytest.approx([0.0, 0.6, 1.0, 2.2])
    assert run.ttft_s == [0.06, 0.04, 0.05, 0.05]  # the measured figures follow their requests
    out = tmp_path / "v"
    argv = ["validate", str(f), "--model", "llama-3-8b", "--gpu", "a100-80gb", "--no-plots", "--out", str(out)]
    assert main(argv) == 0
    req = pd.read_csv(out / "requests.csv")
    assert list(req.id) == [1, 2, 0, 4] and req.ttft_measured_s.tolist() == [0.06, 0.04, 0.05, 0.05]
    del d["start_times"]
    f.write_text(json.dumps(d))
    untimed = read_bench_result(str(f))
    assert not untimed.timed and {r.arrival_s for r in untimed.requests} == {0.0}


def test_aiperf_per_request_records_are_replayed_request_by_request(tmp_path, capsys):
    """AIPerf's profile_export.jsonl: the measured requests (warm-ups left out) with their own lengths and
    latencies; beside its summary a closed loop of its 4 clients (all sent at once, in the order sent), alone at
    the times AIPerf issued them."""
    import shutil

    from kvsim.trace.result_file import read_result

    src = "tests/data/aiperf_run/profile_export.jsonl"
    run = read_result(src)
    recs = [json.loads(line) for line in open(src)]
    measured = [r for r in recs if r["metadata"]["benchmark_phase"] == "profiling"]
    assert len(run.requests) == len(measured) == 20 and (run.max_concurrency, run.timed) == (4, False)
    assert {r.arrival_s for r in run.requests} == {0.0}
    first = min(measured, key=lambda r: r["metadata"]["credit_issued_ns"])
    assert run.requests[0].prompt_tokens == first["metrics"]["input_sequence_length"]["value"]
    assert run.ttft_s[0] == pytest.approx(first["metrics"]["time_to_first_token"]["value"] / 1e3)
    alone = tmp_path / "profile_export.jsonl"
    lines = open(src).read().splitlines()
    bad = json.loads(lines[5])
    bad["error"] = {"code": 500, "message": "boom"}
    alone.write_text("\n".join(lines[:5] + [json.dumps(bad)] + lines[6:]) + "\n")
    run = read_result(str(alone))
    assert run.timed and run.max_concurrency is None and run.skipped == 1 and len(run.requests) == 19
    t0 = min(r["metadata"]["credit_issued_ns"] for i, r in enumerate(recs) if i >= 2 and i != 5)
    assert sorted(r.arrival_s for r in run.requests)[-1] == pytest.approx(
        (max(r["metadata"]["credit_issued_ns"] for i, r in enumerate(recs) if i >= 2 and i != 5) - t0) / 1e9
    )
    alone.write_text(lines[3] + "\n{not json\n")
    with pytest.raises(ConfigError, match=r"profile_export.jsonl:2: not JSON"):
        read_result(str(alone))
    shutil.copy("tests/data/aiperf_run/profile_export_aiperf.json", tmp_path / "profile_export_aiperf.json")
    alone.write_text("\n".join(lines) + "\n")
    argv = ["validate", str(alone), "--model", "qwen3-8b", "--gpu", "h100-80gb", "--no-plots"]
    assert main([*argv, "--out", str(tmp_path / "v")]) == 0
    row = pd.read_csv(tmp_path / "v" / "validate.csv").iloc[0]
    assert row.compared == "requests" and row.requests == 20 and row.max_concurrency == 4


def test_a_summary_in_seconds_as_copies_of_the_script_write_it(tmp_path):
    """InferenceX's copy of vllm bench serve writes median_ttft, p99_tpot, ... in seconds: read as such when the
    _ms fields are absent (the _ms ones win where both are)."""
    from kvsim.trace.result_file import read_result

    d = {k: v for k, v in SUMMARY.items() if not k.endswith("_ms")}
    d.update(median_ttft=4.5677, p99_tpot=0.063, median_e2el=6.79)
    f = tmp_path / "s.json"
    f.write_text(json.dumps(d))
    run = read_result(str(f))
    assert run.measured == {"ttft_p50": 4.5677, "tpot_p99": 0.063, "e2e_p50": 6.79, "output_tok_s": 426.0}
    f.write_text(json.dumps({**d, "median_ttft_ms": 40.0}))
    assert read_result(str(f)).measured["ttft_p50"] == pytest.approx(0.04)


def test_runs_appended_to_one_file_are_each_replayed(tmp_path):
    """`vllm bench serve --append-result` writes each run as one JSON line of the same file: every line is a run,
    called by the file and its line."""
    one = json.loads(open(RESULT).read())
    f = tmp_path / "results.json"
    f.write_text(json.dumps(one) + "\n" + json.dumps({**SUMMARY}) + "\n")
    out = tmp_path / "v"
    argv = ["validate", str(f), "--model", "llama-3-8b", "--gpu", "a100-80gb", "--no-plots", "--out", str(out)]
    assert main(argv) == 0
    table = pd.read_csv(out / "validate.csv")
    assert list(table.file) == ["results.json:1", "results.json:2"]
    assert list(table.compared) == ["requests", "summary"]
    f.write_text(json.dumps(one) + "\n{oops\n")
    assert main(argv) == 2


def test_a_folder_of_results_and_a_client_artifact_folder(tmp_path, capsys):
    """A folder: an AIPerf artifact folder is its run (the per-request records, the summary beside them giving the
    load); any other folder its result files in name order, the files that are no results named as skipped."""
    from kvsim.trace.result_file import read_results

    [run] = read_results("tests/data/aiperf_run")
    assert run.path.endswith("profile_export.jsonl") and run.max_concurrency == 4
    (tmp_path / "b.json").write_text(json.dumps(SUMMARY))
    (tmp_path / "a.json").write_text(open(RESULT).read())
    (tmp_path / "notes.json").write_text('{"comment": "not a result"}')
    runs = read_results(str(tmp_path))
    assert [type(r).__name__ for r in runs] == ["MeasuredRun", "MeasuredSummary"]
    assert "skipped 1 file(s) that are not benchmark results: notes.json" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no benchmark result file in the folder"):
        read_results(str(empty))


def test_an_aiperf_records_file_with_a_line_that_is_no_object_names_it(tmp_path):
    """A JSON line that is not an object (a list) is an error naming the file and line, not a crash."""
    from kvsim.trace.result_file import read_result

    f = tmp_path / "profile_export.jsonl"
    f.write_text("\n[1, 2]\n")
    with pytest.raises(ConfigError, match=r"profile_export.jsonl:2: expected a JSON object"):
        read_result(str(f))
