"""Measured MoE shapes: where the kernel tables timed a model's own fused-MoE layer, its times, not the fit's.

One set of fused-MoE parameters (calibration.MoeParams) prices every expert shape, and across the shapes
AIConfigurator's tables time it misses by 10-50% (H100, vLLM 0.24, 1,024 tokens and more: DeepSeek-V3's FP8
experts at 0.73 of measured, Llama-4-Scout's at 0.68). For the shapes of kvsim's MoE presets the calibration also
keeps, per shape, tensor/expert-parallel split and routing, the measured / fitted ratio at up to
:data:`KNOTS` token counts; the per-operation model multiplies the fit by it, interpolated in log(tokens) and held
at the ends. A shape the tables did not time, or kernels chosen by ``--moe-backend`` (whose own fit prices them),
keep the fit alone.

Layout in a calibration (``moe_shapes``): experts' dtype ("bf16" or a MOE_QUANT key) -> :func:`shape_key` ->
routing (kvsim's name) -> [[tokens...], [ratios...]], tokens ascending.
"""

from __future__ import annotations

import math
from bisect import bisect_left

# the token counts whose ratios are kept (the nearest each table timed): one or two per decade of batch sizes
KNOTS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
# a routing a shape has no ratios for borrows these, in order (the tables time balanced and power-law routings)
FALLBACK_ROUTINGS = ("power-law-1.2", "balanced", "power-law-1.01")


def shape_key(hidden: int, inter: int, experts: int, top_k: int, tp: int, ep: int) -> str:
    """The key of a MoE layer's shape: hidden size, one expert's full width (tokens), experts, experts per token,
    the ranks each expert's width is split over and the ranks the experts are spread over."""
    return f"{hidden},{inter},{experts},{top_k},{tp},{ep}"


def shape_factor(table: dict | None, key: str, routing: str, tokens: float) -> float:
    """measured / fitted for ``tokens`` tokens of shape ``key`` under ``routing`` (1.0 where ``table``, a dtype's
    entry of ``moe_shapes``, has nothing for the shape)."""
    if not table:
        return 1.0
    by_routing = table.get(key)
    if not by_routing:
        return 1.0
    points = by_routing.get(routing)
    if points is None:
        points = next((by_routing[r] for r in FALLBACK_ROUTINGS if r in by_routing), None)
        if points is None:
            return 1.0
    ts, rs = points
    if tokens <= ts[0]:
        return rs[0]
    if tokens >= ts[-1]:
        return rs[-1]
    i = bisect_left(ts, tokens)
    if ts[i] == tokens:
        return rs[i]
    lo, hi = math.log(ts[i - 1]), math.log(ts[i])
    w = (math.log(tokens) - lo) / (hi - lo)
    return rs[i - 1] + w * (rs[i] - rs[i - 1])


def knot_rows(tokens: list[int]) -> list[int]:
    """Indexes of the measured token counts ``tokens`` (ascending, distinct) nearest each of :data:`KNOTS` in
    log scale (each used once), ascending."""
    picked: set[int] = set()
    for k in KNOTS:
        if tokens[-1] < k / 2 and picked:
            break
        best = min(range(len(tokens)), key=lambda i: abs(math.log(tokens[i] / k)))
        picked.add(best)
    return sorted(picked)


def check_table(table, where: str) -> dict:
    """``table`` (one dtype's ``moe_shapes`` entry read from JSON) checked: shape keys of six positive whole numbers,
    routings with equal-length lists of ascending positive token counts and finite positive ratios."""
    from kvsim.latency.routing import ROUTINGS

    if not isinstance(table, dict):
        raise TypeError(f"{where} must be an object")
    out: dict = {}
    for key, by_routing in table.items():
        parts = str(key).split(",")
        if len(parts) != 6 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"{where}: shape key {key!r} is not six positive whole numbers")
        if not isinstance(by_routing, dict):
            raise TypeError(f"{where} {key} must be an object")
        out[key] = {}
        for routing, points in by_routing.items():
            if routing not in ROUTINGS:
                raise ValueError(f"{where} {key}: unknown routing {routing!r}")
            if not (isinstance(points, list) and len(points) == 2 and all(isinstance(p, list) for p in points)):
                raise ValueError(f"{where} {key} {routing}: want [[tokens...], [ratios...]]")
            ts, rs = points
            ok = len(ts) == len(rs) >= 1
            ok = ok and all(isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in ts)
            ok = ok and all(a < b for a, b in zip(ts, ts[1:]))
            ok = ok and all(
                isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) and 0 < r < 100 for r in rs
            )
            if not ok:
                raise ValueError(
                    f"{where} {key} {routing}: tokens must be ascending positive whole numbers and ratios finite "
                    "numbers above 0 and below 100, as many of each"
                )
            out[key][routing] = [list(ts), [float(r) for r in rs]]
    return out
