"""Service-level objectives such as ``ttft_p99=2s,tpot_p99=100ms``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvsim.errors import ConfigError

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "": 1.0}


@dataclass(frozen=True)
class Slo:
    metric: str  # ttft, tpot or e2e
    pct: int  # 50, 90 or 99
    limit_s: float

    @property
    def key(self) -> str:
        """The run-summary column this SLO reads."""
        return f"{self.metric}_p{self.pct}_s"

    def __str__(self) -> str:
        return f"{self.metric}_p{self.pct}<={self.limit_s:g}s"


def parse_slos(text: str) -> list[Slo]:
    out: list[Slo] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"(ttft|tpot|e2e)_p(50|90|99)\s*=\s*([0-9.]+(?:e-?\d+)?)\s*(s|ms|us)?", part)
        if not m:
            raise ConfigError(f"SLO '{part}': expected e.g. ttft_p99=2s, tpot_p90=100ms, e2e_p50=30s")
        slo = Slo(m.group(1), int(m.group(2)), float(m.group(3)) * _UNITS[m.group(4) or ""])
        if not math.isfinite(slo.limit_s):
            raise ConfigError(f"SLO '{part}': the limit must be a finite time")
        if any(o.key == slo.key for o in out):
            raise ConfigError(f"SLO '{part}': {m.group(1)}_p{m.group(2)} is given twice")
        out.append(slo)
    if not out:
        raise ConfigError("--slo is empty")
    return out


def check_slos(summary: dict, slos: list[Slo]) -> list[str]:
    """Violations, e.g. ['ttft_p99 = 3.1 s > 2 s']; empty when every SLO holds."""
    bad = []
    for s in slos:
        v = summary.get(s.key)
        if v is None or v != v:  # NaN: no finished request to measure
            bad.append(f"{s.metric}_p{s.pct}: no finished requests")
        elif v > s.limit_s:
            bad.append(f"{s.metric}_p{s.pct} = {v:.3g} s > {s.limit_s:g} s")
    return bad


def within_slos(req, slos: list[Slo]):
    """Per request (a requests table): finished with every SLO's metric within its limit, whatever the
    SLO's percentile (DistServe's attainment). A one-token answer has no TPOT, which then holds."""
    ok = req.status == "finished"
    for s in slos:
        col = req[f"{s.metric}_s"]
        ok &= (col.isna() | (col <= s.limit_s)) if s.metric == "tpot" else (col <= s.limit_s)
    return ok


def add_slo_columns(summary: dict, req, slos, gpus: int) -> None:
    """SLO columns: whether the percentile SLOs hold, the share of requests that met every per-request
    limit (TTFT and TPOT limits, whatever their percentile; DistServe's attainment), and that goodput per GPU."""
    summary["gpus"] = gpus
    if not slos:
        return
    bad = check_slos(summary, slos)
    summary["slo"] = "met" if not bad else "; ".join(bad)
    ok = within_slos(req, slos)
    summary["slo_attainment"] = float(ok.sum() / len(req)) if len(req) else float("nan")
    summary["goodput_req_s_per_gpu"] = float(ok.sum()) / max(summary["duration_s"], 1e-12) / max(gpus, 1)
