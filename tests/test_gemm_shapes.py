"""Measured GEMM shapes (kvsim/latency/gemm_shapes.py): the grid's interpolation by hand, its fit from a table,
its checks on loading, and the shipped FP8 calibrations against AIConfigurator's measured rows."""

import math

import pandas as pd
import pytest

from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu, get_model
from kvsim.latency.calibration import GEMM_QUANT, Calibration, shipped_calibration
from kvsim.latency.cpu import get_cpu_overhead
from kvsim.latency.gemm_shapes import GemmGrid, fit_grid
from kvsim.latency.perop import Op, PerOpModel, gemm_seconds

GRID = GemmGrid(m=(1, 100), n=(1000,), k=(10, 1000), ratio=(1.0, 2.0, 3.0, 5.0))


def test_the_grid_interpolates_in_log_space_and_holds_its_ends():
    assert GRID.factor(1, 1000, 10) == 1.0 and GRID.factor(100, 1000, 1000) == 5.0
    # halfway in log(m) (m = 10) and log(k) (k = 100): the mean of the four corners
    assert GRID.factor(10, 1000, 100) == pytest.approx((1 + 2 + 3 + 5) / 4)
    assert GRID.factor(10, 1000, 10) == pytest.approx(2.0)  # between (1, 10) -> 1 and (100, 10) -> 3
    # beyond the grid: held at the nearest edge, every axis
    assert GRID.factor(0.5, 10, 1) == 1.0 and GRID.factor(1e6, 1e9, 1e9) == 5.0
    assert GRID.factor(1, 5, 10**6) == 2.0


def test_a_grid_from_a_table_takes_the_median_ratio_at_the_timed_rows_nearest_each_knot():
    rows = pd.DataFrame(
        [(m, n, k, 2e-5) for m in (1, 3, 64, 5000) for n in (128, 4096) for k in (256, 8192) if (n, k) != (4096, 8192)]
        + [(1, 64, 256, 1e-5)],  # narrower than MIN_DIM: not held
        columns=["m", "n", "k", "seconds"],
    )
    pred = [1e-5 if m < 64 else 4e-5 for m in rows["m"]]
    g = fit_grid(rows, pred)
    assert g.n == (128, 4096) and g.k == (256, 8192)
    assert g.m == (1, 3, 64, 5000)  # each knot's nearest timed m, once
    assert g.factor(1, 128, 256) == 2.0 and g.factor(5000, 128, 8192) == 0.5
    assert g.factor(64, 4096, 8192) == 0.5  # (4096, 8192) was not timed: its nearest timed shape's ratio
    assert fit_grid(rows[rows["n"] < 128], [1.0]) is None


def test_a_knot_on_an_isolated_slow_point_keeps_its_neighbours_ratio():
    """Timing noise is one-sided: a point more than 1.4x the fastest of its neighbours is an outlier (B200's vLLM 0.24
    FP8 table: 8,192 x 8,192 at 16 rows 38 us, at 13, 15, 17 and 32 rows 18-19 us); a step between buckets that its
    neighbours share, or a table too sparse to tell, keeps the point's own ratio."""
    from kvsim.latency.gemm_shapes import knot_ratio

    series = pd.Series([1.7, 2.0, 1.0, 1.0, 1.0, 1.0, 1.9, 1.0, 0.9, 1.1], index=[1, 2, 3, 4, 5, 15, 16, 17, 32, 33])
    assert knot_ratio(series, 1) == 1.0  # 1 and 2 both slow: against 3, the end's third point
    assert knot_ratio(series, 16) == 1.0  # neighbours 15 and 17 (1.0, 1.0; 1.9 is out)
    assert knot_ratio(series, 32) == 0.9  # not an outlier: its own
    assert knot_ratio(series, 4) == 1.0
    step = pd.Series([1.0, 1.0, 1.3, 1.3], index=[48, 64, 65, 80])
    assert knot_ratio(step, 65) == 1.3  # 1.3 < 1.4 x 1.0: a real step stays
    assert knot_ratio(pd.Series([1.0, 2.0, 1.2, 1.1], index=[7, 8, 9, 10]), 8) == 1.1  # 7, 9 and 10: within 1.5x
    assert knot_ratio(pd.Series([1.0, 2.0, 1.2], index=[7, 8, 13]), 8) == 1.0  # of two kept, the lower
    assert knot_ratio(pd.Series([2.0, 0.5], index=[1, 64]), 1) == 2.0  # too sparse to test


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"m": [1], "n": [2], "k": [3]}, "ratio"),
        ({"m": [2, 1], "n": [2], "k": [3], "ratio": [1, 1]}, "ascending"),
        ({"m": [1], "n": [2], "k": [3], "ratio": [50]}, "0.05 to 20"),
        ({"m": [1.5], "n": [2], "k": [3], "ratio": [1]}, "whole numbers"),
        ([], "an object"),
    ],
)
def test_a_broken_grid_in_a_calibration_file_is_named(bad, says):
    c, _ = shipped_calibration(get_gpu("h100-80gb"))
    d = c.to_json()
    d["gemm_shapes"] = {"fp8": bad}
    with pytest.raises(ConfigError, match=f"gemm_shapes fp8.*{says}"):
        Calibration.from_json(d, "x.json")
    assert Calibration.from_json(c.to_json()).gemm_shapes["fp8"] == c.gemm_shapes["fp8"]  # round trip


# AIConfigurator (Apache-2.0) h200_sxm/gemm/vllm/0.18.0/gemm_perf.parquet, fp8 rows (ms), copied by hand:
# Llama-3.1-70B's qkv (n 10,240, k 8,192) and o_proj (8,192 x 8,192), by activation rows m
H200_FP8_0_18 = {
    (10240, 8192): {1: 0.0284, 64: 0.0302, 256: 0.0492, 1024: 0.1196, 4096: 0.5013},
    (8192, 8192): {1: 0.0204, 64: 0.0222, 256: 0.0308, 1024: 0.0985, 4096: 0.4054},
}


def test_the_shipped_fp8_gemms_are_the_measured_ones_where_the_fit_alone_was_up_to_1_6x_slow():
    from kvsim.latency.perop import quant_gemm_seconds

    gpu = get_gpu("h200")
    c, _ = shipped_calibration(gpu, "0.18")
    p, grid = c.gemm_quant["fp8"], c.gemm_shapes["fp8"]
    worst_fit = 1.0
    for (n, k), by_m in H200_FP8_0_18.items():
        for m, ms in by_m.items():
            fit = quant_gemm_seconds(p, gpu, m, k, n, "fp8")
            worst_fit = max(worst_fit, fit / (ms * 1e-3))
            assert fit * grid.factor(m, n, k) == pytest.approx(ms * 1e-3, rel=0.03), (n, k, m)
    assert worst_fit > 1.5  # what the four-parameter fit alone did at 256 rows


def test_an_fp8_checkpoints_prefill_step_follows_the_measured_kernels():
    """Llama-3.1-70B-FP8 on one H200: a 200-token prefill's dense layers, before the grid 42 ms (the fit's
    roofline added compute and bandwidth), now about the weights' time at the measured efficiencies."""
    gpu = get_gpu("h200")
    c, _ = shipped_calibration(gpu, "0.18")
    model = PerOpModel(get_model("nvidia/Llama-3.1-70B-Instruct-FP8"), gpu, c, get_cpu_overhead("none"))
    plain = PerOpModel(
        get_model("nvidia/Llama-3.1-70B-Instruct-FP8"),
        gpu,
        Calibration(**{**c.__dict__, "gemm_shapes": {}}),
        get_cpu_overhead("none"),
    )
    assert plain.dense_s(200, 1) > 1.1 * model.dense_s(200, 1)
    assert 0.025 < model.dense_s(200, 1) < 0.040
    assert math.isclose(model.dense_s(0, 0), 0.0)


def test_no_gemm_streams_its_weights_faster_than_the_gpus_hbm_peak():
    """L40S's tables time 16 MB bf16 weights at up to 2.7x its HBM peak (six copies of the weight stay in its
    96 MiB L2); in serving the weights come from HBM, so a GEMM takes at least its weight bytes over the datasheet
    bandwidth. By hand: 1,024 x 8,192 bf16 weights (16,777,216 bytes) over 864 GB/s = 19.42 us at 16 rows, where
    the measured shape alone gave 8.0 us; an H100's GEMMs never reach the bound (unchanged)."""
    l40s = get_gpu("l40s")
    c, _ = shipped_calibration(l40s, "0.22")
    assert Op("x", k=1024, n=8192).seconds(c, l40s, 16, 2) == pytest.approx(1024 * 8192 * 2 / 864e9)
    assert l40s.hbm_bandwidth == 864e9
    for name in ("l40s", "rtx-pro-6000", "rtx-4090", "h100", "b200"):
        gpu = get_gpu(name)
        c, _ = shipped_calibration(gpu)
        for q in (None, "fp8", "nvfp4", "w4a16"):
            wb = 2 if q is None else GEMM_QUANT[q][1]
            for k, n in ((768, 10240), (1024, 8192), (4096, 6144), (8192, 28672)):
                for m in (1, 16, 256):
                    t = Op("x", k=k, n=n, quant=q).seconds(c, gpu, m, 2)
                    assert t >= wb * k * n / gpu.hbm_bandwidth * (1 - 1e-12), (name, q, k, n, m)
    # where the tables stream from HBM the bound does not bind: the measured shape's time stands
    h100 = get_gpu("h100")
    c, _ = shipped_calibration(h100)
    op = Op("x", k=4096, n=6144)
    grid = c.gemm_shapes["bf16"].factor(16, 6144, 4096)
    assert op.seconds(c, h100, 16, 2) == gemm_seconds(c.gemm, h100, 16, 4096, 6144, 2) * grid
