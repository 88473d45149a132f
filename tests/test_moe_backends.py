"""--moe-backend: the fused-MoE kernels a server picked (vLLM's --moe-backend, or VLLM_MXFP4_USE_MARLIN=1 before
it), priced from those kernels' own rows of the measured tables (benchmarks/fit_moe_backends.py)."""

import pytest

from kvsim.errors import ConfigError
from kvsim.latency import build_latency
from kvsim.latency.base import StepShape
from kvsim.latency.calibration import Calibration, MoeParams, load_calibration, moe_backend_of, save_calibration
from kvsim.options import config_from_args


def test_kernel_names_map_to_backends():
    assert moe_backend_of("vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic", "w4a16_mxfp4") == "triton"
    assert moe_backend_of("vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts", "w4a16_mxfp4") == "marlin"
    assert moe_backend_of("vllm_fused_moe", "bfloat16") == "triton"  # vLLM's fused_moe is a Triton kernel
    assert moe_backend_of("vllm_marlin_int4_moe", "int4_wo") == "marlin"
    assert moe_backend_of("vllm_fp8moe_flashinfer_cutlass_flashinferexperts", "fp8_block") == "flashinfer-cutlass"
    assert (
        moe_backend_of("vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic", "fp8_block") == "flashinfer-trtllm"
    )
    assert (
        moe_backend_of("vllm_mxfp4moe_flashinfer_trtllm_mxfp4_mxfp8_trtllmmxfp4expertsmodular", "w4a8_mxfp4_mxfp8")
        == "flashinfer-trtllm-mxfp8"
    )
    assert moe_backend_of("vllm_mxfp4_moe", "w4a16_mxfp4") is None  # the name does not say


def test_a_calibration_keeps_its_backends(tmp_path):
    p = MoeParams(1e-5, 0.0, 1e-9, 0.0, 0.5, 0.7, 1.5)
    c = Calibration(gpu="h100-80gb", moe_backends={"mxfp4": {"marlin": p}, "bf16": {"triton": p}})
    save_calibration(c, tmp_path / "c.json")
    assert load_calibration(tmp_path / "c.json").moe_backends == c.moe_backends
    bad = (tmp_path / "c.json").read_text().replace('"marlin"', '"cuda-magic"')
    (tmp_path / "bad.json").write_text(bad)
    with pytest.raises(ConfigError, match="cuda-magic"):
        load_calibration(tmp_path / "bad.json")


def _prefill_and_decode(*args):
    lat = build_latency(config_from_args(["--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--tp", "2", *args]))
    return lat.step_time(StepShape.of([(8192, 0)])), lat.step_time(StepShape.decode(8, 8 * 1000))


def test_marlin_is_slower_than_triton_on_long_prefills_of_mxfp4_experts():
    """On H100 the measured Marlin MXFP4 MoE reaches about a third of OpenAI's Triton kernel's FLOP rate at
    thousands of tokens; at a few tokens both read the same weights."""
    triton, marlin, auto = (_prefill_and_decode("--moe-backend", b) for b in ("triton", "marlin", "auto"))
    assert marlin[0] > 1.5 * triton[0]
    assert 0.8 < marlin[1] / triton[1] < 1.3
    assert auto != triton  # auto fits every kernel the table timed for the dtype


def test_releases_before_0_11_1_run_gpt_oss_experts_on_marlin_on_hopper():
    """vLLM 0.10-0.11.0 had no triton_kernels dependency (PR #27370 added it for 0.11.1), so Hopper ran MXFP4
    experts with Marlin unless told otherwise; Blackwell and later releases are unchanged."""
    from kvsim.latency import describe_latency
    from kvsim.releases import default_moe_backend

    assert default_moe_backend("hopper", "mxfp4", "0.10.2") == "marlin"
    assert default_moe_backend("hopper", "mxfp4", "0.11.0") == "marlin"
    assert default_moe_backend("hopper", "mxfp4", "0.11.1") is None
    assert default_moe_backend("hopper", "mxfp4", None) is None  # no release: the newest's kernels
    assert default_moe_backend("blackwell", "mxfp4", "0.10.2") is None
    assert default_moe_backend("hopper", "fp8", "0.10.2") is None
    old = _prefill_and_decode("--vllm-version", "0.11.0")
    assert old == _prefill_and_decode("--vllm-version", "0.11.0", "--moe-backend", "marlin")
    assert old != _prefill_and_decode("--vllm-version", "0.11.1")
    cfg = config_from_args(["--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--tp", "2", "--vllm-version", "0.11.0"])
    assert "marlin MoE kernels (vLLM 0.11.0's default)" in describe_latency(cfg)


def test_a_backend_without_measurements_is_refused():
    with pytest.raises(ConfigError, match="no measured mxfp4 MoE kernels of that backend"):
        build_latency(
            config_from_args(
                [
                    "--model",
                    "gpt-oss-120b",
                    "--gpu",
                    "h100-80gb",
                    "--tp",
                    "2",
                    "--moe-backend",
                    "flashinfer-trtllm-mxfp8",
                ]
            )
        )
    with pytest.raises(ConfigError, match="has no MoE layers"):
        build_latency(config_from_args(["--moe-backend", "triton"]))
    with pytest.raises(ConfigError, match="roofline prices no measured kernels"):
        config_from_args(
            [
                "--model",
                "gpt-oss-120b",
                "--gpu",
                "h100-80gb",
                "--tp",
                "2",
                "--moe-backend",
                "marlin",
                "--latency",
                "roofline",
            ]
        )
