import pytest

from kvsim.config import MemoryConfig, plan_pool
from kvsim.errors import ConfigError
from kvsim.hardware import GPU_PRESETS, MODEL_PRESETS, get_gpu, get_model
from kvsim.hardware.gpus import GiB


@pytest.mark.parametrize("name,kib", [("llama-2-7b", 512), ("llama-2-13b", 800), ("llama-2-70b", 320),
                                      ("llama-3-8b", 128), ("llama-3-70b", 320), ("mistral-7b", 128),
                                      ("qwen2.5-7b", 56), ("opt-13b", 800)])
def test_kv_bytes_per_token(name, kib):
    # 2 x layers x kv_heads x head_dim x 2 bytes, worked by hand from each public config.
    assert get_model(name).kv_bytes_per_token == kib * 1024


def test_all_presets_validate():
    for m in MODEL_PRESETS.values():
        m.validate()
    assert {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "l40s", "rtx-4090"} <= set(GPU_PRESETS)


@pytest.mark.parametrize("typed,preset", [("H100", "h100-80gb"), ("NVIDIA H200", "h200-141gb"), ("B200", "b200"),
                                          ("A100-40GB", "a100-40gb"), (" rtx 4090 ", "rtx-4090")])
def test_gpu_names_as_people_write_them(typed, preset):
    assert get_gpu(typed).name == preset


def test_gpu_names_that_could_mean_two_presets_or_another_chip_are_refused():
    with pytest.raises(ConfigError, match="ambiguous.*a100-40gb, a100-80gb"):
        get_gpu("A100")
    with pytest.raises(ConfigError, match="unknown GPU 'L40'.*did you mean 'l40s'"):
        get_gpu("L40")  # the L40 is not the L40S


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
    expected = int(40 * GiB * 0.9 - 6.74e9 * 2 - 2 * GiB)
    assert plan.pool_bytes == expected
    assert plan.pool_tokens == expected // (512 * 1024)
    assert plan_pool(m, g, MemoryConfig(kv_pool_gb=12)).pool_bytes == 12 * GiB
    assert plan_pool(m, g, MemoryConfig(num_blocks=100)).pool_tokens == 1600
    with pytest.raises(ConfigError, match="does not fit"):
        plan_pool(get_model("llama-2-70b"), g, MemoryConfig())
    # tensor parallel splits weights and KV heads
    tp = plan_pool(get_model("llama-2-70b"), get_gpu("a100-80gb"), MemoryConfig(), tp=4)
    assert tp.kv_bytes_per_token == 320 * 1024 // 4
    with pytest.raises(ConfigError, match="divide"):
        plan_pool(get_model("llama-2-70b"), g, MemoryConfig(), tp=3)
