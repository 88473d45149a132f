"""Add to each shipped calibration vLLM V1's element-wise kernels (RMSNorm with the residual add fused in, rotary,
SiLU-and-mul), fitted on the activation-quant kernels AIConfigurator times in vLLM itself, leaving every other
parameter as it is.

    # AIConfigurator's tables (Apache-2.0): its repository at 095f58a
    git -C AIC archive 095f58a aic-core/src/aiconfigurator_core/systems/data | tar -x -C /tmp/aic-tables
    python benchmarks/fit_v1_elementwise.py /tmp/aic-tables/aic-core/src/aiconfigurator_core/systems/data

Why: the element-wise constants fitted on Vidur's profiles are eager PyTorch (SiLU-and-mul as three kernels, a
separate residual add): 33 us per Llama-70B layer at decode sizes on an H100 or H200, where vLLM V1 runs
four kernels of about 2-4 us each in its CUDA graphs. AIConfigurator's quantize tables time two of vLLM's own
row kernels in CUDA graphs, by rows m (1-32,768) and width k (32-65,536): static FP8 quant (one pass, the shape
of rotary and SiLU-and-mul) and per-token dynamic FP8 quant (a reduction over the row first, the shape of
RMSNorm; the table holds its extra time over the static one). kvsim.calibrate.fits.fit_row_kernels fits one
set of element-wise constants to each. The A100 (no FP8 kernels, no table) takes the H100's constants and the
A40 the L40S's, each with its own bandwidth. Prints, per GPU, the fit's error on every fifth width held out.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RELEASE = "0.24.0"  # the newest release AIConfigurator's tables time these kernels on, for every GPU
BORROWED = {"a100-80gb": "h100-80gb", "a40": "l40s"}  # no FP8 kernels: the nearest measured chip's constants


def read_rows(data: Path, system: str):
    """(m, k, static seconds, dynamic seconds) of one system's quant kernel tables."""
    import pandas as pd

    folder = data / system / "quantize" / "vllm" / RELEASE
    for name in ("scale_matrix_perf.parquet", "computescale_perf.parquet"):
        if not (folder / name).exists():
            raise SystemExit(f"{folder / name} not found: is {data} AIConfigurator's systems/data folder?")
    static = pd.read_parquet(folder / "scale_matrix_perf.parquet")[["m", "k", "latency"]]
    extra = pd.read_parquet(folder / "computescale_perf.parquet")[["m", "k", "latency"]]
    rows = static.merge(extra, on=["m", "k"], suffixes=("_static", "_extra"))
    rows = rows[rows["k"] >= 512]  # the widths of real models' rows
    return (
        rows["m"].to_numpy(float),
        rows["k"].to_numpy(float),
        rows["latency_static"].to_numpy(float) * 1e-3,
        (rows["latency_static"] + rows["latency_extra"]).to_numpy(float) * 1e-3,
    )


def held_out_error(m, k, static, dynamic, gpu) -> str:
    """Median |log(pred / measured)| on every fifth width, fitted on the others."""
    import numpy as np

    from kvsim.calibrate.fits import fit_row_kernels
    from kvsim.latency.perop import elementwise_formula

    widths = np.unique(k)
    test = np.isin(k, widths[::5])
    fit = fit_row_kernels(m[~test], k[~test], static[~test], dynamic[~test], gpu)
    parts = []
    for kind, times in (("norm", dynamic), ("act", static)):
        pred = elementwise_formula(fit[kind], gpu, m[test], k[test], 3 * k[test])
        err = np.abs(np.log(pred / times[test]))
        small = m[test] <= 256
        parts.append(f"{kind} {np.median(err[small]):.3f} (m <= 256), {np.median(err):.3f} (all)")
    return "; ".join(parts)


def main() -> None:
    from kvsim.calibrate.fits import fit_row_kernels
    from kvsim.hardware.gpus import GPU_PRESETS
    from kvsim.calibrate.ship import refit_arguments, refit_shipped

    a = refit_arguments(__doc__)
    data = Path(a.data)
    fitted, notes = {}, {}
    measured = {g.name: g.aic_system for g in GPU_PRESETS.values() if g.aic_system and g.name not in BORROWED}
    for chip, system in measured.items():
        gpu = GPU_PRESETS[chip]
        rows = read_rows(data, system)
        print(f"{chip} ({system}, vLLM {RELEASE}), held out: {held_out_error(*rows, gpu)}")
        fitted[chip] = fit_row_kernels(*rows, gpu)
        notes[chip] = (
            f"fitted: NVIDIA AIConfigurator (Apache-2.0) {system}/quantize/vllm/{RELEASE}/scale_matrix_perf.parquet"
            " and computescale_perf.parquet (vLLM's static and per-token FP8 quant kernels in CUDA graphs: "
            "one-pass kernels and RMSNorm; benchmarks/fit_v1_elementwise.py)"
        )
    for chip, donor in BORROWED.items():
        fitted[chip] = fitted[donor]
        notes[chip] = f"borrowed from {donor} (no FP8 quant kernels measured on this chip): " + notes[donor]
    for kind in ("norm", "act"):
        for chip, kinds in fitted.items():
            p = kinds[kind]
            print(
                f"  {chip} {kind}: t0 {p.t0_s * 1e6:.2f} us, bw_eff {p.bw_eff:.3f}, {p.serial_s * 1e12:.0f} ps/element"
            )

    def refit(path, calib):
        if calib.gpu not in fitted:
            print(f"{path.name}: no element-wise kernels measured for {calib.gpu}", file=sys.stderr)
            return None
        sources = {**calib.sources, "v1_elementwise": notes[calib.gpu]}
        return replace(calib, v1_elementwise=fitted[calib.gpu], sources=sources)

    refit_shipped(refit, a.dry_run)


if __name__ == "__main__":
    main()
