"""A user's own trace as they have it: a CSV or JSONL of (time, input tokens, output tokens) under the column
names tools commonly write, read without renaming.

Columns are matched case-insensitively, ignoring spaces, dashes and underscores; the first name of each list that
a file has is used (kvsim's own names first). Times are seconds (``*_ms`` / ``*_us`` columns: milliseconds /
microseconds), or date-times (ISO 8601, ``2023-11-16 18:15:46.680``; UTC unless they carry an offset); either way
the first request arrives at 0. A file with none of a list's names fails with the names it looked for.
"""

from __future__ import annotations

import re

from kvsim.errors import TraceError
from kvsim.trace.request import Request

TIME_NAMES = (
    "arrival_s",
    "arrival_time",
    "arrival",
    "timestamp",
    "time",
    "ts",
    "start_time",
    "created",
    "created_at",
    "request_time",
    "send_time",
    "time_s",
    "t",
    "timestamp_ms",
    "arrival_ms",
    "time_ms",
    "timestamp_us",
)
INPUT_NAMES = (
    "prompt_tokens",
    "input_tokens",
    "prompt_len",
    "prompt_length",
    "input_len",
    "input_length",
    "num_prompt_tokens",
    "num_input_tokens",
    "isl",
    "context_tokens",
    "contexttokens",
    "request_tokens",
    "num_prefill_tokens",
    "prefill_tokens",
    "in_tokens",
    "tokens_in",
)
OUTPUT_NAMES = (
    "output_tokens",
    "completion_tokens",
    "output_len",
    "output_length",
    "generated_tokens",
    "generatedtokens",
    "num_output_tokens",
    "num_completion_tokens",
    "osl",
    "response_tokens",
    "decode_tokens",
    "num_decode_tokens",
    "out_tokens",
    "tokens_out",
)
_KEY = re.compile(r"[\s_\-]+")


def _norm(name: str) -> str:
    return _KEY.sub("", str(name).strip().lower())


def pick_columns(names, path: str) -> tuple[str, str, str]:
    """(time, input, output) columns of a header, by :data:`TIME_NAMES` etc.; a TraceError listing what was
    looked for when one is missing."""
    have = {_norm(n): n for n in names}
    chosen = []
    for what, wanted in (("time", TIME_NAMES), ("input tokens", INPUT_NAMES), ("output tokens", OUTPUT_NAMES)):
        col = next((have[_norm(w)] for w in wanted if _norm(w) in have), None)
        if col is None:
            raise TraceError(
                path,
                1,
                None,
                f"no {what} column: looked for {', '.join(wanted)} (any case, spaces "
                f"or dashes for underscores); the file has {', '.join(map(str, names)) or 'none'}",
            )
        chosen.append(col)
    return chosen[0], chosen[1], chosen[2]


_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}")


def _time(v, col: str, path: str, line: int) -> tuple[float, float]:
    """A time value as (whole seconds, fraction), kept apart so that epoch times keep sub-microsecond
    differences."""
    if isinstance(v, str) and _DATETIME.match(v.strip()):
        from kvsim.trace.importers import _parse_azure_time

        try:
            return _parse_azure_time(v, path, line)
        except TraceError:
            raise TraceError(path, line, col, f"not a date-time: {v!r}") from None
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise TraceError(path, line, col, f"not a number of seconds or a date-time: {v!r}") from None
    if x != x or x in (float("inf"), float("-inf")):
        raise TraceError(path, line, col, f"must be a finite time, got {v!r}")
    n = _norm(col)
    scale = 1e-3 if n.endswith("ms") else 1e-6 if n.endswith("us") else 1.0
    whole = float(int(x)) if abs(x) < 2**53 else x
    return whole * scale, (x - whole) * scale


def _tokens(v, col: str, path: str, line: int) -> int:
    from kvsim.trace.csv_read import num_field

    n = num_field({col: v}, col, path, line)  # a whole number of tokens, within kvsim's bound
    if n < 1:
        raise TraceError(path, line, col, f"must be at least 1 token, got {v!r}")
    return n


def rows_to_requests(
    rows, cols: tuple[str, str, str], path: str, skip_invalid: bool, skipped: list[tuple[int, str]]
) -> list[Request]:
    """Requests of ``(line, row)`` pairs, arrivals shifted so that the first is at 0; a bad row raises, or with
    ``skip_invalid`` is recorded in ``skipped``."""
    raw = []
    tc, ic, oc = cols
    for line, row in rows:
        try:
            raw.append(
                (
                    _time(row.get(tc), tc, path, line),
                    _tokens(row.get(ic), ic, path, line),
                    _tokens(row.get(oc), oc, path, line),
                    line,
                )
            )
        except TraceError as e:
            if not skip_invalid:
                raise
            skipped.append((line, str(e).split(": ", 1)[-1]))
    if not raw:
        return []
    w0, f0 = min(t for t, _, _, _ in raw)
    return [Request(str(i), (w - w0) + (f - f0), p, o, line=line) for i, ((w, f), p, o, line) in enumerate(raw)]


def load_csv_trace(path: str, skip_invalid: bool = False):
    """A CSV trace of (time, input, output) under common names (module docstring), as a LoadedTrace."""
    from kvsim.trace.csv_read import csv_header, csv_rows

    cols = pick_columns(csv_header(path), path)
    skipped: list[tuple[int, str]] = []
    reqs = rows_to_requests(csv_rows(path, cols), cols, path, skip_invalid, skipped)
    return _finish(reqs, path, skipped)


def _finish(reqs: list[Request], path: str, skipped: list[tuple[int, str]]):
    from kvsim.trace.jsonl import LoadedTrace

    if not reqs:
        if skipped:
            raise TraceError(
                path,
                skipped[0][0],
                None,
                f"no valid request: all {len(skipped)} rows are invalid (the first: {skipped[0][1]})",
            )
        raise TraceError(path, 0, None, "no requests in file")
    unsorted = any(reqs[i].arrival_s > reqs[i + 1].arrival_s for i in range(len(reqs) - 1))
    if unsorted:
        reqs.sort(key=lambda r: r.arrival_s)
    return LoadedTrace(reqs, path, skipped, unsorted)


def load_jsonl_rows(path: str, first: dict, skip_invalid: bool = False):
    """A JSONL trace whose objects use other names than kvsim's (``first``: the first object, whose keys decide
    the columns), as a LoadedTrace."""
    import json

    cols = pick_columns(list(first), path)

    def rows():
        with open(path, encoding="utf-8") as fh:
            for line, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except ValueError:
                    obj = None
                if not isinstance(obj, dict):
                    if not skip_invalid:
                        raise TraceError(path, line, None, "not a JSON object")
                    skipped.append((line, "not a JSON object"))
                    continue
                yield line, obj

    skipped: list[tuple[int, str]] = []
    reqs = rows_to_requests(rows(), cols, path, skip_invalid, skipped)
    return _finish(reqs, path, skipped)
