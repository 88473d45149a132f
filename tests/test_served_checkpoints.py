"""Checkpoints as they are served: quantized checkpoints by their Hugging Face ids and by vLLM's --quantization
names on the presets (kvsim/hardware/checkpoints.py), the models of the measured data (MiniMax-M2, Kimi-K2.5), MXFP4
experts as vLLM's kernels lay them out, and releases whose tables time another kernel (kvsim/releases.py).
Bytes are hand-computed."""

import json

import pytest

from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu, get_model
from kvsim.hardware.checkpoints import QUANTIZATION_FLAGS, SCHEMES
from kvsim.options import config_from_args

GIB = 1 << 30


@pytest.mark.parametrize(
    "hf_id, name, fields",
    [
        # NVIDIA ModelOpt: -FP8 per-tensor, -FP4 NVFP4; its MoE exports keep attention in bf16
        ("nvidia/Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b-fp8", ("fp8", "fp8", "modelopt", False)),
        ("nvidia/Llama-3.3-70B-Instruct-FP4", "llama-3.3-70b-nvfp4", ("nvfp4", "nvfp4", "modelopt", False)),
        ("nvidia/Llama-3.1-70B-Instruct-NVFP4", "llama-3.1-70b-nvfp4", ("nvfp4", "nvfp4", "modelopt", False)),
        ("nvidia/DeepSeek-R1-FP4", "deepseek-r1-nvfp4", ("nvfp4", "nvfp4", "modelopt", True)),
        # Red Hat (llm-compressor): FP8 dynamic per channel, W4A16 groups of 128, W8A8 int8
        (
            "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic",
            "llama-3.1-8b-fp8",
            ("fp8", "fp8", "compressed-tensors", False),
        ),
        (
            "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
            "llama-3.3-70b-fp8",
            ("fp8", "fp8", "compressed-tensors", False),
        ),
        (
            "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8",
            "llama-3.1-70b-fp8",
            ("fp8", "fp8", "compressed-tensors", False),
        ),
        (
            "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
            "llama-3.1-8b-int4",
            ("int4", "w4a16", "compressed-tensors", False),
        ),
        (
            "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
            "llama-3.1-8b-int8-w8a8",
            ("int8", "w8a8_int8", "compressed-tensors", False),
        ),
        # AWQ / GPTQ and Qwen's own
        ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "llama-3.1-70b-awq", ("int4", "w4a16", "awq", False)),
        ("Qwen/Qwen3-32B-AWQ", "qwen3-32b-awq", ("int4", "w4a16", "awq", False)),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", "qwen2.5-7b-gptq", ("int8", "w8a16", "gptq", False)),
        ("Qwen/Qwen3-32B-FP8", "qwen3-32b-fp8", ("fp8", "fp8_block", "fp8", False)),  # a preset of its own
        ("Qwen/Qwen3-8B-FP8", "qwen3-8b-fp8", ("fp8", "fp8_block", "fp8", False)),
        ("nvidia/Llama-3.1-405B-Instruct-FP8", "llama-3.1-405b-fp8", ("fp8", "fp8", "modelopt", False)),
        ("nvidia/DeepSeek-V3.1-NVFP4", "deepseek-v3-nvfp4", ("nvfp4", "nvfp4", "modelopt", True)),
    ],
)
def test_a_quantized_checkpoint_id_resolves_to_its_base_model_in_its_format(hf_id, name, fields):
    m = get_model(hf_id).validate()
    assert m.name == name
    assert (m.weight_dtype, m.weight_quant, m.quant_method, m.attention_unquantized) == fields
    base = get_model(name.split("-fp8")[0].split("-nvfp4")[0].split("-awq")[0].split("-int")[0].split("-gptq")[0])
    assert (m.layers, m.hidden_size, m.kv_heads, m.params) == (
        base.layers,
        base.hidden_size,
        base.kv_heads,
        base.params,
    )


def test_an_nvfp4_llama_holds_its_weights_in_4_and_a_half_bits():
    """NVFP4: 4-bit values and one FP8 scale per 16 = 4.5 bits; embedding and LM head in bf16."""
    m = get_model("nvidia/Llama-3.3-70B-Instruct-FP4")
    embed = 2 * 128256 * 8192
    assert m.weight_bytes == pytest.approx((70.6e9 - embed) * 0.5625 + embed * 2, rel=1e-12)


def test_gpt_oss_is_served_with_or_without_its_mxfp4_flag():
    for name in ("gpt-oss-120b", "openai/gpt-oss-120b", "gpt-oss-20b"):
        plain = config_from_args(["--model", name, "--gpu", "h100-80gb", "-tp", "2"]).model
        flagged = config_from_args(["--model", name, "--gpu", "h100-80gb", "-tp", "2", "-q", "mxfp4"]).model
        assert plain == flagged and plain.expert_dtype == "mxfp4" and not flagged.format_note


def test_a_preset_takes_every_quantization_its_model_is_published_in_and_says_how_it_priced_it():
    m = get_model("llama-3.1-70b").with_quantization("modelopt_fp4")
    assert (m.weight_dtype, m.weight_quant, m.quant_method) == ("nvfp4", "nvfp4", "modelopt")
    assert "priced as its modelopt checkpoint" in m.format_note
    kimi = get_model("kimi-k2.5")
    assert kimi.with_quantization("compressed-tensors") is kimi  # its own format: as it is, nothing to say
    nv = kimi.with_quantization("modelopt_fp4")
    assert (nv.weight_dtype, nv.expert_dtype, nv.attention_unquantized) == ("nvfp4", None, True)
    for flag in QUANTIZATION_FLAGS:  # every name on every preset: a format, or a refusal that is true
        for preset in ("llama-3.1-8b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-20b"):
            try:
                q = get_model(preset).with_quantization(flag).validate()
            except ConfigError as e:
                assert ("has no experts" in str(e) and not get_model(preset).is_moe) or (
                    "already quantized" in str(e) and flag == "fp8"
                ), str(e)
                continue
            assert q.weight_quant or q.expert_dtype


def test_refusals_are_true():
    with pytest.raises(ConfigError, match="llama-3.1-8b has no experts"):
        get_model("llama-3.1-8b").with_quantization("mxfp4")
    with pytest.raises(ConfigError, match="already quantized .*mxfp4"):
        get_model("gpt-oss-120b").with_quantization("fp8")
    with pytest.raises(ConfigError, match="not a modelopt checkpoint .*not quantized"):
        get_model("tests/data/llama-3.1-8b-config.json").with_quantization("modelopt_fp4")


def test_a_preset_quantized_by_flag_prints_how_it_was_priced(capsys):
    from kvsim.cli import main

    assert main(["memory", "--model", "llama-3.1-70b", "--gpu", "b200", "-q", "modelopt_fp4"]) == 0
    captured = capsys.readouterr()
    assert "priced as its modelopt checkpoint" in captured.err and "nvfp4" in captured.out


def test_minimax_m2_preset_and_its_config_with_an_all_attention_layer_list(tmp_path):
    m = get_model("MiniMaxAI/MiniMax-M2.5")
    assert m.name == "minimax-m2" and not m.is_hybrid and m.weight_quant == "fp8_block"
    per_layer_attn = 3072 * (48 + 2 * 8) * 128 + 48 * 128 * 3072
    experts = 62 * 256 * 3 * 3072 * 1536
    assert m.shape_params() == pytest.approx(
        experts + 62 * (per_layer_attn + 256 * 3072 + 2 * 3072) + 2 * 200064 * 3072 + 3072, rel=1e-6
    )
    assert m.kv_bytes_per_token == 2 * 62 * 8 * 128 * 2
    cfg = {
        "architectures": ["MiniMaxM2ForCausalLM"],
        "model_type": "minimax_m2",
        "num_hidden_layers": 62,
        "hidden_size": 3072,
        "num_attention_heads": 48,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 1536,
        "num_local_experts": 256,
        "num_experts_per_tok": 8,
        "vocab_size": 200064,
        "max_position_embeddings": 196608,
        "rotary_dim": 64,
        "torch_dtype": "bfloat16",
        "attn_type_list": [1] * 62,
        "quantization_config": {
            "quant_method": "fp8",
            "activation_scheme": "dynamic",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"],
        },
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    c = get_model(str(p))
    assert (c.layers, c.num_experts, c.moe_intermediate_size, c.weight_quant, c.rotary_dim) == (
        62,
        256,
        1536,
        "fp8_block",
        64,
    )
    assert c.kv_bytes_per_token == m.kv_bytes_per_token
    assert c.params == pytest.approx(m.shape_params(), rel=1e-3)
    assert c.qk_norm_all_heads and m.qk_norm_all_heads
    p.write_text(json.dumps({**cfg, "attn_type_list": [0] + [1] * 61}))  # a lightning-attention layer
    with pytest.raises(ConfigError, match="attn_type_list"):
        get_model(str(p))


def test_kimi_k2_5_holds_int4_experts_with_a_bf16_scale_per_32():
    m = get_model("moonshotai/Kimi-K2.5")
    experts = 60 * 384 * 3 * 7168 * 2048
    assert m.expert_weight_bytes() == pytest.approx(experts * (0.5 + 2 / 32), rel=1e-12)
    assert m.weight_bytes == pytest.approx(experts * (0.5 + 2 / 32) + (m.params - experts) * 2, rel=1e-12)
    assert m.weight_bytes / GIB == pytest.approx(554.3, rel=0.01)  # the checkpoint's 64 files, vision tower included


@pytest.mark.parametrize(
    "gpu, tp, inter, hidden",
    [
        ("h100-80gb", 1, 2944, 3072),  # Marlin: intermediate to 128, hidden to 256
        ("h100-80gb", 2, 1536, 3072),
        ("a100-80gb", 4, 768, 3072),
        ("b200", 1, 3072, 3072),  # FlashInfer TRT-LLM: both to 256
        ("b200", 8, 512, 3072),
    ],
)
def test_mxfp4_experts_are_held_padded_as_vllms_kernels_lay_them_out(gpu, tp, inter, hidden):
    m = get_model("gpt-oss-120b")
    width = 2880 / tp
    extra = 36 * 128 * 3 * (inter * hidden - width * 2880) * 0.53125
    assert m.expert_padding_bytes(get_gpu(gpu), tp) == pytest.approx(extra, rel=1e-12)
    bare = m.gpu_weight_bytes(tp)
    assert m.gpu_weight_bytes(tp, 1, get_gpu(gpu)) == pytest.approx(bare + extra, rel=1e-12)
    assert get_model("llama-3.1-8b").expert_padding_bytes(get_gpu(gpu), tp) == 0.0


def test_gpt_oss_120b_on_one_h100_loads_as_vllm_logs_it_and_fails_at_its_defaults(capsys):
    """Public logs: 'Model loading took' 64.4-66.0 GiB on one H100; at 0.90 utilisation vLLM fails to start."""
    from kvsim.memory_budget import memory_budget

    b = memory_budget(
        config_from_args(["--model", "openai/gpt-oss-120b", "--gpu", "h100-80gb", "--gpu-memory-utilization", "0.95"])
    )
    assert 64.4 <= b.weight_bytes / GIB <= 66.1
    with pytest.raises(ConfigError, match="does not fit"):
        config_from_args(["--model", "openai/gpt-oss-120b", "--gpu", "h100-80gb"]).pool_plan()


def test_a_release_whose_table_times_another_kernel_prices_that_op_with_the_newest():
    """B200's vLLM 0.19 MoE table times MXFP4 experts with vllm_mxfp4_moe, not the FlashInfer TRT-LLM kernels gpt-oss
    runs on Blackwell: a 0.15 or 0.19 run takes the newest release's MXFP4 MoE, every other op its own release's."""
    from kvsim.latency import build_latency, latency_notes
    from kvsim.latency.base import StepShape
    from kvsim.latency.calibration import load_calibration, shipped_calibration
    from kvsim.releases import SHIPPED

    newest = load_calibration(SHIPPED / "b200.json")
    own = load_calibration(SHIPPED / "vllm" / "b200-0.19.0.json")
    for v in ("0.15", "0.19"):
        c, note = shipped_calibration(get_gpu("b200"), v)
        assert c.moe_quant["mxfp4"] == newest.moe_quant["mxfp4"] != own.moe_quant["mxfp4"]
        assert c.moe_backends["mxfp4"] == newest.moe_backends["mxfp4"]
        assert c.gemm == own.gemm and c.moe_quant["nvfp4"] == own.moe_quant["nvfp4"]
        assert "MXFP4 MoE priced by vLLM 0.24.0's kernels" in note and "vllm_mxfp4_moe" in note
    cfgs = {
        v: config_from_args(["--model", "gpt-oss-120b", "--gpu", "b200", *(["--vllm-version", v] if v else [])])
        for v in (None, "0.15")
    }
    steps = {v: build_latency(c).step_time(StepShape.decode(32, 32 * 1500)) for v, c in cfgs.items()}
    assert steps["0.15"] == pytest.approx(steps[None], rel=0.05)  # was 2x: the other kernel's MoE
    assert any("MXFP4 MoE" in n for n in latency_notes(cfgs["0.15"]))
    _, note = shipped_calibration(get_gpu("h100-80gb"), "0.22")
    assert "priced by" not in note  # no known mismatch there


def test_int4_experts_of_releases_whose_table_times_triton_take_the_marlin_tables():
    """The 0.18-0.22 tables' INT4 MoE rows (vllm_marlin_int4_moe) were collected through vLLM's Triton W4A16 path,
    not the Marlin kernels compressed-tensors W4A16 experts (Kimi-K2.5) are served with: 0.19 prices them with
    0.24's Marlin rows and says so, every other op its own; Kimi-K2.5's decode step at 0.19 then comes out near
    0.14's and 0.24's (it was 1.8x on H200)."""
    from kvsim.latency import build_latency
    from kvsim.latency.base import StepShape
    from kvsim.latency.calibration import load_calibration, shipped_calibration
    from kvsim.releases import SHIPPED

    for chip, newest_file, own_file, kept in (
        ("h200", "h200-141gb.json", "h200-141gb-0.19.0.json", "fp8"),
        ("b200", "b200.json", "b200-0.19.0.json", "nvfp4"),
    ):
        newest, own = load_calibration(SHIPPED / newest_file), load_calibration(SHIPPED / "vllm" / own_file)
        c, note = shipped_calibration(get_gpu(chip), "0.19.1")
        assert c.moe_quant["int4"] == newest.moe_quant["int4"] != own.moe_quant["int4"]
        assert c.moe_backends["int4"] == newest.moe_backends["int4"]
        assert c.moe_quant[kept] == own.moe_quant[kept] and c.gemm == own.gemm
        assert "INT4 MoE priced by vLLM 0.24.0's kernels" in note and "Triton W4A16" in note
    kimi = ["--model", "moonshotai/Kimi-K2.5", "--gpu", "h200", "--tp", "8", "--vllm-version"]
    step = {
        v: build_latency(config_from_args([*kimi, v])).step_time(StepShape.decode(16, 16 * 1200))
        for v in ("0.14", "0.19.1", "0.24")
    }
    assert step["0.19.1"] == pytest.approx(step["0.24"], rel=0.05)
    assert step["0.19.1"] == pytest.approx(step["0.14"], rel=0.15)


def test_a_release_whose_fp8_gemms_run_no_faster_than_bf16_borrows_the_nearest_plausible_release():
    """Every vLLM 0.14 table times FP8 GEMMs no faster than bf16 ones at compute-bound sizes (H100 0.78 ms against
    0.64 at 4096 x 8192 x 8192), which FP8 tensor cores at twice the rate cannot: those releases price FP8 GEMMs
    with the next measured release's fit and say so; every other op stays their own."""
    from kvsim.latency import build_latency
    from kvsim.latency.base import StepShape
    from kvsim.latency.calibration import load_calibration, shipped_calibration, slow_quant_gemms
    from kvsim.releases import SHIPPED

    h200 = get_gpu("h200")
    own, next_ = (load_calibration(SHIPPED / "vllm" / f"h200-141gb-{r}.json") for r in ("0.14.0", "0.18.0"))
    assert slow_quant_gemms(own, h200) == ["fp8"] and slow_quant_gemms(next_, h200) == []
    assert own.gemm_quant["fp8"].flops_eff * 2 < own.gemm.flops_eff  # the rule's premise, on the shipped fit
    for v in ("0.11", "0.13", "0.14"):
        c, note = shipped_calibration(h200, v)
        assert c.gemm_quant["fp8"] == next_.gemm_quant["fp8"] and c.gemm == own.gemm
        assert c.gemm_quant["fp8_block"] == own.gemm_quant["fp8_block"]  # unused: the per-tensor fit prices it
        assert "fp8 GEMMs priced by vLLM 0.18.0's kernels" in note and "no faster than its bf16" in note
    _, note = shipped_calibration(get_gpu("h100-80gb"), "0.14")
    assert "fp8 GEMMs priced by vLLM 0.19.0's kernels" in note
    assert "GEMMs priced by" not in shipped_calibration(h200, "0.18")[1]
    steps = {
        v: build_latency(
            config_from_args(["--model", "nvidia/Llama-3.1-8B-Instruct-FP8", "--gpu", "h200", "--vllm-version", v])
        ).step_time(StepShape.decode(16, 16 * 1536))
        for v in ("0.14", "0.18")
    }
    assert steps["0.14"] == pytest.approx(steps["0.18"], rel=0.05)  # was 1.1x (decode) to 1.6x (prefill)


def test_a_release_whose_fp8_gemms_are_an_older_releases_slow_table_borrows_another_table():
    """B200's vLLM 0.22 tables have no FP8 GEMM rows: its calibration fitted 0.19's, which are slow (Blackwell's 0.19
    FP8 rows take 1.1x bf16's time) but passed against 0.22's own bf16 fit. Judged as 0.19's, they are slow; and 0.19
    (and a release older than it) must not borrow "0.22's" FP8 GEMMs, the same table: both take 0.24's."""
    from kvsim.latency.calibration import gemm_table, load_calibration, shipped_calibration
    from kvsim.releases import SHIPPED

    b200 = get_gpu("b200")
    c22 = load_calibration(SHIPPED / "vllm" / "b200-0.22.0.json")
    assert gemm_table(c22, "fp8", "0.22.0") == "0.19.0" and gemm_table(c22, "nvfp4", "0.22.0") == "0.22.0"
    newest = load_calibration(SHIPPED / "b200.json")
    for v in ("0.15", "0.19", "0.22"):
        c, note = shipped_calibration(b200, v)
        assert c.gemm_quant["fp8"] == newest.gemm_quant["fp8"], v
        assert c.gemm_shapes["fp8"] == newest.gemm_shapes["fp8"], v  # the fit's measured shapes with it
        assert "fp8 GEMMs priced by vLLM 0.24.0's kernels" in note, v
    assert "0.22.0's fp8 GEMM rows (vLLM 0.19.0's table)" in shipped_calibration(b200, "0.22")[1]
    assert "GEMMs priced by" not in shipped_calibration(b200, "0.24")[1]


def test_a_checkpoint_id_that_declares_an_fp8_kv_cache_stores_it_from_vllm_0_14():
    """nvidia/Llama-3.1-70B-Instruct-FP8 declares an FP8 KV cache (vLLM 0.14.1 logged "Using fp8 data type to
    store kv cache" serving it): 2 x 80 layers x 8 heads x 128 dims x 1 byte = 160 KiB per token from vLLM 0.14 and
    with no release given; 0.13 kept it in bf16 (320 KiB) and says why; --kv-cache-dtype stands in both."""
    args = ["--model", "nvidia/Llama-3.1-70B-Instruct-FP8", "--gpu", "h200"]
    for extra, kib in (([], 160), (["--vllm-version", "0.14"], 160), (["--vllm-version", "0.13.0"], 320)):
        cfg = config_from_args(args + extra)
        assert cfg.model.kv_bytes_per_token == kib * 1024, extra
    assert "before 0.14 does not follow" in config_from_args(args + ["--vllm-version", "0.13"]).model.format_note
    assert config_from_args(args + ["--vllm-version", "0.13", "--kv-cache-dtype", "fp8"]).model.kv_bytes_per_token == (
        160 * 1024
    )
    assert config_from_args(args + ["--kv-cache-dtype", "bf16"]).model.kv_bytes_per_token == 320 * 1024
    # a checkpoint that declares none (Red Hat's FP8-dynamic) keeps the model's dtype
    assert get_model("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic").kv_dtype is None
    assert get_model("nvidia/Llama-3.3-70B-Instruct-FP4").kv_dtype == "fp8"
    # MiniMax-M2.5's NVFP4 export declares FP8 (62 layers x 8 heads x 128 dims x 2 x 1 byte = 124 KiB per token)
    assert get_model("nvidia/MiniMax-M2.5-NVFP4").kv_bytes_per_token == 124 * 1024


def test_every_scheme_names_a_method_vllm_checks():
    assert set(SCHEMES) >= {
        "fp8",
        "modelopt",
        "modelopt_fp4",
        "awq",
        "awq_marlin",
        "gptq",
        "gptq_marlin",
        "compressed-tensors",
        "mxfp4",
    }


@pytest.mark.parametrize(
    "ignore, match",
    [
        (["re:(a+)+$"], "will not run"),
        (["re:" + "a" * 600], "will not run"),
        (["re:(unclosed"], "is not a regular expression"),
        (["lm_head"] * 100_001, "at most 100,000"),
    ],
)
def test_an_exclusion_list_that_asks_for_unbounded_work_is_refused(tmp_path, ignore, match):
    cfg = json.load(open("tests/data/llama-3.1-8b-config.json"))
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "ignore": ignore,
        "config_groups": {
            "g": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
            }
        },
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=match):
        get_model(str(p))


def test_releases_from_0_20_default_to_92_percent_of_gpu_memory():
    """vLLM PR #38284: --gpu-memory-utilization 0.90 -> 0.92 by default, in the 0.20.0 wheel already (announced for
    0.21); a value given stands."""

    def mem(*extra):
        return config_from_args(["--model", "llama-3.1-8b", "--gpu", "l40s", *extra]).memory.gpu_memory_utilization

    assert mem() == mem("--vllm-version", "0.19.1") == 0.90
    assert mem("--vllm-version", "0.20") == mem("--vllm-version", "0.21") == mem("--vllm-version", "0.28.0") == 0.92
    assert mem("--vllm-version", "0.28", "--gpu-memory-utilization", "0.8") == 0.8


@pytest.mark.parametrize(
    "model, flags, refused",
    [
        # Qwen3-235B-A22B-FP8's experts of 1,536 at TP8: 192 per GPU, not a 128-wide block (vLLM's load fails)
        ("Qwen/Qwen3-235B-A22B-FP8", ["-tp", "8"], "1,536 split over 8 GPUs is 192 per GPU"),
        ("Qwen/Qwen3-235B-A22B-FP8", ["-tp", "8", "--enable-expert-parallel"], None),  # experts whole
        ("Qwen/Qwen3-235B-A22B-FP8", ["-tp", "4"], None),  # 384 = 3 blocks
        ("Qwen/Qwen3-235B-A22B-FP8", ["-tp", "4", "-dp", "2"], "split over 8 GPUs"),  # experts over dp x tp
        ("Qwen/Qwen3-235B-A22B", ["-tp", "8"], None),  # bf16: no blocks
        ("MiniMaxAI/MiniMax-M2.5", ["-tp", "8"], "192 per GPU"),
        ("Qwen/Qwen3-30B-A3B-FP8", ["-tp", "4"], "768 split over 4 GPUs is 192 per GPU"),
        ("Qwen/Qwen3-30B-A3B-FP8", ["-tp", "2"], None),
        ("Qwen/Qwen3-32B-FP8", ["-tp", "8"], None),  # 25,600 / 8 = 3,200 = 25 blocks
        ("deepseek-ai/DeepSeek-V3", ["-tp", "8"], None),  # experts 2,048 / 8 = 256; dense MLP 18,432 / 8
    ],
)
def test_block_fp8_weights_must_split_into_whole_blocks_as_vllm_loads_them(model, flags, refused):
    args = ["--model", model, "--gpu", "h200", *flags]
    if refused is None:
        config_from_args(args)
        return
    with pytest.raises(ConfigError, match=refused) as e:
        config_from_args(args)
    assert "vLLM refuses to load it" in str(e.value) and "--enable-expert-parallel" in str(e.value)


def test_a_dense_block_fp8_checkpoint_whose_mlp_does_not_split_into_blocks_is_refused():
    from dataclasses import replace

    m = replace(get_model("qwen3-8b-fp8"), intermediate_size=12288 + 128)  # 97 blocks of 128
    assert m.block_problem(1) is None  # whole on one GPU
    assert "dense MLP width (intermediate_size) 12,416 split over 2 GPUs is 6208 per GPU" in (m.block_problem(2) or "")
    assert replace(m, weight_quant="fp8").block_problem(2) is None  # per-tensor scales: any split


def test_llama_3_1_405b_and_deepseek_v3_1_by_their_ids():
    """Llama-3.1-405B from its config.json: 126 layers x (attention 2 x 16,384^2 + 2 x 16,384 x 1,024, MLP 3 x
    16,384 x 53,248) + 2 x 128,256 x 16,384 untied = 405.8e9 parameters; KV 2 x 126 x 8 x 128 x 2 B = 504 KiB per
    token. DeepSeek-V3.1 (and -Terminus) has V3's config; NVIDIA's NVFP4 export declares an FP8 KV cache.
    Meta's own FP8 of 405B leaves its attention out of FP8 by an exclusion list only its config.json holds: by id
    it is not guessed."""
    m = get_model("meta-llama/Llama-3.1-405B-Instruct")
    per_layer = 2 * 16384**2 + 2 * 16384 * 1024 + 3 * 16384 * 53248
    assert m.params == pytest.approx(126 * per_layer + 2 * 128256 * 16384, rel=1e-3)
    assert m.kv_bytes_per_token == 504 * 1024
    for hf_id in ("deepseek-ai/DeepSeek-V3.1", "deepseek-ai/DeepSeek-V3.1-Terminus"):
        assert get_model(hf_id).name == "deepseek-v3"
    assert get_model("nvidia/DeepSeek-V3.1-NVFP4").kv_dtype == "fp8"
    with pytest.raises(ConfigError, match="config.json"):
        get_model("meta-llama/Llama-3.1-405B-Instruct-FP8")


def test_qwen2_5_72b_and_phi_3_5_mini_by_their_ids():
    """Qwen2.5-72B from its config.json: 80 layers x (attention 2 x 8,192^2 + 2 x 8,192 x 1,024, MLP 3 x 8,192 x
    29,568) + 2 x 152,064 x 8,192 untied = 72.7e9 parameters; KV 2 x 80 x 8 x 128 x 2 B = 320 KiB per token.
    Phi-3.5-mini: 32 layers x (4 x 3,072^2 + 3 x 3,072 x 8,192) + 2 x 32,064 x 3,072 = 3.82e9; its 32 KV heads of 96
    dims: 2 x 32 x 32 x 96 x 2 B = 384 KiB per token. Qwen2.5-Coder-7B keeps Qwen2.5-7B's shapes."""
    q = get_model("Qwen/Qwen2.5-72B-Instruct")
    assert q.params == pytest.approx(
        80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 29568) + 2 * 152064 * 8192, rel=2e-3
    )
    assert q.kv_bytes_per_token == 320 * 1024
    p = get_model("microsoft/Phi-3.5-mini-instruct")
    assert p.params == pytest.approx(32 * (4 * 3072**2 + 3 * 3072 * 8192) + 2 * 32064 * 3072, rel=2e-3)
    assert p.kv_bytes_per_token == 384 * 1024
    assert get_model("Qwen/Qwen2.5-Coder-7B-Instruct").name == "qwen2.5-7b"


def test_fp8_experts_on_blackwell_before_0_24_take_the_kernel_vllm_runs_there():
    """Blackwell's tables before 0.24 time FP8 experts with Triton's fused MoE, which vLLM runs there only when
    told: a B200 at 0.19 prices them with 0.24's FlashInfer rows unless --moe-backend triton asks for Triton (its
    own rows); the warning names only the MoE kernels the model runs."""
    from kvsim.latency import build_latency, latency_notes
    from kvsim.latency.base import StepShape
    from kvsim.latency.calibration import load_calibration, shipped_calibration
    from kvsim.releases import SHIPPED

    newest, own = load_calibration(SHIPPED / "b200.json"), load_calibration(SHIPPED / "vllm" / "b200-0.19.0.json")
    c, _ = shipped_calibration(get_gpu("b200"), "0.19")
    assert c.moe_quant["fp8"] == newest.moe_quant["fp8"] != own.moe_quant["fp8"]
    assert c.moe_backends["fp8"]["triton"] == own.moe_backends["fp8"]["triton"]
    _, hopper = shipped_calibration(get_gpu("h200"), "0.19")
    assert "FP8 MoE" not in hopper  # Hopper serves block FP8 experts with Triton under TP, as its tables time
    qwen = ["--model", "Qwen/Qwen3-235B-A22B-FP8", "--gpu", "b200", "--tp", "4", "--vllm-version", "0.19"]
    notes = " ".join(latency_notes(config_from_args(qwen)))
    assert "FP8 MoE priced by vLLM 0.24.0's kernels" in notes and "INT4 MoE" not in notes and "MXFP4" not in notes
    triton = " ".join(latency_notes(config_from_args([*qwen, "--moe-backend", "triton"])))
    assert "FP8 MoE" not in triton and "fp8 GEMMs priced by" in triton  # its own Triton rows price the experts
    kimi = ["--model", "moonshotai/Kimi-K2.5", "--gpu", "h200", "--tp", "8", "--vllm-version", "0.19"]
    assert "INT4 MoE priced by vLLM 0.24.0" in " ".join(
        latency_notes(config_from_args([*kimi, "--moe-backend", "marlin"]))
    )
    step = {
        extra: build_latency(config_from_args([*qwen, *extra])).step_time(StepShape.decode(16, 16 * 1200))
        for extra in ((), ("--moe-backend", "triton"))
    }
    assert step[()] < 0.9 * step[("--moe-backend", "triton")]


def test_kimi_k2s_later_checkpoints_take_their_own_context_and_expert_format():
    """Kimi-K2-Instruct-0905 was retrained for 262,144 positions (the July release: 131,072); Kimi-K2-Thinking
    is K2.5's text model: INT4 W4A16 routed experts over the same shapes, 1,027 B parameters with no vision tower
    (595 GB of weights as published, 69.3 GiB on each of 8 GPUs)."""
    k2, k0905, thinking = (
        config_from_args(["--model", f"moonshotai/{name}", "--gpu", "h200", "-tp", "8"]).model
        for name in ("Kimi-K2-Instruct", "Kimi-K2-Instruct-0905", "Kimi-K2-Thinking")
    )
    assert (k2.max_context, k0905.max_context, thinking.max_context) == (131072, 262144, 262144)
    assert k0905.weight_dtype == k2.weight_dtype == "fp8" and k0905.expert_dtype == k2.expert_dtype
    assert thinking.expert_dtype == "int4" and thinking.quant_method == "compressed-tensors"
    assert thinking.layers == k2.layers and thinking.num_experts == 384
    assert thinking.gpu_weight_bytes(8) / 2**30 == pytest.approx(69.34, abs=0.01)


def test_naming_awq_or_gptq_on_a_release_before_0_24_says_vllm_runs_its_plain_kernels():
    """vLLM up to 0.23 forces its plain AWQ / GPTQ kernels when --quantization names awq or gptq (Marlin only for
    awq_marlin, gptq_marlin or no flag); from 0.24 all four names run Marlin. kvsim prices Marlin and says so."""
    from kvsim.releases import legacy_int4_kernels

    assert legacy_int4_kernels("0.8.5", "awq") and legacy_int4_kernels("0.23.1", "gptq")
    assert not legacy_int4_kernels("0.24.0", "awq") and not legacy_int4_kernels(None, "awq")
    assert not legacy_int4_kernels("0.8.5", "awq_marlin") and not legacy_int4_kernels("0.8.5", None)
    args = ["--model", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "a100-40gb", "--vllm-version", "0.8.5"]
    named = config_from_args([*args, "-q", "awq"]).model
    assert "plain AWQ kernels" in named.format_note and named.weight_quant == "w4a16"
    assert "plain" not in config_from_args([*args, "-q", "awq_marlin"]).model.format_note
    assert "plain" not in config_from_args(args).model.format_note


def test_minimax_m2_all_reduces_its_qk_norm_per_layer_with_tensor_parallelism():
    """vLLM's MiniMax-M2 normalizes q and k over all heads (MiniMaxText01RMSNormTP.forward_qk): at TP > 1 each of its
    62 attention layers all-reduces 2 fp32 values a token beyond the usual two all-reduces; at TP 1 nothing."""
    from dataclasses import replace

    from kvsim.latency import build_latency
    from kvsim.options import config_from_options

    def comm(model, tp, tokens):
        opts = {"model": "MiniMaxAI/MiniMax-M2.5", "gpu": "h200", "tensor_parallel_size": tp}
        cfg = config_from_options({**opts, "enable_expert_parallel": tp > 1})
        cfg = replace(cfg, model=model)
        lat = build_latency(cfg)
        while not hasattr(lat, "communication_s"):
            lat = lat.inner if hasattr(lat, "inner") else lat.base
        return lat.communication_s(tokens, tokens), lat

    m = get_model("MiniMaxAI/MiniMax-M2.5")
    with_norm, lat = comm(m, 8, 16)
    without, _ = comm(replace(m, qk_norm_all_heads=False), 8, 16)
    assert with_norm - without == pytest.approx(62 * lat._links.seconds(16 * 8), rel=1e-9)
    assert comm(m, 1, 16)[0] == comm(replace(m, qk_norm_all_heads=False), 1, 16)[0] == 0.0


def test_language_model_only_leaves_the_vision_tower_out():
    """vLLM's --language-model-only serves a multimodal model without its encoders: gemma-3-12b's weights lose its
    0.43 B-parameter vision tower (bf16: 0.86 GB), a text-only model is unchanged; the flag of a pasted `vllm
    serve` line is taken (and --profiler-config accepted with no effect)."""
    from kvsim.options import config_from_args

    def weights(*args):
        return config_from_args(["--gpu", "h100", *args]).model.weight_bytes

    gemma = ["--model", "google/gemma-3-12b-it"]
    assert weights(*gemma) - weights(*gemma, "--language-model-only") == pytest.approx(0.43e9 * 2)
    assert weights("--model", "llama-3.1-8b") == weights("--model", "llama-3.1-8b", "--language-model-only")
    assert get_model("kimi-k2-thinking").encoder_params == 0 < get_model("kimi-k2.5").encoder_params
    from kvsim.cli import main

    args = ["memory", *gemma, "--gpu", "h100", "--language-model-only", "--profiler-config", '{"profiler": "torch"}']
    assert main(args) == 0
