"""Find the highest request rate at which a configuration still meets its SLOs.

The search scales the trace's inter-arrival times. It first brackets the capacity by doubling (or
halving) the rate from the trace's own rate, then bisects until the bracket is within ``tol``
(relative) or ``max_steps`` simulations have run. Feasible = every SLO holds and the queue is stable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Evaluation:
    rate: float
    ok: bool
    why: list[str]  # violated SLOs / instability; empty when ok
    summary: dict = field(default_factory=dict)


@dataclass
class Capacity:
    max_rate: float | None  # None: no rate meets the SLOs
    steps: int  # simulations run
    tolerance: float  # relative width of the final bracket (hi - lo) / lo
    bracket: tuple[float, float]
    reason: str = ""  # why no rate works
    evaluations: list[Evaluation] = field(default_factory=list)


def find_capacity(evaluate: Callable[[float], Evaluation], start_rate: float, tol: float = 0.02,
                  max_steps: int = 24, min_rate_factor: float = 1 / 256) -> Capacity:
    evals: list[Evaluation] = []

    def ev(rate: float) -> Evaluation:
        e = evaluate(rate)
        evals.append(e)
        return e

    floor = start_rate * min_rate_factor
    first = ev(start_rate)
    if first.ok:
        lo, hi = start_rate, None
        while hi is None and len(evals) < max_steps:
            r = lo * 2
            if ev(r).ok:
                lo = r
            else:
                hi = r
        if hi is None:
            return Capacity(lo, len(evals), float("inf"), (lo, float("inf")),
                            reason="no upper bound found within max_steps", evaluations=evals)
    else:
        hi, lo = start_rate, None
        last = first
        while lo is None:
            r = hi / 2
            if r < floor or len(evals) >= max_steps:
                why = "; ".join(last.why)
                return Capacity(None, len(evals), float("nan"), (0.0, hi),
                                reason=f"fails even at {hi:.3g} req/s: {why}", evaluations=evals)
            last = ev(r)
            if last.ok:
                lo = r
            else:
                hi = r
    while (hi - lo) / lo > tol and len(evals) < max_steps:
        mid = (lo + hi) / 2
        if ev(mid).ok:
            lo = mid
        else:
            hi = mid
    return Capacity(lo, len(evals), (hi - lo) / lo, (lo, hi), evaluations=evals)
