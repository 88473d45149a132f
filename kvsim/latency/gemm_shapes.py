"""Measured GEMM shapes: where the kernel tables timed a dense GEMM's own shape, its times, not the fit's.

One soft roofline (calibration.GemmParams: a fixed time, two efficiencies and a knee) prices every GEMM of a
weight format. For bf16 it stays within a few percent of AIConfigurator's tables; for FP8 it cannot: vLLM's
CUTLASS FP8 GEMMs pick their tiles by the activation rows m, and their efficiency jumps between those buckets, so
the fit that matches the weight-bound (m <= 16) and compute-bound (m >= 4,096) ends prices the batches between
them 1.2-1.6x too slow (H100 and H200, vLLM 0.18-0.19: Llama-3.1-70B's 8,192 x 8,192 at 256 rows, 1.55x).

So a calibration also keeps, per weight format, the measured / fitted ratio on a grid of activation rows
(:data:`KNOTS_M`) x output width n x reduction k (every width the table timed, from :data:`MIN_DIM` on): the
per-operation model multiplies the fit by it, interpolated linearly in log(m), log(n), log(k) and held at the
grid's ends. The fit still prices what the grid does not hold (a format without a table, the padding a derived
GPU's peaks imply); the ratio carries over to GPUs that borrow the calibration (same architecture).

Layout in a calibration (``gemm_shapes``): format ("bf16" or a GEMM_QUANT key) -> {"m": [...], "n": [...],
"k": [...], "ratio": [...]}, each axis ascending, ratios flat in (m, n, k) order.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

# the activation rows whose ratios are kept (the nearest each table timed): the decode batches and prefill
# chunks between which vLLM's kernels change tiles
KNOTS_M = (1, 4, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192, 16384)
MIN_DIM = 128  # weights narrower than this are not held (no model's projection is; the fit prices them)
RATIO_RANGE = (0.05, 20.0)  # the measured / fitted ratios a grid may hold (beyond: a broken table or file)
OUTLIER = 1.4  # a timed point this much slower than the fastest of its neighbours is a timing outlier (knot_ratio)


@dataclass(frozen=True)
class GemmGrid:
    """measured / fitted GEMM time on a grid of activation rows ``m`` x output width ``n`` x reduction ``k``."""

    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    ratio: tuple[float, ...]  # flat, index (i_m * len(n) + i_n) * len(k) + i_k

    def factor(self, m: float, n: float, k: float) -> float:
        """measured / fitted for an (m x k) by (k x n) GEMM, interpolated in log space, held at the ends."""
        im, wm = _bracket(self.m, m)
        in_, wn = _bracket(self.n, n)
        ik, wk = _bracket(self.k, k)
        nn, nk, r = len(self.n), len(self.k), self.ratio
        out = 0.0
        for a, fa in ((im, 1.0 - wm), (im + 1, wm)):
            if fa == 0.0:
                continue
            for b, fb in ((in_, 1.0 - wn), (in_ + 1, wn)):
                if fb == 0.0:
                    continue
                base = (a * nn + b) * nk
                for c, fc in ((ik, 1.0 - wk), (ik + 1, wk)):
                    if fc:
                        out += fa * fb * fc * r[base + c]
        return out

    def to_json(self) -> dict:
        return {"m": list(self.m), "n": list(self.n), "k": list(self.k), "ratio": [round(x, 4) for x in self.ratio]}

    @staticmethod
    def from_json(d, where: str) -> "GemmGrid":
        """A grid from its JSON object; ValueError naming ``where`` when it is not a usable one."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: must be an object with m, n, k and ratio lists")
        axes = []
        for name in ("m", "n", "k"):
            v = d.get(name)
            if not isinstance(v, list) or not v or not all(isinstance(x, int) and x >= 1 for x in v):
                raise ValueError(f"{where}: '{name}' must be a non-empty list of whole numbers >= 1")
            if any(b <= a for a, b in zip(v, v[1:])):
                raise ValueError(f"{where}: '{name}' must be ascending without repeats")
            axes.append(tuple(v))
        ratio = d.get("ratio")
        size = len(axes[0]) * len(axes[1]) * len(axes[2])
        if not isinstance(ratio, list) or len(ratio) != size:
            raise ValueError(f"{where}: 'ratio' must list {size} numbers (m x n x k)")
        lo, hi = RATIO_RANGE
        if not all(isinstance(x, (int, float)) and math.isfinite(x) and lo <= x <= hi for x in ratio):
            raise ValueError(f"{where}: every ratio must be a number from {lo:g} to {hi:g}")
        return GemmGrid(axes[0], axes[1], axes[2], tuple(float(x) for x in ratio))


def _bracket(axis: tuple[int, ...], x: float) -> tuple[int, float]:
    """(index i, weight w) such that x sits between axis[i] and axis[i + 1] at w in log space (w = 0 at or
    below the first point, and at the last one)."""
    if x <= axis[0] or len(axis) == 1:
        return 0, 0.0
    if x >= axis[-1]:
        return len(axis) - 1, 0.0
    i = bisect_right(axis, x) - 1
    lo, hi = math.log(axis[i]), math.log(axis[i + 1])
    return i, (math.log(x) - lo) / (hi - lo)


def knot_ratio(by_m, m: int) -> float:
    """The ratio a grid keeps at knot ``m`` of one (n, k): the ratio at the timed activation rows nearest ``m``,
    unless it is an outlier, more than :data:`OUTLIER` times the fastest of its neighbours (the timed rows next to
    it, three points at an end, and any within 1.5x of it; none beyond 4x, and no test with fewer than three): then
    the median of the neighbours that are not. Timing noise is one-sided (a kernel is never faster than it can be)
    and some tables have isolated slow points, which a knot would otherwise spread over every batch around it: B200's vLLM 0.24 FP8 table times 8,192 x 8,192 at 38 us
    with 16 rows and 18-19 us at 13, 15, 17 and 32 (17% of its knots are more than 20% off their neighbours, at
    most 2% in every other table)."""
    ms = list(by_m.index)
    rs = [float(x) for x in by_m.to_numpy()]
    i = min(range(len(ms)), key=lambda j: abs(math.log(ms[j]) - math.log(m)))
    lo = max(0, min(i - 1, len(ms) - 3))  # the three timed rows around it (at an end, the two on its side)
    hi = min(len(ms), lo + 3)

    def apart(j: int) -> float:
        return abs(math.log(ms[j] / ms[i]))

    # none beyond 4x: a table's sparse rows have no neighbours
    near = {j for j in range(len(ms)) if (lo <= j < hi or apart(j) <= math.log(1.5)) and apart(j) <= math.log(4)}
    fastest = min(rs[j] for j in near)
    if len(near) < 3 or rs[i] <= OUTLIER * fastest:
        return rs[i]
    kept = sorted(rs[j] for j in near if rs[j] <= OUTLIER * fastest)
    return kept[(len(kept) - 1) // 2]  # the lower median: of two, the faster


def fit_grid(rows, predicted) -> GemmGrid | None:
    """The grid of a measured table: ``rows`` (a DataFrame of m, n, k, seconds) and the fit's ``predicted``
    seconds of each row. Per (n, k) of at least MIN_DIM, the median ratio at the timed m nearest each of
    KNOTS_M in log scale, an outlier among its neighbours set aside (:func:`knot_ratio`); an (n, k) the table
    skipped takes its nearest timed neighbour's. None: nothing held."""
    import numpy as np

    g = rows.assign(ratio=rows["seconds"].to_numpy(float) / np.asarray(predicted, float))
    g = g[(g["n"] >= MIN_DIM) & (g["k"] >= MIN_DIM) & (g["m"] >= 1) & (g["ratio"] > 0) & np.isfinite(g["ratio"])]
    if g.empty:
        return None
    cells = g.groupby(["n", "k", "m"])["ratio"].median()
    ns, ks = sorted(set(g["n"])), sorted(set(g["k"]))
    timed_m = sorted(set(g["m"]))
    knots = sorted({min(timed_m, key=lambda t: abs(math.log(t) - math.log(q))) for q in KNOTS_M})
    have = {nk: cells.loc[nk] for nk in {(n, k) for n, k in zip(g["n"], g["k"])}}

    def nearest(n: int, k: int):
        return have[min(have, key=lambda s: (math.log(s[0] / n) ** 2 + math.log(s[1] / k) ** 2, s))]

    ratio = []
    for m in knots:
        for n in ns:
            for k in ks:
                by_m = have.get((n, k))
                if by_m is None:
                    by_m = nearest(n, k)
                ratio.append(float(min(RATIO_RANGE[1], max(RATIO_RANGE[0], knot_ratio(by_m, m)))))
    return GemmGrid(tuple(int(x) for x in knots), tuple(int(x) for x in ns), tuple(int(x) for x in ks), tuple(ratio))
