"""Fit the V1 API server's per-prompt-token time and its delivery delay (kvsim.frontend, preset ``vllm``) on
half of InferenceMAX's vLLM V1 runs of gpt-oss-120b, and check them on the other half.

    python benchmarks/fit_v1_frontend.py [--data benchmarks/data/inferencemax_gpt_oss_120b.csv]

The runs (benchmarks/validate_inferencemax.py has their set-up) are split by configuration: every other row of the
data table fits, the rest is held out. For each pair of a grid (delivery 5.5-10.5 ms, 1-4 us per prompt token;
the 1.5 ms per request stays) kvsim replays the fitting half with the MoE kernels the servers ran and scores the
median |predicted / measured - 1| of the median TTFT; the best pair is then scored on the held-out half, beside
the preset it replaces (0.5 ms delivery, 1 us per token). TPOT does not depend on either (both shift every token
of a request alike). Takes about 15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DELIVER_MS = (5.5, 8.0, 10.5)
TOKEN_US = (1.0, 2.5, 4.0)
BEFORE = (0.5, 1.0)  # the preset's estimates before this fit


def score(runs, deliver_ms: float, token_us: float) -> dict:
    """TTFT p50 predicted / measured over ``runs`` with this delivery delay and per-token time."""
    import numpy as np

    import kvsim.frontend as fe
    import validate_inferencemax as V

    saved = fe.FRONTEND_PRESETS["vllm"]
    fe.FRONTEND_PRESETS["vllm"] = replace(saved, deliver_s=deliver_ms * 1e-3, token_s=token_us * 1e-6)
    try:
        r = np.array([V.replay(row, "served")["ttft_p50"] / row.median_ttft_s for row in runs.itertuples()])
    finally:
        fe.FRONTEND_PRESETS["vllm"] = saved
    return {
        "median": float(np.median(r)),
        "p10": float(np.quantile(r, 0.1)),
        "p90": float(np.quantile(r, 0.9)),
        "abs_err": float(np.median(abs(r - 1))),
    }


def main() -> None:
    import pandas as pd

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT / "benchmarks" / "data" / "inferencemax_gpt_oss_120b.csv"))
    a = ap.parse_args()
    runs = pd.read_csv(a.data, dtype={"vllm": str})
    fit, held = runs.iloc[::2], runs.iloc[1::2]
    best = None
    for d, t in itertools.product(DELIVER_MS, TOKEN_US):
        s = score(fit, d, t)
        print(
            f"fit half, delivery {d} ms, {t} us/token: TTFT {s['median']:.3f} [{s['p10']:.2f}, {s['p90']:.2f}], "
            f"median |error| {100 * s['abs_err']:.1f}%",
            flush=True,
        )
        if best is None or s["abs_err"] < best[2]["abs_err"]:
            best = (d, t, s)
    for d, t in ((best[0], best[1]), BEFORE):
        s = score(held, d, t)
        print(
            f"held-out half, delivery {d} ms, {t} us/token: TTFT {s['median']:.3f} [{s['p10']:.2f}, {s['p90']:.2f}], "
            f"median |error| {100 * s['abs_err']:.1f}%",
            flush=True,
        )


if __name__ == "__main__":
    main()
