"""The per-operation latency model: hand numbers, closed forms, calibration, and its errors on measured data."""

import glob
import json
import math
from dataclasses import replace

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from kvsim.cli import main
from kvsim.hardware import get_gpu, get_model
from kvsim.latency import StepShape, get_cpu_overhead
from kvsim.errors import ConfigError
from kvsim.latency.calibration import Calibration, DecodeAttentionParams, GemmParams, LinkParams, shipped_calibration
from kvsim.calibrate.fits import dense_rows, fit_links, leave_one_model_out, summarize_dense
from kvsim.latency.perop import PerOpModel, gemm_seconds
from kvsim.options import config_from_args

EXCERPT = "tests/data/vidur"


def test_gemm_hand_numbers():
    """knee 1 adds compute and memory time: a 4096 x 4096 weight, 1 token, A100-80GB at full efficiency:
    FLOPs 2 x 4096^2 = 33.6 MFLOP / 312 TFLOP/s = 0.1075 us; bytes 2 x (4096^2 + 2 x 4096) = 33.57 MB /
    2.039 TB/s = 16.47 us; + 5 us."""
    p = GemmParams(5e-6, 1.0, 1.0, 1.0)
    t = gemm_seconds(p, get_gpu("a100-80gb"), 1, 4096, 4096, 2)
    assert t == pytest.approx(5e-6 + 2 * 4096**2 / 312e12 + 2 * (4096**2 + 2 * 4096) / 2.039e12, rel=1e-12)
    # a large knee is the roofline: the larger of the two
    t = gemm_seconds(replace(p, knee=60.0), get_gpu("a100-80gb"), 4096, 4096, 4096, 2)
    assert t == pytest.approx(5e-6 + 2 * 4096**3 / 312e12, rel=1e-2)


def _model(cpu="none", tp=1, model="llama-2-7b", gpu="a100-80gb"):
    g = get_gpu(gpu)
    c, _ = shipped_calibration(g)
    return PerOpModel(get_model(model), g, c, get_cpu_overhead(cpu), tp)


def test_decode_attention_floor_and_stream():
    m = _model(model="llama-3-8b")  # 8 KV heads for 32 query heads: the split-KV kernel
    p = m.calib.decode_attention
    # one short sequence: the kernels' floor (or the ramp, where it lies above); a large batch: the KV
    # streamed at the achieved bandwidth
    token_s = 2 * 8 * 128 * 2 / (2.039e12 * p.bw_eff)
    assert m.decode_attention_layer_s(1, 10) == pytest.approx(
        max(p.floor_s, p.ramp_s + (10 + p.per_seq_tokens) * token_s)
    )
    assert m.decode_attention_layer_s(1, 10) < 25e-6
    kv = 256 * 4096
    big = m.decode_attention_layer_s(256, kv)
    assert big == pytest.approx(p.ramp_s + (kv + 256 * p.per_seq_tokens) * token_s, rel=1e-12)


def test_mha_decode_on_a100_walks_each_context_unsplit():
    """vLLM's FlashAttention-2 splits the KV only for grouped queries: Llama-2-7B (32 query heads, 32 KV heads)
    runs one CTA per sequence and head, each streaming its whole context at the fitted per-CTA bandwidth,
    at most one per SM (108 on an A100); the measured table has one 131K-token sequence at 3.0 ms."""
    m = _model()
    p = m.calib.decode_attention
    assert p.unsplit_cta_bw > 0 and m._unsplit is not None
    head_token = 2 * 128 * 2  # K and V of one head, bf16
    one = m.decode_attention_layer_s(1, 131072)
    assert one == pytest.approx(
        p.unsplit_ramp_s + (131072 + p.unsplit_per_seq_tokens) * head_token / p.unsplit_cta_bw, rel=1e-12
    )
    assert one == pytest.approx(3.0e-3, rel=0.1)
    # 2 sequences: 64 CTAs stream below the achieved bandwidth; 4 sequences (128 CTAs, 108 at a time) above
    # it: the bandwidth binds, with the unsplit kernel's ramp and per-sequence tokens
    bw = 2.039e12 * p.bw_eff
    assert 64 * p.unsplit_cta_bw < bw < 108 * p.unsplit_cta_bw
    kv = 2 * 8192
    assert m.decode_attention_layer_s(2, kv) == pytest.approx(
        p.unsplit_ramp_s + (kv + 2 * p.unsplit_per_seq_tokens) * 32 * head_token / (64 * p.unsplit_cta_bw), rel=1e-12
    )
    kv = 4 * 8192
    assert m.decode_attention_layer_s(4, kv) == pytest.approx(
        p.unsplit_ramp_s + (kv + 4 * p.unsplit_per_seq_tokens) * 32 * head_token / bw, rel=1e-12
    )
    # the same heads at TP4 (8 per GPU) on an H100, whose kernels split every layout: the plain stream
    h = _model(model="llama-2-7b", gpu="h100-80gb", tp=4)
    assert h._unsplit is None


def test_fit_finds_an_unsplit_kernel_only_where_the_table_shows_one():
    """Rows made by known parameters: grouped layouts from the split model, one-head-per-KV-head layouts
    from an unsplit walk (22 GB/s per CTA), the fit recovers the walk; rows where those layouts follow the
    split model keep one set of parameters."""
    from kvsim.calibrate.aic import _decode_df, fit_decode

    gpu = get_gpu("a100-80gb")
    truth = DecodeAttentionParams(
        12e-6,
        15e-6,
        0.75,
        0.0,
        90.0,
        unsplit_cta_bw=22e9,
        unsplit_floor_s=11e-6,
        unsplit_ramp_s=7e-6,
        unsplit_per_seq_tokens=80.0,
    )
    rows = [
        (b, ctx, q, kv)
        for b in (1, 2, 4, 16, 64)
        for ctx in (128, 1024, 4096, 16384)
        for q, kv in ((8, 1), (32, 8), (4, 4), (8, 8))
    ]
    d = pd.DataFrame(rows, columns=["num_seqs", "context", "q_heads", "kv_heads"])
    d["head_dim"], d["kv_dtype_bytes"] = 128, 2
    d["kv_tokens"] = d.num_seqs * d.context
    d["kv_bytes"] = (d.kv_tokens * 2 * d.kv_heads * 128 * 2).astype(float)
    d["seconds"] = _decode_df(truth, gpu, d)
    got = fit_decode(d, gpu)
    assert got.unsplit_cta_bw == pytest.approx(22e9, rel=0.02)
    assert got.bw_eff == pytest.approx(0.75, rel=0.02)
    assert _decode_df(got, gpu, d) == pytest.approx(d.seconds.to_numpy(), rel=0.03)
    d["seconds"] = _decode_df(replace(truth, unsplit_cta_bw=0.0), gpu, d)
    assert fit_decode(d, gpu).unsplit_cta_bw == 0.0


@pytest.mark.parametrize("cpu", ["none", "vllm-v0", "vllm-v1", "vllm-v1-async"])
@given(n=st.integers(1, 300), ctx=st.integers(1, 8000), k=st.integers(1, 300))
def test_decode_run_closed_form_equals_the_sum_of_steps(cpu, n, ctx, k):
    m = _model(cpu, tp=2, model="llama-2-70b")
    s0 = n * ctx
    steps = sum(m.step_time(StepShape.decode(n, s0 + n * i)) for i in range(k))
    assert math.isclose(m.decode_run_time(n, s0, k), steps, rel_tol=1e-9)


# Every attention kind, on shapes where decode attention is FLOP-bound where it can be: MLA at TP1 (absorbed
# decode does 2 x heads x (2 x latent + rope) FLOPs per token against a small latent read), windowed and
# chunked layers (gemma-2, llama-4-scout), a mamba hybrid, plain GQA, and MHA on A100 (the unsplit walk).
KINDS = {
    "mla-tp1": ("deepseek-v3", "h200-141gb", 1),
    "mla-tp8": ("deepseek-v3", "h200-141gb", 8),
    "sliding": ("gemma-2-9b", "h100-80gb", 1),
    "chunked": ("llama-4-scout", "h200-141gb", 4),
    "mamba": ("jamba-1.5-mini", "h200-141gb", 1),
    "full": ("llama-3-8b", "a100-80gb", 1),
    "full-unsplit": ("llama-2-7b", "a100-80gb", 1),
}


def test_mla_decode_at_tp1_is_flop_bound():
    m = _model(model="deepseek-v3", gpu="h200-141gb")
    byte_s = m.kv_bytes_per_token_layer / (m.gpu.hbm_bandwidth * m.calib.decode_attention.bw_eff)
    assert m._decode_token_s > 1.2 * byte_s  # the FLOPs clearly dominate, so decode runs must price them


@pytest.mark.parametrize("kind", sorted(KINDS))
@given(n=st.integers(1, 256), ctx=st.integers(1, 20000), k=st.integers(1, 200))
def test_decode_runs_price_every_attention_kind_as_steps_do(kind, n, ctx, k):
    """The closed form of a decode run equals the sum of its steps, FLOP-bound or byte-bound (without the
    engine's per-sequence contexts, windowed layers bound reads by sequences x window in both)."""
    model, gpu, tp = KINDS[kind]
    m = _model("vllm-v1", tp=tp, model=model, gpu=gpu)
    s0 = n * ctx
    steps = [m.step_time(StepShape.decode(n, s0 + n * i)) for i in range(k)]
    assert math.isclose(m.decode_run_time(n, s0, k), math.fsum(steps), rel_tol=1e-9)
    assert m.decode_step_times(n, s0, k) == pytest.approx(steps, rel=1e-12)


@given(
    b=st.integers(1, 64),
    ctx=st.integers(0, 20000),
    new=st.integers(1, 4096),
    cpu=st.sampled_from(["none", "vllm-v0", "vllm-v1", "vllm-v1-async"]),
)
def test_breakdown_adds_up(b, ctx, new, cpu):
    m = _model(cpu, tp=4, model="llama-3-70b", gpu="h100-80gb")
    bd = m.breakdown(StepShape.of([(new, ctx)] * b))
    assert bd["total_s"] == pytest.approx(bd["dense_s"] + bd["attention_s"] + bd["communication_s"] + bd["cpu_s"])
    assert min(bd.values()) >= 0 and bd["communication_s"] > 0


def test_prefill_tile_model_by_hand():
    """One 256-token chunk, no cache, one head per GPU: query tiles of 128 attend to 2 and 4 KV tiles of 64,
    plus 2 tiles of start-up each: 10 tile-iterations in all, the longest unit 6; on 108 SMs the pass takes
    the longest unit: 6 tiles x (4 x 128 x 64 x 128 FLOP / (312 TFLOP/s / 108 x 0.6))."""
    m = PerOpModel(
        get_model("custom:layers=1,q_heads=1,kv_heads=1,head_dim=128,params=1e6"),
        get_gpu("a100-80gb"),
        Calibration("a100-80gb"),
        get_cpu_overhead("none"),
    )
    p = m.calib.prefill_attention
    tile = 4 * 128 * 64 * 128 / (312e12 / 108 * p.flops_eff)
    assert m.prefill_attention_layer_s([(256, 0)]) == pytest.approx(p.floor_s + 6 * tile, rel=1e-12)
    # 300 cached tokens: tiles ceil(300/64)+2 = 7 and 7+2 = 9 (+2 start-up each): longest 11
    assert m.prefill_attention_layer_s([(256, 300)]) == pytest.approx(p.floor_s + 11 * tile, rel=1e-12)


def test_tensor_parallel_all_reduces():
    """Two all-reduces per layer and one for the embedding of tokens x hidden x 2 bytes, plus the logits."""
    c = replace(Calibration("a100-80gb"), all_reduce={"nvswitch": {"2": LinkParams(40e-6, 100e9)}})
    m = PerOpModel(get_model("llama-2-7b"), get_gpu("a100-80gb"), c, get_cpu_overhead("none"), tp=2)
    act = 40e-6 + 8 * 4096 * 2 / 100e9
    logits = 40e-6 + 8 * 16000 * 2 / 100e9
    assert m.communication_s(8, 8) == pytest.approx(65 * act + logits, rel=1e-12)


def test_all_reduce_between_measured_sizes_is_interpolated_on_log_log_axes():
    """Measured 10 us at 1,000 bytes and 40 us at 4,000: 2,000 bytes (halfway on a log axis) take 20 us,
    whatever the lines say; outside the measured sizes the line, scaled to meet the nearest point."""
    line = LinkParams(5e-6, 1e9)  # 5 us + 1 ns a byte: 6 us at 1,000 bytes, 13 us at 8,000
    link = replace(line, points=((1000.0, 10e-6), (4000.0, 40e-6)))
    assert link.seconds(2000) == pytest.approx(20e-6, rel=1e-12)
    assert link.seconds(1000) == pytest.approx(10e-6, rel=1e-12) and link.seconds(4000) == pytest.approx(40e-6)
    assert link.seconds(8000) == pytest.approx(13e-6 * 40e-6 / 9e-6, rel=1e-12)  # the line x (40 / 9)
    assert link.seconds(500) == pytest.approx(5.5e-6 * 10e-6 / 6e-6, rel=1e-12)
    assert line.seconds(2000) == pytest.approx(7e-6, rel=1e-12)  # no points: the line alone


def test_measured_all_reduce_points_load_checked():
    """A calibration's points load back as written; unordered or non-positive pairs are refused by name."""
    good = {"latency_s": 5e-6, "bandwidth": 1e9, "points": [[1000, 1e-5], [4000, 4e-5]]}
    d = Calibration("a100-80gb").to_json()
    d["all_reduce"] = {"nvswitch": {"2": good}}
    c = Calibration.from_json(d)
    assert c.link(2, "nvswitch").points == ((1000.0, 1e-5), (4000.0, 4e-5))
    for bad in ([[4000, 4e-5], [1000, 1e-5]], [[1000, 0.0]], [[1000]], "x"):
        d["all_reduce"] = {"nvswitch": {"2": {**good, "points": bad}}}
        with pytest.raises(ConfigError, match="points"):
            Calibration.from_json(d)


def test_shipped_all_reduce_is_the_measured_table_at_its_sizes():
    """H100, 4 GPUs (AIConfigurator's vLLM 0.24 table): 512 KiB measured 11.36 us, which two lines put at 8.2
    (the custom all-reduce's switch from one-shot to two-shot); the shipped points price it as measured."""
    link = shipped_calibration(get_gpu("h100-80gb"))[0].link(4, "nvswitch")
    assert link.line_seconds(524288) == pytest.approx(8.2e-6, rel=0.02)
    assert dict(link.points)[524288.0] == pytest.approx(link.seconds(524288), rel=1e-12)
    assert 10e-6 < link.seconds(524288) < 13e-6


def test_shipped_calibration_holds_its_measured_error_on_profile_excerpts():
    """The A100 calibration (GEMMs fitted on vLLM 0.14's kernels, element-wise kernels on Vidur's profiles)
    predicts Vidur's whole dense layers of the excerpted profiles within what the cross-check on all of them
    measured (reports/latency-validation/aic.md: medians 0.88-1.06, p10/p90 within 0.83-1.14: Vidur's older
    PyTorch/cuBLAS ran large GEMMs slower than vLLM 0.14 does)."""
    g = get_gpu("a100-80gb")
    rows = [
        r
        for f in sorted(glob.glob(f"{EXCERPT}/compute__a100__*"))
        for r in dense_rows(pd.read_csv(f), f.split("__")[3])
    ]
    c, note = shipped_calibration(g)
    assert note == "" and c.measured_on == "gpu"
    layer = summarize_dense(rows, c, g)["layer"]
    for regime, s in layer.items():
        assert 0.85 <= s["median"] <= 1.08, (regime, s)
        assert s["p10"] >= 0.8 and s["p90"] <= 1.17, (regime, s)


def test_leave_one_model_out_on_the_excerpt():
    """Fitted without each model, the dense layer of that model is predicted within 8% (median), 12% (p10/p90)."""
    g = get_gpu("a100-80gb")
    rows = [
        r
        for f in sorted(glob.glob(f"{EXCERPT}/compute__a100__*"))
        for r in dense_rows(pd.read_csv(f), f.split("__")[3])
    ]
    lomo = leave_one_model_out(rows, g, Calibration("a100-80gb"))["pooled"]["layer"]
    assert set(lomo) == {"1-16", "17-128", "129-1024", ">=1025"}
    for regime, s in lomo.items():
        assert 0.92 <= s["median"] <= 1.08 and s["p10"] >= 0.88 and s["p90"] <= 1.12, (regime, s)


def test_all_reduce_fit_matches_the_shipped_one():
    f = f"{EXCERPT}/network__a100_pairwise_nvlink__all_reduce.csv"
    fitted = fit_links([(f, pd.read_csv(f))])["pairwise"]["2"]
    shipped = shipped_calibration(get_gpu("a100-80gb"))[0].all_reduce["pairwise"]["2"]
    assert fitted.latency_s == pytest.approx(shipped.latency_s, rel=0.1)
    assert fitted.bandwidth == pytest.approx(shipped.bandwidth, rel=0.1)


def test_calibrate_from_vidur_files_names_the_gpu_from_the_path(tmp_path):
    out = tmp_path / "a100.json"
    files = sorted(glob.glob(f"{EXCERPT}/*a100*"))
    assert main(["calibrate", *files, "-o", str(out)]) == 0
    c = json.loads(out.read_text())
    assert c["gpu"] == "a100-80gb" and c["sources"]["gemm"].startswith("fitted")
    assert c["all_reduce"]["pairwise"]["2"]["bandwidth"] > 1e11


def test_derived_and_foreign_calibrations_say_so():
    c, note = shipped_calibration(get_gpu("a100-40gb"))
    assert c.derived_from == "a100-80gb" and "same architecture" in note and not note.startswith("warning")
    c, note = shipped_calibration(get_gpu("rtx-4090"))  # the L40S's die (AD102), measured
    assert c.derived_from == "l40s" and "same architecture" in note and not note.startswith("warning")
    volta = replace(get_gpu("a100-80gb"), name="v100", arch="volta")  # an architecture nothing measured
    c, note = shipped_calibration(volta)
    assert note.startswith("warning") and "unvalidated" in note


def test_latency_command_single_shape_and_csv(tmp_path, capsys):
    assert (
        main(
            [
                "latency",
                "--model",
                "codellama-34b",
                "--gpu",
                "a100-80gb",
                "-tp",
                "2",
                "--batch",
                "8",
                "--context",
                "1024",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for part in ("total", "dense", "attention", "communication", "cpu"):
        assert part in out
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("batch,context,new_tokens\n1,1024,1\n64,2048,1\n1,0,512\n2,300,128\n")
    res = tmp_path / "res.csv"
    assert (
        main(
            [
                "latency",
                "--model",
                "llama-2-70b",
                "--gpu",
                "h100-80gb",
                "--tensor-parallel-size",
                "4",
                "--shapes",
                str(shapes),
                "--out",
                str(res),
            ]
        )
        == 0
    )
    df = pd.read_csv(res)
    assert list(df.columns) == [
        "batch",
        "context",
        "new_tokens",
        "total_s",
        "dense_s",
        "attention_s",
        "communication_s",
        "graph_padding_s",
        "cpu_s",
    ]
    assert list(df.batch) == [1, 64, 1, 2] and list(df.new_tokens) == [1, 1, 512, 128]
    parts = df.dense_s + df.attention_s + df.communication_s + df.cpu_s
    assert ((df.total_s - parts).abs() <= 1e-12 * df.total_s).all()
    bad = tmp_path / "bad.csv"
    bad.write_text("batch,context,new_tokens\n1,10,x\n")
    assert main(["latency", "--shapes", str(bad), "--out", str(res)]) == 2
    assert f"{bad}:2: field 'new_tokens': must be an integer" in capsys.readouterr().err


def test_model_from_a_hugging_face_config(tmp_path):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 22016,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_hidden_layers": 48,
        "vocab_size": 32000,
        "max_position_embeddings": 16384,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "hidden_act": "silu",
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = get_model(str(p))
    preset = get_model("codellama-34b")
    for f in (
        "layers",
        "hidden_size",
        "intermediate_size",
        "q_heads",
        "kv_heads",
        "head_dim",
        "vocab_size",
        "max_context",
        "dtype",
        "gated_mlp",
    ):
        assert getattr(m, f) == getattr(preset, f), f
    assert m.params == pytest.approx(33.74e9, rel=1e-3) and m.kv_bytes_per_token == 2 * 48 * 8 * 128 * 2
    # accepted wherever a preset is
    cfg_run = config_from_args(["--model", str(p), "--gpu", "a100-80gb", "-tp", "2"])
    assert cfg_run.model.hidden_size == 8192
    p.write_text(json.dumps({**cfg, "num_hidden_layers": -1}))
    with pytest.raises(Exception, match="num_hidden_layers"):
        get_model(str(p))


def test_presets_shapes_match_their_parameter_counts():
    from kvsim.hardware import MODEL_PRESETS

    for m in MODEL_PRESETS.values():  # a multimodal preset counts its vision tower as vLLM loads it
        assert m.shape_params() + m.encoder_params == pytest.approx(m.params, rel=0.01), m.name


def test_cpu_presets_change_the_time_as_documented():
    g = get_gpu("a100-80gb")
    c, _ = shipped_calibration(g)
    shape = StepShape.decode(32, 32 * 500)
    t = {
        cpu: PerOpModel(get_model("opt-13b"), g, c, get_cpu_overhead(cpu)).breakdown(shape)
        for cpu in ("none", "vllm-v0", "vllm-v1", "vllm-v1-async")
    }
    assert t["none"]["cpu_s"] == 0
    assert t["vllm-v0"]["cpu_s"] == pytest.approx(2e-3 + 32 * 0.25e-3)
    assert t["vllm-v1"]["cpu_s"] == pytest.approx(0.5e-3 + 32 * 10e-6)
    assert t["vllm-v1-async"]["cpu_s"] == pytest.approx(50e-6)  # hidden behind a GPU step of ~30 ms
    assert t["vllm-v0"]["total_s"] > t["vllm-v1"]["total_s"] > t["vllm-v1-async"]["total_s"] > t["none"]["total_s"]


def test_an_fp8_kv_cache_streams_at_its_own_measured_efficiency():
    """FP8 KV halves the bytes a decode reads, not the time: the calibration carries its own bandwidth efficiency
    and extra time (fitted on vLLM's fp8 decode kernels), so a step takes more than half the bf16 stream."""
    from kvsim.options import config_from_args
    from kvsim.latency import build_latency

    bf16, fp8 = (
        build_latency(config_from_args(["--model", "llama-3-8b", "--gpu", "h100-80gb", *a]))
        for a in ([], ["--kv-cache-dtype", "fp8"])
    )
    p = fp8.calib.decode_attention
    assert 0 < p.kv8_bw_eff < p.bw_eff and p.kv8_ramp_s > 0
    assert fp8._decode_token_s == pytest.approx(bf16._decode_token_s / 2 * p.bw_eff / p.kv8_bw_eff)
    n, kv = 64, 64 * 4000
    a = bf16.decode_attention_layer_s(n, kv)
    b = fp8.decode_attention_layer_s(n, kv)
    assert a / 2 < b < a


def test_an_fp8_kv_caches_per_sequence_cost_is_its_own():
    """Each sequence's fixed work (its splits' merge, its last tile) is counted in FP8 tokens of its own
    (``kv8_per_seq_tokens``), not bf16's count of half-length tokens; 0 keeps bf16's count. Hand-computed: ramp 2
    us + 1 us FP8 extra + (1,000 tokens + 4 x 300 per sequence) x 1 ns."""
    from kvsim.latency.calibration import DecodeAttentionParams

    p = DecodeAttentionParams(floor_s=0.0, ramp_s=2e-6, per_seq_tokens=100.0, kv8_ramp_s=1e-6, kv8_per_seq_tokens=300.0)
    assert p.stream_s(4, 1000, 1e-9, kv8=True) == pytest.approx(2e-6 + 1e-6 + (1000 + 4 * 300) * 1e-9)
    assert p.stream_s(4, 1000, 1e-9, kv8=False) == pytest.approx(2e-6 + (1000 + 4 * 100) * 1e-9)
    assert replace(p, kv8_per_seq_tokens=0.0).stream_s(4, 1000, 1e-9, kv8=True) == pytest.approx(
        3e-6 + (1000 + 4 * 100) * 1e-9
    )
    import numpy as np

    both = p.stream_s(np.array([4, 4]), np.array([1000, 1000]), 1e-9, kv8=np.array([True, False]))
    assert both == pytest.approx([2e-6 + 1e-6 + 2200e-9, 2e-6 + 1400e-9])


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["sliding", "chunked"]),
    window=st.integers(1, 3000),
    tq=st.sampled_from([3, 16, 64, 128]),
    tkv=st.sampled_from([5, 16, 64]),
    new=st.integers(1, 20000),
    cached=st.integers(0, 20000),
    ovh=st.sampled_from([0.0, 0.9, 2.0]),
)
def test_windowed_tiles_in_closed_form_equal_the_tile_by_tile_walk(kind, window, tq, tkv, new, cached, ovh):
    from kvsim.latency.perop import windowed_tiles

    walked = windowed_tiles(new, cached, kind, window, tq, tkv, ovh, explicit_limit=10**9)
    closed = windowed_tiles(new, cached, kind, window, tq, tkv, ovh, explicit_limit=1)
    assert closed[0] == pytest.approx(walked[0], rel=1e-12) and closed[1] == walked[1]


def test_v0_cpu_time_grows_with_tensor_parallel_workers():
    """vllm-v0: 2 ms + 0.25 ms per sequence + 1.5 ms per tensor-parallel GPU beyond the first; the other presets
    do not depend on the GPU count."""
    from kvsim.latency.calibration import shipped_calibration
    from kvsim.latency.cpu import get_cpu_overhead
    from kvsim.latency.perop import PerOpModel

    g = get_gpu("a100-80gb")
    c, _ = shipped_calibration(g)
    shape = StepShape.decode(32, 32 * 500)
    for tp, cpu_s in ((1, 2e-3 + 8e-3), (4, 2e-3 + 3 * 1.5e-3 + 8e-3)):
        m = PerOpModel(get_model("llama-2-70b"), g, c, get_cpu_overhead("vllm-v0"), tp)
        assert m.breakdown(shape)["cpu_s"] == pytest.approx(cpu_s)
    v1 = get_cpu_overhead("vllm-v1")
    assert v1.for_ranks(8) is v1
