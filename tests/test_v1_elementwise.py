"""vLLM V1's element-wise kernels (kvsim/latency/perop.py fuse_residual_adds, Calibration.v1_elementwise): the
residual add inside RMSNorm, each kernel at the times of vLLM's own row kernels; the V0 engine keeps Vidur's
eager PyTorch ops."""

import numpy as np
import pytest

from kvsim.calibrate.fits import V1_SHAPES, fit_row_kernels
from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu
from kvsim.latency import build_latency
from kvsim.latency.calibration import Calibration, ElementwiseParams, shipped_calibration
from kvsim.latency.perop import elementwise_formula
from kvsim.options import config_from_args


def _kinds(lat) -> list[tuple[str, str, float]]:
    return [(op.name, op.kind, op.bytes_per_token) for op in lat.classes[0][1] if op.kind]


def test_v1_fuses_the_residual_add_into_the_norms_and_v0_does_not():
    """Llama-3.1-8B (hidden 4,096, bf16): V0 runs norm 16 KiB/token, rope, norm, act, add (24 KiB); V1's
    fused_add_rms_norm reads and writes the residual too (32 KiB/token) and no add kernel runs."""
    v0 = build_latency(config_from_args(["--model", "llama-3.1-8b", "--gpu", "h100", "--vllm-engine", "v0"]))
    v1 = build_latency(config_from_args(["--model", "llama-3.1-8b", "--gpu", "h100"]))
    assert [k for _, k, _ in _kinds(v0)] == ["norm", "rope", "norm", "act", "add"]
    assert [k for _, k, _ in _kinds(v1)] == ["norm", "rope", "norm", "act"]
    norms = {n: b for n, k, b in _kinds(v1) if k == "norm"}
    assert norms == {"input_layernorm": 4 * 4096 * 2, "post_attention_layernorm": 4 * 4096 * 2}
    assert v1.ops == v1.classes[0][1]


def test_a_v1_layer_prices_its_element_wise_kernels_with_the_measured_row_kernels():
    """H200, Llama-3.1-70B at 4 decode tokens, by hand from the shipped constants: each norm t0 + the larger of
    8,192 x its per-element time and 4 x 32 KiB at its bandwidth; SiLU-and-mul over 28,672; rotary over 9,216."""
    lat = build_latency(config_from_args(["--model", "llama-3.1-70b", "--gpu", "h200"]))
    calib, _ = shipped_calibration(get_gpu("h200"))
    bw = get_gpu("h200").hbm_bandwidth

    def by_hand(p, row, nbytes):
        return p.t0_s + max(p.serial_s * row, 4 * nbytes / (bw * p.bw_eff))

    ce = calib.v1_elementwise
    want = (
        2 * by_hand(ce["norm"], 8192, 4 * 8192 * 2)
        + by_hand(ce["rope"], 9216, 2 * 9216 * 2)
        + by_hand(ce["act"], 28672, 3 * 28672 * 2)
    )
    got = sum(op.seconds(lat.calib, lat.gpu, 4, 2) for op in lat.ops if op.kind)
    assert got == pytest.approx(want, rel=1e-12)
    assert 8e-6 < got < 20e-6  # four kernels of about 2-4 us each, as vLLM's row kernels take in CUDA graphs
    v0 = build_latency(config_from_args(["--model", "llama-3.1-70b", "--gpu", "h200", "--vllm-engine", "v0"]))
    assert sum(op.seconds(v0.calib, v0.gpu, 4, 2) for op in v0.ops if op.kind) > 2 * got  # Vidur's eager ops (33 us)


def test_the_row_kernel_fit_recovers_the_constants_that_made_the_times():
    gpu = get_gpu("h100")
    m = np.repeat([1, 4, 16, 64, 256, 1024, 4096, 16384], 6).astype(float)
    k = np.tile([1024, 2048, 4096, 8192, 16384, 65536], 8).astype(float)
    pointwise, reduce = ElementwiseParams(1.9e-6, 0.9, 90e-12), ElementwiseParams(2.4e-6, 0.7, 190e-12)
    static = elementwise_formula(pointwise, gpu, m, k, 3 * k)
    dynamic = elementwise_formula(reduce, gpu, m, k, 3 * k)
    fit = fit_row_kernels(m, k, static, dynamic, gpu)
    assert set(fit) == set(V1_SHAPES)
    for kind, want in (("norm", reduce), ("act", pointwise), ("rope", pointwise)):
        got = fit[kind]
        assert (got.t0_s, got.bw_eff, got.serial_s) == pytest.approx((want.t0_s, want.bw_eff, want.serial_s), rel=1e-3)


def test_v1_element_wise_constants_round_trip_and_an_unknown_kind_is_refused():
    calib, _ = shipped_calibration(get_gpu("h100"))
    assert set(calib.v1_elementwise) == {"norm", "rope", "act", "add"}
    assert Calibration.from_json(calib.to_json()).v1_elementwise == calib.v1_elementwise
    bad = calib.to_json()
    bad["v1_elementwise"] = {"emb": bad["v1_elementwise"]["norm"]}
    with pytest.raises(ConfigError, match="v1_elementwise has parameters for 'emb'"):
        Calibration.from_json(bad)
    for chip in ("a100-80gb", "a40", "b200", "l40s", "h200"):
        c, _ = shipped_calibration(get_gpu(chip))
        assert c.v1_elementwise and "v1_elementwise" in c.sources, chip
