"""Build a report from a capacity table (`kvsim plan`) and/or a table of simulated points (plan
evaluations or a sweep): throughput vs rate, latency percentiles vs rate with the SLO lines, memory
breakdown per configuration, and the capacity table. Plots are matplotlib PNGs, embedded in the
HTML page as data URIs (the page needs no other file) and linked from the Markdown."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from kvsim.allocators.base import MEMORY_CATEGORIES
from kvsim.planning.slo import Slo

CAPACITY_COLUMNS = [("config", "configuration"), ("max_rate_req_s", "max rate (req/s)"), ("meets_slo", "meets SLO"),
                    ("search", "search"),
                    ("search_steps", "steps"), ("tolerance", "tolerance"), ("replicas", "replicas"), ("gpus", "GPUs"),
                    ("cost_per_hour", "$/hour"), ("cost_per_m_output_tokens", "$ per M output tokens"),
                    ("at_max_ttft_p99_s", "TTFT p99 (s)"), ("at_max_tpot_p99_s", "TPOT p99 (s)"),
                    ("at_max_mean_batch", "batch"), ("at_max_kv_efficiency", "KV eff."),
                    ("block_size", "block"), ("table_entries_per_seq", "table entries/seq"), ("kernel_us", "kernel us"),
                    ("gpu_memory_utilization", "mem util"), ("reason", "why not")]


def label_points(points: pd.DataFrame) -> pd.DataFrame:
    """Give each row a `config` label: its own, or the config columns that vary across the table."""
    if "config" in points.columns:
        return points
    candidates = [c for c in ("allocator", "gpu", "model", "eviction", "block_size", "preemption", "trace")
                  if c in points.columns and points[c].nunique() > 1]
    if not candidates:
        candidates = [c for c in ("allocator",) if c in points.columns]
    lab = points[candidates].astype(str).agg(" ".join, axis=1) if candidates else pd.Series(["run"] * len(points))
    return points.assign(config=lab.values)


def _rate_col(points: pd.DataFrame) -> str:
    return "rate" if "rate" in points.columns and points["rate"].notna().any() else "offered_rate"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_throughput(points: pd.DataFrame, path: Path) -> Path:
    plt = _plt()
    rc = _rate_col(points)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, g in points.groupby("config", sort=False):
        g = g.sort_values(rc)
        line, = ax.plot(g[rc], g["throughput_tok_s"], marker="o", ms=3, label=name)
        if "ok" in g.columns:
            bad = g[~g["ok"].astype(bool)]
            ax.plot(bad[rc], bad["throughput_tok_s"], "x", color=line.get_color(), ms=6)
    ax.set_xlabel("offered request rate (req/s)")
    ax.set_ylabel("output tokens/s")
    ax.set_title("Throughput vs rate (x: misses SLO)" if "ok" in points.columns else "Throughput vs rate")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_latency(points: pd.DataFrame, slos: list[Slo], path: Path) -> Path:
    plt = _plt()
    rc = _rate_col(points)
    metrics = [s.key for s in slos] or ["ttft_p99_s", "tpot_p99_s"]
    metrics = list(dict.fromkeys(metrics + [m for m in ("ttft_p99_s", "tpot_p99_s") if m not in metrics]))
    metrics = [m for m in metrics if m in points.columns]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        for name, g in points.groupby("config", sort=False):
            g = g.sort_values(rc)
            ax.plot(g[rc], g[m], marker="o", ms=3, label=name)
        for s in slos:
            if s.key == m:
                ax.axhline(s.limit_s, color="red", ls="--", lw=1.2, label=f"SLO {s}")
        ax.set_yscale("log")
        ax.set_xlabel("offered request rate (req/s)")
        ax.set_ylabel(m.replace("_s", " (s)").replace("_", " "))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Latency percentiles vs rate")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_memory(rows: pd.DataFrame, prefix: str, path: Path) -> Path:
    """Stacked time-weighted memory shares, one bar per configuration."""
    from kvsim.output.plots import COLORS, LABELS

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.8))
    left = [0.0] * len(rows)
    names = list(rows["config"])
    for c in MEMORY_CATEGORIES:
        vals = [100 * float(v) if v == v and v is not None else 0.0 for v in rows[f"{prefix}mem_{c}"]]
        ax.barh(names, vals, left=left, color=COLORS[c], label=LABELS[c])
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
    ax.set_xlabel("% of KV pool (time-weighted)")
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title("Memory breakdown" + (" at each configuration's max SLO-meeting rate" if prefix else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def capacity_table(cap: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    cols = [(k, h) for k, h in CAPACITY_COLUMNS if k in cap.columns and cap[k].notna().any()
            and not (k == "reason" and not cap[k].astype(str).str.len().any())]
    rows = [[_fmt(r[k]) for k, _ in cols] for _, r in cap.iterrows()]
    return [h for _, h in cols], rows


def build_report(out_dir: str | Path, capacity: pd.DataFrame | None, points: pd.DataFrame | None,
                 slos: list[Slo], title: str, notes: list[str] | None = None) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figs: list[tuple[str, Path]] = []
    if points is not None and len(points):
        points = label_points(points)
        if "throughput_tok_s" in points.columns:
            figs.append(("Throughput vs offered rate", plot_throughput(points, out / "throughput_vs_rate.png")))
            figs.append(("Latency percentiles vs offered rate, with the SLOs", plot_latency(points, slos, out / "latency_vs_rate.png")))
    if capacity is not None and len(capacity) and "at_max_mem_token_states" in capacity.columns:
        ok = capacity[capacity["at_max_mem_token_states"].notna()]
        if len(ok):
            figs.append(("Memory breakdown per configuration", plot_memory(ok, "at_max_", out / "memory_breakdown.png")))
    elif points is not None and len(points) and "mem_token_states" in points.columns:
        rc = _rate_col(points)
        top = points.sort_values(rc).groupby("config", sort=False).tail(1)
        figs.append(("Memory breakdown per configuration (highest rate simulated)", plot_memory(top, "", out / "memory_breakdown.png")))
    slo_text = ", ".join(str(s) for s in slos) if slos else "none"
    headers, rows = capacity_table(capacity) if capacity is not None and len(capacity) else ([], [])

    md = [f"# {title}", "", f"SLOs: {slo_text}", ""]
    md += [f"- {n}" for n in notes or []]
    if headers:
        md += ["", "## Capacity", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        md += ["| " + " | ".join(r) + " |" for r in rows]
    for cap_text, p in figs:
        md += ["", f"## {cap_text}", "", f"![{cap_text}]({p.name})"]
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")

    e = html.escape
    page = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>{e(title)}</title>",
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
            "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}"
            "th{background:#f3f3f3}td:first-child{text-align:left}img{max-width:100%}</style></head><body>",
            f"<h1>{e(title)}</h1>", f"<p>SLOs: {e(slo_text)}</p>"]
    if notes:
        page.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    if headers:
        page.append("<h2>Capacity</h2><table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr></thead><tbody>")
        page += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows]
        page.append("</tbody></table>")
    for cap_text, p in figs:
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        page.append(f"<h2>{e(cap_text)}</h2><img alt='{e(cap_text)}' src='data:image/png;base64,{data}'>")
    page.append("</body></html>")
    (out / "report.html").write_text("\n".join(page) + "\n", encoding="utf-8")
    return {"html": out / "report.html", "md": out / "report.md", **{p.stem: p for _, p in figs}}
