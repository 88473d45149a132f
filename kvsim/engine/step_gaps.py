"""The inter-token latency a streaming client measures: the gaps between one sequence's tokens.

A benchmark client (``vllm bench serve``'s ITL) records, for every streamed chunk after the first, the time
since the previous one. On a busy engine that gap is the step that produced the chunk: a plain decode step,
or a longer one that also computed prompt chunks of other requests. Each step that gives n running
sequences a token (not their first) adds n gaps of its duration, so percentiles are taken over steps weighted
by their decoding sequences. A sequence's TPOT averages its gaps, so where long prompts are prefilled among the
decodes its median is the stalls' share, while the median ITL is the plain decode step.

Kept per event (a step, or a run of decode steps), in lists: one append per step, no per-sequence work.
"""

from __future__ import annotations


class StepGaps:
    """Steps' start times (seconds), durations (seconds) and the decoding sequences each gave a token."""

    __slots__ = ("starts", "seconds", "tokens")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.seconds: list[float] = []
        self.tokens: list[int] = []

    def add(self, start_s: float, seconds: float, tokens: int) -> None:
        """One step of ``seconds`` that gave ``tokens`` decoding sequences their next token."""
        if tokens > 0:
            self.starts.append(start_s)
            self.seconds.append(seconds)
            self.tokens.append(tokens)

    def add_run(self, start_s: float, step_seconds: list[float], tokens: int) -> None:
        """A run of decode steps of these durations, each giving ``tokens`` sequences a token (those finishing
        within the run are counted to its end: their share of its steps is small and the steps alike)."""
        if tokens > 0 and step_seconds:
            k = len(step_seconds)
            self.starts.extend([start_s] * k)
            self.seconds.extend(step_seconds)
            self.tokens.extend([tokens] * k)

    def percentiles(self, qs: tuple[int, ...], since_s: float = 0.0) -> dict[int, float]:
        """The q-th percentile of the gaps (seconds) of steps started at ``since_s`` or later (after a client's
        warm-up), each step counted once per sequence it gave a token; NaN where there is none."""
        import numpy as np

        s = np.asarray(self.seconds, dtype=float)
        w = np.asarray(self.tokens, dtype=float)
        if since_s > 0 and len(s):
            keep = np.asarray(self.starts, dtype=float) >= since_s
            s, w = s[keep], w[keep]
        if not len(s):
            return {q: float("nan") for q in qs}
        order = np.argsort(s, kind="stable")
        s, cum = s[order], np.cumsum(w[order])
        # the smallest gap with at least q% of all gaps at or below it
        return {q: float(s[min(int(np.searchsorted(cum, q / 100 * cum[-1])), len(s) - 1)]) for q in qs}
