"""Speculative decoding (kvsim/speculative.py, kvsim/latency/speculative.py): the drafter's weights and KV by
hand, verify steps priced on the target's own terms, an iteration = 1/tau of a step, and the engine's budget."""

import json

import pytest

from kvsim.errors import ConfigError
from kvsim.latency import StepShape, build_latency
from kvsim.options import config_from_args

EAGLE3 = ["--speculative-config", json.dumps({"method": "eagle3", "num_speculative_tokens": 3})]


def cfg(*args, model="llama-3.1-8b", gpu="h100-80gb"):
    return config_from_args(["--model", model, "--gpu", gpu, *args])


def test_an_eagle3_drafter_holds_one_layer_its_fc_and_head_and_one_more_kv_layer():
    base, spec = cfg(), cfg(*EAGLE3, "--acceptance-length", "2.5")
    h, ffn = 4096, 14336
    layer = h * (32 + 2 * 8) * 128 + 32 * 128 * h + 3 * h * ffn + 2 * h  # attention, gated MLP, two norms
    draft = layer + 3 * h * h + 32000 * h + h  # fc over three hidden states, its own 32k-token LM head, a norm
    assert spec.model.draft_weight_bytes == 2 * draft
    assert spec.model.weight_bytes == base.model.weight_bytes + 2 * draft
    assert spec.model.kv_bytes_per_token_gpu(1) == 33 * 2 * 8 * 128 * 2  # 32 layers + the draft's
    assert spec.pool_plan().pool_bytes == base.pool_plan().pool_bytes - 2 * draft
    ngram = cfg("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}', "--acceptance-length", "2")
    assert ngram.model.kv_bytes_per_token_gpu(1) == base.model.kv_bytes_per_token_gpu(1)
    assert ngram.model.weight_bytes == base.model.weight_bytes


def test_mtp_adds_deepseeks_own_layer_in_fp8():
    spec = cfg(
        "--speculative-config",
        '{"method": "mtp", "num_speculative_tokens": 1}',
        "--acceptance-length",
        "1.8",
        "-tp",
        "8",
        model="deepseek-v3",
        gpu="h200",
    )
    m = spec.model
    assert m.draft_layers == 1 and m.kv_bytes_per_token_gpu(8) == 62 * (512 + 64) * 2
    # one MLA + MoE layer (256 routed experts + 1 shared) and the 2h x h projection: about 11.6 B parameters
    assert 11.0e9 < m.draft_weight_bytes < 12.5e9  # FP8: a byte each


def test_a_verify_step_is_priced_on_k_plus_one_tokens_and_an_iteration_is_its_1_over_tau_share():
    plain = build_latency(cfg("--no-async-scheduling"))  # vLLM runs n-gram drafts in step with the GPU
    k = 3
    ngram = lambda tau: build_latency(
        cfg(
            "--speculative-config",
            f'{{"method": "ngram", "num_speculative_tokens": {k}}}',
            "--acceptance-length",
            str(tau),
        )
    )
    shape = StepShape.decode(32, 32 * 2000)
    one, full = ngram(1), ngram(k + 1)
    verify = plain.target if hasattr(plain, "target") else plain
    # n-gram proposals cost no GPU work: the step is the target's over 4 tokens per sequence, attention once
    gpu = verify.dense_s(32 * 4, 32 * 4) + verify.attention_s(shape) + verify._padding_s(128, 128)
    assert one.step_time(shape) == pytest.approx(verify._combine(gpu, 32)[0], rel=1e-12)
    assert full.step_time(shape) == pytest.approx(one.step_time(shape) / (k + 1), rel=1e-12)
    assert one.step_time(shape) > plain.step_time(shape) > full.step_time(shape)
    b = full.breakdown(shape)
    assert sum(
        b[p] for p in ("dense_s", "attention_s", "communication_s", "graph_padding_s", "cpu_s")
    ) == pytest.approx(b["total_s"], rel=1e-12)
    # a prefill chunk of the iteration stands for tau times as many prompt tokens of the step
    chunk = StepShape.of([(100, 0)])
    assert ngram(2).step_time(chunk) == pytest.approx(ngram(1).step_time(StepShape.of([(200, 0)])) / 2, rel=1e-12)


@pytest.mark.parametrize(
    "model, gpu, tp, spec",
    [
        ("llama-3.1-8b", "h100-80gb", 1, {"method": "eagle3", "num_speculative_tokens": 3}),
        ("llama-3.1-70b", "h100-80gb", 4, {"method": "eagle", "num_speculative_tokens": 5}),
        ("deepseek-v3", "h200", 8, {"method": "mtp", "num_speculative_tokens": 2}),
    ],
)
def test_decode_runs_add_up_to_their_steps(model, gpu, tp, spec):
    lat = build_latency(
        cfg(
            "--speculative-config", json.dumps(spec), "--acceptance-length", "2.4", "-tp", str(tp), model=model, gpu=gpu
        )
    )
    for n, s0, k in ((1, 700, 40), (48, 48 * 1500, 200), (256, 256 * 3000, 16)):
        steps = [lat.step_time(StepShape.decode(n, s0 + n * i)) for i in range(k)]
        assert lat.decode_step_times(n, s0, k) == pytest.approx(steps, rel=1e-12)
        assert lat.decode_run_time(n, s0, k) == pytest.approx(sum(steps), rel=1e-12)
        half = sum(steps) / 2
        until = lat.decode_steps_until(n, s0, half, k)
        assert sum(steps[:until]) >= half > sum(steps[: until - 1])


def test_the_engine_budget_is_the_steps_over_tau_and_decoding_speeds_up():
    spec = cfg(*EAGLE3, "--acceptance-length", "2.5", "--max-num-batched-tokens", "8192")
    assert spec.engine_scheduler().max_num_batched_tokens == int(8192 / 2.5)
    assert (
        cfg(*EAGLE3, "--acceptance-length", "4", "--max-num-batched-tokens", "512", "--max-num-seqs", "256")
        .engine_scheduler()
        .max_num_batched_tokens
        == 256
    )  # never below max_num_seqs
    from kvsim.runner import simulate
    from kvsim.trace import Request

    reqs = [Request(i, 0.05 * i, 200, 300) for i in range(8)]
    tpot = {}
    for tau in (None, 1.0, 2.5, 4.0):
        c = cfg() if tau is None else cfg(*EAGLE3, "--acceptance-length", str(tau))
        out = simulate(reqs, c, "paged:16")
        assert (out.requests["status"] == "finished").all()
        tpot[tau] = out.requests["tpot_s"].median()
    assert tpot[1.0] > tpot[None] > tpot[2.5] > tpot[4.0]
    assert tpot[None] / tpot[2.5] == pytest.approx(2.5 / 1.25, rel=0.25)  # the step costs ~1.1-1.4x a plain one


@pytest.mark.parametrize(
    "args, match",
    [
        (["--speculative-config", "{method: eagle}"], "not JSON"),
        (["--speculative-config", "[3]"], "must be a JSON object"),
        (["--speculative-config", '{"method": "medusa", "num_speculative_tokens": 3}'], "method must be one of"),
        (["--speculative-config", '{"method": "eagle"}'], "num_speculative_tokens must be a whole number"),
        (["--speculative-config", '{"method": "eagle", "num_speculative_tokens": 3}'], "needs --acceptance-length"),
        ([*EAGLE3, "--acceptance-length", "4.5"], "must be from 1 to num_speculative_tokens \\+ 1 \\(4\\)"),
        (
            [
                "--speculative-config",
                '{"method": "eagle", "num_speculative_tokens": 3, "tree": 1}',
                "--acceptance-length",
                "2",
            ],
            "does not model tree",
        ),
        (["--acceptance-length", "2"], "needs --speculative-config"),
        ([*EAGLE3, "--acceptance-length", "2", "--latency", "roofline"], "roofline"),
        ([*EAGLE3, "--acceptance-length", "2", "-pp", "2"], "pipeline"),
        ([*EAGLE3, "--acceptance-length", "2", "--no-enable-chunked-prefill"], "chunked prefill"),
        ([*EAGLE3, "--acceptance-length", "2", "--batching", "static"], "continuous batching"),
    ],
)
def test_bad_speculative_settings_are_refused_naming_the_flag(args, match):
    with pytest.raises(ConfigError, match=match):
        cfg(*args)


def test_drafters_that_do_not_fit_the_model_are_refused():
    with pytest.raises(ConfigError, match="use method mtp"):
        cfg(*EAGLE3, "--acceptance-length", "2", "-tp", "8", model="deepseek-v3", gpu="h200")
    with pytest.raises(ConfigError, match="not full attention"):
        cfg(*EAGLE3, "--acceptance-length", "2", model="gemma-2-9b")


def test_kvsim_latency_says_what_an_iteration_is_under_speculation(capsys):
    from kvsim.cli import main

    assert (
        main(
            [
                "latency",
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "h100-80gb",
                *EAGLE3,
                "--acceptance-length",
                "2.5",
                "--batch",
                "8",
                "--context",
                "1000",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "an iteration is 1/2.5 of a verify step of 4 tokens per decoding sequence and 3 draft passes" in out


def test_async_scheduling_follows_the_drafter_and_the_release():
    """vLLM 0.14+ schedules one step ahead by default, also with EAGLE/MTP drafts (PR #31998), not with n-gram
    ones; 0.13 never does unless told."""
    ngram = '{"method": "ngram", "num_speculative_tokens": 3}'
    assert cfg().runs_async and cfg(*EAGLE3, "--acceptance-length", "2.5").runs_async
    assert not cfg("--speculative-config", ngram, "--acceptance-length", "2").runs_async
    assert (
        not cfg("--vllm-version", "0.13").runs_async and cfg("--vllm-version", "0.13", "--async-scheduling").runs_async
    )
