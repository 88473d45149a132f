"""Write a run's or a comparison's results to a folder: CSV (or Parquet), PNG plots, Markdown summary."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kvsim.engine.sequence import Status
from kvsim.errors import ConfigError
from kvsim.files import atomic_path, results_folder, write_text_atomically
from kvsim.output.table import markdown_table


RESULT_FILES = ("requests", "runs", "memory_timeline")  # each .csv or .parquet
PLOT_FILES = ("memory_breakdown.png", "latency_cdf.png")
FLEET_FILES = ("fleet", "replicas")  # kvsim cluster's tables besides requests


def write_table(df: pd.DataFrame, path: Path, fmt: str) -> Path:
    """``path`` with the format's suffix, written atomically (a killed run never leaves half a file)."""
    target = path.with_suffix(".parquet" if fmt == "parquet" else ".csv")
    with atomic_path(target) as tmp:
        if fmt == "parquet":
            try:
                df.to_parquet(tmp, index=False)
            except ImportError:
                raise ConfigError("--format parquet needs pyarrow (pip install 'kvsim[parquet]')") from None
        else:
            write_csv(df, tmp)
    return target


def write_csv(df: pd.DataFrame, path: Path, rows_per_chunk: int = 65536) -> None:
    """``df.to_csv(path, index=False)``, byte for byte, about twice as fast on result tables: pandas formats every
    float through numpy before its csv writer; the csv module formats Python floats the same way (shortest
    round-trip repr), so columns go to it directly, ``rows_per_chunk`` rows at a time (missing values as empty
    fields, as pandas writes them). A column of any other kind (dates, categories, nullable numbers) sends the
    table to pandas."""
    import csv

    kinds = []
    for name in df.columns:
        dt = df[name].dtype
        if dt.kind in "iub":
            kinds.append("plain")
        elif dt == "float64":
            kinds.append("float")
        elif dt.kind == "O" or isinstance(dt, pd.StringDtype):
            kinds.append("object")
        else:
            df.to_csv(path, index=False)
            return

    def column(s: pd.Series, kind: str) -> list:
        if kind == "plain":
            return s.tolist()
        if kind == "float":
            v = s.tolist()
            return [None if x != x else x for x in v] if s.hasnans else v
        return [
            None if x is None or x is pd.NA or (isinstance(x, float) and x != x) else x
            for x in s.astype(object).tolist()
        ]

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(list(df.columns))
        for start in range(0, len(df), rows_per_chunk):
            part = df.iloc[start : start + rows_per_chunk]
            w.writerows(zip(*(column(part[c], k) for c, k in zip(df.columns, kinds))))


def write_results(
    out_dir: str | Path,
    outputs: list,
    context: dict[str, str],
    notes: list[str],
    plots: bool = True,
    fmt: str = "csv",
    marker: tuple[str, str] | None = None,
) -> list[Path]:
    """``outputs`` are runner.RunOutput objects, one per allocator. kvsim's files in the folder are replaced
    as a set (files.results_folder), so it holds one consistent result; ``marker``: (file name, text) written
    with the results (the configuration they describe)."""
    out = Path(out_dir)
    with results_folder(out, "--out", marker) as stage:
        written = _write_results(stage, outputs, context, notes, plots, fmt)
    return [out / p.name for p in written]


def result_names(fmt: str, plots: bool = True) -> list[str]:
    """The files `kvsim run` and `compare` write in their folder."""
    ext = "parquet" if fmt == "parquet" else "csv"
    return [f"{n}.{ext}" for n in RESULT_FILES] + (list(PLOT_FILES) if plots else []) + ["summary.md"]


def _write_results(
    out: Path, outputs: list, context: dict[str, str], notes: list[str], plots: bool, fmt: str
) -> list[Path]:
    written = []
    reqs = pd.concat([o.requests.assign(allocator=o.summary["allocator"]) for o in outputs], ignore_index=True)
    reqs = reqs[["allocator", *[c for c in reqs.columns if c != "allocator"]]]
    runs = pd.DataFrame([o.summary for o in outputs])
    tl = pd.concat([o.timeline.assign(allocator=o.summary["allocator"]) for o in outputs], ignore_index=True)
    for name, df in zip(RESULT_FILES, (reqs, runs, tl)):
        written.append(write_table(df, out / name, fmt))
    if plots:
        from kvsim.output.plots import latency_cdf_plot, memory_breakdown_plot

        written.append(
            memory_breakdown_plot(
                [o.summary for o in outputs], {o.summary["allocator"]: o.timeline for o in outputs}, out / PLOT_FILES[0]
            )
        )
        written.append(latency_cdf_plot({o.summary["allocator"]: o.requests for o in outputs}, out / PLOT_FILES[1]))
    write_text_atomically(out / "summary.md", summary_markdown(outputs, context, notes, plots))
    written.append(out / "summary.md")
    return written


def rejection_lines(outputs: list) -> list[str]:
    lines = []
    for o in outputs:
        rej = o.requests[o.requests.status == Status.REJECTED.value]
        if len(rej):
            kinds = rej.reason.str.replace(r"\d+", "N", regex=True).value_counts()
            for why, n in kinds.items():
                lines.append(f"{o.summary['allocator']}: {n} rejected ({why})")
        unf = o.requests[o.requests.status == Status.UNFINISHED.value]
        if len(unf):
            lines.append(f"{o.summary['allocator']}: {len(unf)} unfinished at the end of the simulation")
    return lines


def summary_markdown(outputs: list, context: dict[str, str], notes: list[str], plots: bool) -> str:
    summaries = [o.summary for o in outputs]
    parts = ["# kvsim results", ""]
    parts += [f"- **{k}**: {v}" for k, v in context.items()]
    parts += ["", markdown_table(summaries), ""]
    best = max(summaries, key=lambda s: s["throughput_tok_s"])
    parts.append(
        f"Highest throughput: **{best['allocator']}** at {best['throughput_tok_s']:,.0f} output tokens/s, "
        f"mean running batch {best['mean_batch']:.1f}."
    )
    parts.append("")
    parts.append(
        "Memory columns are time-weighted shares of the KV pool: token states (slots holding KV), reserved "
        "(held for the request's future tokens), internal fragmentation (held beyond the request's final "
        "length), external fragmentation (free but unusable for the next allocation), free. `eff%` = token "
        "states / (pool - free); `waste%` = reserved + internal + external. Latencies are over finished "
        "requests, in the unit each header names."
    )
    if any(s.get("prefix_hit_rate_tokens") is not None for s in summaries):
        parts.append("")
        parts.append(
            "`hit%` is the share of prompt tokens the prefix cache served over every lookup, restarts after "
            "a preemption included (a restart finds its own earlier blocks), so it can exceed the trace's "
            "ideal reuse that `kvsim trace stats` reports (each request once, an infinite cache)."
        )
    if any(s.get("sharing_dedup_frac") is not None for s in summaries):
        parts.append("")
        parts.append(
            "`dedup%` is the share of the token states sequences hold that sharing stores once for several "
            "holders; it is not a share of the pool (the memory columns are)."
        )
    extra = rejection_lines(outputs) + notes
    if extra:
        parts += ["", "## Notes", ""] + [f"- {line}" for line in extra]
    if plots:
        parts += ["", "![memory breakdown](memory_breakdown.png)", "", "![latency CDFs](latency_cdf.png)"]
    return "\n".join(parts) + "\n"
