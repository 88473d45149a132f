"""Fit the GEMMs of weight-only (W4A16, W8A16) and int8 (W8A8) checkpoints in the shipped calibrations from
measured kernels, and validate each fit on weight shapes it never saw.

    python benchmarks/fit_weight_only.py [--dry-run]

Data: benchmarks/data/aic_trtllm_weight_only_gemm.csv.gz, the int4_wo, int8_wo and sq rows of AIConfigurator's
TensorRT-LLM GEMM tables (A100 1.0.0, H200 1.2.0rc5, L40S 1.0.0; weights at least 256 wide): TensorRT-LLM's
weight-only GEMMs (4- or 8-bit integer weights dequantized in the kernel, bf16 math) and its SmoothQuant int8 GEMM.
No table times vLLM's own weight-only kernels (Marlin, Machete): these are the measured kernels of the same kind,
on the same GPUs. Public Marlin measurements, not fitted (docs/latency.md): 4-bit weights stream at 1.16 TB/s
on an A100 at batch 1-16 (vLLM PR #2497; this fit 1.13 on a large projection, the bf16 fit's efficiencies that
priced them before 1.47); on an H100 one token by an 8192 x 8192 weight runs at 4.98-5.81 TFLOP/s (W4A16) and
3.46-4.29 (W8A16) (inclusionAI/humming PR #2), where H200's fit gives 4.14 and 3.70 (before: 8.81 and 4.96).

Run it after any refit of the bf16 GEMMs: the fits hold their fixed time.

Before this, such GEMMs were priced with the bf16 fit reading the scheme's weight bytes: on the A100 and H200
tables that is 0.35-0.65x the measured time at 1-128 tokens. vLLM runs FP8 checkpoints on GPUs without FP8 tensor cores (Ampere)
and NVFP4 on GPUs without FP4 ones (before Blackwell) through the same weight-only kernels, so those take the W8A16
and W4A16 fits (kvsim.latency.perop.quant_gemm_scheme). A chip of the same architecture without a table takes
the fit of one that has it (efficiencies are fractions of each GPU's own peaks): H100 from H200, A40 from A100.
Blackwell has no such table and keeps the bf16 fit's efficiencies (vLLM's Marlin runs there without Blackwell's
tensor-core instructions: not measured).

Writes ``gemm_quant`` w4a16 / w8a16 / w8a8_int8, ``sources["gemm_weight_only"]`` and ``fit["weight_only"]`` (the
held-out errors) of every shipped calibration of those chips, and reports/latency-validation/weight-only.md.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, replace
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TABLE = ROOT / "benchmarks" / "data" / "aic_trtllm_weight_only_gemm.csv.gz"
REPORT = ROOT / "reports" / "latency-validation" / "weight-only.md"
# kvsim's scheme (kvsim.latency.calibration.GEMM_QUANT) -> the tables' gemm_dtype
SCHEMES = {"w4a16": "int4_wo", "w8a16": "int8_wo", "w8a8_int8": "sq"}
# chip -> (AIConfigurator system, TensorRT-LLM version) of its table
TABLES = {"a100-80gb": ("a100_sxm", "1.0.0"), "h200-141gb": ("h200_sxm", "1.2.0rc5"), "l40s": ("l40s", "1.0.0")}
DONORS = {"h100-80gb": "h200-141gb", "a40": "a100-80gb"}  # same architecture, no table of its own
# the weights fitted on (elements): a 4096 x 8192 projection and larger, whose time the weights' streaming sets;
# below it the table's GEMMs of narrow outputs take up to 20 us at one token (TensorRT-LLM's GEMV parallelizes
# over the output columns only, Marlin splits the reduction as well: 5.7 us on a T4 for 1024 x 2048, vLLM PR
# #29901), a floor vLLM's kernels do not have
MIN_WEIGHTS = 2**25
# a large projection (Llama-3.1-70B's gate_up at TP1: k 8192, n 57344) to state the fits' bandwidth on
LARGE = (8192, 57344)


@lru_cache(maxsize=1)
def _table():
    """The committed excerpt, read once."""
    import pandas as pd

    return pd.read_csv(TABLE)


def read_rows(chip: str, scheme: str):
    """The measured (m, n, k, seconds) rows of ``scheme`` on ``chip``'s table."""
    import pandas as pd

    system, version = TABLES[chip]
    d = _table()
    d = d[(d["system"] == system) & (d["version"] == version) & (d["gemm_dtype"] == SCHEMES[scheme])]
    return pd.DataFrame(
        {"m": d["m"].to_numpy(), "n": d["n"].to_numpy(), "k": d["k"].to_numpy(), "seconds": d["latency_ms"] * 1e-3}
    ).reset_index(drop=True)


@lru_cache(maxsize=None)
def fitted(chip: str) -> dict:
    """scheme -> (GemmParams, held-out validation, predicted / measured of every row by the fit and by the bf16
    fit's efficiencies, by tokens) of ``chip``'s table: fitted on weights of at least MIN_WEIGHTS elements with
    the fixed time held at the chip's bf16 fit's (:func:`fit_gemm_table`)."""
    from kvsim.calibrate.aic import _by_regime, fit_gemm_table, gemm_regimes, gemm_seconds_table, validate_gemm
    from kvsim.hardware import get_gpu

    gpu, bf16 = get_gpu(chip), bf16_fit(chip)
    out = {}
    for q in SCHEMES:
        rows = read_rows(chip, q)
        wide = rows[rows["n"] * rows["k"] >= MIN_WEIGHTS].reset_index(drop=True)
        p = fit_gemm_table(wide, gpu, q, bf16.t0_s)
        measured, regimes = rows["seconds"].to_numpy(), gemm_regimes(rows)
        out[q] = (
            p,
            validate_gemm(wide, gpu, quant=q, t0_s=bf16.t0_s),
            {
                "fit": _by_regime(gemm_seconds_table(p, gpu, rows, q) / measured, regimes),
                "bf16_fit": _by_regime(gemm_seconds_table(bf16, gpu, rows, q) / measured, regimes),
            },
        )
    return out


def chip_fits(chip: str, t0_s: float) -> dict:
    """scheme -> GemmParams that price ``chip``'s weight-only and int8 GEMMs: its own table's fits, or its
    architecture's (DONORS), with the fixed time ``t0_s`` of the calibration they go into."""
    return {q: replace(p, t0_s=t0_s) for q, (p, _, _) in fitted(DONORS.get(chip, chip)).items()}


def bf16_fit(chip: str):
    """The bf16 GEMM parameters of ``chip``'s newest shipped calibration."""
    from kvsim.latency.calibration import SHIPPED, load_calibration

    return load_calibration(SHIPPED / f"{chip}.json").gemm


def source(chip: str, donor: str | None) -> str:
    system, version = TABLES[donor or chip]
    text = (
        f"fitted: TensorRT-LLM {version}'s weight-only GEMMs (int4_wo, int8_wo rows) and SmoothQuant int8 GEMM (sq) "
        f"of NVIDIA AIConfigurator's {system}/gemm/trtllm/{version} table (Apache-2.0; benchmarks/data/"
        f"{TABLE.name}): the measured kernels of vLLM's weight-only (Marlin) and int8 paths' kind, no table of "
        "vLLM's own"
    )
    return text if donor is None else f"borrowed: {donor}'s fit (same architecture, no {chip} table): " + text


def refit(path: Path, calib):
    chip = calib.gpu
    donor = DONORS.get(chip)
    if chip not in TABLES and donor is None:
        return None
    # a borrowed fit keeps this chip's own fixed time (its bf16 fit's, as the fit's is its chip's)
    fits = chip_fits(chip, calib.gemm.t0_s)
    sources = {**calib.sources, "gemm_weight_only": source(chip, donor)}
    fit = dict(calib.fit)
    fit["weight_only"] = (
        {"borrowed_from": donor} if donor else {q: {"held_out": v["held_out"]} for q, (_, v, _) in fitted(chip).items()}
    )
    print(f"{path.name}: " + ", ".join(f"{q} {asdict(p)}" for q, p in fits.items()), flush=True)
    return replace(calib, gemm_quant={**calib.gemm_quant, **fits}, sources=sources, fit=fit)


def bandwidth(chip: str, scheme: str, params) -> float:
    """The fit's weight bytes per second on LARGE at one token (TB/s)."""
    from kvsim.hardware import get_gpu
    from kvsim.latency.calibration import GEMM_QUANT
    from kvsim.latency.perop import quant_gemm_seconds

    k, n = LARGE
    return GEMM_QUANT[scheme][1] * k * n / quant_gemm_seconds(params, get_gpu(chip), 1, k, n, scheme) / 1e12


def report() -> str:
    def cell(s: dict) -> str:
        return f"{s['median']:.2f} [{s['p10']:.2f}, {s['p90']:.2f}]"

    lines = [
        "# Weight-only and int8 GEMMs from measured kernels",
        "",
        f"Data: benchmarks/data/{TABLE.name}, TensorRT-LLM's weight-only (int4_wo, int8_wo) and SmoothQuant "
        "(sq) GEMM rows of NVIDIA AIConfigurator's tables (Apache-2.0); written by benchmarks/fit_weight_only.py. "
        f"predicted / measured, median [p10, p90]. Fitted on weights of at least {MIN_WEIGHTS:,} elements with "
        "the fixed time held at the chip's bf16 GEMM fit's; held out: every 5th weight shape (n, k) of those, "
        "predicted by a fit without it. Every row: all weights at least 256 wide, the narrow ones included "
        "(their floor is TensorRT-LLM's GEMV, not vLLM's kernels), by the fit and by the bf16 fit's efficiencies "
        "reading the scheme's weight bytes (how kvsim priced them before).",
        "",
        "| chip | scheme | tokens | held out (rows) | held out | every row: fit | every row: bf16 fit before |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for chip in TABLES:
        for q, (_, v, every) in fitted(chip).items():
            for regime, s in v["held_out"].items():
                lines.append(
                    f"| {chip} | {q} | {regime} | {s['n']} | {cell(s)} | {cell(every['fit'][regime])} | "
                    f"{cell(every['bf16_fit'][regime])} |"
                )
    lines += [
        "",
        f"Weight bytes streamed per second at one token on a {LARGE[0]} x {LARGE[1]} weight (TB/s), by the fit "
        "and by the bf16 fit's efficiencies:",
        "",
        "| chip | w4a16 | w8a16 | w4a16, bf16 fit | w8a16, bf16 fit |",
        "|---|---:|---:|---:|---:|",
    ]
    for chip in [*TABLES, *DONORS]:
        bf16 = bf16_fit(chip)
        fits = chip_fits(chip, bf16.t0_s)
        lines.append(
            f"| {chip}{' (' + DONORS[chip] + ' fit)' if chip in DONORS else ''} | "
            + " | ".join(f"{bandwidth(chip, q, fits[q]):.2f}" for q in ("w4a16", "w8a16"))
            + " | "
            + " | ".join(f"{bandwidth(chip, q, bf16):.2f}" for q in ("w4a16", "w8a16"))
            + " |"
        )
    lines += [
        "",
        "Public Marlin measurements (not fitted): 1.16 TB/s of 4-bit weights on an A100 at batch 1-16 (vLLM PR "
        "#2497, Marlin's bench.py); on an H100, one token by an 8192 x 8192 weight, W4A16 4.98-5.81 TFLOP/s and "
        "W8A16 3.46-4.29 (inclusionAI/humming PR #2, two runs), where H200's fit gives 4.14 and 3.70 (the bf16 "
        "efficiencies: 8.81 and 4.96).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    from kvsim.calibrate.ship import refit_shipped
    from kvsim.files import write_text_atomically

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="report, write nothing")
    a = ap.parse_args()
    refit_shipped(refit, a.dry_run)
    text = report()
    if a.dry_run:
        print(text)
    else:
        write_text_atomically(REPORT, text)


if __name__ == "__main__":
    main()
