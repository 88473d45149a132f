"""Weight-only (W4A16, W8A16) and int8 GEMMs priced from measured kernels (benchmarks/fit_weight_only.py)."""

import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from kvsim.hardware import get_gpu
from kvsim.latency.calibration import GEMM_QUANT, shipped_calibration
from kvsim.latency.perop import quant_gemm_scheme, quant_gemm_seconds

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import fit_weight_only as fwo  # noqa: E402


@pytest.mark.parametrize("chip", sorted(fwo.TABLES))
def test_the_shipped_fits_are_the_committed_tables_fits_and_predict_shapes_they_never_saw(chip):
    gpu = get_gpu(chip)
    shipped, _ = shipped_calibration(gpu)
    for q, (p, v, _) in fwo.fitted(chip).items():
        # refitting changes nothing (but the last bits: OpenBLAS picks its kernels by CPU, so a least-squares fit on
        # another machine can stop a few 1e-9 away)
        assert asdict(shipped.gemm_quant[q]) == pytest.approx(asdict(replace(p, t0_s=shipped.gemm.t0_s)), rel=1e-6)
        for regime, s in v["held_out"].items():  # every 5th weight shape, by a fit without it
            assert 0.85 <= s["median"] <= 1.15, (chip, q, regime, s)
        assert shipped.fit["weight_only"][q]["held_out"]["all"]["n"] == v["held_out"]["all"]["n"]


def test_a_chip_without_a_table_borrows_its_architectures_fit_with_its_own_fixed_time():
    for chip, donor in fwo.DONORS.items():
        c, _ = shipped_calibration(get_gpu(chip))
        d, _ = shipped_calibration(get_gpu(donor))
        for q in fwo.SCHEMES:
            assert c.gemm_quant[q] == replace(d.gemm_quant[q], t0_s=c.gemm.t0_s)
        assert c.sources["gemm_weight_only"].startswith(f"borrowed: {donor}'s fit")


def test_one_token_gemms_against_public_marlin_measurements():
    """Not fitted to them. A100: Marlin streams 4-bit weights at 1.16 TB/s at batch 1-16 (vLLM PR #2497; the bf16
    fit's efficiencies, which priced them before, gave 1.47 on a large projection). H100, an 8192 x 8192 weight
    (channelwise), one token, two runs (inclusionAI/humming PR #2): Marlin W4A16 4.98 / 5.81 TFLOP/s, W8A16 3.46
    / 4.29, torch bf16 2.30 / 2.68. H100 borrows H200's TensorRT-LLM fit, whose 4-bit kernel is slower than
    Marlin at one token: about 0.77x Marlin's rate (before: 1.63x), W8A16 0.95x (before: 1.28x)."""

    def rate(chip, q, k, n):  # (weight bytes per second, FLOP/s) at one token
        gpu = get_gpu(chip)
        c, _ = shipped_calibration(gpu)
        t = quant_gemm_seconds(c.gemm_quant[q], gpu, 1, k, n, q)
        return GEMM_QUANT[q][1] * k * n / t, 2 * k * n / t

    assert rate("a100-80gb", "w4a16", *fwo.LARGE)[0] / 1e12 == pytest.approx(1.16, rel=0.1)
    assert 0.7 <= rate("h100-80gb", "w4a16", 8192, 8192)[1] / ((4.98 + 5.81) / 2 * 1e12) <= 0.85
    assert rate("h100-80gb", "w8a16", 8192, 8192)[1] / ((3.46 + 4.29) / 2 * 1e12) == pytest.approx(1.0, abs=0.1)


def test_weights_without_their_tensor_cores_take_the_weight_only_fit_of_as_many_bits():
    a100, h100, b200 = get_gpu("a100-80gb"), get_gpu("h100-80gb"), get_gpu("b200")
    ca, ch, cb = (shipped_calibration(g)[0] for g in (a100, h100, b200))
    assert [quant_gemm_scheme(ca, a100, q) for q in ("fp8", "fp8_block", "nvfp4", "w4a16", "w8a8_int8")] == [
        "w8a16",
        "w8a16",
        "w4a16",
        "w4a16",
        "w8a8_int8",
    ]
    assert [quant_gemm_scheme(ch, h100, q) for q in ("fp8", "fp8_block", "nvfp4", "w4a16")] == [
        "fp8",
        "fp8",
        "w4a16",
        "w4a16",
    ]
    # Blackwell: FP4 and FP8 on their own tensor cores; no weight-only table (the bf16 fit prices W4A16)
    assert [quant_gemm_scheme(cb, b200, q) for q in ("nvfp4", "fp8", "w4a16")] == ["nvfp4", "fp8", None]


def test_the_notes_say_what_prices_a_checkpoints_weight_only_gemms():
    from kvsim.options import config_from_args
    from kvsim.latency import latency_notes

    def notes(*args):
        return [n for n in latency_notes(config_from_args(list(args))) if " weights on " in n]

    assert notes("--model", "llama-3.1-8b", "-q", "awq", "--gpu", "a100-80gb") == [
        "w4a16 weights on a100-80gb: vLLM's 4-bit weight-only GEMMs, priced from TensorRT-LLM's measured kernels "
        "of the kind, not vLLM's own (no table times them)"
    ]
    assert "(h200-141gb's fit, same architecture)" in notes("--model", "llama-3.1-8b", "-q", "awq", "--gpu", "h100")[0]
    assert "8-bit weight-only" in notes("--model", "llama-3.1-8b", "-q", "fp8", "--gpu", "a100-80gb")[0]
    assert "bf16 GEMM fit's efficiencies" in notes("--model", "llama-3.1-8b", "-q", "awq", "--gpu", "b200")[0]
    # FP8 on FP8 tensor cores, bf16: their own measured tables, nothing to say
    assert notes("--model", "llama-3.1-8b", "-q", "fp8", "--gpu", "h100") == []
    assert notes("--model", "llama-3.1-8b", "--gpu", "a100-80gb") == []
