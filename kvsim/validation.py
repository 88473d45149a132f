"""Value rules shared by the options table (kvsim/options.py) and the configuration dataclasses.

A rule returns None for a good value and a short description of the problem otherwise; callers
prefix it with the name the user knows (a flag, a grid key, a field).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvsim.errors import ConfigError


def is_finite(v) -> bool:
    """math.isfinite for any int or float read from a file: an integer too large for a float (JSON and YAML
    allow hundreds of digits) is not finite here rather than an OverflowError."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def shown(v) -> str:
    """A value for an error message: as written, or the size of an integer too long to print whole, or the start
    of a text too long to print whole."""
    if isinstance(v, int) and not isinstance(v, bool) and not -(10**20) < v < 10**20:
        return f"a {len(str(abs(v))) if abs(v) < 10**4000 else 'over 4000'}-digit integer"
    if isinstance(v, str) and len(v) > MAX_SHOWN:
        return f"{v[:MAX_SHOWN]!r}... ({len(v):,} characters)"
    return repr(v)


MAX_SHOWN = 80  # characters of a text an error message repeats


@dataclass(frozen=True)
class Number:
    """An int or a finite float within bounds."""

    integer: bool = False
    min: float | None = None
    min_open: bool = False  # min itself not allowed
    max: float | None = None
    max_open: bool = False

    def __call__(self, v) -> str | None:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"must be {'an integer' if self.integer else 'a number'}, got {v!r}"
        if self.integer and not isinstance(v, int):
            return f"must be an integer, got {v!r}"
        if not is_finite(v):
            return f"must be finite, got {shown(v)}"
        if self.min is not None and (v < self.min or (self.min_open and v == self.min)):
            return f"must be {'>' if self.min_open else '>='} {self.min:g}, got {v:g}"
        if self.max is not None and (v > self.max or (self.max_open and v == self.max)):
            return f"must be {'<' if self.max_open else '<='} {self.max:g}, got {v:g}"
        return None

    def describe(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f"{'>' if self.min_open else '>='} {self.min:g}")
        if self.max is not None:
            parts.append(f"{'<' if self.max_open else '<='} {self.max:g}")
        return " and ".join(parts)


POSITIVE_INT = Number(integer=True, min=1)
POSITIVE = Number(min=0, min_open=True)
NON_NEGATIVE = Number(min=0)
FRACTION = Number(min=0, min_open=True, max=1)  # (0, 1]
EFFICIENCY = Number(min=1e-6, max=1)  # a fraction of a peak that keeps times finite
MIN_RATE = 1e-6  # requests/s: one every 11.6 days; slower rates push arrivals where seconds lose their precision
MIN_GBS = 1e-3  # GB/s: 1 MB/s; a slower link or bus is a typo, and below ~1e-300 a transfer's seconds overflow to inf
MAX_GBS = 1e9  # GB/s: a million times any real link
BANDWIDTH_GBS = Number(min=MIN_GBS, max=MAX_GBS)  # a bandwidth option in GB/s
MAX_GIB = float(1 << 30)  # an exbibyte: any memory size beyond it is a typo, and byte counts stay exact
GIB = Number(min=0, min_open=True, max=MAX_GIB)  # sizes in GiB
GIB_OR_ZERO = Number(min=0, max=MAX_GIB)
RATE = Number(min=MIN_RATE, max=1e9)  # requests/s
ARRIVAL_CV = Number(min=1e-3, max=1e3)  # gamma arrivals' coefficient of variation: beyond, gaps under- or overflow
SEED = Number(integer=True, min=0, max=2**63 - 1)  # what numpy's generators take
MAX_SIGMA = 10.0  # lognormal shape beyond which samples overflow float64 for any sensible mean
LOGNORMAL_SIGMA = Number(min=0, max=MAX_SIGMA)
MAX_TP = 4096  # GPUs a replica's tensor parallelism may span
MAX_PROMPTS = 10_000_000  # requests one generated workload may have: beyond this, memory runs out first
MAX_LEN = 1 << 30  # tokens per prompt or output: far beyond any model's context, and sums stay exact


def request_rate(v) -> str | None:
    """A request rate in requests/s, or inf (every request at once)."""
    if isinstance(v, float) and v == math.inf:
        return None
    problem = RATE(v)
    return f"{problem} (or inf: every request at once)" if problem else None


def require(value, rule, name: str) -> None:
    """Raise ConfigError('NAME: problem') if ``value`` breaks ``rule``."""
    problem = rule(value)
    if problem:
        raise ConfigError(f"{name}: {problem}")
