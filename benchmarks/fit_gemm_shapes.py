"""Add to each shipped calibration the measured / fitted ratios of its dense GEMMs on the grid of shapes its
kernel table timed (kvsim/latency/gemm_shapes.py), leaving its fitted parameters as they are.

    # AIConfigurator's tables (Apache-2.0), every release: its repository at 095f58a
    git -C AIC archive 095f58a aic-core/src/aiconfigurator_core/systems/data | tar -x -C /tmp/aic-tables
    python benchmarks/fit_gemm_shapes.py /tmp/aic-tables/aic-core/src/aiconfigurator_core/systems/data

Each calibration names the table its GEMM fits came from (``sources``: "h200_sxm/gemm/vllm/0.18.0/
gemm_perf.parquet", per weight format); that table's rows of the format are priced with the calibration's own
fit and the ratios kept per (m, n, k) grid point. A calibration whose GEMMs were not fitted on such a table
(Vidur's dense-op fits) gets no grid. Prints, per file and format, how far the fit alone and the fit with the
grid are from the table on the weights of real models (n and k from 1,024), by activation rows: the grid is
read back at points it holds, so "with grid" shows the interpolation's own error between the knots.
"""

from __future__ import annotations

import re
from dataclasses import replace
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TABLE = re.compile(r"([A-Za-z0-9_]+)/gemm/vllm/([0-9.]+)/gemm_perf\.parquet")
QUANT_TABLE = re.compile(r"(\w+) weights from ([A-Za-z0-9_]+)/gemm/vllm/([0-9.]+)/gemm_perf\.parquet")


def tables(calib) -> dict[str, tuple[str, str]]:
    """{format: (AIConfigurator system, vLLM version)} of the tables ``calib``'s GEMM fits came from."""
    out = {}
    m = TABLE.search(calib.sources.get("gemm", ""))
    if m:
        out["bf16"] = (m.group(1), m.group(2))
    for q, system, version in QUANT_TABLE.findall(calib.sources.get("gemm_quant", "")):
        if q in calib.gemm_quant:
            out[q] = (system, version)
    return out


def main() -> None:
    from kvsim.calibrate.ship import refit_arguments, refit_shipped

    a = refit_arguments(__doc__)
    refit_shipped(lambda path, calib: with_grids(path, calib, Path(a.data)), a.dry_run)


def with_grids(path: Path, calib, data: Path):
    """``calib`` (the file at ``path``) with the grids of the GEMM tables it was fitted on, each reported; None:
    no grid."""
    import numpy as np

    from kvsim.calibrate.aic import gemm_seconds_table, read_gemm
    from kvsim.hardware.gpus import GPU_PRESETS
    from kvsim.latency.calibration import GEMM_QUANT
    from kvsim.latency.gemm_shapes import fit_grid

    gpu = GPU_PRESETS[calib.gpu]
    grids = {}
    for q, (system, version) in tables(calib).items():
        if q == "fp8_block" and "fp8" in calib.gemm_quant:
            continue  # priced by the per-tensor fit and its grid (kvsim.latency.perop.quant_gemm_scheme)
        f = data / system / "gemm" / "vllm" / version / "gemm_perf.parquet"
        if not f.exists():
            print(f"{path.name}: {q}: {f} not found; no grid", file=sys.stderr)
            continue
        dtypes = ("bfloat16", "float16") if q == "bf16" else (GEMM_QUANT[q][0],)
        rows, _ = read_gemm(f, dtypes)
        quant = None if q == "bf16" else q
        p = calib.gemm if q == "bf16" else calib.gemm_quant[q]
        pred = gemm_seconds_table(p, gpu, rows, quant)
        grid = fit_grid(rows, pred)
        if grid is None:
            continue
        grids[q] = grid
        wide = (rows["n"] >= 1024) & (rows["k"] >= 1024)
        r0 = pred[wide] / rows["seconds"].to_numpy()[wide]
        sub = rows[wide]
        with_grid = (
            np.array([grid.factor(m, n, k) for m, n, k in zip(sub["m"], sub["n"], sub["k"])])
            * pred[wide]
            / sub["seconds"].to_numpy()
        )
        bins = [(1, 16), (17, 128), (129, 1024), (1025, 10**9)]
        parts = []
        for lo, hi in bins:
            sel = (sub["m"] >= lo).to_numpy() & (sub["m"] <= hi).to_numpy()
            if sel.any():
                parts.append(
                    f"m {lo}-{hi if hi < 10**9 else 'up'}: fit {np.median(np.abs(np.log(r0[sel]))):.3f} "
                    f"-> {np.median(np.abs(np.log(with_grid[sel]))):.3f}"
                )
        print(f"{path.name} {q} ({system} {version}), median |log(pred/meas)|: " + "; ".join(parts))
    if not grids:
        return None
    src = dict(calib.sources)
    src["gemm_shapes"] = (
        "measured / fitted on the grid of the GEMM tables named above (benchmarks/fit_gemm_shapes.py): "
        + ", ".join(sorted(grids))
    )
    return replace(calib, gemm_shapes=grids, sources=src)


if __name__ == "__main__":
    main()
