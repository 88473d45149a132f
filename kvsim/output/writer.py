"""Write a run's or a comparison's results to a folder: CSV (or Parquet), PNG plots, Markdown summary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
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


def write_csv(df: pd.DataFrame, path: Path, rows_per_chunk: int = 16384, arrow: bool | None = None) -> None:
    """``df.to_csv(path, index=False)``, byte for byte, several times as fast on result tables: pandas formats every
    float through numpy before its csv writer. With pyarrow installed the columns are formatted by Arrow's C++
    kernels (:func:`_arrow_lines`; ``arrow`` None: where pandas has imported pyarrow already, or the table is
    large enough to repay importing it); else the csv module formats Python floats the same way (shortest
    round-trip repr), ``rows_per_chunk`` rows at a time (missing values as empty fields, as pandas writes them).
    A column of any other kind (dates, categories, nullable numbers) sends the table to pandas."""
    import csv
    import sys

    if arrow is None:
        arrow = "pyarrow" in sys.modules or len(df) >= 20000

    if not df.columns.is_unique:  # (a column name twice: pandas' own writer)
        df.to_csv(path, index=False)
        return
    kinds = []
    for dt in df.dtypes:
        if dt.kind in "iu":
            kinds.append("int")
        elif dt.kind == "b":
            kinds.append("bool")
        elif dt == "float64":
            kinds.append("float")
        elif dt.kind == "O" or isinstance(dt, pd.StringDtype):
            kinds.append("object")
        else:
            df.to_csv(path, index=False)
            return
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(list(df.columns))
        if arrow and len(df.columns) > 1:  # (one column: the csv module quotes an empty field, Arrow cannot)
            with _c_library_allocator():
                lines = _arrow_lines(df, kinds, rows_per_chunk)
                if lines is not None:
                    fh.flush()
                    for chunk in lines:
                        fh.buffer.write(chunk)
                    return
        for start in range(0, len(df), rows_per_chunk):
            part = df.iloc[start : start + rows_per_chunk]
            w.writerows(zip(*(_column(part[c], k) for c, k in zip(df.columns, kinds))))


def _column(s: pd.Series, kind: str) -> list:
    """A column's values as the csv module takes them (None for a missing value)."""
    if kind in ("int", "bool"):
        return s.tolist()
    if kind == "float":
        v = s.tolist()
        return [None if x != x else x for x in v] if s.hasnans else v
    return [
        None if x is None or x is pd.NA or (isinstance(x, float) and x != x) else x for x in s.astype(object).tolist()
    ]


@contextmanager
def _c_library_allocator() -> Iterator[None]:
    """Arrow's buffers from the C library's allocator within: it gives freed memory back, Arrow's default one
    keeps it (tens of MiB after a large table). A buffer is freed to the allocator it came from, whichever is
    the default then."""
    try:
        import pyarrow as pa
    except ImportError:
        yield
        return
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def _arrow_lines(df: pd.DataFrame, kinds: list[str], rows_per_chunk: int):
    """The table's rows as UTF-8 CSV lines, ``rows_per_chunk`` rows per bytes object, exactly as the csv module
    writes them, or None when pyarrow is missing or a text column holds something other than strings.

    Arrow formats integers as Python does, and floats by the same shortest round-trip digits but not always
    the same notation: Python writes ``0.0``, ``10000000000.5`` and ``1e-05`` where Arrow writes ``0``,
    ``1.00000000005e+10`` and ``0.00001``; those values take Python's repr (:func:`_arrow_floats`; few in result
    tables). Text is quoted as the csv module quotes it (QUOTE_MINIMAL: a field holding a comma, a quote or a line
    break). Numeric columns are formatted on threads (Arrow's kernels release the GIL)."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return None
    columns = []  # per column: its kind, and its text whole (few distinct values, or strings Arrow holds) or values
    for i, kind in enumerate(kinds):
        s = df.iloc[:, i]
        if kind == "object":
            text = _arrow_text(s, pa, pc)
            if text is None:
                return None
            columns.append((kind, text))
        else:
            columns.append((kind, s.to_numpy()))
    return _arrow_chunks(len(df), columns, rows_per_chunk, pa, pc)


def _arrow_chunks(n: int, columns: list, rows_per_chunk: int, pa, pc):
    """The CSV lines of rows [start, start + rows_per_chunk) at a time: numbers are formatted a chunk at a time
    (a million-row table's text would need a few hundred MiB at once), on two threads."""
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor

    def numbers(kind: str, v):
        if kind == "int":
            return pc.cast(pa.array(v), pa.string())
        if kind == "bool":
            return pc.if_else(pa.array(v), "True", "False")
        return _arrow_floats(v.astype(np.float64, copy=False), pa, pc)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for start in range(0, n, rows_per_chunk):
            end = min(start + rows_per_chunk, n)
            pending = [
                c.slice(start, end - start) if kind == "object" else pool.submit(numbers, kind, c[start:end])
                for kind, c in columns
            ]
            part = [p if kind == "object" else p.result() for p, (kind, _) in zip(pending, columns)]
            row = pc.binary_join_element_wise(*part, ",", null_handling="replace", null_replacement="")
            line = pc.binary_join_element_wise(row, "\n", "", null_handling="replace", null_replacement="")
            yield _string_bytes(line, pa)


def _arrow_floats(v, pa, pc):
    """float64 values as Python's repr writes them (NaN: null, an empty field).

    The two agree from 1e16 up; below it Python writes fixed notation down to 1e-4 and ends integral values in ".0",
    where Arrow may switch to an exponent (1.00000000005e+10) or drop the ".0": those values take repr."""
    import numpy as np

    text = pc.cast(pa.array(v, from_pandas=True), pa.string())
    a = np.abs(v)
    exponent = pc.fill_null(pc.match_substring(text, "e"), False).to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        python = np.isfinite(v) & (a < 1e16) & ((a < 1e-4) | exponent | (v == np.trunc(v)))
    if not python.any():
        return text
    idx = np.flatnonzero(python)
    fixed = pa.array([repr(x) for x in v[idx].tolist()], pa.string())
    return pc.replace_with_mask(text, pa.array(python), fixed)


def _arrow_text(s: pd.Series, pa, pc):
    """A text column quoted as the csv module quotes it; None if it holds anything but strings and nulls.

    A string column is taken as Arrow holds it (pandas keeps it in Arrow where pyarrow is installed); a column
    of Python objects (allocator, status, reason: few distinct values) is converted and quoted once per distinct
    value, then taken by its code (missing values, code -1, are nulls: empty fields)."""
    import numpy as np

    if isinstance(s.dtype, pd.StringDtype):
        arr = pa.array(s.array)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        return _quoted(arr.cast(pa.string()), pa, pc)
    codes, uniques = pd.factorize(s, use_na_sentinel=True)
    try:
        distinct = pa.array(np.asarray(uniques, dtype=object), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if pa.types.is_null(distinct.type):
        distinct = distinct.cast(pa.string())
    if not pa.types.is_string(distinct.type):
        return None
    return _quoted(distinct, pa, pc).take(pa.array(codes, mask=codes < 0))


def _quoted(text, pa, pc):
    """Strings quoted where the csv module quotes them (a quote inside doubled)."""
    import numpy as np

    quote = pc.fill_null(pc.match_substring_regex(text, _quoted_chars()), False).to_numpy(zero_copy_only=False)
    if not quote.any():
        return text
    idx = np.flatnonzero(quote)
    fixed = pa.array(['"' + x.replace('"', '""') + '"' for x in text.take(pa.array(idx)).to_pylist()], pa.string())
    return pc.replace_with_mask(text, pa.array(quote), fixed)


@lru_cache(maxsize=1)  # (the running Python's csv module: probed once)
def _quoted_chars() -> str:
    """A regular expression of the characters that make the csv module quote a field (delimiter, quote, and the
    line breaks it quotes: releases differ on a lone carriage return with a newline line terminator)."""
    import csv
    import io
    import re

    chars = [",", '"']
    for c in "\r\n":
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(["a" + c, "b"])
        if buf.getvalue().startswith('"'):
            chars.append(c)
    return "[" + re.escape("".join(chars)) + "]"


def _string_bytes(arr, pa) -> memoryview:
    """The concatenated UTF-8 of a string array without nulls (its data buffer between its first and last
    offsets)."""
    import numpy as np

    if len(arr) == 0:
        return memoryview(b"")
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    return memoryview(arr.buffers()[2])[offsets[0] : offsets[-1]]


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
