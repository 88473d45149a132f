"""Write a run's or a comparison's results to a folder: CSV (or Parquet), PNG plots, Markdown summary."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kvsim.engine.sequence import Status
from kvsim.errors import ConfigError
from kvsim.output.table import markdown_table


def _write_table(df: pd.DataFrame, path: Path, fmt: str) -> Path:
    if fmt == "parquet":
        try:
            df.to_parquet(path.with_suffix(".parquet"), index=False)
        except ImportError:
            raise ConfigError("--format parquet needs pyarrow (pip install 'kvsim[parquet]')") from None
        return path.with_suffix(".parquet")
    df.to_csv(path.with_suffix(".csv"), index=False)
    return path.with_suffix(".csv")


def write_results(out_dir: str | Path, outputs: list, context: dict[str, str], notes: list[str],
                  plots: bool = True, fmt: str = "csv") -> list[Path]:
    """``outputs`` are runner.RunOutput objects, one per allocator."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    reqs = pd.concat([o.requests.assign(allocator=o.summary["allocator"]) for o in outputs], ignore_index=True)
    reqs = reqs[["allocator", *[c for c in reqs.columns if c != "allocator"]]]
    runs = pd.DataFrame([o.summary for o in outputs])
    tl = pd.concat([o.timeline.assign(allocator=o.summary["allocator"]) for o in outputs], ignore_index=True)
    written.append(_write_table(reqs, out / "requests", fmt))
    written.append(_write_table(runs, out / "runs", fmt))
    written.append(_write_table(tl, out / "memory_timeline", fmt))
    if plots:
        from kvsim.output.plots import latency_cdf_plot, memory_breakdown_plot

        written.append(memory_breakdown_plot([o.summary for o in outputs],
                                             {o.summary["allocator"]: o.timeline for o in outputs},
                                             out / "memory_breakdown.png"))
        written.append(latency_cdf_plot({o.summary["allocator"]: o.requests for o in outputs}, out / "latency_cdf.png"))
    md = summary_markdown(outputs, context, notes, plots)
    (out / "summary.md").write_text(md, encoding="utf-8")
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
    parts.append(f"Highest throughput: **{best['allocator']}** at {best['throughput_tok_s']:,.0f} output tokens/s, "
                 f"mean running batch {best['mean_batch']:.1f}.")
    parts.append("")
    parts.append("Memory columns are time-weighted shares of the KV pool: token states (slots holding KV), reserved "
                 "(held for the request's future tokens), internal fragmentation (held beyond the request's final "
                 "length), external fragmentation (free but unusable for the next allocation), free. `eff%` = token "
                 "states / (pool - free). Latencies are seconds, over finished requests.")
    extra = rejection_lines(outputs) + notes
    if extra:
        parts += ["", "## Notes", ""] + [f"- {line}" for line in extra]
    if plots:
        parts += ["", "![memory breakdown](memory_breakdown.png)", "", "![latency CDFs](latency_cdf.png)"]
    return "\n".join(parts) + "\n"
