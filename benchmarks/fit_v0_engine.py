"""Fit the V0 engine's CPU time per step (`--cpu-overhead vllm-v0`, kvsim/latency/cpu.py) and its API server's
time per request (`--frontend vllm-v0`, kvsim/frontend.py) on LambdaLabsML/vllm-benchmark's A100 load
sweep, and check both on the runs left out of the fit.

    python benchmarks/fit_v0_engine.py FOLDER

FOLDER as for benchmarks/validate_load_sweep.py. The runs (sorted by path) are split alternately: the even ones
fit, the odd ones are held out. Every candidate replays the fit runs as validate_load_sweep.py does. First the
CPU time per step (base + per scheduled sequence + per tensor-parallel GPU beyond the first; a multi-step window
pays it once): the triple with the smallest
median |log(predicted / measured median TPOT)|. Then, with it, the API server's time per request (a burst handed
to the engine together): the smallest median |log| of the median TTFT. Four numbers are fitted in all.
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

CPU_BASE_MS = (1.0, 2.0, 3.0)
CPU_PER_SEQ_MS = (0.2, 0.25, 0.3)
CPU_PER_RANK_MS = (0.0, 0.5, 1.0, 1.5, 2.0)
INTAKE_MS = (1.5, 2.5, 3.5, 4.0, 4.5, 5.0, 6.0)


def main() -> None:
    import numpy as np

    import kvsim.frontend as frontend
    import kvsim.latency.cpu as cpu

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    a = ap.parse_args()
    sweep = runpy.run_path(str(ROOT / "benchmarks" / "validate_load_sweep.py"))
    runs = list(sweep["runs"](Path(a.folder)))
    fit, held = runs[0::2], runs[1::2]
    cpu0, fe0 = cpu.CPU_PRESETS["vllm-v0"], frontend.FRONTEND_PRESETS["vllm-v0"]

    def ratios(subset, base_s: float, per_seq_s: float, per_rank_s: float, request_s: float) -> tuple:
        """(TPOT, TTFT) predicted / measured medians of every run of ``subset`` with these constants."""
        cpu.CPU_PRESETS["vllm-v0"] = replace(cpu0, base_s=base_s, per_seq_s=per_seq_s, per_rank_s=per_rank_s)
        frontend.FRONTEND_PRESETS["vllm-v0"] = replace(fe0, request_s=request_s)
        try:
            tpot, ttft = [], []
            for _, d, preset, quant, tp, max_len, _ in subset:
                p = sweep["replay"](d, preset, quant, tp, max_len, sweep["scheduler_steps"](d)[1], sweep["SERVED"])
                tpot.append(p["tpot_p50"] / (d["median_tpot_ms"] / 1e3))
                ttft.append(p["ttft_p50"] / (d["median_ttft_ms"] / 1e3))
            return np.array(tpot), np.array(ttft)
        finally:
            cpu.CPU_PRESETS["vllm-v0"], frontend.FRONTEND_PRESETS["vllm-v0"] = cpu0, fe0

    def err(r) -> float:
        return float(np.median(np.abs(np.log(r))))

    def q(r) -> str:
        return (
            f"{np.median(r):.2f} [{np.quantile(r, 0.1):.2f}, {np.quantile(r, 0.9):.2f}], median |error| "
            f"{100 * (math.exp(err(r)) - 1):.0f}%"
        )

    request_s = fe0.request_s
    scores = {}
    for b in CPU_BASE_MS:
        for s in CPU_PER_SEQ_MS:
            for r in CPU_PER_RANK_MS:
                scores[b, s, r] = err(ratios(fit, b / 1e3, s / 1e3, r / 1e3, request_s)[0])
                print(
                    f"CPU {b:.1f} ms + {s:.2f} ms per sequence + {r:.1f} ms per extra GPU: fit runs' TPOT median "
                    f"|log ratio| {scores[b, s, r]:.3f}",
                    flush=True,
                )
    b, s, r = min(scores, key=scores.get)
    cpu_s = (b / 1e3, s / 1e3, r / 1e3)
    scores = {}
    for ms in INTAKE_MS:
        scores[ms] = err(ratios(fit, *cpu_s, ms / 1e3)[1])
        print(f"API server {ms:.1f} ms per request: fit runs' TTFT median |log ratio| {scores[ms]:.3f}", flush=True)
    intake = min(scores, key=scores.get)
    tpot, ttft = ratios(held, *cpu_s, intake / 1e3)
    tpot0, ttft0 = ratios(held, 2e-3, 0.1e-3, 0.0, 1.5e-3)
    print(
        f"fitted on {len(fit)} runs: CPU {b} ms + {s} ms per sequence + {r} ms per extra tensor-parallel GPU per "
        f"step, API server {intake} ms per request"
    )
    print(f"held out ({len(held)} runs), predicted / measured median: TPOT {q(tpot)}; TTFT {q(ttft)}")
    print(
        f"  with the RFC-sourced CPU (2 ms + 0.1 ms per sequence) and V1's 1.5 ms per request: TPOT {q(tpot0)}; "
        f"TTFT {q(ttft0)}"
    )


if __name__ == "__main__":
    main()
