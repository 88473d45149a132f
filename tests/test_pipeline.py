"""Pipeline parallelism: memory of the largest stage, an iteration as a rotation of micro-batches, and the
options around it (hand-computed numbers; closed forms against the steps they sum)."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from kvsim.cli import main
from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu, get_model
from kvsim.latency import StepShape, get_cpu_overhead
from kvsim.latency.calibration import shipped_calibration
from kvsim.latency.perop import PerOpModel, micro_batches
from kvsim.options import config_from_options


def _model(pp, tp=2, model="llama-3-70b", gpu="h100-80gb", cpu="vllm-v1"):
    g = get_gpu(gpu)
    return PerOpModel(get_model(model), g, shipped_calibration(g)[0], get_cpu_overhead(cpu), tp, pp=pp)


def test_a_stage_holds_its_layers_kv_and_weights():
    """Llama-3-70B over 2 stages of TP2: 40 of 80 layers per GPU, each with 4 of 8 KV heads: 2 x 40 x 4 x 128
    x 2 B = 80 KiB per token; weights: 40 layers' share of the non-embedding parameters plus one 128,256 x
    8,192 vocabulary matrix, over 2 GPUs."""
    cfg = config_from_options(
        {"model": "llama-3-70b", "gpu": "h100-80gb", "tensor_parallel_size": 2, "pipeline_parallel_size": 2}
    )
    assert cfg.gpus == 4
    pool = cfg.pool_plan()
    assert pool.kv_bytes_per_token == 2 * 40 * 4 * 128 * 2
    m, stage = cfg.model, cfg.memory_model
    vocab = m.vocab_size * m.hidden_size
    assert stage.layers == 40
    assert stage.params == pytest.approx(vocab + (m.params - 2 * vocab - m.hidden_size) / 2, rel=1e-9)
    # an odd split: the largest stage holds ceil(61 / 4) = 16 of DeepSeek-V3's layers (all MoE: its first three
    # dense layers are in the first stage)
    d = get_model("deepseek-v3").pipeline_stage(4)
    assert d.layers == 16 and all(d.moe_mask)


def test_one_sequence_waits_for_every_stage_and_a_full_batch_for_the_slowest_one():
    m1, m4 = _model(1, cpu="none"), _model(4, cpu="none")
    f = 20 / 80
    one = StepShape.decode(1, 3000)
    stage = m4._stage_parts(one)
    # one sequence: a micro-batch of one, round all four stages
    assert m4.step_time(one) == pytest.approx(4 * sum(stage), rel=1e-12)
    head = sum(m1._head_parts(1, 1))
    act, logits = m1._comm_parts(1, 1)
    send = m4._send.seconds(m1.hidden_bytes)
    assert sum(stage) == pytest.approx(
        f * (m1.dense_s(1, 1) - head) + head + f * m1.attention_s(one) + f * 160 * act + act + logits + send, rel=1e-12
    )
    # 64 sequences: four micro-batches of 16 pass the slowest stage one after another
    full = StepShape.decode(64, 64 * 3000)
    mbs = micro_batches(full, 4)
    assert [mb.num_seqs for mb in mbs] == [16] * 4 and sum(mb.kv_tokens for mb in mbs) == 64 * 3000
    assert m4.step_time(full) == pytest.approx(sum(sum(m4._stage_parts(mb)) for mb in mbs), rel=1e-12)


def test_prefill_chunks_go_to_the_lightest_micro_batch():
    shape = StepShape.of([(1000, 0), (300, 0), (200, 50)] + [(1, 500)] * 3)
    mbs = micro_batches(shape, 2)
    # decodes 2 + 1; 1000 joins the one with 1 decode, 300 and then 200 the other (2, then 302 tokens)
    assert sorted(mb.new_tokens for mb in mbs) == [502, 1001]
    assert sum(mb.num_seqs for mb in mbs) == 6 and sum(mb.kv_tokens for mb in mbs) == shape.kv_tokens


@settings(max_examples=40, deadline=None)
@given(
    pp=st.sampled_from([2, 3, 4]),
    n=st.integers(1, 200),
    ctx=st.integers(1, 8000),
    k=st.integers(1, 100),
    cpu=st.sampled_from(["none", "vllm-v1", "vllm-v1-async"]),
)
def test_decode_runs_of_pipelines_sum_their_rotations(pp, n, ctx, k, cpu):
    m = _model(pp, cpu=cpu)
    s0 = n * ctx
    steps = [m.step_time(StepShape.decode(n, s0 + n * i)) for i in range(k)]
    assert math.isclose(m.decode_run_time(n, s0, k), math.fsum(steps), rel_tol=1e-9)
    assert m.decode_step_times(n, s0, k) == pytest.approx(steps, rel=1e-12)


def test_models_and_latency_models_that_cannot_take_stages_say_so():
    with pytest.raises(
        ConfigError,
        match="pipeline-parallel-size 2: pipeline parallelism is modelled for models "
        "whose layers all keep full attention; gemma-2-9b has sliding",
    ):
        config_from_options({"model": "gemma-2-9b", "pipeline_parallel_size": 2}, naming="flag")
    with pytest.raises(ConfigError, match="more stages than the model's 32 layers"):
        config_from_options({"model": "llama-2-7b", "pipeline_parallel_size": 33})
    from kvsim.latency import build_latency

    with pytest.raises(ConfigError, match="roofline does not price pipeline stages"):
        build_latency(config_from_options({"model": "llama-2-7b", "pipeline_parallel_size": 2, "latency": "roofline"}))


def test_a_pipeline_run_accounts_for_every_request_and_the_plan_counts_every_gpu(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--trace",
                "traces/chat.jsonl",
                "--model",
                "llama-3-70b",
                "--gpu",
                "H100",
                "-tp",
                "2",
                "-pp",
                "2",
                "--out",
                str(out),
                "--no-plots",
            ]
        )
        == 0
    )
    import pandas as pd

    row = pd.read_csv(out / "runs.csv").iloc[0]
    assert row.finished + row.rejected + row.unfinished == row.requests == 3000
    assert "2 pipeline stages" in (out / "summary.md").read_text()
    from kvsim.planning.plan import add_costs

    rows = [
        {"max_rate_req_s": 2.0, "tp": 2, "gpus_per_replica": 4, "cost_per_gpu_hour": 1.0, "mean_output_tokens": 100.0}
    ]
    add_costs(rows, 5.0)
    assert rows[0]["replicas"] == 3 and rows[0]["gpus"] == 12


def test_the_fleet_plan_sizes_fleets_of_pipelined_replicas(tmp_path, capsys):
    """With -pp 2 every replica spans two stages: fleets grow in steps of 2 GPUs, layouts say pp2, and the
    chosen layout's vllm serve line carries the flag."""
    from kvsim.planning.fleet_plan import layouts_of

    assert {(L.decode, L.pp, L.gpus) for L in layouts_of("g", 1, 4, ["rr"], by_gpus=True, pp=2) if not L.prefill} == {
        (2, 2, 4)
    }
    assert all(L.gpus == 6 for L in layouts_of("g", [1], 3, ["rr"], pp=2))  # 3 replicas of 2 stages
    out = tmp_path / "fp"
    assert (
        main(
            [
                "plan",
                "--trace",
                "traces/chat.jsonl",
                "--model",
                "llama-3-8b",
                "--gpus",
                "h100-80gb:3.0",
                "-pp",
                "2",
                "--slo",
                "ttft_p99=5s",
                "--target-rate",
                "4",
                "--fleet-max-gpus",
                "4",
                "--fleet-routers",
                "least-requests",
                "--out",
                str(out),
                "--no-plots",
            ]
        )
        == 0
    )
    import pandas as pd

    rows = pd.read_csv(out / "fleet_plan.csv")
    assert (rows.gpus % 2 == 0).all() and (rows.pp == 2).all()
    assert "--pipeline-parallel-size 2" in capsys.readouterr().out


def test_replica_groups_take_pipeline_stages(tmp_path, capsys):
    out = tmp_path / "c"
    assert (
        main(
            [
                "cluster",
                "--trace",
                "traces/chat.jsonl",
                "--model",
                "llama-3-70b",
                "--groups",
                "h100-80gb:2:tp2:pp2,h100:1:tp4",
                "--routers",
                "least-requests",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    import pandas as pd

    fleet = pd.read_csv(out / "fleet.csv").iloc[0]
    assert fleet.replicas == 3 and fleet.gpus == 2 * 4 + 4
    assert main(["cluster", "--trace", "traces/chat.jsonl", "--groups", "h100:1:pp2:pp3", "--out", str(out)]) == 2
    assert "optionally with :tpN, :ppN and :dpN" in capsys.readouterr().err
