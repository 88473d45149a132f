"""Matplotlib figures (Agg backend, imported only when plots are written)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kvsim.allocators.base import MEMORY_CATEGORIES
from kvsim.engine.sequence import Status

COLORS = {"token_states": "#2e7d32", "reserved": "#f9a825", "internal_frag": "#e65100",
          "external_frag": "#c62828", "free": "#cfd8dc"}
LABELS = {"token_states": "token states", "reserved": "reserved", "internal_frag": "internal frag.",
          "external_frag": "external frag.", "free": "free"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, dpi: int = 110) -> None:
    from kvsim.files import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    _plt().close(fig)


def memory_breakdown_plot(summaries: list[dict], timelines: dict[str, pd.DataFrame], path: Path) -> Path:
    """Left: time-weighted share of the pool per category, one bar per allocator. Right: categories over time."""
    plt = _plt()
    n = len(summaries)
    fig = plt.figure(figsize=(12, 2.6 + 1.9 * n))
    gs = fig.add_gridspec(n, 2, width_ratios=[1, 2.2])
    ax_bar = fig.add_subplot(gs[:, 0])
    names = [s["allocator"] for s in summaries]
    left = np.zeros(n)
    for c in MEMORY_CATEGORIES:
        vals = np.array([100 * s[f"mem_{c}"] for s in summaries])
        ax_bar.barh(names, vals, left=left, color=COLORS[c], label=LABELS[c])
        left += vals
    ax_bar.set_xlim(0, 100)
    ax_bar.set_xlabel("% of KV pool (time-weighted)")
    ax_bar.invert_yaxis()
    ax_bar.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8)
    ax_bar.set_title("Memory breakdown")
    for i, s in enumerate(summaries):
        tl = timelines[s["allocator"]]
        ax = fig.add_subplot(gs[i, 1])
        if len(tl):
            ax.stackplot(tl.t_s, *[100 * tl[c] for c in MEMORY_CATEGORIES],
                         colors=[COLORS[c] for c in MEMORY_CATEGORIES])
        ax.set_ylim(0, 100)
        ax.set_ylabel(s["allocator"], fontsize=9)
        if i == n - 1:
            ax.set_xlabel("simulated time (s)")
        if i == 0:
            ax.set_title("KV pool over time (%)")
    fig.tight_layout()
    _save(fig, path)
    return path


def latency_cdf_plot(frames: dict[str, pd.DataFrame], path: Path) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (col, label) in zip(axes, [("ttft_s", "TTFT (s)"), ("tpot_s", "TPOT (s)"), ("e2e_s", "E2E latency (s)")]):
        for name, df in frames.items():
            v = np.sort(df.loc[df.status == Status.FINISHED.value, col].dropna().to_numpy())
            if len(v):
                ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=name)
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of finished requests")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Latency CDFs")
    fig.tight_layout()
    _save(fig, path)
    return path
