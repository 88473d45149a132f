"""A request rate that changes over the day: piecewise-constant rates per window, read from a CSV, and arrivals
drawn under it (`kvsim trace generate --rate-profile`).

Arrivals come from a renewal process in operational time: unit-rate gaps (exponential, or gamma with the given
coefficient of variation) laid on the cumulative intensity Lambda(t) = integral of the rate, then mapped back
to seconds. For exponential gaps that is the non-homogeneous Poisson process of the profile; a window of rate
0 gets no arrivals. The same profile, scale and seed give the same times.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

import numpy as np

from kvsim.errors import ConfigError, TraceError

START_NAMES = ("start_s", "window_start_s", "time_s", "timestamp")
RATE_NAMES = ("rate", "rate_rps", "total_rate_rps", "requests_per_s")
MAX_WINDOWS = 10_000_000


@dataclass(frozen=True)
class RateProfile:
    starts: np.ndarray  # window starts, seconds, increasing
    rates: np.ndarray  # requests/s in each window (>= 0)
    end: float  # the last window's end, seconds

    @property
    def duration_s(self) -> float:
        return self.end - float(self.starts[0])

    def expected_requests(self, scale: float = 1.0) -> float:
        widths = np.diff(np.append(self.starts, self.end))
        return float(scale * np.sum(self.rates * widths))


def read_rate_profile(path: str) -> RateProfile:
    """The CSV's windows: a start column (start_s, window_start_s, ...) and a rate column (rate, rate_rps, ...),
    one row per window; the last window is as long as the one before it (a single window: one hour). Errors
    name the file, line and field."""
    try:
        fh = open(path, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise TraceError(path, 0, None, f"cannot open: {e.strerror}") from None
    starts: list[float] = []
    rates: list[float] = []
    with fh:
        try:
            reader = csv.DictReader(fh)
            names = reader.fieldnames or []
            start_col = next((n for n in names if n.strip().lower() in START_NAMES), None)
            rate_col = next((n for n in names if n.strip().lower() in RATE_NAMES), None)
            if start_col is None or rate_col is None:
                raise TraceError(
                    path,
                    1,
                    None,
                    f"needs a window-start column ({', '.join(START_NAMES)}) and a rate column "
                    f"({', '.join(RATE_NAMES)}), got {', '.join(names) or 'none'}",
                )
            for line, row in enumerate(reader, start=2):
                vals = []
                for col in (start_col, rate_col):
                    try:
                        v = float(row[col])
                    except (TypeError, ValueError):
                        raise TraceError(path, line, col, f"must be a number, got {row[col]!r}") from None
                    if not math.isfinite(v) or v < 0:
                        raise TraceError(path, line, col, f"must be finite and >= 0, got {row[col]!r}")
                    vals.append(v)
                if starts and vals[0] <= starts[-1]:
                    raise TraceError(path, line, start_col, f"windows must start in increasing order ({vals[0]:g} s)")
                starts.append(vals[0])
                rates.append(vals[1])
                if len(starts) > MAX_WINDOWS:
                    raise TraceError(path, line, None, f"more than {MAX_WINDOWS:,} windows")
        except (UnicodeDecodeError, csv.Error) as e:
            raise TraceError(path, 0, None, f"not a readable CSV ({e})") from None
    if not starts:
        raise TraceError(path, 0, None, "no windows in file")
    if not any(rates):
        raise TraceError(path, 0, None, "every window's rate is 0: no request would arrive")
    width = starts[-1] - starts[-2] if len(starts) > 1 else 3600.0
    return RateProfile(np.array(starts), np.array(rates), starts[-1] + width)


def profile_arrivals(
    profile: RateProfile,
    rng: np.random.Generator,
    scale: float = 1.0,
    cv: float = 1.0,
    limit: int | None = None,
) -> np.ndarray:
    """Arrival times in seconds (from the profile's first window start = 0) under ``scale`` x the profile's rates;
    gaps in operational time have mean 1 and coefficient of variation ``cv`` (1: Poisson). At most ``limit``."""
    widths = np.diff(np.append(profile.starts, profile.end))
    cum = np.concatenate(([0.0], np.cumsum(scale * profile.rates * widths)))  # Lambda at window edges
    total = float(cum[-1])
    if total <= 0:
        raise ConfigError("the rate profile x --rate-scale brings no arrivals")
    wanted = total if limit is None else min(total, float(limit) + 1)
    if wanted > 2 * 10_000_000:
        raise ConfigError(
            f"the rate profile brings about {total:,.0f} requests; at most 10,000,000 (lower --rate-scale, or -n)"
        )
    shape = 1.0 / cv**2
    points: list[np.ndarray] = []
    reached = 0.0
    while reached < wanted:
        n = int(wanted - reached + 6 * math.sqrt(wanted - reached) + 16)
        gaps = rng.exponential(1.0, n) if cv == 1.0 else rng.gamma(shape, 1.0 / shape, n)
        op = reached + np.cumsum(gaps)
        points.append(op)
        reached = float(op[-1])
    op_times = np.concatenate(points)
    op_times = op_times[op_times < total]
    if limit is not None:
        op_times = op_times[:limit]
    edges = np.append(profile.starts, profile.end) - profile.starts[0]
    # the window each point falls in: the last edge at or below it, which starts a window of positive rate
    k = np.searchsorted(cum, op_times, side="right") - 1
    return edges[k] + (op_times - cum[k]) / (scale * profile.rates[k])
