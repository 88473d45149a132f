"""Multi-step scheduling (vLLM V0's --num-scheduler-steps): decode windows that admit nothing and deliver at
their end, the CPU share of a decode step, the options' rules, and what a result file's streaming shows."""

import json

import pytest

from helpers import FixedLatency, req, sched
from kvsim.allocators import make_allocator
from kvsim.engine.simulator import Simulation
from kvsim.errors import ConfigError
from kvsim.latency import build_latency
from kvsim.latency.base import StepShape
from kvsim.latency.cpu import CPU_PRESETS
from kvsim.metrics import requests_frame
from kvsim.options import config_from_options
from kvsim.trace.bench_result import read_bench_result


def run(reqs, steps, **kw):
    cfg = sched(num_scheduler_steps=steps, **kw)
    return Simulation(reqs, make_allocator("paged:16", 10_000, cfg.max_model_len), FixedLatency(), cfg).run()


def test_a_sequence_finishing_inside_a_window_is_delivered_at_its_end():
    # Prefill 0.1 s emits token 1; decode steps of 0.01 s in windows of 4: tokens 2-5 by 0.14, 6-9 by 0.18; token
    # 10 comes in the third window's first step (0.19), whose three other steps still run: delivered at 0.22.
    one, four = run([req(0, 0, 100, 10)], 1), run([req(0, 0, 100, 10)], 4)
    assert one.sequences[0].finish_s == pytest.approx(0.19)
    s = four.sequences[0]
    assert s.first_token_s == pytest.approx(0.1) and s.finish_s == pytest.approx(0.22)
    assert s.generated == 10 and four.steps == one.steps == 10  # the discarded steps are not iterations


def test_a_window_ends_on_a_boundary_without_waiting():
    # 1 + 8 tokens: two full windows of 4, the last token at 0.18 is the window's end
    s = run([req(0, 0, 100, 9)], 4).sequences[0]
    assert s.finish_s == pytest.approx(0.18)


def test_an_arrival_waits_for_the_window_to_end():
    # A's decode window runs 0.10-0.14; B arrives at 0.115. One step at a time B's prompt is scheduled at 0.12
    # (a 0.1 s step: first token 0.22); with windows of 4 it waits for 0.14 (first token 0.24).
    reqs = [req("a", 0, 100, 20), req("b", 0.115, 50, 3)]
    one = {s.req.id: s for s in run(reqs, 1).sequences}
    four = {s.req.id: s for s in run(reqs, 4).sequences}
    assert one["b"].first_token_s == pytest.approx(0.22)
    assert four["b"].admitted_s == pytest.approx(0.14) and four["b"].first_token_s == pytest.approx(0.24)
    # B's two more tokens come in the window of 0.24-0.28 (with A's): both are delivered at its end
    assert four["b"].finish_s == pytest.approx(0.28)


def test_every_request_is_accounted_for_with_windows_and_a_horizon():
    reqs = [req(i, i * 0.03, 64, 40 + i % 7) for i in range(60)]
    res = run(reqs, 8, horizon_s=1.0, max_num_seqs=16)
    df = requests_frame(res)
    assert len(df) == 60 and set(df.status) <= {"finished", "unfinished"}
    fin = df[df.status == "finished"]
    assert (fin.finish_s >= fin.first_token_s).all()


def _cfg(**kw):
    return config_from_options({"model": "llama-3-8b", "gpu": "a100-80gb", **kw})


def test_a_decode_step_pays_its_share_of_the_cpu_time():
    one, ten = build_latency(_cfg(vllm_engine="v0")), build_latency(_cfg(vllm_engine="v0", num_scheduler_steps=10))
    cpu = CPU_PRESETS["vllm-v0"].seconds(8)  # the V0 engine's
    decode, prefill = StepShape.decode(8, 8 * 500), StepShape.of([(500, 0)])
    assert one.breakdown(decode)["cpu_s"] == pytest.approx(cpu)
    assert ten.breakdown(decode)["cpu_s"] == pytest.approx(cpu / 10)
    assert ten.step_time(decode) == pytest.approx(one.step_time(decode) - 0.9 * cpu)
    assert ten.breakdown(prefill)["cpu_s"] == pytest.approx(CPU_PRESETS["vllm-v0"].seconds(1))
    # a decode run is its steps, each with the same share
    run_s = ten.decode_run_time(8, 8 * 500, 5)
    assert run_s == pytest.approx(sum(ten.step_time(StepShape.decode(8, 8 * 500 + 8 * i)) for i in range(5)))


@pytest.mark.parametrize(
    "other, flag",
    [
        (
            {"speculative_config": '{"method": "ngram", "num_speculative_tokens": 2}', "acceptance_length": 1.5},
            "--speculative-config",
        ),
        ({"pipeline_parallel_size": 2}, "--pipeline-parallel-size"),
        ({"batching": "static"}, "--batching"),
    ],
)
def test_multi_step_is_refused_with_what_it_is_not_modelled_with(other, flag):
    with pytest.raises(ConfigError, match=f"--num-scheduler-steps 4: .*drop {flag}"):
        _cfg(num_scheduler_steps=4, vllm_engine="v0", **other)


def test_multi_step_needs_the_v0_engine():
    with pytest.raises(ConfigError, match="--num-scheduler-steps 4: .*V0 engine.*add --vllm-engine v0"):
        _cfg(num_scheduler_steps=4)


def test_bad_step_counts_are_refused():
    for bad in (0, -2, 1.5):
        with pytest.raises(ConfigError, match="--num-scheduler-steps"):
            _cfg(num_scheduler_steps=bad, vllm_engine="v0")


def test_a_result_file_shows_how_many_tokens_each_chunk_carried(tmp_path):
    # benchmark_serving.py files: one ITL per streamed chunk after the first token
    d = {
        "input_lens": [10, 20, 30],
        "output_lens": [21, 3, 1],
        "ttfts": [0.1, 0.1, 0.1],
        "itls": [[0.1, 0.1], [0.05], []],
        "request_rate": "inf",
    }
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    run = read_bench_result(str(p))
    assert run.tokens_per_chunk == pytest.approx((20 + 2) / 3)  # 22 later tokens in 3 chunks
    d["itls"] = [[0.01] * 20, [0.01] * 2, []]
    p.write_text(json.dumps(d))
    assert read_bench_result(str(p)).tokens_per_chunk == 1.0


def test_validate_says_when_a_file_streamed_several_tokens_at_a_time(tmp_path, capsys):
    from kvsim.cli import main

    d = {
        "input_lens": [100, 50],
        "output_lens": [21, 11],
        "ttfts": [0.05, 0.05],
        "itls": [[0.1, 0.1], [0.1]],
        "request_rate": "inf",
        "duration": 0.5,
    }
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    args = ["validate", str(p), "--model", "llama-3-8b", "--gpu", "a100-80gb", "--no-plots"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "10.0 at a time" in err and "--num-scheduler-steps 10" in err  # (20 + 10) later tokens in 3 chunks
    assert main(args + ["--out", str(tmp_path / "b"), "--vllm-engine", "v0", "--num-scheduler-steps", "10"]) == 0
    assert "at a time" not in capsys.readouterr().err


def test_multi_step_is_refused_where_engines_hand_off_kv(tmp_path, capsys):
    from kvsim.cli import main

    common = ["--trace", "traces/chat.jsonl", "--vllm-engine", "v0", "--num-scheduler-steps", "4"]
    assert main(["cluster", *common, "--prefill", "h100:1", "--decode", "h100:1", "--out", str(tmp_path / "c")]) != 0
    assert "not modelled for disaggregated" in capsys.readouterr().err
    assert main(["plan", *common, "--fleet-max-gpus", "2", "--slo", "ttft_p99=2", "--out", str(tmp_path / "p")]) != 0
    assert "--fleet-max-gpus" in capsys.readouterr().err


def test_the_v0_engine_runs_prompts_in_steps_of_their_own():
    # A decodes from 0.1 (steps of 0.01 s: tokens 2-4 by 0.13). B arrives at 0.125: V1 schedules B's prompt with
    # A's decode at 0.13 (a 0.1 s step: A's token 5 and B's first token at 0.23; A's last token at 0.28). V0 runs
    # B's prompt alone in that step: A gets no token from it, so its 10 tokens end a step later, at 0.29.
    reqs = [req("a", 0, 100, 10), req("b", 0.125, 50, 2)]
    v1 = {s.req.id: s for s in run(reqs, 1, max_num_batched_tokens=4096).sequences}
    v0 = {s.req.id: s for s in run(reqs, 1, max_num_batched_tokens=4096, prompts_alone=True).sequences}
    assert v1["b"].first_token_s == v0["b"].first_token_s == pytest.approx(0.23)
    assert v1["a"].finish_s == pytest.approx(0.28) and v0["a"].finish_s == pytest.approx(0.29)
    assert v0["b"].finish_s == pytest.approx(0.24) and v1["b"].finish_s == pytest.approx(0.24)


def test_the_v0_engine_takes_its_own_defaults():
    cfg = _cfg(vllm_engine="v0")  # Llama-3-8B: 8,192-token context
    s = cfg.scheduler
    assert (s.enable_chunked_prefill, s.max_num_seqs, s.max_num_batched_tokens, s.prompts_alone) == (
        False,
        256,
        8192,
        True,
    )
    assert cfg.cpu_overhead == "vllm-v0" and _cfg(vllm_engine="v0", cpu_overhead="none").cpu_overhead == "none"
    s = _cfg(vllm_engine="v0", max_model_len=1024).scheduler
    assert s.max_num_batched_tokens == 2048
    s = config_from_options({"model": "llama-3.1-8b", "gpu": "h100", "vllm_engine": "v0"}).scheduler  # 131,072
    assert (s.enable_chunked_prefill, s.max_num_batched_tokens, s.prompts_alone) == (True, 512, False)
    s = _cfg(vllm_engine="v0", max_num_seqs=64, enable_chunked_prefill=True).scheduler
    assert (s.max_num_seqs, s.max_num_batched_tokens, s.prompts_alone) == (64, 512, False)


def test_validate_replays_the_engine_a_result_file_shows(tmp_path, capsys):
    """A run dated before vLLM 0.8 replays on the V0 engine, with multi-step scheduling where its tokens came four
    or more at a time; options given win."""
    from kvsim.cli import main
    from kvsim.commands.validate import server_implied

    d = {
        "date": "20240907-071536",
        "input_lens": [100, 50],
        "output_lens": [21, 11],
        "ttfts": [0.05, 0.05],
        "itls": [[0.1, 0.1], [0.1]],
        "request_rate": "inf",
        "duration": 0.5,
    }
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    run = read_bench_result(str(p))
    assert server_implied(run, {}) == {"vllm_engine": "v0", "vllm_version": "0.7", "num_scheduler_steps": 10}
    assert server_implied(run, {"vllm_engine": "v1", "vllm_version": "0.22"}) == {}
    assert server_implied(run, {"num_scheduler_steps": 4, "latency": "roofline"}) == {"vllm_engine": "v0"}
    d["itls"] = [[0.01] * 20, [0.01] * 10]
    p.write_text(json.dumps(d))
    assert server_implied(read_bench_result(str(p)), {}) == {"vllm_engine": "v0", "vllm_version": "0.7"}
    d["date"] = "20250901-000000"  # V1, before 0.14 made async scheduling the default
    p.write_text(json.dumps(d))
    assert server_implied(read_bench_result(str(p)), {}) == {"async_scheduling": False}
    assert server_implied(read_bench_result(str(p)), {"vllm_version": "0.11"}) == {}  # the release decides
    d["date"] = "20260301-000000"
    p.write_text(json.dumps(d))
    assert server_implied(read_bench_result(str(p)), {}) == {}
    d["date"], d["itls"] = "20240907-071536", [[0.1, 0.1], [0.1]]
    p.write_text(json.dumps(d))
    assert (
        main(
            [
                "validate",
                str(p),
                "--model",
                "llama-3-8b",
                "--gpu",
                "a100-80gb",
                "--no-plots",
                "--out",
                str(tmp_path / "a"),
            ]
        )
        == 0
    )
    assert (
        "replayed --vllm-engine v0 --vllm-version 0.7 --num-scheduler-steps 10 as the file shows"
        in capsys.readouterr().err
    )


def test_a_request_without_text_is_replayed_but_not_compared(tmp_path):
    d = {
        "input_lens": [100, 300],
        "output_lens": [21, 0],
        "ttfts": [0.05, 0.0],
        "itls": [[0.01] * 20, []],
        "request_rate": "inf",
    }
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    run = read_bench_result(str(p))
    assert run.silent == 1 and run.skipped == 0
    assert [(r.prompt_tokens, r.output_tokens) for r in run.requests] == [(100, 21), (300, 1)]
    from kvsim.commands.validate import compare_run

    row, req = compare_run(run, _cfg())
    assert row["without_text"] == 1 and req.ttft_predicted_s.isna().tolist() == [False, True]
    assert row["ttft_p50_measured_s"] == pytest.approx(0.05)
