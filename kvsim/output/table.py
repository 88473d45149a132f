"""The comparison table printed to the terminal."""

from __future__ import annotations

import math

# (summary key, header, format)
COMPARE_COLUMNS = [
    ("allocator", "allocator", "{}"),
    ("finished", "done", "{:d}"),
    ("rejected", "rej", "{:d}"),
    ("unfinished", "unfin", "{:d}"),
    ("throughput_tok_s", "tok/s", "{:,.0f}"),
    ("throughput_req_s", "req/s", "{:.2f}"),
    ("mean_batch", "batch", "{:.1f}"),
    ("max_batch", "max", "{:d}"),
    ("ttft_p50_s", "TTFT p50", "{:.3f}"),
    ("ttft_p99_s", "TTFT p99", "{:.3f}"),
    ("tpot_p50_s", "TPOT p50", "{:.4f}"),
    ("e2e_p99_s", "E2E p99", "{:.2f}"),
    ("preemptions", "preempt", "{:d}"),
    ("preempt_recompute", "recomp", "{:d}"),
    ("preempt_swap", "swap", "{:d}"),
    ("preempt_partial", "partial", "{:d}"),
    ("swap_fallback_recompute", "swap-full", "{:d}"),
    ("prefix_hit_rate_tokens", "hit%", "pct"),
    ("evictions", "evict", "{:d}"),
    ("sharing_dedup_frac", "dedup%", "pct"),
    ("mem_token_states", "token%", "pct"),
    ("mem_reserved", "resv%", "pct"),
    ("mem_internal_frag", "int%", "pct"),
    ("mem_external_frag", "ext%", "pct"),
    ("mem_free", "free%", "pct"),
    ("kv_efficiency", "eff%", "pct"),
]


def format_cell(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if fmt == "pct":
        return f"{100 * value:.1f}"
    if fmt == "{:d}":
        return f"{int(value):d}"
    return fmt.format(value)


# Shown only when some run has a non-zero value (features that were not in play stay out of the way).
OPTIONAL = {"preempt_recompute", "preempt_swap", "preempt_partial", "swap_fallback_recompute",
            "prefix_hit_rate_tokens", "evictions", "sharing_dedup_frac"}


def _shown(key: str, summaries: list[dict]) -> bool:
    vals = [s.get(key) for s in summaries]
    if key in OPTIONAL:
        return any(isinstance(v, (int, float)) and not math.isnan(v) and v != 0 for v in vals)
    return any(v is not None for v in vals)


def table_rows(summaries: list[dict], columns=COMPARE_COLUMNS) -> tuple[list[str], list[list[str]]]:
    cols = [c for c in columns if _shown(c[0], summaries)]
    headers = [h for _, h, _ in cols]
    rows = [[format_cell(s.get(k), f) for k, _, f in cols] for s in summaries]
    return headers, rows


def markdown_table(summaries: list[dict], columns=COMPARE_COLUMNS) -> str:
    headers, rows = table_rows(summaries, columns)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def print_table(summaries: list[dict], title: str, columns=COMPARE_COLUMNS) -> None:
    from rich.console import Console
    from rich.table import Table

    headers, rows = table_rows(summaries, columns)
    t = Table(title=title, show_lines=False)
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*r)
    Console(width=max(160, len(headers) * 9)).print(t)
