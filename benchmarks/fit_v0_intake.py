"""Fit the V0 engine's API-server time per request (`kvsim/engine/frontend.py`, preset `vllm-v0`) on
LambdaLabsML/vllm-benchmark's A100 load sweep, and check it on the runs left out of the fit.

    python benchmarks/fit_v0_intake.py FOLDER

FOLDER as for benchmarks/validate_load_sweep.py. The runs (sorted by path) are split alternately: the even ones
fit, the odd ones are held out. For each candidate time per request, every fit run is replayed as
validate_load_sweep.py replays it (the V0 engine, its API server taking a burst in and handing it to the engine
together), and the candidate with the smallest median |log(predicted / measured median TTFT)| wins. One number
is fitted; TPOT and throughput do not depend on it at these loads beyond the start of each run.
"""

from __future__ import annotations

import argparse
import math
import runpy
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CANDIDATES_MS = (1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0)


def main() -> None:
    import numpy as np

    import kvsim.engine.frontend as frontend

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    a = ap.parse_args()
    sweep = runpy.run_path(str(ROOT / "benchmarks" / "validate_load_sweep.py"))
    runs = list(sweep["runs"](Path(a.folder)))
    fit, held = runs[0::2], runs[1::2]
    base = frontend.FRONTEND_PRESETS["vllm-v0"]

    def ratios(subset, request_s: float):
        frontend.FRONTEND_PRESETS["vllm-v0"] = replace(base, request_s=request_s)
        out = []
        for _, d, preset, quant, tp, max_len, _ in subset:
            ratio = d["median_itl_ms"] / d["median_tpot_ms"] if d.get("median_itl_ms") else 1.0
            p = sweep["replay"](d, preset, quant, tp, max_len, 10 if ratio > 2 else 1, sweep["SERVED"])
            out.append(p["ttft_p50"] / (d["median_ttft_ms"] / 1e3))
        frontend.FRONTEND_PRESETS["vllm-v0"] = base
        return np.array(out)

    def err(r) -> float:
        return float(np.median(np.abs(np.log(r))))

    scores = {}
    for ms in CANDIDATES_MS:
        scores[ms] = err(ratios(fit, ms / 1e3))
        print(f"{ms:4.1f} ms per request: fit runs' median |log ratio| {scores[ms]:.3f}", flush=True)
    best = min(scores, key=scores.get)
    r = ratios(held, best / 1e3)
    before = ratios(held, 1.5e-3)
    q = lambda x: f"{np.median(x):.2f} [{np.quantile(x, 0.1):.2f}, {np.quantile(x, 0.9):.2f}]"  # noqa: E731
    print(f"fitted: {best} ms per request on {len(fit)} runs; held out ({len(held)} runs): TTFT p50 predicted / "
          f"measured {q(r)}, median |error| {100 * (math.exp(err(r)) - 1):.0f}% (at 1.5 ms: {q(before)}, "
          f"{100 * (math.exp(err(before)) - 1):.0f}%)")


if __name__ == "__main__":
    main()
