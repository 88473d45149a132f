"""The CUDA graphs' memory vLLM 0.20+ subtracts from the KV cache (kvsim/cudagraph_memory.py): the graph counts of
vLLM's default grid, the estimate by hand, a public log, and the KV pool it moves (only from 0.20, only with
graphs, only with the vLLM-profile reserve)."""

import pytest

from kvsim.config import GiB
from kvsim.cudagraph_memory import PER_LAYER_GRAPH, TP_FACTOR, cudagraph_estimate_bytes, graph_counts
from kvsim.hardware import get_model
from kvsim.latency.cuda_graphs import vllm_capture_sizes
from kvsim.memory_budget import memory_budget
from kvsim.options import config_from_args


def test_the_default_grids_graph_counts_as_vllm_logs_them():
    # "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)" at 256 sequences
    assert graph_counts(vllm_capture_sizes(256, 8192), 256) == (51, 35)
    assert graph_counts(vllm_capture_sizes(128, 2048), 128) == (35, 19)  # PIECEWISE=35 (256), FULL=19 (128)
    assert graph_counts(vllm_capture_sizes(1024, 8192), 1024) == (51, 51)


def test_the_estimate_by_hand_and_against_a_public_log():
    m = get_model("qwen2.5-7b")  # 28 layers, hidden 3,584, MLP 18,944
    est = cudagraph_estimate_bytes(m, 1, vllm_capture_sizes(128, 2048), 128)
    activations = 256 * (3 * 18944 + 4 * 3584) * 2  # the forward pass at the largest size, 256 tokens
    assert est == pytest.approx(activations + 0.23 * 2**20 * 28 * (35 + 19 - 1))
    assert est / GiB == pytest.approx(0.37, rel=0.05)  # vLLM 0.22's log: "Estimated CUDA graph memory: 0.37 GiB"
    tp4 = cudagraph_estimate_bytes(m, 4, vllm_capture_sizes(128, 2048), 128)
    assert tp4 - (256 * (3 * 18944 / 4 + 4 * 3584) * 2) == pytest.approx(PER_LAYER_GRAPH * 28 * TP_FACTOR * 53)
    assert cudagraph_estimate_bytes(m, 1, (), 128) == 0.0  # eager: no graphs


def _pool(*args):
    return memory_budget(config_from_args(["--model", "qwen3-8b", "--gpu", "h100-80gb", *args]))


def test_from_vllm_020_the_kv_pool_pays_for_the_graphs():
    old = _pool("--vllm-version", "0.19.1", "--gpu-memory-utilization", "0.9")
    new = _pool("--vllm-version", "0.20.0", "--gpu-memory-utilization", "0.9")
    m = get_model("qwen3-8b")
    est = cudagraph_estimate_bytes(m, 1, vllm_capture_sizes(1024, 8192), 1024)
    assert old.pool_bytes - new.pool_bytes == pytest.approx(est, abs=1)
    assert "CUDA graphs" in new.reserve_how and "CUDA graphs" not in old.reserve_how
    eager = _pool("--vllm-version", "0.20.0", "--gpu-memory-utilization", "0.9", "--cudagraph-capture-sizes", "none")
    assert eager.pool_bytes == old.pool_bytes
    fixed = _pool("--vllm-version", "0.20.0", "--activation-reserve-gb", "2")
    assert fixed.reserve_bytes == 2 * GiB  # a reserve given in GiB is kept as given
    assert _pool().pool_bytes == _pool("--gpu-memory-utilization", "0.9").pool_bytes  # no release: as 0.10-0.11
