"""Seeded synthetic traces: arrival process x length distribution."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvsim.errors import ConfigError
from kvsim.trace.request import Request
from kvsim.validation import ARRIVAL_CV, LOGNORMAL_SIGMA, POSITIVE, RATE, Number, require


@dataclass(frozen=True)
class ArrivalSpec:
    process: str = "poisson"  # "poisson" or "gamma"
    rate: float = 1.0  # requests per second
    cv: float = 1.0  # coefficient of variation of inter-arrival times (gamma only; > 1 = bursty)

    def __post_init__(self) -> None:
        if self.process not in ("poisson", "gamma"):
            raise ConfigError(f"unknown arrival process '{self.process}' (poisson, gamma)")
        require(self.rate, RATE, "rate")
        require(self.cv, ARRIVAL_CV, "cv")


@dataclass(frozen=True)
class LengthSpec:
    prompt_mean: float = 300.0  # tokens (lognormal mean)
    prompt_sigma: float = 1.0  # lognormal shape
    output_mean: float = 250.0
    output_sigma: float = 1.0
    max_total: int = 4096  # prompt + output never exceed this (outputs are clipped first)
    lengths_csv: str | None = None  # sample (prompt, output) pairs from this CSV instead

    def __post_init__(self) -> None:
        for name in ("prompt_mean", "output_mean"):
            require(getattr(self, name), POSITIVE, name)
        for name in ("prompt_sigma", "output_sigma"):
            require(getattr(self, name), LOGNORMAL_SIGMA, name)
        require(self.max_total, Number(integer=True, min=2, max=1 << 40), "max_total")


def arrival_times(spec: ArrivalSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """n arrival times in seconds, starting at 0."""
    with np.errstate(over="ignore", divide="ignore"):
        if spec.process == "poisson":
            gaps = rng.exponential(1.0 / spec.rate, size=n)
        else:
            shape = 1.0 / spec.cv**2
            gaps = rng.gamma(shape, 1.0 / (spec.rate * shape), size=n)
        t = np.cumsum(gaps)
    if not np.isfinite(t[-1]) or not np.isfinite(gaps).all():
        raise ConfigError(f"rate {spec.rate:g}/s (cv {spec.cv:g}) puts arrivals beyond float range; raise the rate")
    return t - t[0]


def read_lengths_csv(path: str) -> np.ndarray:
    """(N, 2) int array of (prompt, output) pairs; rows with a non-positive length are left out (counted by
    kvsim.trace.csv_read.read_length_pairs, which `kvsim trace generate` reports)."""
    from kvsim.errors import TraceError
    from kvsim.trace.csv_read import read_length_pairs

    try:
        pairs, _, _ = read_length_pairs(path)
    except TraceError as e:
        raise ConfigError(str(e)) from None
    if not pairs:
        raise ConfigError(f"{path}: no rows with positive lengths")
    return np.asarray(pairs, dtype=np.int64)


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int, cap: float = 1 << 40) -> np.ndarray:
    """n lognormal token counts with this mean, in [1, cap] (clipped as floats, before the integer cast)."""
    mu = np.log(mean) - sigma**2 / 2
    with np.errstate(over="ignore"):
        x = rng.lognormal(mu, sigma + 0.0, size=n)  # + 0.0: a sigma of -0 (allowed: >= 0) is numpy's "sigma < 0"
    return np.clip(np.round(x), 1, cap).astype(np.int64)


def sample_lengths(
    spec: LengthSpec, n: int, rng: np.random.Generator, notes: list[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """n (prompt, output) token counts; prompt + output never exceed ``spec.max_total`` (prompts to max_total - 1,
    then outputs to what is left). ``notes``: gets a line saying how many requests the cap shortened, if any."""
    if spec.lengths_csv:
        table = read_lengths_csv(spec.lengths_csv)
        pick = table[rng.integers(0, len(table), size=n)]
        prompt, output = pick[:, 0].copy(), pick[:, 1].copy()
    else:
        prompt = _lognormal(rng, spec.prompt_mean, spec.prompt_sigma, n, spec.max_total)
        output = _lognormal(rng, spec.output_mean, spec.output_sigma, n, spec.max_total)
    asked_prompt, asked_output = prompt.copy(), output.copy()
    prompt = np.minimum(prompt, spec.max_total - 1)
    output = np.clip(output, 1, spec.max_total - prompt)
    if notes is not None:
        note = cap_note(spec.max_total, int((prompt < asked_prompt).sum()), int((output < asked_output).sum()), n)
        if note:
            notes.append(note)
    return prompt, output


def cap_note(max_total: int, prompts: int, outputs: int, n: int) -> str:
    """The line that says what a length cap changed ('' when it changed nothing)."""
    if not prompts and not outputs:
        return ""
    return (
        f"note: --max-total {max_total:,} shortened {prompts:,} prompts and {outputs:,} outputs of {n:,} requests "
        "(prompt + output never exceed it; a larger --max-total, or none, keeps the lengths drawn)"
    )


def generate(
    n: int, arrivals: ArrivalSpec, lengths: LengthSpec, seed: int = 0, notes: list[str] | None = None
) -> list[Request]:
    """A trace of n requests; the same arguments and seed give the same trace. ``notes``: gets what a length cap
    changed."""
    if n <= 0:
        raise ConfigError("--num-requests must be > 0")
    rng = np.random.default_rng(seed)
    t = arrival_times(arrivals, n, rng)
    return requests_at(t, lengths, rng, notes)


def requests_at(
    t: np.ndarray, lengths: LengthSpec, rng: np.random.Generator, notes: list[str] | None = None
) -> list[Request]:
    """Requests arriving at the times ``t`` (seconds), their lengths drawn from ``lengths`` with ``rng``."""
    n = len(t)
    prompt, output = sample_lengths(lengths, n, rng, notes)
    return [Request(str(i), float(t[i]), int(prompt[i]), int(output[i])) for i in range(n)]


NO_CAP = 1 << 40  # LengthSpec.max_total that caps nothing (the command line's default)
