import pytest

from kvsim.config import MemoryConfig, plan_pool
from kvsim.errors import ConfigError
from kvsim.hardware import GPU_PRESETS, MODEL_PRESETS, get_gpu, get_model
from kvsim.hardware.gpus import GiB


@pytest.mark.parametrize(
    "name,kib",
    [
        ("llama-2-7b", 512),
        ("llama-2-13b", 800),
        ("llama-2-70b", 320),
        ("llama-3-8b", 128),
        ("llama-3-70b", 320),
        ("mistral-7b", 128),
        ("qwen2.5-7b", 56),
        ("opt-13b", 800),
        ("llama-3.1-8b", 128),
        ("llama-3.3-70b", 320),
        ("qwen3-8b", 144),
        ("qwen3-32b", 256),
        ("qwen3-235b-a22b", 188),
        ("gpt-oss-120b", 72),
        ("qwen3-0.6b", 112),  # 2 x 28 x 8 x 128 x 2
        ("qwen3-4b", 144),  # 2 x 36 x 8 x 128 x 2
        ("qwen3-coder-480b-a35b", 248),  # 2 x 62 x 8 x 128 x 2
        ("mixtral-8x7b", 128),  # 2 x 32 x 8 x 128 x 2
        ("mixtral-8x22b", 224),  # 2 x 56 x 8 x 128 x 2
        ("llama-4-maverick", 192),  # 2 x 48 x 8 x 128 x 2 (a chunked layer keeps at most its chunk)
        ("glm-4.5", 368),  # 2 x 92 x 8 x 128 x 2
        ("glm-4.5-air", 184),  # 2 x 46 x 8 x 128 x 2
    ],
)
def test_kv_bytes_per_token(name, kib):
    # 2 x layers x kv_heads x head_dim x 2 bytes, worked by hand from each public config.
    assert get_model(name).kv_bytes_per_token == kib * 1024


def test_all_presets_validate():
    for m in MODEL_PRESETS.values():
        m.validate()
    assert {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l40s", "rtx-4090"} <= set(GPU_PRESETS)


@pytest.mark.parametrize(
    "typed,preset",
    [
        ("H100", "h100-80gb"),
        ("NVIDIA H200", "h200-141gb"),
        ("B200", "b200"),
        ("A100-40GB", "a100-40gb"),
        (" rtx 4090 ", "rtx-4090"),
    ],
)
def test_gpu_names_as_people_write_them(typed, preset):
    assert get_gpu(typed).name == preset


def test_gpu_names_that_could_mean_two_presets_or_another_chip_are_refused():
    with pytest.raises(ConfigError, match="ambiguous.*a100-40gb, a100-80gb"):
        get_gpu("A100")
    assert get_gpu("L40").name == "l40"  # the L40 is not the L40S


def test_hugging_face_ids_name_the_presets_and_others_say_what_to_pass():
    from kvsim.hardware.models import HF_IDS

    assert set(HF_IDS.values()) <= set(MODEL_PRESETS)
    assert get_model("meta-llama/Llama-3.1-70B-Instruct").name == "llama-3.1-70b"
    assert get_model("qwen/qwen3-235b-a22b").name == "qwen3-235b-a22b"  # any case
    assert get_model("moonshotai/Kimi-K2-Instruct").num_experts == 384
    with pytest.raises(ConfigError, match="reads no hub: pass the model's config.json path"):
        get_model("someone/unknown-model")


def test_more_served_models_by_their_ids():
    """Models of AIConfigurator's model_configs (their config.json shapes) that kvsim had no preset for."""
    maverick = get_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert (maverick.num_experts, maverick.experts_per_token, maverick.shared_experts) == (128, 1, 1)
    assert sum(maverick.moe_mask) == 24 and maverick.moe_mask[:2] == (False, True)  # every 2nd layer routes
    assert maverick.max_context == 1048576 and maverick.layer_types.count("full") == 12
    coder = get_model("Qwen/Qwen3-Coder-480B-A35B-Instruct")
    assert (coder.num_experts, coder.experts_per_token, coder.moe_intermediate_size) == (160, 8, 2560)
    fp8 = get_model("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8")
    assert fp8.weight_quant == "fp8_block"
    assert "320 per GPU, not a whole number of its 128-wide" in fp8.block_problem(8)  # as vLLM refuses
    assert fp8.block_problem(8, expert_parallel=True) is None and fp8.block_problem(4) is None
    small = get_model("Qwen/Qwen3-Coder-30B-A3B-Instruct")
    assert small.name == "qwen3-30b-a3b-2507" and small.max_context == 262144
    assert get_model("mistralai/Mixtral-8x22B-Instruct-v0.1").vocab_size == 32768
    assert get_model("mistralai/Mixtral-8x22B-v0.1").vocab_size == 32000
    assert get_model("Qwen/Qwen3-0.6B").tie_word_embeddings
    glm = get_model("zai-org/GLM-4.6")
    assert glm.max_context == 202752 and glm.rotary_dim == 64 and sum(glm.moe_mask) == 89  # 3 dense layers first
    assert get_model("zai-org/GLM-4.5").max_context == 131072
    # Z.ai's -FP8 are llm-compressor's per-channel FP8 (compressed-tensors), not a per-tensor guess
    glm_fp8 = get_model("zai-org/GLM-4.5-Air-FP8")
    assert (glm_fp8.quant_method, glm_fp8.weight_quant) == ("compressed-tensors", "fp8")


def test_more_tensor_parallel_ranks_than_kv_heads_replicate_one_head_each():
    """Qwen3-235B-A22B has 4 KV heads; at TP8 each GPU holds one, replicated twice, as vLLM does: 94 layers x
    1 head x 128 dims x 2 (K, V) x 2 B = 48,128 B per token per GPU. TP3 divides neither way."""
    m = get_model("qwen3-235b-a22b")
    assert m.kv_bytes_per_token_gpu(8) == 94 * 1 * 128 * 2 * 2 == m.kv_bytes_per_token_gpu(4)
    assert plan_pool(m, get_gpu("h200-141gb"), MemoryConfig(), tp=8).kv_bytes_per_token == 48_128
    with pytest.raises(ConfigError, match="or be a multiple of it"):
        plan_pool(m, get_gpu("h200-141gb"), MemoryConfig(), tp=3)


def test_custom_model():
    m = get_model("custom:layers=2,kv_heads=2,q_heads=4,head_dim=64,params=1e8,dtype=fp32")
    assert m.kv_bytes_per_token == 2 * 2 * 2 * 64 * 4
    with pytest.raises(ConfigError, match="missing"):
        get_model("custom:layers=2")
    with pytest.raises(ConfigError, match="multiple"):
        get_model("custom:layers=2,kv_heads=3,q_heads=4,head_dim=64,params=1e8")
    with pytest.raises(ConfigError, match="unknown model"):
        get_model("gpt-9")


def test_pool_plan_derived_and_overrides():
    m, g = get_model("llama-2-7b"), get_gpu("a100-40gb")
    plan = plan_pool(m, g, MemoryConfig())
    # 39.49 GiB as CUDA reports an A100-40GB's; vLLM's profile at vllm serve's A100 limits (256 sequences, 2,048
    # tokens): the sampler's 256 rows x 32,000 vocabulary entries x 38.9 B outweigh the forward pass's 2,048 x
    # (3 x 11,008 + 4 x 4,096) x 2 B; plus 0.13 GiB outside PyTorch
    assert 256 * 32000 * 38.9 > 2048 * (3 * 11008 + 4 * 4096) * 2
    rope = 4096 * 128 * 2  # vLLM's rotary cos/sin table: 4,096 positions x 128 dims in fp16
    expected = int(40438 * 2**20 * 0.9 - (6.74e9 * 2 + rope) - (256 * 32000 * 38.9 + 0.13 * GiB))
    assert plan.pool_bytes == expected
    assert plan.pool_tokens == expected // (512 * 1024)
    fixed = plan_pool(m, g, MemoryConfig(activation_reserve="fixed"))
    assert fixed.pool_bytes == int(40438 * 2**20 * 0.9 - (6.74e9 * 2 + rope) - 2 * GiB)  # --activation-reserve-gb 2
    assert plan_pool(m, g, MemoryConfig(kv_pool_gb=12)).pool_bytes == 12 * GiB
    assert plan_pool(m, g, MemoryConfig(num_blocks=100)).pool_tokens == 1600
    with pytest.raises(ConfigError, match="does not fit"):
        plan_pool(get_model("llama-2-70b"), g, MemoryConfig())
    # tensor parallel splits weights and KV heads
    tp = plan_pool(get_model("llama-2-70b"), get_gpu("a100-80gb"), MemoryConfig(), tp=4)
    assert tp.kv_bytes_per_token == 320 * 1024 // 4
    with pytest.raises(ConfigError, match="divide"):
        plan_pool(get_model("llama-2-70b"), g, MemoryConfig(), tp=3)


def test_hf_configs_read_as_vllm_serves_them(tmp_path):
    """Gemma's gelu_pytorch_tanh MLP is gated (GeGLU), OPT's is not; a float32 checkpoint is served in bf16
    (vLLM's dtype auto)."""
    import json

    from helpers import gemma2_config

    gemma = gemma2_config(torch_dtype="float32", hidden_act="gelu_pytorch_tanh")
    p = tmp_path / "config.json"
    p.write_text(json.dumps(gemma))
    m = get_model(str(p))
    assert m.gated_mlp and m.dtype == "bf16" and m.params == pytest.approx(MODEL_PRESETS["gemma-2-9b"].params, rel=0.01)
    p.write_text(
        json.dumps(
            {
                "model_type": "opt",
                "num_hidden_layers": 40,
                "hidden_size": 5120,
                "num_attention_heads": 40,
                "ffn_dim": 20480,
                "vocab_size": 50272,
                "max_position_embeddings": 2048,
                "torch_dtype": "float16",
                "activation_function": "relu",
                "tie_word_embeddings": True,
            }
        )
    )
    m = get_model(str(p))
    assert not m.gated_mlp and m.params == pytest.approx(MODEL_PRESETS["opt-13b"].params, rel=0.01)


def test_rotary_cache_is_read_from_hf_configs(tmp_path):
    """vLLM's rotary cos/sin table (max positions x rotary dims in the model's dtype) is part of each GPU's
    weights: the whole head by default, a part with partial_rotary_factor, none for families without RoPE."""
    import json

    base = {
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 1024,
        "torch_dtype": "bfloat16",
        "model_type": "llama",
    }

    def rope(**more):
        p = tmp_path / "config.json"
        p.write_text(json.dumps({**base, **more}))
        return get_model(str(p)).rope_cache_bytes

    assert rope() == 1024 * 64 * 2
    assert rope(partial_rotary_factor=0.5) == 1024 * 32 * 2
    assert rope(model_type="opt") == 0 == rope(model_type="falcon", alibi=True)
    with pytest.raises(ConfigError, match="partial_rotary_factor"):
        rope(partial_rotary_factor=1.5)
    m = get_model("llama-3.1-8b")
    assert m.gpu_weight_bytes(4) == pytest.approx(m.weight_bytes / 4 + 131072 * 128 * 2)  # whole on every GPU
