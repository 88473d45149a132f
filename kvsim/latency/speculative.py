"""Iteration time under speculative decoding (kvsim.speculative): one engine iteration is the 1/tau share of a
verify step.

A verify step of d decoding sequences and prefill chunks runs the target over every chunk's tokens and K + 1
tokens per decode (its dense layers, all-reduces, CUDA-graph padding and LM head over all of them; attention
reads each decode's context once), then the drafter: once over the prompt tokens and the accepted ones, and
K - 1 more times one token per sequence (its attention reading the context in its own layers). The engine's
iteration stands for 1/tau of such a step: its prefill chunks are scaled by tau into the step's, and every
part of the step's time, CPU included, is divided by tau.
"""

from __future__ import annotations

import numpy as np

from kvsim.latency.base import BREAKDOWN_COLUMNS, LatencyModel, StepShape


class SpeculativeModel(LatencyModel):
    """The per-operation ``target`` model verifying, the per-operation ``draft`` model (None: n-gram proposals,
    no GPU work) proposing ``k`` tokens per sequence, ``tau`` tokens gained per sequence and step."""

    name = "per-op"

    def __init__(self, target, draft, k: int, tau: float):
        self.target, self.draft, self.k, self.tau = target, draft, k, tau
        self.windows = target.windows

    # --- one step -------------------------------------------------------------------------------
    def _parts(self, shape: StepShape) -> tuple[float, float, float, float]:
        """(dense, attention, communication, padding) GPU seconds of the verify step this iteration stands for,
        the drafter's passes counted in their kinds."""
        t, k, tau = self.target, self.k, self.tau
        d, dkv, chunks = shape.split()
        real = tuple((max(1, round(n * tau)), cached) for n, cached in chunks)
        prefill = sum(n for n, _ in real)
        tokens, sampled = prefill + d * (k + 1), d * (k + 1) + len(real)
        verify = StepShape(tokens, d + len(real), 0, 0, d, dkv, real, shape.window_reads)
        dense, attn = t.dense_s(tokens, sampled), t.attention_s(verify)
        comm, pad = t.communication_s(tokens, sampled), t._padding_s(tokens, sampled)
        g = self.draft
        if g is not None and tokens:
            seqs = d + len(real)
            first = prefill + max(d, round(d * tau))  # the prompt and the accepted tokens, once
            dense += g.dense_s(first, seqs) + (k - 1) * g.dense_s(seqs, seqs)
            attn += g.attention_s(StepShape(first, seqs, 0, 0, d, dkv, real)) + (k - 1) * g.attention_s(
                StepShape.decode(seqs, dkv + sum(c + n for n, c in real))
            )
            comm += g.communication_s(first, seqs) + (k - 1) * g.communication_s(seqs, seqs)
            pad += g._padding_s(first, seqs) + (k - 1) * g._padding_s(seqs, seqs)
        return dense, attn, comm, pad

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        dense, attn, comm, pad = self._parts(shape)
        total, cpu = self.target._combine(dense + attn + comm + pad, shape.num_seqs)
        return dict(zip(BREAKDOWN_COLUMNS, (x / self.tau for x in (total, dense, attn, comm, pad, cpu))))

    def step_time(self, shape: StepShape) -> float:
        dense, attn, comm, pad = self._parts(shape)
        return self.target._combine(dense + attn + comm + pad, shape.num_seqs)[0] / self.tau

    # --- decode runs: the step times as numpy vectors ---------------------------------------------
    def _run(self, n: int, s0: int, k: int, contexts=None):
        """Seconds of each of k iterations of a decode run of n sequences (iteration i reads s0 + n*i KV
        tokens)."""
        t, K, tau = self.target, self.k, self.tau
        if k <= 0:
            return np.zeros(0)
        real = n * (K + 1)
        gpu = (
            t._run_gpu(n, s0, k, contexts)
            - t._run_constant_s(n)
            + (
                t.dense_s(real, real)
                + t.communication_s(real, real)
                + t._padding_s(real, real)
                + t.recurrent_state_s(n)
            )
        )
        g = self.draft
        if g is not None:
            first = max(n, round(n * tau))
            gpu = (
                gpu
                + K * g._run_gpu(n, s0, k)
                + (g.dense_s(first, n) - g.dense_s(n, n))
                + (g.communication_s(first, n) - g.communication_s(n, n))
                + (g._padding_s(first, n) - g._padding_s(n, n))
            )
        return t._combine_run(gpu, n) / tau

    def decode_step_times(self, n: int, s0: int, k: int, contexts=None) -> list[float]:
        return self._run(n, s0, k, contexts).tolist()

    def decode_run_time(self, n: int, s0: int, k: int, contexts=None) -> float:
        return float(self._run(n, s0, k, contexts).cumsum()[-1]) if k > 0 else 0.0

    def decode_steps_until(self, n: int, s0: int, budget_s: float, k_max: int, contexts=None) -> int:
        total = self._run(n, s0, k_max, contexts).cumsum()
        if k_max <= 0 or total[-1] < budget_s:
            return k_max
        return max(1, int(np.searchsorted(total, budget_s, side="left")) + 1)
