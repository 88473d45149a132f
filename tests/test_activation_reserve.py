"""--activation-reserve vllm: the memory vLLM's start-up profile keeps from the KV cache, against the numbers
public vLLM 0.11 logs print (llm-d's H100 measurements, docs/memory.md), and by hand."""

import pytest

from kvsim.activation_reserve import SAMPLER_BYTES_PER_LOGIT, forward_peak_bytes, vllm_reserve_bytes
from kvsim.hardware import get_gpu, get_model
from kvsim.options import config_from_args

GiB = 2**30


def test_the_sampler_run_dominates_and_does_not_shrink_with_tp():
    m, h100 = get_model("llama-3.1-8b"), get_gpu("h100-80gb")
    sampler = SAMPLER_BYTES_PER_LOGIT * 1024 * 128256  # 1,024 rows of the whole vocabulary
    assert vllm_reserve_bytes(m, h100, 1, 1024, 8192) == pytest.approx(sampler + 0.13 * GiB, rel=1e-12)
    assert sampler / GiB == pytest.approx(4.76, rel=0.02)  # logged torch peak of the profile run
    q = get_model("qwen3-32b")
    assert vllm_reserve_bytes(q, h100, 2, 1024, 8192) - vllm_reserve_bytes(q, h100, 1, 1024, 8192) == pytest.approx(
        0.6 * GiB
    )  # only the second rank's NCCL / custom all-reduce buffers
    # a small vocabulary and a long budget: the forward pass is the peak (LLaVA-1.6-Mistral-7B logged 1.97 GiB)
    mistral = get_model("mistral-7b")
    fwd = forward_peak_bytes(mistral, 1, 16384)
    assert fwd == 16384 * (3 * 14336 + 4 * 4096) * 2
    assert vllm_reserve_bytes(mistral, h100, 1, 1024, 16384) == pytest.approx(fwd + 0.13 * GiB, rel=1e-12)


@pytest.mark.parametrize(
    "args, logged_kv_gib",
    [
        (["--model", "llama-3.1-8b"], 51.38),
        (["--model", "qwen3-32b", "-tp", "2"], 34.49),
        (["--model", "llama-3.3-70b", "-q", "fp8", "-tp", "2"], 32.00),
    ],
)
def test_the_kv_pool_matches_vllm_logs_on_h100(args, logged_kv_gib):
    """'Available KV cache memory' of vLLM 0.11 on H100 at its defaults there (1,024 sequences, 8,192 tokens,
    utilization 0.9): within 0.5%, by default (the scheduler's limits are vllm serve's for an H100). The fixed 2 GiB
    reserve, picked by giving --activation-reserve-gb, was 6% high for the 8B model."""
    cfg = config_from_args([*args, "--gpu", "h100-80gb"])
    assert cfg.memory.activation_reserve == "vllm"
    assert (cfg.scheduler.max_num_seqs, cfg.scheduler.max_num_batched_tokens) == (1024, 8192)
    assert cfg.pool_plan().pool_bytes / GiB == pytest.approx(logged_kv_gib, rel=0.005)
    fixed = config_from_args([*args, "--gpu", "h100-80gb", "--activation-reserve-gb", "2"])
    assert fixed.memory.activation_reserve == "fixed"
    assert fixed.pool_plan().pool_bytes == int(
        fixed.gpu.memory_bytes * 0.9 - fixed.model.gpu_weight_bytes(fixed.tp, 1, fixed.gpu) - 2 * GiB
    )
    named = config_from_args(
        [*args, "--gpu", "h100-80gb", "--activation-reserve-gb", "3", "--activation-reserve", "vllm"]
    )  # the mode, when named, decides
    assert named.pool_plan().pool_bytes == cfg.pool_plan().pool_bytes


def test_non_torch_memory_grows_with_nvlink_peers_within_an_nvlink_domain_only():
    from kvsim.activation_reserve import non_torch_bytes

    h200, l40s = get_gpu("h200-141gb"), get_gpu("l40s")
    assert non_torch_bytes(h200, 1) == pytest.approx(0.13 * GiB)
    assert non_torch_bytes(h200, 8) == pytest.approx((0.13 + 7 * 0.6) * GiB)
    assert non_torch_bytes(h200, 16) == pytest.approx((0.13 + 7 * 0.6 + 8 * 0.05) * GiB)  # 8 more over the network
    assert non_torch_bytes(l40s, 4) == pytest.approx((0.13 + 3 * 0.05) * GiB)  # PCIe peers
    # vLLM 0.18 on: 0.25 on one GPU; 0.19 on: one set of NVLink buffers per group (llm-d's H100 logs of 0.19.0:
    # 2.06-2.07 GiB at TP2, 2.13 at TP4)
    h100 = get_gpu("h100-80gb")
    assert [non_torch_bytes(h100, 1, r) / GiB for r in ("0.17.1", "0.18.0")] == pytest.approx([0.13, 0.25])
    assert non_torch_bytes(h100, 2, "0.18.0") == pytest.approx((0.25 + 0.6) * GiB)
    assert [non_torch_bytes(h100, tp, "0.19.0") / GiB for tp in (2, 4, 8)] == pytest.approx([2.07, 2.13, 2.25])
    assert non_torch_bytes(l40s, 4, "0.19.0") == pytest.approx((0.25 + 3 * 0.05) * GiB)
    # an NVL72 rack is one NVLink domain: 16 ranks are all NVLink peers
    assert non_torch_bytes(get_gpu("gb200"), 16) == pytest.approx((0.13 + 15 * 0.6) * GiB)


def test_the_sampler_runs_peak_follows_the_release():
    """vLLM's dummy sampler run, by release (read from its wheels): PyTorch's sort up to 0.16 (38.9 bytes per
    entry, 50 below 128 rows), Triton / FlashInfer top-k/top-p from 0.17 (14, plus the Triton kernel's row per
    SM), the V2 runner's run without top-k/top-p for the models it serves by default (6, then 2), 14 from 0.33."""
    from kvsim.activation_reserve import sampler_bytes, sampler_peak_bytes, v2_runner_default
    from kvsim.hardware import get_gpu, get_model

    qwen3, llama, qwen25, moe = (get_model(n) for n in ("qwen3-8b", "llama-3.1-8b", "qwen2.5-7b", "gpt-oss-20b"))
    assert sampler_bytes(qwen3, 256, None) == sampler_bytes(qwen3, 256, "0.16.0") == SAMPLER_BYTES_PER_LOGIT
    assert sampler_bytes(qwen3, 64, "0.11.2") == 50.0
    # FlashInfer's top-k/top-p (--flashinfer-sampler; up to 0.11.0 wherever flashinfer imports, as in vLLM's Docker
    # image): no sort and no Triton buffer; by default (a pip install) those releases sort
    assert [sampler_bytes(qwen3, 1024, r) for r in ("0.9.2", "0.11.0", "0.16.0")] == [38.9, 38.9, 38.9]
    assert [sampler_bytes(qwen3, 1024, r, True) for r in ("0.9.2", "0.11.0", "0.16.0")] == [14.0, 14.0, 14.0]
    assert sampler_peak_bytes(qwen3, 1024, "0.11.0", 132, True) == 14.0 * 1024 * 151936
    assert sampler_peak_bytes(qwen3, 1024, "0.19.1", 132, True) == 14.0 * 1024 * 151936  # FlashInfer, not Triton
    assert sampler_peak_bytes(qwen3, 1024, "0.21.0", 132, True) == sampler_peak_bytes(qwen3, 1024, "0.21.0", 132)
    assert sampler_bytes(qwen3, 256, "0.22.0", True) == 6.0  # the V2 runner's dummy run samples neither way
    assert sampler_bytes(qwen3, 256, "0.17.0") == sampler_bytes(qwen25, 256, "0.22.0") == 14.0
    assert sampler_bytes(qwen3, 4, "0.19.1") == 50.0  # under 8 rows the sort still runs
    assert [v2_runner_default(qwen3, r) for r in ("0.21.0", "0.22.0")] == [False, True]
    assert [v2_runner_default(llama, r) for r in ("0.22.0", "0.23.0")] == [False, True]
    assert [v2_runner_default(qwen25, r) for r in ("0.24.0", "0.25.0")] == [False, True]
    assert [v2_runner_default(moe, r) for r in ("0.28.0", "0.29.0")] == [False, True]
    assert [sampler_bytes(qwen3, 256, r) for r in ("0.22.0", "0.26.0", "0.27.0", "0.28.0", "0.33.0")] == [
        6.0,
        2.0,
        6.0,
        2.0,
        14.0,
    ]
    a100 = get_gpu("a100-40gb")  # 108 SMs: Qwen3-8B's 151,936 entries, 0.19.1, 256 rows
    want = 14 * 256 * 151936 + 4 * 108 * 151936
    assert sampler_peak_bytes(qwen3, 256, "0.19.1", a100.sms) == want
    assert want / GiB == pytest.approx(0.57, abs=0.01)


def test_flashinfer_sampler_flag_sizes_the_pool_as_vllms_image_does():
    """vLLM 0.11.0 in its Docker image samples with FlashInfer (14 bytes per logit), a pip install sorts (38.9):
    Qwen3-32B on one H100 at vLLM's defaults (1,024 sequences) gets (38.9 - 14) x 1,024 x 151,936 bytes more KV
    with the flag. gpt-oss-120b on one H100 at 0.10.1 fails to start by default, as the public log of a pip
    install did, and the error names the sampler run that fills the memory."""
    from kvsim.errors import ConfigError
    from kvsim.options import config_from_args

    base = ["--model", "qwen3-32b", "--gpu", "h100-80gb", "--vllm-version", "0.11.0"]
    pip = config_from_args(base).pool_plan().pool_bytes
    image = config_from_args([*base, "--flashinfer-sampler"]).pool_plan().pool_bytes
    assert image - pip == pytest.approx((38.9 - 14.0) * 1024 * 151936, rel=1e-9)
    assert config_from_args([*base, "--no-flashinfer-sampler"]).pool_plan().pool_bytes == pip
    gpt = ["--model", "openai/gpt-oss-120b", "--gpu", "h100-80gb", "--vllm-version", "0.10.1"]
    with pytest.raises(ConfigError, match="does not fit") as failed:
        config_from_args(gpt).pool_plan()
    # says what vLLM does and which flag shrinks the reserve's largest part: 38.9 x 1,024 x 201,088 bytes
    assert "No available memory for the cache blocks" in str(failed.value)
    assert "7.5 GiB of the reserve is its sampler run over 1,024 sequences (a smaller --max-num-seqs" in str(
        failed.value
    )
    assert config_from_args([*gpt, "--flashinfer-sampler"]).pool_plan().pool_bytes > 0
    assert config_from_args([*gpt, "--max-num-seqs", "64"]).pool_plan().pool_bytes > 0
    with pytest.raises(ConfigError, match="run out of memory loading the weights"):
        config_from_args(["--model", "llama-3.1-70b", "--gpu", "h100-80gb"]).pool_plan()


def test_the_kv_pool_and_tokens_of_an_fp8_kv_checkpoint_match_its_vllm_0_14_log():
    """DigitalOcean's GTC-2026 demo server (benchmarks/data/digitalocean_llama70b_fp8_h200.csv): vLLM 0.14.1 serving
    nvidia/Llama-3.1-70B-Instruct-FP8 on one H200 at its defaults logged 53.15 GiB of KV cache and 348,304 tokens,
    the cache in FP8 as the checkpoint declares (160 KiB per token; bf16 would hold half as many)."""
    cfg = config_from_args(
        ["--model", "nvidia/Llama-3.1-70B-Instruct-FP8", "--gpu", "h200", "--vllm-version", "0.14.1"]
    )
    plan = cfg.pool_plan()
    assert plan.pool_bytes / GiB == pytest.approx(53.15, rel=0.005)
    assert plan.pool_bytes // cfg.model.kv_bytes_per_token == pytest.approx(348_304, rel=0.005)


def test_from_0_27_the_v2_runners_penalty_buffers_come_out_of_the_kv_cache():
    """vLLM 0.27 sizes the KV cache by what the instance consumed (mem_get_info), so the V2 model runner's
    buffers allocated before the profile count: its sampler's int32 output counts and 1-bit prompt mask per
    (sequence, vocabulary entry), the structured-output bitmask (1 bit per entry), and per sequence int32 tables of
    1,024 allowed-token ids, 1,024 logit-bias ids and 1,024 values, 128 stop ids, 1,024 bad-word ids and 129
    offsets, 128 logprob token ids, the logits index, and 32 bytes of request state and input offsets (0.27-0.34
    sdists). By hand for Qwen3-8B at 1,024 sequences: 1,024 x (151,936 x (4 + 4 / 32 + 4 / 32) + 17,960) bytes."""
    from kvsim.activation_reserve import runner_buffer_bytes

    qwen, llama_moe = get_model("qwen3-8b"), get_model("qwen3-30b-a3b")
    tables = 4 * (1024 + 1024 + 1024 + 128 + 1024 + 129 + 128 + 1) + 32
    assert tables == 17_960
    assert runner_buffer_bytes(qwen, 1024, "0.30.0") == 1024 * (151936 * 4.25 + tables) == 679_616_512
    assert runner_buffer_bytes(qwen, 1024, "0.26.0") == 0  # counted only from 0.27 (memory_profiling)
    assert runner_buffer_bytes(qwen, 1024, None) == 0
    assert runner_buffer_bytes(llama_moe, 256, "0.28.0") == 0  # a MoE model: the V1 runner until 0.29
    assert runner_buffer_bytes(llama_moe, 256, "0.29.0") == 256 * (151936 * 4.25 + tables)
    # silybench's Qwen3-8B on one H100, vLLM 0.30.0, utilization 0.9, 16,384-token context: logged 377,024
    # (bf16) and 430,272 (FP8) tokens; kvsim within 3.5% and 2% (4.4% and 2.4% before the buffers)
    base = ["--model", "Qwen/Qwen3-8B", "--gpu", "h100-80gb", "--vllm-version", "0.30.0", "--max-model-len", "16384"]
    for extra, logged in (([], 377_024), (["-q", "fp8"], 430_272)):
        cfg = config_from_args([*base, "--gpu-memory-utilization", "0.9", *extra])
        tokens = cfg.pool_plan().pool_tokens
        assert 1.0 < tokens / logged < (1.035 if not extra else 1.02), (extra, tokens)
