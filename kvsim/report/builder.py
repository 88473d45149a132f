"""Build a report from a capacity table (`kvsim plan`) and/or a table of simulated points (plan
evaluations or a sweep): throughput vs rate, latency percentiles vs rate with the SLO lines, memory
breakdown per configuration, and the capacity table. Plots are matplotlib PNGs, embedded in the
HTML page as data URIs (the page needs no other file) and linked from the Markdown."""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import pandas as pd

from kvsim.allocators.base import MEMORY_CATEGORIES
from kvsim.option_table import option_columns
from kvsim.planning.slo import Slo

CAPACITY_COLUMNS = [
    ("config", "configuration"),
    ("max_rate_req_s", "max rate (req/s)"),
    ("meets_slo", "meets SLO"),
    ("search", "search"),
    ("search_steps", "steps"),
    ("tolerance", "tolerance"),
    ("replicas", "replicas"),
    ("gpus", "GPUs"),
    ("cost_per_hour", "$/hour"),
    ("cost_per_m_output_tokens", "$ per M output tokens"),
    ("at_max_ttft_p99_s", "TTFT p99"),
    ("at_max_tpot_p99_s", "TPOT p99"),
    ("at_max_mean_batch", "batch"),
    ("at_max_kv_efficiency", "KV eff. %"),
    ("block_size", "block"),
    ("table_entries_per_seq", "table entries/seq"),
    ("kernel_us", "kernel us"),
    ("gpu_memory_utilization", "mem util"),
    ("reason", "why not"),
]


CONFIG_KEYS = ("allocator", *option_columns(), "trace")  # the columns that name a configuration


def varying_config_columns(points: pd.DataFrame) -> list[str]:
    """The configuration columns whose values differ across the table, except the rate (the x axis): a
    sweep's cfg_* columns (its allocator as resolved, e.g. paged:32), else the plain configuration columns
    of plan points."""
    sweep = any(c.startswith("cfg_") for c in points.columns)
    cols = []
    for c in points.columns:
        if sweep:
            if c == "allocator" or (c.startswith("cfg_") and c not in ("cfg_allocator", "cfg_rate", "cfg_rate_scale")):
                cols.append(c)
        elif c in CONFIG_KEYS:
            cols.append(c)
    cols = [c for c in cols if points[c].astype(str).nunique() > 1]
    return sorted(cols, key=lambda c: c.removeprefix("cfg_") != "allocator")  # the allocator first


def label_points(points: pd.DataFrame) -> pd.DataFrame:
    """Give each row a `config` label: its own, or every configuration column that varies across the table
    (each named, so two dimensions never merge into one line)."""
    if "config" in points.columns:
        return points
    cols = varying_config_columns(points)
    if not cols:
        cols = [c for c in ("allocator",) if c in points.columns]
        if not cols:
            return points.assign(config="run")
    named = len(cols) > 1 or cols[0] not in ("allocator", "cfg_allocator")

    def label(row) -> str:
        parts = []
        for c in cols:
            key, v = c.removeprefix("cfg_"), row[c]
            if v is None or (isinstance(v, float) and v != v):
                continue  # not set for this point (e.g. an extra point without the grid's key)
            v = f"{v:g}" if isinstance(v, float) else v
            parts.append(str(v) if key == "allocator" or not named else f"{key}={v}")
        return " ".join(parts) or "run"

    return points.assign(config=points.apply(label, axis=1).values)


def _has_rate(points: pd.DataFrame) -> bool:
    """Sweeps and plans vary the rate; a comparison's runs (`kvsim compare` runs.csv) do not."""
    return any(c in points.columns and points[c].notna().any() for c in ("rate", "offered_rate"))


def _rate_col(points: pd.DataFrame) -> str:
    return "rate" if "rate" in points.columns and points["rate"].notna().any() else "offered_rate"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _legend_below(fig, ax, n: int) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            labels,
            loc="lower center",
            ncol=min(4, max(1, n)),
            fontsize=8,
            frameon=False,
            bbox_to_anchor=(0.5, -0.02),
        )


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=100, bbox_inches="tight")
    _plt().close(fig)
    return path


def plot_throughput(points: pd.DataFrame, path: Path) -> Path:
    from kvsim.output.plots import style_map

    plt = _plt()
    rc = _rate_col(points)
    names = list(dict.fromkeys(points["config"]))
    styles = style_map(names)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for name, g in points.groupby("config", sort=False):
        g = g.sort_values(rc)
        ax.plot(g[rc], g["throughput_tok_s"], ms=4, label=name, **styles[name])
        if "ok" in g.columns:
            bad = g[~g["ok"].astype(bool)]
            ax.plot(bad[rc], bad["throughput_tok_s"], "x", color=styles[name]["color"], ms=8)
    ax.set_xlabel("offered request rate (req/s)")
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.yaxis.set_major_formatter(_plt().FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_title("Throughput vs offered rate" + (" (x: misses an SLO)" if "ok" in points.columns else ""))
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.08 + 0.03 * (len(names) // 4), 1, 1))
    _legend_below(fig, ax, len(names))
    return _save(fig, path)


def plot_latency(points: pd.DataFrame, slos: list[Slo], path: Path) -> Path:
    from kvsim.output.plots import log_time_axis, style_map

    plt = _plt()
    rc = _rate_col(points)
    metrics = [s.key for s in slos] or ["ttft_p99_s", "tpot_p99_s"]
    metrics = list(dict.fromkeys(metrics + [m for m in ("ttft_p99_s", "tpot_p99_s") if m not in metrics]))
    metrics = [m for m in metrics if m in points.columns]
    names = list(dict.fromkeys(points["config"]))
    styles = style_map(names)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.4 * len(metrics), 4.4), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        vals = []
        for name, g in points.groupby("config", sort=False):
            g = g.sort_values(rc)
            ax.plot(g[rc], g[m], ms=4, label=name, **styles[name])
            vals += [v for v in g[m] if v == v and v > 0]
        for s in slos:
            if s.key == m:
                ax.axhline(s.limit_s, color="red", ls="--", lw=1.2, label=f"SLO {s}")
                vals.append(s.limit_s)
        ax.set_yscale("log")
        log_time_axis(ax.yaxis, min(vals, default=1e-3), max(vals, default=1.0))
        ax.set_xlabel("offered request rate (req/s)")
        metric, pct = m[:-2].rsplit("_", 1)
        ax.set_title(f"{metric.upper()} {pct}")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
    fig.suptitle("Latency percentiles vs offered rate")
    fig.tight_layout(rect=(0, 0.08 + 0.03 * (len(names) // 4), 1, 1))
    _legend_below(fig, axes[0][0], len(names) + len(slos))
    return _save(fig, path)


def _share(v) -> float:
    """A memory share as plotted: a finite number, else nothing (0); the table's count of unreadable cells says
    so."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) else 0.0


def plot_memory(rows: pd.DataFrame, prefix: str, path: Path) -> Path:
    """Stacked time-weighted memory shares, one bar per configuration (most token states first)."""
    from kvsim.output.plots import memory_bars

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.8))
    shares = [{c: _share(r.get(f"{prefix}mem_{c}", 0.0)) for c in MEMORY_CATEGORIES} for _, r in rows.iterrows()]
    memory_bars(ax, list(rows["config"]), shares)
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    ax.set_title("Where the KV pool went" + (" at each configuration's max SLO-meeting rate" if prefix else ""))
    fig.tight_layout()
    return _save(fig, path)


RESULT_COLUMNS = [
    ("throughput_tok_s", "output tok/s"),
    ("throughput_req_s", "req/s"),
    ("ttft_p50_s", "TTFT p50"),
    ("ttft_p99_s", "TTFT p99"),
    ("tpot_p50_s", "TPOT p50"),
    ("tpot_p99_s", "TPOT p99"),
    ("preemptions", "preemptions"),
    ("prefix_hit_rate_tokens", "hit %"),
    ("mem_token_states", "token %"),
    ("kv_efficiency", "KV eff. %"),
]


def _result_cell(c: str, v) -> str:
    from kvsim.output.plots import duration_label

    if v is None or v != v:
        return "-"
    if c.endswith("_s") and c.startswith(("ttft", "tpot")):
        return duration_label(float(v), digits=3)
    if c in ("prefix_hit_rate_tokens", "mem_token_states", "kv_efficiency"):
        return f"{100 * float(v):.1f}"
    if c == "throughput_req_s":
        return f"{float(v):.2f}"
    return f"{float(v):,.0f}"


def results_table(points: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """One row per simulation: the varying configuration, the rate, then throughput, latency (ms) and memory."""
    cfg_cols = varying_config_columns(points)
    if not cfg_cols and "allocator" in points.columns:  # a comparison's runs: one row per allocator
        cfg_cols = ["allocator"]
    rc = _rate_col(points) if _has_rate(points) else None
    cols = [
        c
        for c, _ in RESULT_COLUMNS
        if c in points.columns
        and points[c].notna().any()
        and not (c == "prefix_hit_rate_tokens" and not points[c].fillna(0).any())
    ]
    headers = [c[4:] if c.startswith("cfg_") else c for c in cfg_cols] + (["rate (req/s)"] if rc else [])
    headers += [dict(RESULT_COLUMNS)[c] for c in cols]
    rows = []
    order = [*cfg_cols, rc] if rc else cfg_cols
    for _, r in (points.sort_values(order) if order else points).iterrows():
        row = [_fmt(r[c]) for c in cfg_cols] + ([_fmt(r.get(rc))] if rc else [])
        for c in cols:
            try:
                row.append(_result_cell(c, r[c]))
            except (TypeError, ValueError):  # a hand-edited table: show what is there
                row.append(_fmt(r[c]))
        rows.append(row)
    return headers, rows


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and v in ("nan", "None")):
        return "-"
    if isinstance(v, bool) or type(v).__name__ in ("bool_", "bool"):  # numpy's too (np.bool_, np.bool)
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def capacity_table(cap: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    cols = [
        (k, h)
        for k, h in CAPACITY_COLUMNS
        if k in cap.columns and cap[k].notna().any() and not (k == "reason" and not cap[k].astype(str).str.len().any())
    ]
    from kvsim.output.plots import duration_label

    def cell(k, v) -> str:
        if v is None or v != v:
            return "-"
        if k in ("at_max_ttft_p99_s", "at_max_tpot_p99_s"):
            return duration_label(float(v), digits=3)
        if k == "at_max_kv_efficiency":
            return f"{100 * float(v):.1f}"
        if k == "tolerance":
            return f"{100 * float(v):.1f}%"
        if k in ("at_max_mean_batch", "table_entries_per_seq"):
            return f"{float(v):.1f}"
        if k in ("max_rate_req_s", "cost_per_m_output_tokens"):
            return f"{float(v):,.3f}"
        return _fmt(v)

    def safe_cell(k, v) -> str:
        try:
            return cell(k, v)
        except (TypeError, ValueError):  # a hand-edited table: show what is there
            return _fmt(v)

    rows = [[safe_cell(k, r[k]) for k, _ in cols] for _, r in cap.iterrows()]
    return [h for _, h in cols], rows


FLEET_COLUMNS = [
    ("layout", "layout"),
    ("router", "router"),
    ("gpus", "GPUs"),
    ("mode", "mode"),
    ("meets_slo", "meets SLO"),
    ("violations", "misses"),
    ("slo_attainment", "SLO attainment"),
    ("tok_s_per_gpu", "out tok/s per GPU"),
    ("ttft_p99_s", "TTFT p99 s"),
    ("tpot_p99_s", "TPOT p99 s"),
    ("prefix_hit_rate_tokens", "prefix hit"),
    ("cost_per_m_output_tokens", "$ per M output tokens"),
]


def _met(fleet: pd.DataFrame) -> pd.Series:
    """Per layout: it meets every SLO (a table read back may hold the flag as text)."""
    return fleet["meets_slo"].astype(str).str.lower().isin(("true", "1"))


def fleet_chosen(fleet: pd.DataFrame) -> dict | None:
    """The fleet plan's answer, as `kvsim plan` picks it (fleet_plan.cheapest); None when no layout meets the SLOs."""
    from kvsim.planning.fleet_plan import cheapest

    rows = [{k: v for k, v in r.items() if v == v} for r in fleet.assign(meets_slo=_met(fleet)).to_dict("records")]
    best = cheapest(rows)  # (NaN cells dropped above: a layout without a price is ranked by its GPUs)
    return best[0] if best else None


def fleet_tables(fleet: pd.DataFrame) -> list[tuple[str, list[str], list[list[str]]]]:
    """The layouts simulated (the chosen one first, marked) and, per router, its best layout."""
    cols = [(k, h) for k, h in FLEET_COLUMNS if k in fleet.columns]
    chosen = fleet_chosen(fleet)

    def row(r, mark="") -> list[str]:
        return [mark + _fmt(r.get(k)) if i == 0 else _fmt(r.get(k)) for i, (k, _) in enumerate(cols)]

    order = fleet.sort_values(["gpus", "layout", "router"], kind="stable")
    layouts = ([row(chosen, "-> ")] if chosen is not None else []) + [row(r) for _, r in order.iterrows()]
    routers = []
    for router, g in fleet.groupby("router", sort=True):
        met = g[_met(g)]
        pick = met.sort_values(["gpus", "ttft_p99_s"]).iloc[0] if len(met) else g.sort_values("slo_attainment").iloc[-1]
        routers.append(
            [
                str(router),
                _fmt(pick["layout"]),
                _fmt(pick["gpus"]),
                "yes" if len(met) else "no",
                _fmt(pick["ttft_p99_s"]),
                _fmt(pick["tok_s_per_gpu"]),
            ]
        )
    return [
        ("Layouts (-> the cheapest meeting the SLOs)", [h for _, h in cols], layouts),
        (
            "Routers: the smallest layout each meets the SLOs with",
            ["router", "layout", "GPUs", "meets SLO", "TTFT p99 s", "out tok/s per GPU"],
            routers,
        ),
    ]


def plot_fleet(fleet: pd.DataFrame, path: Path) -> Path:
    """Output tokens/s per GPU against TTFT p99 of every layout (aggregated and disaggregated apart, those that miss
    an SLO hollow), the Pareto front and the chosen layout."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    met = _met(fleet)
    for mode, marker in (("aggregated", "o"), ("disaggregated", "s")):
        m = fleet["mode"] == mode if "mode" in fleet.columns else pd.Series(mode == "aggregated", fleet.index)
        for ok, face in ((True, None), (False, "none")):
            g = fleet[m & (met == ok)]
            if len(g):
                ax.plot(
                    g["ttft_p99_s"],
                    g["tok_s_per_gpu"],
                    marker,
                    ms=6,
                    mfc=face,
                    ls="none",
                    label=f"{mode}{'' if ok else ' (misses an SLO)'}",
                )
    front = fleet.sort_values("ttft_p99_s")
    front = front[front["tok_s_per_gpu"] >= front["tok_s_per_gpu"].cummax()]
    ax.plot(front["ttft_p99_s"], front["tok_s_per_gpu"], "-", color="0.5", lw=1, label="Pareto front")
    chosen = fleet_chosen(fleet)
    if chosen is not None:
        ax.plot(
            [chosen["ttft_p99_s"]],
            [chosen["tok_s_per_gpu"]],
            "*",
            ms=16,
            color="C3",
            label=f"chosen: {chosen['layout']} ({chosen['router']})",
        )
    ax.set_xscale("log")
    ax.set_xlabel("TTFT p99 (s)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_ylim(bottom=0)
    ax.set_title("Fleet layouts: throughput per GPU vs TTFT p99")
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    _legend_below(fig, ax, 3)
    return _save(fig, path)


def plot_fleet_routers(fleet: pd.DataFrame, path: Path) -> Path:
    """TTFT p99 and TPOT p99 per router at the chosen layout's fleet size (else the largest simulated)."""
    plt = _plt()
    chosen = fleet_chosen(fleet)
    size = chosen["gpus"] if chosen is not None else fleet["gpus"].max()
    g = fleet[fleet["gpus"] == size].sort_values(["router", "layout"])
    labels = [f"{r}\n{lay}" for r, lay in zip(g["router"], g["layout"])]
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2))
    for ax, col, name in ((axes[0], "ttft_p99_s", "TTFT p99 (s)"), (axes[1], "tpot_p99_s", "TPOT p99 (s)")):
        ax.bar(range(len(g)), g[col], color="C0")
        ax.set_xticks(range(len(g)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{name}, fleets of {size} GPUs")
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return _save(fig, path)


def build_report(
    out_dir: str | Path,
    capacity: pd.DataFrame | None,
    points: pd.DataFrame | None,
    slos: list[Slo],
    title: str,
    notes: list[str] | None = None,
    fleet: pd.DataFrame | None = None,
) -> dict[str, Path]:
    """The report's page and Markdown (and plots): a capacity table and its points, and/or a fleet plan's layouts
    (``fleet``: fleet_plan.csv)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figs: list[tuple[str, Path]] = []
    if fleet is not None and len(fleet):
        figs.append(("Fleet layouts: throughput per GPU vs TTFT p99", plot_fleet(fleet, out / "fleet_layouts.png")))
        figs.append(("Routers at the chosen fleet size", plot_fleet_routers(fleet, out / "fleet_routers.png")))
    if points is not None and len(points):
        points = label_points(points)
        if "throughput_tok_s" in points.columns and _has_rate(points):
            figs.append(("Throughput vs offered rate", plot_throughput(points, out / "throughput_vs_rate.png")))
            figs.append(
                (
                    "Latency percentiles vs offered rate, with the SLOs",
                    plot_latency(points, slos, out / "latency_vs_rate.png"),
                )
            )
    if capacity is not None and len(capacity) and "at_max_mem_token_states" in capacity.columns:
        ok = capacity[capacity["at_max_mem_token_states"].notna()]
        if len(ok):
            figs.append(
                ("Memory breakdown per configuration", plot_memory(ok, "at_max_", out / "memory_breakdown.png"))
            )
    elif points is not None and len(points) and "mem_token_states" in points.columns:
        ordered = points.sort_values(_rate_col(points)) if _has_rate(points) else points
        top = ordered.groupby("config", sort=False).tail(1)
        caption = "Memory breakdown per configuration" + (" (highest rate simulated)" if _has_rate(points) else "")
        figs.append((caption, plot_memory(top, "", out / "memory_breakdown.png")))
    slo_text = ", ".join(str(s) for s in slos) if slos else "none"
    headers, rows = capacity_table(capacity) if capacity is not None and len(capacity) else ([], [])
    tables = [("Capacity", headers, rows)] if headers else []
    if fleet is not None and len(fleet):
        tables += fleet_tables(fleet)
    if points is not None and len(points) and "throughput_tok_s" in points.columns and not headers:
        tables.append(("Results", *results_table(points)))

    md = [f"# {title}", "", f"SLOs: {slo_text}", ""]
    md += [f"- {n}" for n in notes or []]
    for name, hs, rs in tables:
        md += ["", f"## {name}", "", "| " + " | ".join(hs) + " |", "|" + "---|" * len(hs)]
        md += ["| " + " | ".join(r) + " |" for r in rs]
    for cap_text, p in figs:
        md += ["", f"## {cap_text}", "", f"![{cap_text}]({p.name})"]
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")

    e = html.escape
    page = [
        "<!DOCTYPE html>",
        "<html><head><meta charset='utf-8'>",
        f"<title>{e(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}"
        "th{background:#f3f3f3}td:first-child{text-align:left}img{max-width:100%}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f"<p>SLOs: {e(slo_text)}</p>",
    ]
    if notes:
        page.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    for name, hs, rs in tables:
        page.append(
            f"<h2>{e(name)}</h2><table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in hs) + "</tr></thead><tbody>"
        )
        page += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rs]
        page.append("</tbody></table>")
    for cap_text, p in figs:
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        page.append(f"<h2>{e(cap_text)}</h2><img alt='{e(cap_text)}' src='data:image/png;base64,{data}'>")
    page.append("</body></html>")
    (out / "report.html").write_text("\n".join(page) + "\n", encoding="utf-8")
    return {"html": out / "report.html", "md": out / "report.md", **{p.stem: p for _, p in figs}}
