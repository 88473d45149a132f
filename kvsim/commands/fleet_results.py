"""What `kvsim cluster` writes and prints: the fleet table's columns, SLO columns, and the result files (a changing
fleet's timeline and plot too)."""

from __future__ import annotations

import math
from pathlib import Path


def fleet_columns(fleets=(), slos=()):
    """The terminal and summary.md columns, one row per router and layout (the comparison table's where they
    agree); disaggregated runs add the KV transfer and the wait for decode memory, SLOs their attainment."""
    from dataclasses import replace

    from kvsim.output.table import BY_NAME, Column

    key = lambda k: lambda s: s.get(k)  # noqa: E731
    head = []
    if len({f.summary.get("layout") for f in fleets}) > 1:
        head.append(Column("layout", "layout", "", "text", "", key("layout")))
    tail = []
    if any(f.summary.get("mode") == "disaggregated" for f in fleets):
        tail += [
            Column("xfer_p99", "KV xfer", "p99", "latency", "", key("kv_transfer_p99_s"), drop_order=1),
            Column("dwait_p99", "D wait", "p99", "latency", "", key("decode_wait_p99_s"), drop_order=1),
        ]
    if slos:
        tail += [
            Column("attain", "SLO", "attain%", "pct", "", key("slo_attainment")),
            Column("good", "good", "req/s/GPU", "float2", "", key("goodput_req_s_per_gpu")),
        ]
    # a narrow terminal drops imbalance, queue and TPOT before the hit rate and TTFT, which routers decide
    return (
        head
        + [
            Column("router", "router", "", "text", "", key("router")),
            BY_NAME["done"],
            BY_NAME["rej"],
            BY_NAME["unfin"],
            BY_NAME["tok_s"],
            replace(BY_NAME["hit"], drop_order=0),
            replace(BY_NAME["ttft_p50"], drop_order=0),
            BY_NAME["ttft_p99"],
            replace(BY_NAME["tpot_p50"], drop_order=2),
            Column("queue_p99", "queue", "p99", "latency", "", key("queue_p99_s"), drop_order=3),
            Column("imb_req", "imbal", "req", "float2", "", key("imbalance_requests"), drop_order=5),
            Column("imb_busy", "imbal", "busy", "float2", "", key("imbalance_busy"), drop_order=4),
        ]
        + tail
    )


def write_fleet_results(out: Path, fleets, title: str, fmt: str, columns=None, marker=None, extra=None) -> list[Path]:
    """fleet, replicas and requests tables and summary.md (``extra``: a changing fleet's (timelines, SLOs): its
    timeline table and plot too); kvsim's files in the folder are replaced as a set (files.results_folder)."""
    from kvsim.files import results_folder

    with results_folder(out, "--out", marker) as stage:
        written = _write_fleet_results(stage, fleets, title, fmt, columns)
        if extra is not None:
            written += write_over_time(stage, extra[0], extra[1], fmt)
    return [Path(out) / p.name for p in written]


def _write_fleet_results(out: Path, fleets, title: str, fmt: str, columns=None) -> list[Path]:
    import pandas as pd

    from kvsim.files import write_text_atomically
    from kvsim.output.writer import write_table

    written = [
        write_table(pd.DataFrame([f.summary for f in fleets]), out / "fleet", fmt),
        write_table(
            pd.concat(
                [f.replica_table.assign(router=f.router, layout=f.summary.get("layout")) for f in fleets],
                ignore_index=True,
            ),
            out / "replicas",
            fmt,
        ),
        write_table(
            pd.concat(
                [f.requests.assign(router=f.router, layout=f.summary.get("layout")) for f in fleets], ignore_index=True
            ),
            out / "requests",
            fmt,
        ),
    ]
    from kvsim.output.table import markdown_table

    text = [
        f"# {title}",
        "",
        markdown_table([f.summary for f in fleets], columns or fleet_columns(fleets)),
        "",
        "Per replica (routed requests, busy fraction, TTFT p99 s, prefix hit rate):",
        "",
    ]
    for f in fleets:
        t = f.replica_table
        text.append(
            f"- **{f.router}** ({f.summary.get('layout')}): "
            + "; ".join(
                f"{int(r.replica)} {r.group}: {int(r.routed)} req, busy {r.busy_frac:.2f}, TTFT p99 {r.ttft_p99_s:.3f}"
                + ("" if math.isnan(r.prefix_hit_rate_tokens) else f", hit {100 * r.prefix_hit_rate_tokens:.1f}%")
                for r in t.itertuples()
            )
        )
    write_text_atomically(out / "summary.md", "\n".join(text) + "\n")
    written.append(out / "summary.md")
    return written


def write_over_time(out: Path, timelines, slos, fmt: str) -> list[Path]:
    """The scrapes of every run (timeline) and the plot of replicas and TTFT p99 over time."""
    import pandas as pd

    from kvsim.output.writer import write_table
    from kvsim.sim.report import plot_over_time

    frame = pd.concat([tl.assign(run=name) for name, tl in timelines.items()], ignore_index=True)
    written = [write_table(frame, out / "timeline", fmt)]
    plot_over_time(timelines, out / "replicas_over_time.png", slos)
    written.append(out / "replicas_over_time.png")
    return written
