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
    # an NVL72 rack is one NVLink domain: 16 ranks are all NVLink peers
    assert non_torch_bytes(get_gpu("gb200"), 16) == pytest.approx((0.13 + 15 * 0.6) * GiB)
