"""The comparison table: columns with units, a compact default set that fits the terminal, and markdown.

Every column has a short name for ``--columns``. The default set answers "which allocator, how much
memory holds KV, what throughput and latency"; ``--wide`` shows every column that has something to
say. In the terminal, columns are dropped from the right end of the default set (and named in a note)
until the table fits the console's real width; nothing is ever cut with an ellipsis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Column:
    name: str  # for --columns
    header: str  # first line of the header
    unit: str  # second line ("" for none); latency columns pick ms or s from their values
    kind: str  # text, int, float1, float2, pct, latency, money
    help: str
    get: Callable[[dict], object]
    default: bool = False
    optional: bool = False  # shown only when some row has a non-zero value
    drop_order: int = 0  # when too wide, default columns with the highest drop_order go first


def _key(k: str) -> Callable[[dict], object]:
    return lambda s: s.get(k)


def _waste(s: dict) -> float | None:
    parts = [s.get(k) for k in ("mem_reserved", "mem_internal_frag", "mem_external_frag")]
    return None if any(p is None for p in parts) else sum(p or 0.0 for p in parts) + (s.get("mem_page_padding") or 0.0)


COLUMNS: list[Column] = [
    Column("allocator", "allocator", "", "text", "allocator name", _key("allocator"), True),
    Column("done", "done", "", "int", "requests finished", _key("finished"), True),
    Column(
        "rej",
        "rej",
        "",
        "int",
        "requests rejected (longer than the context or the pool)",
        _key("rejected"),
        True,
        optional=True,
    ),
    Column("unfin", "unfin", "", "int", "requests unfinished at --horizon-s", _key("unfinished"), True, optional=True),
    Column("tok_s", "out", "tok/s", "int", "output tokens generated per second", _key("throughput_tok_s"), True),
    Column("req_s", "req/s", "", "float2", "requests finished per second", _key("throughput_req_s")),
    Column(
        "batch",
        "batch",
        "mean",
        "float1",
        "running sequences per iteration, time-weighted mean",
        _key("mean_batch"),
        True,
        drop_order=5,
    ),
    Column("max_batch", "batch", "max", "int", "most running sequences in one iteration", _key("max_batch")),
    Column("ttft_p50", "TTFT", "p50", "latency", "time to first token, median", _key("ttft_p50_s"), True, drop_order=6),
    Column("ttft_p99", "TTFT", "p99", "latency", "time to first token, 99th percentile", _key("ttft_p99_s"), True),
    Column(
        "tpot_p50", "TPOT", "p50", "latency", "time per output token after the first, median", _key("tpot_p50_s"), True
    ),
    Column("tpot_p99", "TPOT", "p99", "latency", "time per output token, 99th percentile", _key("tpot_p99_s")),
    Column(
        "itl_p50",
        "ITL",
        "p50",
        "latency",
        "inter-token latency (the gap between a stream's tokens, as vllm bench serve's ITL), median",
        _key("itl_p50_s"),
    ),
    Column("itl_p99", "ITL", "p99", "latency", "inter-token latency, 99th percentile", _key("itl_p99_s")),
    Column("e2e_p99", "E2E", "p99", "latency", "end-to-end latency, 99th percentile", _key("e2e_p99_s")),
    Column("preempt", "pre-", "empt", "int", "preemptions", _key("preemptions"), True, optional=True, drop_order=4),
    Column("recompute", "recom-", "pute", "int", "preemptions by recompute", _key("preempt_recompute"), optional=True),
    Column("swap", "swap", "", "int", "preemptions by swap to host memory", _key("preempt_swap"), optional=True),
    Column(
        "partial",
        "part-",
        "ial",
        "int",
        "partial preemptions (tail blocks only)",
        _key("preempt_partial"),
        optional=True,
    ),
    Column(
        "swap_full",
        "swap",
        "full",
        "int",
        "swaps that fell back to recompute (host pool full)",
        _key("swap_fallback_recompute"),
        optional=True,
    ),
    Column(
        "hit",
        "hit",
        "%",
        "pct",
        "prompt tokens served from the prefix cache",
        _key("prefix_hit_rate_tokens"),
        True,
        optional=True,
        drop_order=1,
    ),
    Column(
        "evict",
        "evic-",
        "tions",
        "int",
        "cached blocks evicted to reuse their memory",
        _key("evictions"),
        optional=True,
    ),
    Column(
        "wfree",
        "win",
        "freed",
        "int",
        "blocks sliding or chunked windows freed before their sequence ended",
        _key("window_freed_blocks"),
        optional=True,
    ),
    Column(
        "dedup",
        "dedup",
        "%",
        "pct",
        "share of held token states stored once for several holders",
        _key("sharing_dedup_frac"),
        optional=True,
    ),
    Column(
        "token",
        "KV",
        "token%",
        "pct",
        "pool share holding computed token states (time-weighted)",
        _key("mem_token_states"),
        True,
    ),
    Column(
        "state",
        "KV",
        "state%",
        "pct",
        "pool share holding recurrent (mamba) states",
        _key("mem_recurrent_state"),
        True,
        optional=True,
        drop_order=2,
    ),
    Column(
        "waste",
        "KV",
        "waste%",
        "pct",
        "pool share reserved, internally or externally fragmented, or padding",
        _waste,
        True,
        drop_order=2,
    ),
    Column(
        "resv", "KV", "resv%", "pct", "pool share reserved for the same request's future tokens", _key("mem_reserved")
    ),
    Column("int", "KV", "int%", "pct", "pool share held beyond the request's final length", _key("mem_internal_frag")),
    Column(
        "ext",
        "KV",
        "ext%",
        "pct",
        "pool share free but unusable (too scattered, or in another pool)",
        _key("mem_external_frag"),
    ),
    Column(
        "pad",
        "KV",
        "pad%",
        "pct",
        "pool share of page padding (hybrid layouts)",
        _key("mem_page_padding"),
        optional=True,
    ),
    Column("free", "KV", "free%", "pct", "pool share free and usable", _key("mem_free"), True, drop_order=3),
    Column("eff", "KV", "eff%", "pct", "token states / occupied memory", _key("kv_efficiency")),
]
BY_NAME = {c.name: c for c in COLUMNS}


def choose_columns(names: str | None = None, wide: bool = False) -> list[Column]:
    """The columns ``--columns`` names (in that order), every column (``--wide``), or the default set."""
    if names is not None:
        from kvsim.errors import ConfigError

        out = []
        for n in filter(None, (x.strip() for x in names.split(","))):
            if n not in BY_NAME:
                import difflib

                close = difflib.get_close_matches(n, BY_NAME, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(f"--columns: unknown column '{n}'{hint}; known: {', '.join(BY_NAME)}")
            out.append(BY_NAME[n])
        if not out:
            raise ConfigError("--columns is empty")
        return out if out[0].name == "allocator" else [BY_NAME["allocator"], *out]
    return list(COLUMNS) if wide else [c for c in COLUMNS if c.default]


def _number(v) -> float | None:
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return float(v)


def latency_unit(values: list) -> tuple[str, float, int]:
    """(unit, scale from seconds, decimals) for a latency column: ms while every value is under 10 s, else s;
    one number of decimals for the whole column, enough for three significant digits of its smallest value
    (at most 3)."""
    finite = [abs(x) for x in map(_number, values) if x is not None and math.isfinite(x)]
    top = max(finite, default=0.0)
    unit, scale = ("ms", 1e3) if top < 10 else ("s", 1.0)
    smallest = min((x * scale for x in finite if x > 0), default=1.0)
    return unit, scale, max(0, min(3, 2 - math.floor(math.log10(smallest))))


NUMBER_FORMATS = {"int": "{:,.0f}", "pct": "{:.1f}", "float1": "{:.1f}", "float2": "{:.2f}", "money": "{:,.3f}"}


def printable(text: str) -> str:
    """``text`` with newlines, tabs and other control characters escaped (\\n, \\x1b, ...), so that a name read
    from a file (a config.json's ``_name_or_path``, a trace's path) stays on its line and cannot drive the terminal."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def shell_line(words) -> str:
    """A command line to show or paste: every word shell-quoted (a model named `a b` or `$(...)` stays one inert
    word), control characters escaped."""
    import shlex

    return printable(" ".join(shlex.quote(str(w)) for w in words))


def format_value(v, kind: str, scale: float = 1.0, decimals: int = 1) -> str:
    if kind == "text":
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return f"{v:g}" if isinstance(v, float) else printable(v)
    x = _number(v)
    if x is None:
        return "-"
    if kind == "latency":
        return f"{x * scale:,.{decimals}f}"
    if kind == "pct":
        x *= 100
    return NUMBER_FORMATS[kind].format(x)


def _shown(col: Column, rows: list[dict]) -> bool:
    vals = [col.get(r) for r in rows]
    if col.optional:
        return any(_number(v) not in (None, 0.0) for v in vals)
    return any(v is not None for v in vals)


def render(rows: list[dict], columns: list[Column]) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """(headers as (line 1, line 2), cell texts) for the columns that have something to show."""
    cols = [c for c in columns if _shown(c, rows)]
    headers: list[tuple[str, str]] = []
    cells: list[list[str]] = [[] for _ in rows]
    for c in cols:
        unit, scale, dec = c.unit, 1.0, 1
        if c.kind == "latency":
            u, scale, dec = latency_unit([c.get(r) for r in rows])
            unit = f"{c.unit} {u}".strip()
        headers.append((c.header, unit))
        for i, r in enumerate(rows):
            cells[i].append(format_value(c.get(r), c.kind, scale, dec))
    return headers, cells


def markdown_table(summaries: list[dict], columns: list[Column] | None = None) -> str:
    headers, rows = render(summaries, columns or choose_columns(wide=True))
    joined = [a[:-1] + b if a.endswith("-") else f"{a} {b}".strip() for a, b in headers]  # "pre-" + "empt"
    lines = [
        "| " + " | ".join(joined) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _rich_table(headers, rows):
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for i, (h1, h2) in enumerate(headers):
        t.add_column(f"{h1}\n{h2}" if h2 else h1, justify="left" if i == 0 else "right", no_wrap=True)
    for r in rows:
        t.add_row(*(Text(c) for c in r))  # as written: a name with [brackets] is not rich markup
    return t


def _width(console, table) -> int:
    """Columns the table needs unsqueezed (rich measures within the console's width unless told otherwise)."""
    return console.measure(table, options=console.options.update(max_width=100_000)).maximum


def print_table(
    summaries: list[dict],
    title: str | None = None,
    columns: list[Column] | None = None,
    console=None,
    fit: bool = True,
    hint: str = "see --wide, --columns",
) -> list[str]:
    """Print the table at the console's width; returns the names of columns dropped to fit (with a note)."""
    from rich.console import Console

    console = console or Console()
    cols = [c for c in (columns or choose_columns()) if _shown(c, summaries)]
    dropped: list[str] = []
    table = _rich_table(*render(summaries, cols))
    width = _width(console, table)
    if not fit:  # --wide: as wide as it needs, never squeezed into ellipses
        console = Console(width=max(console.width, width), file=console.file)
    while width > console.width and len(cols) > 2:
        victim = max(cols[1:], key=lambda c: (c.drop_order, cols.index(c)))
        cols.remove(victim)
        dropped.append(victim.name)
        table = _rich_table(*render(summaries, cols))
        width = _width(console, table)
    if title:
        console.print(printable(title), overflow="fold", soft_wrap=False, markup=False, highlight=False)
    console.print(table)
    if dropped:
        console.print(
            f"(hidden to fit {console.width} columns: {', '.join(reversed(dropped))}; {hint})", overflow="fold"
        )
    return dropped


def print_rows(
    rows: list[dict],
    columns: list[Column],
    title: str | None = None,
    console=None,
    hint: str = "every column is in the results file",
) -> None:
    """Any list of dicts with the given columns, fitted like the comparison table (plan, sweep)."""
    print_table(rows, title, columns, console, hint=hint)
