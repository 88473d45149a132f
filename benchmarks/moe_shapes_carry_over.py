"""Do a MoE shape's measured / fitted ratios carry over between vLLM releases? (docs/latency.md, Measured MoE shapes)

    python benchmarks/moe_shapes_carry_over.py

For every chip, experts' dtype that carries over (calibration.SHAPES_CARRY_OVER) and shape and split a shipped
release calibration timed, price each of its kept token counts the way a release that did not time the shape is
priced (the ratio of the first release calibration.shape_sources names that timed it: the nearest, of two as
near the later; releases whose table times another kernel neither give nor take), and compare with the release's
own measured ratio: |log(borrowed / own)| against the fit alone's |log(1 / own)|. Pairs of releases whose ratios
are identical (AIConfigurator's 0.22 MoE tables repeat 0.24's on some chips) are left out. Reads only the
calibrations shipped in the package.
"""

from __future__ import annotations

import math


def points() -> list[dict]:
    """One row per (chip, dtype, shape and split, release, routing, kept token count)."""
    from kvsim.latency.calibration import SHAPES_CARRY_OVER, SHIPPED, load_calibration, shape_sources
    from kvsim.latency.moe_shapes import shape_factor
    from kvsim.releases import vllm_releases

    rows = []
    for chip, files in vllm_releases().items():
        shapes = {r: load_calibration(SHIPPED / f).moe_shapes for r, f in files.items()}
        for q in SHAPES_CARRY_OVER:
            for a in files:
                sources = shape_sources(chip, a, q)
                for key, own in shapes[a].get(q, {}).items():
                    b = next((r for r in sources if key in shapes[r].get(q, {})), None)
                    if b is None or shapes[b][q][key] == own:
                        continue
                    theirs = {key: shapes[b][q][key]}
                    rows += [
                        dict(
                            chip=chip,
                            dtype=q,
                            shape=key,
                            release=a,
                            borrowed_from=b,
                            tokens=t,
                            fit_error=abs(math.log(1 / x)),
                            carried_error=abs(math.log(shape_factor(theirs, key, routing, t) / x)),
                        )
                        for routing, (ts, ratios) in own.items()
                        for t, x in zip(ts, ratios)
                    ]
    return rows


def main() -> None:
    import numpy as np
    import pandas as pd

    d = pd.DataFrame(points())

    def pct(s, q=0.5):
        return f"{(np.exp(s.quantile(q)) - 1) * 100:.1f}%"

    print(f"{len(d):,} points; the other release's ratio closer at {(d.carried_error < d.fit_error).mean():.0%}")
    print("| group | points | fit alone: median, p90 |error| | other release's ratio: median, p90 |")
    print("|---|---:|---|---|")
    groups = [("all", d)] + [(q, g) for q, g in d.groupby("dtype")] + [(c, g) for c, g in d.groupby("chip")]
    for name, g in groups:
        print(
            f"| {name} | {len(g):,} | {pct(g.fit_error)}, {pct(g.fit_error, 0.9)} | "
            f"{pct(g.carried_error)}, {pct(g.carried_error, 0.9)} |"
        )


if __name__ == "__main__":
    main()
