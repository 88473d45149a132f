"""Quantized checkpoints as vLLM loads them: the config.json's quantization_config (AWQ, GPTQ, compressed-tensors,
ModelOpt, FP8, MXFP4) in weights memory and in GEMM / MoE time. Weight bytes are hand-computed."""

import json

import pytest

from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu, get_model
from kvsim.latency.calibration import shipped_calibration
from kvsim.latency.cpu import get_cpu_overhead
from kvsim.latency.perop import PerOpModel, gemm_seconds, quant_gemm_seconds

LLAMA = json.load(open("tests/data/llama-3.1-8b-config.json"))
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}


def _ct(weights: dict, acts: dict | None = None, targets=("Linear",)) -> dict:
    """A compressed-tensors quantization_config with one config group (llm-compressor's layout)."""
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": list(targets), "weights": weights, "input_activations": acts}},
    }


def load(tmp_path, quant, base=LLAMA, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps({**base, "quantization_config": quant}))
    return get_model(str(p))


def embed_params(m) -> int:
    return m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)


@pytest.mark.parametrize(
    "quant, fields, per_weight",
    [
        # 4-bit weights, an fp16 scale and a 4-bit zero point per 128: 4 + 16/128 + 4/128 bits
        (AWQ, ("int4", "w4a16", 128, True), 0.5 + 2.5 / 128),
        ({**AWQ, "group_size": 64, "zero_point": False}, ("int4", "w4a16", 64, False), 0.5 + 2 / 64),
        (GPTQ, ("int4", "w4a16", 128, False), 0.5 + 2 / 128),  # symmetric: Marlin keeps no zero points
        ({**GPTQ, "bits": 8, "group_size": -1}, ("int8", "w8a16", 0, False), 1.0),  # per channel
        ({**GPTQ, "sym": False}, ("int4", "w4a16", 128, True), 0.5 + 2.5 / 128),
        (
            _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}),
            ("int4", "w4a16", 128, False),
            0.5 + 2 / 128,
        ),
        (
            _ct(
                {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
                {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True},
            ),
            ("int8", "w8a8_int8", 0, False),
            1.0,
        ),
        (
            _ct(
                {"num_bits": 8, "type": "float", "strategy": "channel"},
                {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
            ),
            ("fp8", "fp8", 0, False),
            1.0,
        ),
        (
            _ct(
                {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
                {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128},
            ),
            ("fp8", "fp8_block", 0, False),
            1.0,
        ),
        (
            _ct(
                {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
                {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
            ),
            ("nvfp4", "nvfp4", 0, False),
            0.5625,
        ),  # 4 bits + an FP8 scale per 16
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, ("nvfp4", "nvfp4", 0, False), 0.5625),
        ({"quant_method": "modelopt", "quantization": {"quant_algo": "FP8"}}, ("fp8", "fp8", 0, False), 1.0),
    ],
)
def test_a_quantized_checkpoint_holds_its_weights_in_their_bytes(tmp_path, quant, fields, per_weight):
    m = load(tmp_path, quant)
    assert (m.weight_dtype, m.weight_quant, m.weight_group_size, m.weight_zero_points) == fields
    assert m.weight_dtype_bytes == pytest.approx(per_weight)
    e = embed_params(m)  # the embedding and LM head stay bf16, as vLLM loads them
    assert m.weight_bytes == pytest.approx((m.params - e) * per_weight + e * 2, rel=1e-12)


def test_awq_llama_3_1_8b_weights_and_pool_by_hand(tmp_path, capsys):
    """Llama-3.1-8B in AWQ: its non-embedding parameters at 4 + 16/128 + 4/128 bits, the embedding and LM head
    (2 x 128,256 x 4,096) in bf16: 5.33 GiB against bf16's 14.96 GiB; `kvsim memory` says how they are held."""
    from kvsim.cli import main

    m = load(tmp_path, AWQ)
    bf16 = get_model("tests/data/llama-3.1-8b-config.json")
    e = 2 * 128256 * 4096
    assert m.params == bf16.params
    by_hand = (m.params - e) * (4 + 16 / 128 + 4 / 128) / 8 + e * 2
    assert m.weight_bytes == pytest.approx(by_hand, rel=1e-12)
    assert bf16.weight_bytes - m.weight_bytes == pytest.approx((m.params - e) * (2 - 4.15625 / 8), rel=1e-12)
    for model in (tmp_path / "config.json", "tests/data/llama-3.1-8b-config.json"):
        assert main(["memory", "--model", str(model), "--gpu", "a100-80gb"]) == 0
    out = capsys.readouterr().out
    assert m.weight_bytes / 2**30 == pytest.approx(5.33, abs=0.005) and bf16.weight_bytes / 2**30 == pytest.approx(
        14.96, abs=0.005
    )
    # per GPU, with vLLM's 32 MiB rotary cos/sin table (131,072 positions x 128 x 2 B)
    assert "5.37 GiB per GPU (8.03 B params, int4)" in out and "as awq w4a16, groups of 128 + zero points" in out
    assert "14.99 GiB per GPU (8.03 B params, bf16)" in out


@pytest.mark.parametrize(
    "quant, match",
    [
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "quant_method 'bitsandbytes' is not priced"),
        ({"quant_method": "awq", "bits": 3}, "field 'bits' must be one of 4"),
        (
            {"quant_method": "gptq", "bits": 8, "group_size": 0},
            "field 'group_size' must be a positive whole number or -1",
        ),
        ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "quant_algo 'W4A8_AWQ' is not priced"),
        (
            _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}, {"num_bits": 8, "type": "int"}),
            "int 4-bit weights .* with 8-bit activations is not priced",
        ),
        (_ct({"num_bits": 8, "type": "float"}, targets=("Embedding",)), "0 config groups target Linear"),
        ({"quant_method": "compressed-tensors"}, "needs a non-empty 'config_groups'"),
        ({"quant_method": "mxfp4"}, "mixture-of-experts"),
        ("awq", "quantization_config must be an object"),
    ],
)
def test_a_quantization_kvsim_does_not_price_is_refused_not_read_as_bf16(tmp_path, quant, match):
    with pytest.raises(ConfigError, match=match):
        load(tmp_path, quant)


def test_the_quantization_flag_names_the_checkpoint_method_as_vllm_checks(tmp_path):
    m = load(tmp_path, AWQ)
    assert m.with_quantization("awq") is m and m.with_quantization("awq_marlin") is m
    with pytest.raises(ConfigError, match="not a gptq checkpoint .*awq"):
        m.with_quantization("gptq")
    with pytest.raises(ConfigError, match="already quantized"):
        m.with_quantization("fp8")
    with pytest.raises(ConfigError, match="is not a awq checkpoint .*not quantized"):
        get_model("tests/data/llama-3.1-8b-config.json").with_quantization("awq")  # a config.json is the truth
    preset = get_model("llama-3.1-8b").with_quantization("awq")  # a preset: as AWQ checkpoints hold it, said so
    assert (preset.weight_dtype, preset.weight_group_size, preset.weight_zero_points) == ("int4", 128, True)
    assert preset.name == "llama-3.1-8b-awq" and "priced as its awq checkpoint" in preset.format_note
    from kvsim.options import config_from_args

    cfg = config_from_args(["--model", str(tmp_path / "config.json"), "-q", "awq_marlin", "--gpu", "a100-80gb"])
    assert cfg.model.weight_quant == "w4a16"
    with pytest.raises(ConfigError, match="--quantization"):
        config_from_args(["--model", "llama-3.1-8b", "-q", "int3"])


def test_weight_only_int4_gemms_are_priced_from_measured_weight_only_kernels():
    """W4A16 (Marlin) on an A100: the weight-only fit (TensorRT-LLM's measured weight-only GEMMs,
    benchmarks/fit_weight_only.py), a decode's GEMM (weight-bound) 2-3.2x faster than bf16 (Marlin's published A100
    figure is 3.1x on large weights), a long prefill's (compute-bound) about as fast as bf16; FP8 weights on
    Ampere (no FP8 tensor cores) run the same kind of kernel with 8-bit weights."""
    from kvsim.latency.perop import quant_gemm_scheme

    a100 = get_gpu("a100-80gb")
    c, _ = shipped_calibration(a100)
    assert quant_gemm_scheme(c, a100, "w4a16") == "w4a16" and "TensorRT-LLM" in c.sources["gemm_weight_only"]
    assert quant_gemm_scheme(c, a100, "fp8") == quant_gemm_scheme(c, a100, "fp8_block") == "w8a16"
    p = c.gemm_quant["w4a16"]
    k, n = 4096, 14336
    small = gemm_seconds(c.gemm, a100, 1, k, n, 2) / quant_gemm_seconds(p, a100, 1, k, n, "w4a16")
    assert 2.0 < small < 3.2
    big = gemm_seconds(c.gemm, a100, 16384, k, n, 2) / quant_gemm_seconds(p, a100, 16384, k, n, "w4a16")
    assert 0.75 < big < 1.1
    # a chip with FP8 tensor cores keeps its FP8 kernels; Blackwell, with no weight-only table, the bf16 fit
    h100 = get_gpu("h100-80gb")
    assert quant_gemm_scheme(shipped_calibration(h100)[0], h100, "fp8") == "fp8"
    b200 = get_gpu("b200")
    assert quant_gemm_scheme(shipped_calibration(b200)[0], b200, "w4a16") is None


def test_schemes_run_on_their_own_kernels_where_the_gpu_has_the_tensor_cores(tmp_path):
    nvfp4 = load(tmp_path, {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16})
    for gpu, scheme_fit in (("b200", True), ("h100-80gb", False)):
        g = get_gpu(gpu)
        c, _ = shipped_calibration(g)
        model = PerOpModel(nvfp4, g, c, get_cpu_overhead("none"))
        op = next(op for op in model.ops if op.name == "mlp_down_proj")
        assert op.quant == "nvfp4"
        p = c.gemm_quant["nvfp4" if scheme_fit else "w4a16"]  # Hopper: Marlin's weight-only NVFP4
        # B200: its own fit at the table's measured / fitted ratio for the shape; Hopper: the W4A16 fit alone
        ratio = c.gemm_shapes["nvfp4"].factor(64, op.n, op.k) if scheme_fit else 1.0
        assert op.seconds(c, g, 64, 2) == quant_gemm_seconds(p, g, 64, op.k, op.n, "nvfp4") * ratio
    assert get_gpu("b200").tensor_core_speedup("fp4") == 4.0 and get_gpu("h100-80gb").tensor_core_speedup("fp4") == 1
    assert get_gpu("a100-80gb").tensor_core_speedup("int8") == 2.0 == get_gpu("h200").tensor_core_speedup("fp8")


def test_int4_experts_are_priced_from_their_measured_kernels(tmp_path):
    base = {**LLAMA, "num_local_experts": 8, "num_experts_per_tok": 2, "model_type": "mixtral"}
    m = load(tmp_path, AWQ, base)
    h100 = get_gpu("h100-80gb")
    c, _ = shipped_calibration(h100)
    assert "int4" in c.moe_quant
    model = PerOpModel(m, h100, c, get_cpu_overhead("none"), tp=2)
    experts = [x for _, _, x in model.classes if x is not None]
    assert {x.quant for x in experts} == {"int4"}
    assert experts[0].weight_bytes == pytest.approx(0.5 + 2.5 / 128)
    assert m.expert_weight_bytes() == pytest.approx(m.expert_params() * (0.5 + 2.5 / 128))


LLAMA_70B = {
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


@pytest.mark.parametrize(
    "quant, gpu, logged",
    [
        (AWQ, "h200", 37.87),  # hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4, vLLM 0.18, Machete
        (GPTQ, "h200", 37.11),  # RedHatAI/Meta-Llama-3.1-70B-Instruct-quantized.w4a16
        (
            _ct(
                {"num_bits": 8, "type": "float", "strategy": "channel"},
                {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
            ),
            "h200",
            67.7,
        ),  # RedHatAI ...-FP8
    ],
)
def test_weights_per_gpu_match_vllm_start_up_logs(tmp_path, quant, gpu, logged):
    """'Model loading took X GiB' of public vLLM logs (docs/memory.md): within 1% (the rotary cos/sin cache
    counted: 131,072 positions x 128 x 2 B = 32 MiB)."""
    m = load(tmp_path, quant, LLAMA_70B)
    assert m.rope_cache_bytes == 131072 * 128 * 2
    got = m.gpu_weight_bytes(1, 1, get_gpu(gpu)) / 2**30
    assert got == pytest.approx(logged, rel=0.01)


def test_hopper_holds_awq_zero_points_in_16_bits_as_machete_does(tmp_path):
    m = load(tmp_path, AWQ, LLAMA_70B)
    e = 2 * 128256 * 8192
    extra = (m.params - e) * (2 - 0.5) / 128
    assert m.zero_point_extra_bytes(get_gpu("h100")) == pytest.approx(extra, rel=1e-12)
    assert m.zero_point_extra_bytes(get_gpu("a100-80gb")) == m.zero_point_extra_bytes(get_gpu("b200")) == 0.0
    assert m.gpu_weight_bytes(2, 1, get_gpu("h200")) == pytest.approx(
        (m.weight_bytes + extra) / 2 + m.rope_cache_bytes, rel=1e-12
    )
    assert load(tmp_path, GPTQ, LLAMA_70B).zero_point_extra_bytes(get_gpu("h200")) == 0.0  # symmetric: none


def test_qwen3_fp8_presets_are_the_block_scaled_checkpoints():
    for hf, base in (("Qwen/Qwen3-32B-FP8", "qwen3-32b"), ("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b")):
        m, b = get_model(hf), get_model(base)
        assert (m.weight_dtype, m.weight_quant, m.quant_method) == ("fp8", "fp8_block", "fp8")
        assert (m.layers, m.hidden_size, m.params) == (b.layers, b.hidden_size, b.params)
        e = embed_params(m)
        assert m.weight_bytes == pytest.approx((m.params - e) + 2 * e, rel=1e-12)
        assert m.with_quantization("fp8") is m


def test_qwen3_next_presets_are_its_config_json(tmp_path):
    """Qwen3-Next-80B-A3B (and its -FP8, Coder-Next): the preset is what its config.json's fields give (12 full
    attention layers of 2 KV heads of 256: 2 x 12 x 2 x 256 x 2 B = 24 KiB a token; 36 Gated DeltaNet layers),
    at its published parameter count; the -FP8 id the 128x128-block checkpoint."""
    import json

    from kvsim.hardware.hf_config import model_from_hf_config
    from kvsim.hardware.presets import _QWEN3_NEXT

    m = get_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    (tmp_path / "config.json").write_text(json.dumps(_QWEN3_NEXT))
    assert m.layer_types == model_from_hf_config(str(tmp_path / "config.json")).layer_types
    assert m.layer_types.count("full") == 12 and m.layer_types.count("mamba") == 36
    assert m.kv_bytes_per_token == 2 * 12 * 2 * 256 * 2 and m.params == 79.7e9
    assert get_model("Qwen/Qwen3-Coder-Next") is m
    fp8 = get_model("Qwen/Qwen3-Next-80B-A3B-Thinking-FP8")
    assert (fp8.weight_quant, fp8.layers, fp8.num_experts) == ("fp8_block", 48, 512)


def test_a_checkpoint_that_leaves_attention_unquantized_holds_and_runs_it_in_bf16(tmp_path):
    """ModelOpt's exclude_modules (and compressed-tensors' ignore) naming the attention projections: those stay
    bf16 in memory and in GEMM time; an exclusion list of only the LM head changes nothing."""
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    plain = load(tmp_path, {**nvfp4, "exclude_modules": ["lm_head"]}, name="a.json")
    kept = load(tmp_path, {**nvfp4, "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}, name="b.json")
    assert not plain.attention_unquantized and kept.attention_unquantized
    tower = load(tmp_path, {**nvfp4, "exclude_modules": ["lm_head", "vision_model.*self_attn*"]}, name="c.json")
    assert not tower.attention_unquantized  # a vision tower's attention is not the language model's
    attn = 32 * (4096 * (32 + 16) * 128 + 32 * 128 * 4096)  # q, k, v and o of every layer
    assert kept.weight_bytes - plain.weight_bytes == pytest.approx(attn * (2 - 0.5625), rel=1e-12)
    b200 = get_gpu("b200")
    c, _ = shipped_calibration(b200)
    ops = {op.name: op.quant for op in PerOpModel(kept, b200, c, get_cpu_overhead("none")).ops if not op.kind}
    assert ops["attn_pre_proj"] is None and ops["mlp_down_proj"] == "nvfp4"
    with pytest.raises(ConfigError, match="field 'ignore' must be a list"):
        load(tmp_path, {**_ct({"num_bits": 8, "type": "float"}, {"num_bits": 8, "type": "float"}), "ignore": "x"})


def test_a_checkpoint_that_declares_an_fp8_kv_cache_gets_one_under_auto(tmp_path):
    """vLLM's --kv-cache-dtype auto follows the checkpoint: ModelOpt kv_cache_quant_algo FP8 or a
    compressed-tensors kv_cache_scheme of 8-bit floats store KV in one byte (Llama-3.1-8B: 64 KiB per token
    instead of 128); a dtype given on the command line stands; other declared formats are refused."""
    from kvsim.options import config_from_args

    fp8 = {"num_bits": 8, "type": "float", "strategy": "tensor"}
    declared = [
        {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
        {"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}},
        {**_ct(fp8, fp8), "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"}},
    ]
    for quant in declared:
        m = load(tmp_path, quant)
        assert m.kv_dtype == m.checkpoint_kv_dtype == "fp8" and m.kv_bytes_per_token == 64 * 1024
        cfg = config_from_args(["--model", str(tmp_path / "config.json"), "--gpu", "h100"])
        assert cfg.model.kv_bytes_per_token == 64 * 1024
        cfg = config_from_args(["--model", str(tmp_path / "config.json"), "--gpu", "h100", "--kv-cache-dtype", "bf16"])
        assert cfg.model.kv_bytes_per_token == 128 * 1024
    for quant in ({"quant_method": "modelopt", "quant_algo": "FP8"}, {**_ct(fp8, fp8), "kv_cache_scheme": None}, AWQ):
        assert load(tmp_path, quant).kv_bytes_per_token == 128 * 1024
    with pytest.raises(ConfigError, match="kv_cache_quant_algo 'NVFP4' is not priced"):
        load(tmp_path, {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"})
    with pytest.raises(ConfigError, match="kv_cache_scheme of 'int' 8-bit values is not priced"):
        load(tmp_path, {**_ct(fp8, fp8), "kv_cache_scheme": {"num_bits": 8, "type": "int"}})


def test_exclusions_of_single_layers_keep_only_those_in_the_model_dtype(tmp_path):
    """An exclusion list that names some layers (the first layer's attention, the last layer's MLP) keeps just
    those in bf16, matched as each tool matches names (ModelOpt * patterns, compressed-tensors re: and exact
    names, AWQ's dotted components); the MoE router and a vision tower are not the language model's layers."""
    fp8 = {"quant_method": "modelopt", "quant_algo": "FP8"}
    plain = load(tmp_path, {**fp8, "exclude_modules": ["lm_head"]}, name="a.json")
    some = load(
        tmp_path,
        {**fp8, "exclude_modules": ["lm_head", "model.layers.0.self_attn*", "model.layers.31.mlp*"]},
        name="b.json",
    )
    assert (some.unquantized_attention_layers, some.unquantized_mlp_layers) == ((0,), (31,))
    assert not some.attention_unquantized
    attn, mlp = 4096 * (32 + 16) * 128 + 32 * 128 * 4096, 3 * 4096 * 14336
    assert some.weight_bytes - plain.weight_bytes == pytest.approx((attn + mlp) * (2 - 1), rel=1e-12)
    assert "1 layers' attention and 1 layers' MLP in bf16" in some.quant_detail
    every = [f"model.layers.{i}.self_attn.{p}" for i in range(32) for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
    w8 = {"num_bits": 8, "type": "float", "strategy": "channel"}
    ct = load(tmp_path, {**_ct(w8, w8), "ignore": ["lm_head", *every]}, name="c.json")
    assert ct.attention_unquantized and ct.unquantized_attention_layers == ()  # every layer: GEMMs in bf16 too
    router = load(
        tmp_path, {**_ct(w8, w8), "ignore": ["lm_head", "re:.*mlp.gate$", "re:vision_tower.*"]}, name="d.json"
    )
    assert router.weight_bytes == load(tmp_path, _ct(w8, w8), name="e.json").weight_bytes
    awq = load(tmp_path, {**AWQ, "modules_to_not_convert": ["model.layers.0"]}, name="f.json")
    assert (awq.unquantized_attention_layers, awq.unquantized_mlp_layers) == ((0,), (0,))
    assert some.pipeline_stage(2).unquantized_mlp_layers == (15,)  # the last 16 layers' own numbering
    assert some.pipeline_stage(2).unquantized_attention_layers == ()
    with pytest.raises(ConfigError, match="not a regular expression"):
        load(tmp_path, {**_ct(w8, w8), "ignore": ["re:(unclosed"]}, name="g.json")
