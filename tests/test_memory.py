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
    # Moonshot's smallest FP8 deployment: 16
    m = get_model(model)
    # the widest TP up to 8 its heads split over (phi-4's 10 KV heads: 2)
    fits = [t for t in (8, 4, 2, 1) if m.q_heads % t == 0 and (m.kv_heads % t == 0 or t % m.kv_heads == 0)]
    # models too large for the GPUs their KV heads split over take the widest split
    wide = {
        "kimi-k2": 16,
        "kimi-k2-0905": 16,
        "qwen3.5-397b-a17b": 8,
        "qwen3.5-397b-a17b-fp8": 8,
        "qwen3.5-122b-a10b": 8,
    }
    tp = wide.get(model, min(8, m.kv_heads, fits[0]))
    # block-FP8 experts that do not split into whole blocks at this TP load only whole (vLLM refuses the split)
    ep = ["--enable-expert-parallel"] if m.block_problem(tp) else []
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


def _longest(problem: str) -> int:
    return int(problem.split("the longest that would is ")[1].split(" tokens")[0].replace(",", ""))


def test_vllm_refuses_to_start_where_one_max_length_request_does_not_fit():
    """vLLM checks at start-up that one request of max_model_len fits its KV cache. Qwen3-32B (256 KiB a token)
    on one H100 at 0.11.0's defaults: 40,960 tokens need 10.00 GiB, the pool has 4.39; the longest that fits is
    the pool's whole 16-token blocks, and at that --max-model-len vLLM starts, one token more it does not."""
    base = ["--model", "qwen3-32b", "--gpu", "h100-80gb", "--vllm-version", "0.11.0"]
    cfg = config_from_args(base)
    problem = cfg.start_problem()
    assert problem and "40,960 tokens" in problem and "(10.00 GiB of KV cache per GPU" in problem
    longest = _longest(problem)
    assert longest == cfg.pool_plan().pool_bytes // (16 * 256 * KiB) * 16
    assert config_from_args([*base, "--max-model-len", str(longest)]).start_problem() is None
    assert _longest(config_from_args([*base, "--max-model-len", str(longest + 1)]).start_problem()) == longest
    # a pool set by hand is a what-if, run as given
    assert config_from_args([*base, "--kv-pool-gb", "1"]).start_problem() is None
    assert config_from_args([*base, "--num-blocks", "100"]).start_problem() is None


def test_a_hybrid_model_is_checked_in_the_layout_vllm_serves_it_in():
    """gpt-oss-120b on one H100 at 0.95 utilisation (1.7 GiB of KV): its sliding layers hold at most their
    128-token window plus a prefill chunk, so the longest request is the full layers' share of the pool; the
    binary search's answer starts and one token more does not."""
    base = ["--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--gpu-memory-utilization", "0.95"]
    problem = config_from_args(base).start_problem()
    assert problem is not None
    longest = _longest(problem)
    assert 0 < longest < 131072
    assert config_from_args([*base, "--max-model-len", str(longest)]).start_problem() is None
    assert config_from_args([*base, "--max-model-len", str(longest + 1)]).start_problem() is not None


def test_kvsim_run_warns_where_vllm_would_not_start_and_runs_anyway(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 5}) + "\n")
    args = ["--trace", str(trace), "--model", "qwen3-32b", "--gpu", "h100-80gb", "--vllm-version", "0.11.0"]
    assert main(["run", *args, "--no-plots", "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "warning: vLLM would not start" in err and "kvsim simulates the configuration as given" in err
    assert main(["memory", *args[2:]]) == 0
    assert "warning: vLLM would not start" in capsys.readouterr().err
    # a fleet: each replica group on its own GPU, named (an H200 has room)
    groups = ["--groups", "h100-80gb:1,h200-141gb:1", "--out", str(tmp_path / "c")]
    assert main(["cluster", *args, *groups]) == 0
    warned = [x for x in capsys.readouterr().err.splitlines() if "vLLM would not start" in x]
    assert len(warned) == 1 and warned[0].startswith("warning: h100-80gb: vLLM would not start")


def test_the_july_2025_qwen3_updates_have_their_longer_context():
    """Qwen3-235B-A22B-Instruct-2507 / -Thinking-2507 (and -FP8, and the 30B's): 262,144 positions."""
    for hf_id, name in [
        ("Qwen/Qwen3-235B-A22B-Thinking-2507-FP8", "qwen3-235b-a22b-2507-fp8"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b-2507"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8", "qwen3-30b-a3b-2507-fp8"),
    ]:
        m = get_model(hf_id)
        assert m.name == name and m.max_context == 262144
    assert get_model("Qwen/Qwen3-235B-A22B-FP8").max_context == 40960
    assert get_model("qwen3-235b-a22b-2507-fp8").weight_quant == "fp8_block"
