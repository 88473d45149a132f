"""The MoE router's top-k selection (perop.expert_selection): a chain of small kernels before vLLM 0.11.1, one
kernel after (PR #26717), priced apart from the experts except where the measured MXFP4 times include it."""

import pytest

from kvsim.hardware import get_gpu, get_model
from kvsim.latency.calibration import ElementwiseParams
from kvsim.latency.perop import TOPK_FIXED_COSTS, expert_selection, layer_classes
from kvsim.options import config_from_options
from kvsim.releases import fuses_topk


def _selection(ops):
    return [op for op in ops if op.name == "moe_select"]


def test_the_selection_costs_its_fixed_costs_plus_the_logits_it_streams():
    """Hand-computed: 2 or 5 fixed costs of the element-wise kind, plus the bytes at its bandwidth."""
    from kvsim.latency.calibration import Calibration

    gpu = get_gpu("h100-80gb")
    p = ElementwiseParams(t0_s=2e-6, bw_eff=0.5, serial_s=0.0)
    calib = Calibration(gpu="h100-80gb", elementwise={"act": p})
    model = get_model("qwen3-235b-a22b")  # 128 experts, top-8
    fused, chain = expert_selection(model, True), expert_selection(model, False)
    assert fused.bytes_per_token == 2 * 128 + 12 * 8  # bf16 logits in; fp32 weights, int32 ids and indices out
    assert chain.bytes_per_token == 10 * 128 + 24 * 8  # and an fp32 copy written and read, the sum and division
    tokens = 8192
    stream = tokens * fused.bytes_per_token / (gpu.hbm_bandwidth * 0.5)
    assert fused.seconds(calib, gpu, tokens, 2) == pytest.approx(2 * 2e-6 + stream)
    stream = tokens * chain.bytes_per_token / (gpu.hbm_bandwidth * 0.5)
    assert chain.seconds(calib, gpu, tokens, 2) == pytest.approx(5 * 2e-6 + stream)
    assert TOPK_FIXED_COSTS == {True: 2.0, False: 5.0}


def test_every_moe_layer_selects_its_experts_except_where_mxfp4_times_include_it():
    qwen = get_model("qwen3-235b-a22b")
    [(_, ops, experts)] = layer_classes(qwen, 8)
    assert experts is not None and len(_selection(ops)) == 1
    assert _selection(ops)[0].fixed_costs == 2.0
    [(_, old, _)] = layer_classes(qwen, 8, fused_topk=False)
    assert _selection(old)[0].fixed_costs == 5.0
    for _, ops, experts in layer_classes(get_model("gpt-oss-120b"), 1):
        assert experts is not None and not _selection(ops)  # AIConfigurator timed vLLM's FusedMoE layer
    deepseek = layer_classes(get_model("deepseek-v3"), 8)
    assert [len(_selection(ops)) for _, ops, e in deepseek] == [0 if e is None else 1 for _, _, e in deepseek]
    [(_, dense, none)] = layer_classes(get_model("llama-3.1-8b"), 1)
    assert none is None and not _selection(dense)


def test_the_release_says_which_selection_runs():
    assert not fuses_topk("0.11.0") and not fuses_topk("0.8.5")
    assert fuses_topk("0.11.1") and fuses_topk("0.19") and fuses_topk(None)  # no release: a current one
    from kvsim.latency import build_latency

    def layer_s(release):
        cfg = config_from_options(
            {"model": "qwen3-235b-a22b", "gpu": "h100-80gb", "tensor_parallel_size": 8, "vllm_version": release}
        )
        model = build_latency(cfg)
        [(_, ops, _)] = model.classes
        return sum(op.seconds(model.calib, model.gpu, 8, 2) for op in _selection(ops)), model.calib

    # the same kernel tables (0.14's, the oldest measured) price both: only the selection differs, by 3 fixed costs
    # of V1's measured element-wise kernels (and 8 tokens' bytes, under 1 %)
    (old, calib), (new, _) = layer_s("0.11.0"), layer_s("0.11.1")
    assert old - new == pytest.approx(3 * calib.elementwise["act"].t0_s, rel=0.01)
