"""Reading CSV files of traces (UTF-8; a spreadsheet's byte-order mark is allowed): rows with one-line errors
naming the file, line and column, and the (prompt, output) length pairs of a lengths CSV. Shared by the
importers and the trace generator, which import this module and not each other."""

from __future__ import annotations

import csv
import functools
import math
from collections import Counter

from kvsim.errors import TraceError
from kvsim.trace.jsonl import MAX_TOKENS

# Column pairs accepted for empirical length CSVs (prompt, output).
LENGTH_COLUMNS = [
    ("prompt_tokens", "output_tokens"),
    ("num_prefill_tokens", "num_decode_tokens"),  # Vidur / etalon
    ("ContextTokens", "GeneratedTokens"),  # Azure
    ("input_length", "output_length"),  # Mooncake
    ("Request tokens", "Response tokens"),  # BurstGPT
]


def num_field(row: dict, col: str, path: str, line: int, kind=int):
    v = row.get(col)
    if v is None or v == "":
        raise TraceError(path, line, col, "missing")
    try:
        x = float(v)
    except ValueError:
        raise TraceError(path, line, col, f"not a number: {v!r}") from None
    if not math.isfinite(x):
        raise TraceError(path, line, col, f"must be a finite number, got {v!r}")
    if kind is int:
        if abs(x) > MAX_TOKENS:
            raise TraceError(path, line, col, f"must be at most {MAX_TOKENS:,} tokens, got {v!r}")
        if not x.is_integer():
            raise TraceError(path, line, col, f"must be an integer, got {v!r}")
        return int(x)
    return x


def csv_rows(path: str, required: tuple[str, ...]):
    try:
        fh = open(path, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise TraceError(path, 0, None, f"cannot open: {e.strerror}") from None
    with fh:
        reader = csv.DictReader(fh)
        try:
            reader.fieldnames
        except UnicodeDecodeError:
            raise TraceError(path, 1, None, "not UTF-8 text (a binary file?)") from None
        except csv.Error as e:
            raise TraceError(path, 1, None, f"not valid CSV ({e})") from None
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(
                path, 1, missing[0], f"column missing from header (have: {', '.join(reader.fieldnames or [])})"
            )
        i = 1
        try:
            for i, row in enumerate(reader, start=2):
                yield i, row
        except UnicodeDecodeError:
            raise TraceError(path, i + 1, None, "not UTF-8 text (a binary file?)") from None
        except csv.Error as e:
            raise TraceError(path, i + 1, None, f"not valid CSV ({e})") from None


def csv_header(path: str) -> list[str]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            return next(csv.reader(fh), [])
    except OSError as e:
        raise TraceError(path, 0, None, f"cannot open: {e.strerror}") from None
    except UnicodeDecodeError:
        raise TraceError(path, 1, None, "not UTF-8 text (a binary file?)") from None
    except csv.Error as e:
        raise TraceError(path, 1, None, f"not valid CSV ({e})") from None


def lengths_ok(p: int, o: int, skipped: Counter) -> bool:
    if p <= 0:
        skipped["prompt length <= 0"] += 1
        return False
    if o <= 0:
        skipped["output length <= 0"] += 1
        return False
    return True


def read_length_pairs(path: str, limit: int | None = None) -> tuple[list[tuple[int, int]], int, Counter]:
    """(prompt, output) pairs of a lengths CSV (any column pair of LENGTH_COLUMNS), the rows
    read, and the rows skipped by reason. Cached per file version: generating and reporting read it once."""
    import os

    try:
        st = os.stat(path)
    except OSError as e:
        raise TraceError(path, 0, None, f"cannot open: {e.strerror}") from None
    pairs, rows, skipped = _read_length_pairs(path, limit, st.st_mtime_ns, st.st_size)
    return list(pairs), rows, Counter(dict(skipped))


@functools.lru_cache(maxsize=4)
def _read_length_pairs(path: str, limit: int | None, _mtime_ns: int, _size: int):
    header = csv_header(path)
    pair = next(((p, o) for p, o in LENGTH_COLUMNS if p in header and o in header), None)
    if pair is None:
        raise TraceError(
            path, 1, None, "no length columns; need one of " + ", ".join(f"{p}+{o}" for p, o in LENGTH_COLUMNS)
        )
    lengths: list[tuple[int, int]] = []
    skipped: Counter = Counter()
    rows = 0
    for line, row in csv_rows(path, pair):
        if limit is not None and rows >= limit:
            break
        rows += 1
        p, o = num_field(row, pair[0], path, line), num_field(row, pair[1], path, line)
        if lengths_ok(p, o, skipped):
            lengths.append((p, o))
    return tuple(lengths), rows, tuple(skipped.items())
