"""Matplotlib figures (Agg backend, imported only when plots are written).

Conventions kept across every figure: one colour per allocator (its family's, see :func:`style_map`),
latencies on millisecond/second axes written out in plain numbers, legends outside the data, bars
sorted by how much of the pool holds token states.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kvsim.allocators.base import MEMORY_CATEGORIES
from kvsim.engine.sequence import Status

COLORS = {
    "token_states": "#2e7d32",
    "reserved": "#f9a825",
    "internal_frag": "#e65100",
    "external_frag": "#c62828",
    "free": "#cfd8dc",
    "recurrent_state": "#6a1b9a",
    "page_padding": "#8d6e63",
}
LABELS = {
    "token_states": "token states",
    "reserved": "reserved",
    "internal_frag": "internal frag.",
    "external_frag": "external frag.",
    "free": "free",
    "recurrent_state": "recurrent state",
    "page_padding": "page padding",
}
# Stacking order: what holds state first, free last.
PLOT_ORDER = ("token_states", "recurrent_state", "reserved", "internal_frag", "page_padding", "external_frag", "free")

# Allocator families keep their colour in every plot and report (Okabe-Ito, colour-blind safe).
FAMILY_COLORS = {
    "max": "#D55E00",
    "pow2": "#E69F00",
    "oracle": "#CC79A7",
    "paged": "#0072B2",
    "paged+prefix": "#009E73",
    "radix": "#56B4E9",
    "hybrid": "#009E73",
    "static-split": "#E69F00",
    "naive": "#0072B2",
}
OTHER_COLORS = ["#000000", "#F0E442", "#7f7f7f", "#8c564b", "#9467bd", "#17becf", "#bcbd22", "#e377c2"]


def _family(name: str) -> str | None:
    """The allocator family a name or a report label ('h100-80gb paged:16+prefix') mentions, if any."""
    for word in reversed(str(name).split()):
        base = word.split(":")[0].split("+")[0]
        if base in ("max", "pow2", "oracle", "radix", "hybrid", "static-split", "naive"):
            return base
        if base == "paged":
            return "paged+prefix" if "+prefix" in word else "paged"
    return None


LINE_STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def style_map(names: list[str]) -> dict[str, dict]:
    """Line style per name: the colour of the allocator family it names (the same in every plot), and
    within a family a different dash and marker per name; names of no known family take other colours."""
    out: dict = {}
    seen: dict = {}
    spare = iter(OTHER_COLORS * 4)
    for n in names:
        f = _family(n)
        k = seen[f] = seen.get(f, -1) + 1
        color = FAMILY_COLORS[f] if f is not None else next(spare)
        if f is None:
            k = 0
        out[n] = {"color": color, "ls": LINE_STYLES[k % len(LINE_STYLES)], "marker": MARKERS[k % len(MARKERS)]}
    return out


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def duration_label(seconds: float, digits: int | None = None) -> str:
    """'0.5 ms', '40 ms', '1.5 s', '1,000 s': plain numbers with a unit (axis ticks; with ``digits``,
    table cells rounded to that many significant digits)."""
    if seconds <= 0 or not np.isfinite(seconds):
        return "0"
    unit, v = ("µs", seconds * 1e6) if seconds < 1e-3 else ("ms", seconds * 1e3) if seconds < 1 else ("s", seconds)
    if digits is None:
        return f"{v:,g} {unit}"
    decimals = max(0, digits - 1 - int(np.floor(np.log10(v))))
    return f"{v:,.{decimals}f} {unit}"


def log_time_axis(axis, lo: float, hi: float) -> None:
    """A log axis of seconds labelled '10 ms', '1 s', ...: at powers of ten over wide ranges, at 1-2-5 steps
    when the data spans less than two decades (so a narrow range still has labels), never at minor ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    narrow = hi > 0 and lo > 0 and np.log10(hi / lo) < 2
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if narrow else (1.0,), numticks=12))
    axis.set_major_formatter(FuncFormatter(lambda v, _: duration_label(v)))
    axis.set_minor_formatter(NullFormatter())


def _save(fig, path: Path, dpi: int = 110) -> None:
    from kvsim.files import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png", bbox_inches="tight")
    _plt().close(fig)


def _present(shares: list[dict[str, float]]) -> list[str]:
    return [c for c in PLOT_ORDER if c not in ("recurrent_state", "page_padding") or any(s.get(c) for s in shares)]


def memory_bars(ax, names: list[str], shares: list[dict[str, float]]) -> None:
    """Stacked horizontal bars of the memory categories (fractions), most token states on top; categories that
    are empty in every bar (recurrent state and padding outside hybrid models) are left out."""
    order = sorted(range(len(names)), key=lambda i: -shares[i]["token_states"])
    names = [names[i] for i in order]
    left = np.zeros(len(names))
    for c in _present(shares):
        vals = np.array([100 * (shares[i][c] or 0.0) for i in order])
        ax.barh(names, vals, left=left, color=COLORS[c], label=LABELS[c], edgecolor="white", linewidth=0.5)
        for y, (x0, v) in enumerate(zip(left, vals)):
            if v >= 8:
                ax.text(
                    x0 + v / 2,
                    y,
                    f"{v:.0f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if c != "free" else "#333333",
                )
        left += vals
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
    ax.set_xlabel("% of the KV pool (time-weighted)")


def memory_breakdown_plot(summaries: list[dict], timelines: dict[str, pd.DataFrame], path: Path) -> Path:
    """Left: time-weighted share of the pool per category, one bar per allocator. Right: categories over time
    (in the bars' order: most token states first)."""
    plt = _plt()
    summaries = sorted(summaries, key=lambda s: -s["mem_token_states"])
    n = len(summaries)
    fig = plt.figure(figsize=(12, 2.6 + 1.6 * n))
    gs = fig.add_gridspec(n, 2, width_ratios=[1, 2.2])
    ax_bar = fig.add_subplot(gs[:, 0])
    memory_bars(
        ax_bar, [s["allocator"] for s in summaries], [{c: s[f"mem_{c}"] for c in MEMORY_CATEGORIES} for s in summaries]
    )
    ax_bar.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8, frameon=False)
    ax_bar.set_title("Where the KV pool went")
    for i, s in enumerate(summaries):
        tl = timelines[s["allocator"]]
        ax = fig.add_subplot(gs[i, 1])
        if len(tl):
            cats = _present([{c: float(tl[c].max()) for c in MEMORY_CATEGORIES}])
            ax.stackplot(tl.t_s, *[100 * tl[c] for c in cats], colors=[COLORS[c] for c in cats])
        ax.set_ylim(0, 100)
        ax.set_xlim(left=0)
        ax.set_ylabel(f"{s['allocator']}\n% of pool", fontsize=9)
        if i == n - 1:
            ax.set_xlabel("simulated time since the first arrival (s)")
        else:
            ax.tick_params(labelbottom=False)
        if i == 0:
            ax.set_title("KV pool over time")
    fig.tight_layout()
    _save(fig, path)
    return path


def latency_cdf_plot(frames: dict[str, pd.DataFrame], path: Path) -> Path:
    plt = _plt()
    styles = style_map(list(frames))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, (col, label) in zip(
        axes, [("ttft_s", "time to first token"), ("tpot_s", "time per output token"), ("e2e_s", "end-to-end latency")]
    ):
        lo, hi = np.inf, 0.0
        for name, df in frames.items():
            v = np.sort(df.loc[df.status == Status.FINISHED.value, col].dropna().to_numpy())
            v = v[v > 0]
            if len(v):
                ax.plot(
                    v,
                    np.arange(1, len(v) + 1) / len(v),
                    label=name,
                    color=styles[name]["color"],
                    ls=styles[name]["ls"],
                    lw=1.6,
                )
                lo, hi = min(lo, v[0]), max(hi, v[-1])
        ax.set_xscale("log")
        log_time_axis(ax.xaxis, lo, hi)
        ax.set_xlabel(label)
        ax.set_ylim(0, 1.0)
        ax.grid(alpha=0.3, which="major")
    axes[0].set_ylabel("fraction of finished requests")
    handles, labels = axes[0].get_legend_handles_labels()
    if labels:  # no allocator finished a request (all rejected): empty axes, no legend
        fig.legend(
            handles,
            labels,
            loc="lower center",
            ncol=min(6, len(labels)),
            fontsize=9,
            frameon=False,
            bbox_to_anchor=(0.5, -0.04),
        )
    else:
        for ax in axes:
            ax.text(0.5, 0.5, "no finished requests", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle("Latency distributions (finished requests)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    _save(fig, path)
    return path
