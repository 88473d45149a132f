"""`kvsim memory`: golden numbers from the seed design's formulas and vLLM's maximum concurrency."""

import json

import pytest

from kvsim.cli import main
from kvsim.hardware import MODEL_PRESETS, get_model
from kvsim.memory_budget import memory_budget
from kvsim.options import config_from_args

KiB, GiB = 1 << 10, 1 << 30


def budget(*args):
    return memory_budget(config_from_args(list(args)))


def test_seed_design_7b_numbers():
    """Seed design: a 7B model (32 layers, 32 heads of 128) holds 2 x 32 x 128 x 2 B = 16 KiB of KV per
    token per layer, 512 KiB per token, so 4 GiB at 8k tokens and 16 GiB at 32k; fp16 weights ~14 GB."""
    m = get_model("llama-2-7b")
    assert m.kv_bytes_per_token == 512 * KiB
    assert m.kv_bytes_per_token // m.layers == 16 * KiB
    assert 8192 * m.kv_bytes_per_token == 4 * GiB and 32768 * m.kv_bytes_per_token == 16 * GiB
    assert m.weight_bytes == pytest.approx(14e9, rel=0.05)  # 6.74 B params x 2 B


def test_gqa_fp8_and_tensor_parallel():
    assert get_model("llama-3-8b").kv_bytes_per_token == 128 * KiB  # 8 KV heads instead of 32
    assert get_model("llama-3-8b").with_kv_cache_dtype("fp8").kv_bytes_per_token == 64 * KiB
    b = budget("--model", "llama-2-70b", "--gpu", "a100-80gb", "-tp", "4")
    assert b.kv_bytes_per_token_model == 320 * KiB and b.kv_bytes_per_token_gpu == 80 * KiB
    assert b.weight_bytes == pytest.approx(69e9 * 2 / 4 + 4096 * 128 * 2)  # + the rotary table, on every GPU


def test_vllm_maximum_concurrency_by_hand():
    # 10,000 blocks of 16; a 4,096-token request needs 256 blocks: 10000 / 256 = 39.0625x
    b = budget("--model", "llama-3-8b", "--gpu", "h100-80gb", "--num-blocks", "10000", "--max-model-len", "4096")
    assert b.num_blocks == 10000 and b.blocks_per_request == 256
    assert b.max_concurrency == pytest.approx(39.0625) and b.full_length_sequences == 39
    assert b.sequences_at(1000) == 10000 // 63  # 1,000 tokens = 63 blocks of 16
    # derived pool: 80 GB x 0.9 - weights - vLLM's profile (1,024 sampler rows of 128,256 entries x 38.9 B + 0.13
    # GiB outside PyTorch at an H100's vllm serve limits), in 128 KiB tokens
    d = budget("--model", "llama-3-8b", "--gpu", "h100-80gb")
    reserve = 1024 * 128256 * 38.9 + 0.13 * GiB
    weights = get_model("llama-3-8b").weight_bytes + 8192 * 128 * 2  # + the rotary cos/sin table
    expect = int(d.gpu_bytes * 0.9 - weights - reserve) // (128 * KiB)
    assert d.reserve_bytes == pytest.approx(reserve, rel=1e-12)
    assert d.pool_tokens == expect and d.num_blocks == expect // 16


@pytest.mark.parametrize("model", sorted(MODEL_PRESETS))
def test_memory_command_fits_80_columns_for_every_preset(model, capsys):
    tp = 16 if model == "kimi-k2" else min(8, get_model(model).kv_heads)  # Moonshot's smallest FP8 deployment: 16
    # block-FP8 experts that do not split into whole blocks at this TP load only whole (vLLM refuses the split)
    ep = ["--enable-expert-parallel"] if get_model(model).block_problem(tp) else []
    rc = main(
        [
            "memory",
            "--model",
            model,
            "--gpu",
            "h200-141gb",
            "--tensor-parallel-size",
            str(tp),
            *ep,
            "--context",
            "4096",
            "32768",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "maximum concurrency" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_memory_command_with_hf_config_and_context_warning(tmp_path, capsys):
    cfg = {
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert main(["memory", "--model", str(p), "--gpu", "a40", "--max-model-len", "8192"]) == 0
    cap = capsys.readouterr()
    assert "2 x 4 layers x 2 KV heads x 64 dims x 2 B" in cap.out  # 2 KiB per token
    assert "beyond" in cap.err and "2,048" in cap.err
