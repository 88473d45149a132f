"""CUDA-graph padding (kvsim/latency/cuda_graphs.py): vLLM's default capture sizes, and the per-operation model
running a step's dense layers and all-reduces at the next captured size, in single steps and decode runs alike."""

import pytest

from kvsim.errors import ConfigError
from kvsim.latency import build_latency
from kvsim.latency.base import StepShape
from kvsim.latency.cuda_graphs import parse_capture_sizes, vllm_capture_sizes
from kvsim.options import config_from_args


def test_vllm_default_sizes():
    s = vllm_capture_sizes(256, 8192)
    assert len(s) == 51 and s[:5] == (1, 2, 4, 8, 16) and s[-1] == 512
    assert 248 in s and 256 in s and 264 not in s and 272 in s  # every 8 below 256, every 16 from it
    assert vllm_capture_sizes(128, 8192)[-1] == 256  # 2 x max_num_seqs
    assert vllm_capture_sizes(256, 64)[-1] == 64  # never above the token budget
    assert parse_capture_sizes("none", 256, 8192) == ()
    assert parse_capture_sizes("8, 1,4", 256, 8192) == (1, 4, 8)
    assert parse_capture_sizes("8,1,4,100000", 256, 8192) == (1, 4, 8)  # no step reaches a size past the budget
    for bad in ("1,x", "0,4"):
        with pytest.raises(ConfigError, match="--cudagraph-capture-sizes"):
            parse_capture_sizes(bad, 256, 8192)


def test_vllm_default_sizes_by_release_gpu_and_drafts():
    """vLLM 0.28+ captures up to 1,024 tokens on data-center Blackwell (``_set_cudagraph_sizes``); 0.27+ counts
    each sequence's verified drafts and captures the token budget when it is the limit; no release: as before."""
    from kvsim.hardware import get_gpu

    b200, h100, rtx = get_gpu("b200"), get_gpu("h100-80gb"), get_gpu("rtx-pro-6000")
    assert vllm_capture_sizes(1024, 8192, b200, "0.28.0")[-1] == 1024
    assert len(vllm_capture_sizes(1024, 8192, b200, "0.28.0")) == 35 + 48  # every 16 from 256 to 1,024
    for gpu, release in ((b200, "0.27.0"), (b200, None), (h100, "0.28.0"), (rtx, "0.30.0")):
        assert vllm_capture_sizes(1024, 8192, gpu, release)[-1] == 512
    assert vllm_capture_sizes(64, 8192, h100, "0.27.0", draft_tokens=3)[-1] == 512  # 2 x 64 x (1 + 3)
    assert vllm_capture_sizes(64, 8192, h100, "0.26.0", draft_tokens=3)[-1] == 128
    assert vllm_capture_sizes(256, 300, h100, "0.27.0")[-2:] == (288, 300)  # the budget, off the 16 stride
    assert vllm_capture_sizes(256, 300)[-1] == 288


def _models(*args):
    base = ["--model", "llama-2-70b", "--gpu", "h100-80gb", "-tp", "4", *args]
    return build_latency(config_from_args(base)), build_latency(
        config_from_args([*base, "--cudagraph-capture-sizes", "none"])
    )


def test_a_step_pays_for_its_padding_tokens_in_dense_layers_and_all_reduces():
    padded, eager = _models()
    shape = StepShape.decode(13, 13 * 1000)
    bd, ref = padded.breakdown(shape), eager.breakdown(shape)
    extra = (
        padded.dense_s(16, 13)
        + padded.communication_s(16, 13)
        - padded.dense_s(13, 13)
        - padded.communication_s(13, 13)
    )
    assert bd["graph_padding_s"] == pytest.approx(max(extra, 0.0), rel=1e-12)
    assert bd["attention_s"] == ref["attention_s"] and bd["dense_s"] == ref["dense_s"]
    assert bd["total_s"] == pytest.approx(ref["total_s"] + bd["graph_padding_s"], rel=1e-12)
    for n in (16, 600):  # a captured size, and a step above the largest (eager)
        assert padded.breakdown(StepShape.decode(n, n * 1000))["graph_padding_s"] == 0.0
    # a mixed step of 300 tokens runs piecewise graphs of 304
    assert padded.breakdown(StepShape.of([(290, 0)] + [(1, 500)] * 10))["graph_padding_s"] > 0


def test_decode_runs_price_the_padding_as_their_steps_do():
    padded, _ = _models()
    n, s0, k = 37, 37 * 800, 50
    steps = [padded.step_time(StepShape.decode(n, s0 + n * i)) for i in range(k)]
    assert padded.decode_run_time(n, s0, k) == pytest.approx(sum(steps), rel=1e-9)
    assert padded.decode_step_times(n, s0, k) == pytest.approx(steps, rel=1e-9)


def test_a_run_without_cuda_graphs_says_its_kernel_launches_are_not_priced():
    from kvsim.latency import latency_notes

    base = ["--model", "qwen2.5-7b", "--gpu", "a100-40gb"]
    off = config_from_args([*base, "--cudagraph-capture-sizes", "none"])  # what vLLM's --enforce-eager becomes
    assert any("launches every kernel" in n for n in latency_notes(off))
    assert not any("launches every kernel" in n for n in latency_notes(config_from_args(base)))
