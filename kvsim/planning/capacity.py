"""Find the highest request rate at which a configuration still meets its SLOs.

The search scales the trace's inter-arrival times. It first brackets the capacity by doubling (or
halving) the rate from the trace's own rate, then bisects until the bracket is within ``tol``
(relative) or ``max_steps`` simulations have run. Feasible = every SLO holds and the queue is stable.

A search ends in one of five states, and only two of them are conclusions:
- ``found``: the capacity lies in [lo, hi] with (hi - lo) / lo <= tol;
- ``never``: it fails even at the floor rate (``min_rate_factor`` x the trace's rate);
- ``lower-bound``: it still met the SLOs at the highest rate tried when ``max_steps`` ran out (capacity >= lo);
- ``unconverged``: bracketed, but ``max_steps`` ran out before the bracket narrowed to ``tol``;
- ``not-found``: it failed at every rate tried, but ``max_steps`` ran out before the floor.
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
    reason: str = ""  # why no rate works, or why the search is inconclusive
    evaluations: list[Evaluation] = field(default_factory=list)
    status: str = "found"  # found, never, lower-bound, unconverged, not-found (module docstring)

    @property
    def conclusive(self) -> bool:
        return self.status in ("found", "never")


def find_capacity(
    evaluate: Callable[[float], Evaluation],
    start_rate: float,
    tol: float = 0.02,
    max_steps: int = 24,
    min_rate_factor: float = 1 / 256,
) -> Capacity:
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
            return Capacity(
                lo,
                len(evals),
                float("inf"),
                (lo, float("inf")),
                reason=f"still meets the SLOs at {lo:.3g} req/s, the highest rate tried in {len(evals)}"
                " simulations (raise --max-steps)",
                evaluations=evals,
                status="lower-bound",
            )
    else:
        hi, lo = start_rate, None
        last = first
        while lo is None:
            r = hi / 2
            if r < floor:
                why = "; ".join(last.why)
                return Capacity(
                    None,
                    len(evals),
                    float("nan"),
                    (0.0, hi),
                    reason=f"fails even at {hi:.3g} req/s ({hi / start_rate:.3g} x the trace's rate): {why}",
                    evaluations=evals,
                    status="never",
                )
            if len(evals) >= max_steps:
                why = "; ".join(last.why)
                return Capacity(
                    None,
                    len(evals),
                    float("nan"),
                    (0.0, hi),
                    reason=f"fails at every rate tried, down to {hi:.3g} req/s, in {len(evals)} simulations"
                    f" (raise --max-steps to search lower): {why}",
                    evaluations=evals,
                    status="not-found",
                )
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
    width = (hi - lo) / lo
    if width > tol:
        return Capacity(
            lo,
            len(evals),
            width,
            (lo, hi),
            evaluations=evals,
            status="unconverged",
            reason=f"between {lo:.3g} and {hi:.3g} req/s after {len(evals)} simulations, wider than the"
            f" {100 * tol:g}% asked (raise --max-steps)",
        )
    return Capacity(lo, len(evals), width, (lo, hi), evaluations=evals)
