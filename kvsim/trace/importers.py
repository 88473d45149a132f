"""Convert public trace formats to kvsim JSONL.

Every row is accounted for: converted, or skipped with a counted reason (bad rows raise a
TraceError naming file, line and field unless the format defines them as skippable, e.g.
BurstGPT's failed requests with 0 response tokens).
"""

from __future__ import annotations

import json
import re
from typing import Any
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from kvsim.errors import TraceError
from kvsim.trace.csv_read import csv_rows, lengths_ok, num_field, read_length_pairs
from kvsim.trace.generate import ArrivalSpec, arrival_times
from kvsim.trace.jsonl import MAX_TOKENS
from kvsim.trace.request import Request
from kvsim.validation import is_finite, shown

FORMATS = ("mooncake", "azure", "burstgpt", "vidur", "lengths-csv")


@dataclass
class Converted:
    requests: list[Request]
    rows: int  # data rows read
    skipped: Counter = field(default_factory=Counter)  # reason -> count
    written: int | None = None  # requests written as they were read (stream_convert), not held in requests

    @property
    def count(self) -> int:
        return len(self.requests) if self.written is None else self.written

    def report(self, path: str) -> list[str]:
        lines = [f"{path}: {self.rows} rows -> {self.count} requests"]
        lines += [f"  skipped {n}: {why}" for why, n in self.skipped.most_common()]
        return lines


def from_mooncake(path: str, limit: int | None = None) -> Converted:
    """Mooncake FAST'25 JSONL: timestamp (ms), input_length, output_length, hash_ids (one per 512 tokens).
    Arrivals are shifted so that the first one is at 0 s."""
    reqs: list[Request] = []
    skipped: Counter = Counter()
    rows = 0
    try:
        fh = open(path, encoding="utf-8")
    except OSError as e:
        raise TraceError(path, 0, None, f"cannot open: {e.strerror}") from None
    line = 0
    with fh:
        try:
            for line, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                if limit is not None and rows >= limit:
                    break
                rows += 1
                req = _mooncake_request(text, path, line, len(reqs), skipped)
                if req is not None:
                    reqs.append(req)
        except UnicodeDecodeError:
            raise TraceError(path, line + 1, None, "not UTF-8 text (a binary file?)") from None
    t0 = min((r.arrival_s for r in reqs), default=0.0)
    return Converted(
        [
            Request(
                r.id,
                r.arrival_s - t0,
                r.prompt_tokens,
                r.output_tokens,
                hash_ids=r.hash_ids,
                hash_block_tokens=r.hash_block_tokens,
            )
            for r in reqs
        ],
        rows,
        skipped,
    )


def _mooncake_request(text: str, path: str, line: int, index: int, skipped: Counter) -> Request | None:
    """One Mooncake line as a request (arrival in absolute seconds), or None if skipped (counted)."""
    try:
        obj = json.loads(text, parse_constant=lambda c: float("nan"))
    except json.JSONDecodeError as e:
        raise TraceError(path, line, None, f"not valid JSON ({e.msg})") from None
    except RecursionError:
        raise TraceError(path, line, None, "JSON nested too deeply") from None
    except ValueError as e:  # an integer of over 4,300 digits
        raise TraceError(path, line, None, f"not readable JSON ({e})") from None
    if not isinstance(obj, dict):
        raise TraceError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    for f in ("timestamp", "input_length", "output_length"):
        v = obj.get(f)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise TraceError(path, line, f, "missing or not a number")
        if not is_finite(v):
            raise TraceError(path, line, f, f"must be a finite number, got {shown(v)}")
        if f != "timestamp" and (v != int(v) or abs(v) > MAX_TOKENS):
            raise TraceError(path, line, f, f"must be a whole number of tokens up to {MAX_TOKENS:,}, got {v}")
    p, o = int(obj["input_length"]), int(obj["output_length"])
    if not lengths_ok(p, o, skipped):
        return None
    ids = obj.get("hash_ids")
    if ids is not None and (
        not isinstance(ids, list)
        or not all(isinstance(x, int) and not isinstance(x, bool) and abs(x) < 1 << 63 for x in ids)
    ):
        raise TraceError(path, line, "hash_ids", "must be a list of 64-bit integers")
    if ids is not None and len(ids) > -(-p // 512):
        raise TraceError(path, line, "hash_ids", f"{len(ids)} ids for {p} tokens (at most {-(-p // 512)})")
    return Request(
        str(index),
        obj["timestamp"] / 1000.0,
        p,
        o,
        hash_ids=tuple(ids) if ids else None,
        hash_block_tokens=512 if ids else None,
    )


_AZURE_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?)(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?")


def _parse_azure_time(s: str | None, path: str, line: int) -> tuple[int, float]:
    """'2023-11-16 18:15:46.6805900' (7 fractional digits) -> (whole POSIX seconds, fraction), kept
    apart so that differences keep sub-microsecond precision. Times without an offset are UTC (the
    published traces are), never the machine's time zone; a 'Z' or '+HH:MM' offset is honoured."""
    if s is None:  # a row shorter than its header
        raise TraceError(path, line, "TIMESTAMP", "missing")
    m = _AZURE_TIME.fullmatch(s.strip())
    if m is None:
        raise TraceError(path, line, "TIMESTAMP", f"not a date-time: {s!r}")
    base, frac, zone = m.groups()
    try:
        whole = int(datetime.fromisoformat(base.replace(" ", "T")).replace(tzinfo=timezone.utc).timestamp())
    except ValueError:
        raise TraceError(path, line, "TIMESTAMP", f"not a date-time: {s!r}") from None
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        whole -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return whole, (float("0." + frac) if frac else 0.0)


def _convert_csv(path: str, columns: tuple[str, ...], parse, limit: int | None, rebase: bool = True) -> Converted:
    """Read a CSV row by row; ``parse(row, line, skipped)`` gives (arrival, prompt, output) or None (skipped).
    ``rebase``: shift arrivals so that the first is at 0 (arrival may be a (whole, fraction) pair)."""
    raw: list = []
    skipped: Counter = Counter()
    rows = 0
    for line, row in csv_rows(path, columns):
        if limit is not None and rows >= limit:
            break
        rows += 1
        item = parse(row, line, skipped)
        if item is not None:
            raw.append(item)
    if rebase and raw:
        t0 = min(r[0] for r in raw)
        times = [_rebased(r[0], t0) for r in raw]
    else:
        times = [r[0] for r in raw]
    return Converted([Request(str(i), t, p, o) for i, (t, (_, p, o)) in enumerate(zip(times, raw))], rows, skipped)


def _azure(path: str):
    """Azure LLM inference trace CSV (2023 and 2024): TIMESTAMP, ContextTokens, GeneratedTokens."""

    def parse(row, line, skipped):
        t = _parse_azure_time(row["TIMESTAMP"], path, line)
        p, o = num_field(row, "ContextTokens", path, line), num_field(row, "GeneratedTokens", path, line)
        return (t, p, o) if lengths_ok(p, o, skipped) else None

    return ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), parse


def _burstgpt(path: str):
    """BurstGPT CSV: Timestamp (s), Request tokens, Response tokens. Rows with 0 response tokens are
    failed requests: they are dropped and counted."""

    def parse(row, line, skipped):
        t = num_field(row, "Timestamp", path, line, float)
        p, o = num_field(row, "Request tokens", path, line), num_field(row, "Response tokens", path, line)
        if o == 0:
            skipped["failed request (0 response tokens)"] += 1
            return None
        return (t, p, o) if lengths_ok(p, o, skipped) else None

    return ("Timestamp", "Request tokens", "Response tokens"), parse


def _vidur(path: str):
    """Vidur's processed trace CSV: arrived_at (s), num_prefill_tokens, num_decode_tokens. Arrivals are
    shifted so that the first one is at 0 s, as for every other format."""

    def parse(row, line, skipped):
        t = num_field(row, "arrived_at", path, line, float)
        if t < 0:
            raise TraceError(path, line, "arrived_at", f"must be >= 0 seconds, got {row['arrived_at']!r}")
        p, o = num_field(row, "num_prefill_tokens", path, line), num_field(row, "num_decode_tokens", path, line)
        return (t, p, o) if lengths_ok(p, o, skipped) else None

    return ("arrived_at", "num_prefill_tokens", "num_decode_tokens"), parse


CSV_FORMATS = {"azure": _azure, "burstgpt": _burstgpt, "vidur": _vidur}  # timestamped CSVs, converted streaming


def from_azure(path: str, limit: int | None = None) -> Converted:
    columns, parse = _azure(path)
    return _convert_csv(path, columns, parse, limit)


def from_burstgpt(path: str, limit: int | None = None) -> Converted:
    columns, parse = _burstgpt(path)
    return _convert_csv(path, columns, parse, limit)


def from_vidur(path: str, limit: int | None = None) -> Converted:
    columns, parse = _vidur(path)
    return _convert_csv(path, columns, parse, limit)


def _rebased(t, t0):
    if isinstance(t0, tuple):  # (whole seconds, fraction): subtract apart to keep precision
        return (t[0] - t0[0]) + (t[1] - t0[1])
    return t - t0


def stream_convert(fmt: str, path: str, output: str, limit: int | None = None) -> Converted:
    """A timestamped CSV trace (:data:`CSV_FORMATS`) to kvsim JSONL in two passes over the file (the earliest
    arrival, then the requests, written as they are read): memory stays flat however long the trace (the
    Azure 2024 week, BurstGPT's months). The file is the one :func:`convert` + ``write_trace`` give, byte for
    byte; the returned Converted holds no requests, only the counts."""
    from kvsim.files import atomic_path
    from kvsim.trace.jsonl import request_line

    columns, parse = CSV_FORMATS[fmt](path)
    t0 = None
    for rows, (line, row) in enumerate(csv_rows(path, columns)):
        if limit is not None and rows >= limit:
            break
        item = parse(row, line, Counter())
        if item is not None and (t0 is None or item[0] < t0):
            t0 = item[0]
    skipped: Counter = Counter()
    rows = written = 0
    with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for line, row in csv_rows(path, columns):
            if limit is not None and rows >= limit:
                break
            rows += 1
            item = parse(row, line, skipped)
            if item is None:
                continue
            fh.write(request_line(Request(str(written), _rebased(item[0], t0), item[1], item[2]), output, written))
            written += 1
        if not written:  # (raised inside: the output, if it existed, is left as it was)
            why = "; ".join(f"skipped {n}: {w}" for w, n in skipped.most_common())
            raise TraceError(path, 0, None, f"no usable requests to write ({rows} rows{'; ' + why if why else ''})")
    return Converted([], rows, skipped, written)


def from_lengths_csv(path: str, arrivals: ArrivalSpec, seed: int = 0, limit: int | None = None) -> Converted:
    """A CSV of lengths only; rows keep their order and get arrival times from the chosen process."""
    lengths, rows, skipped = read_length_pairs(path, limit)
    t: Any = arrival_times(arrivals, len(lengths), np.random.default_rng(seed)) if lengths else []
    return Converted([Request(str(i), float(t[i]), p, o) for i, (p, o) in enumerate(lengths)], rows, skipped)


def convert(
    fmt: str, path: str, limit: int | None = None, arrivals: ArrivalSpec | None = None, seed: int = 0
) -> Converted:
    if fmt == "mooncake":
        return from_mooncake(path, limit)
    if fmt == "azure":
        return from_azure(path, limit)
    if fmt == "burstgpt":
        return from_burstgpt(path, limit)
    if fmt == "vidur":
        return from_vidur(path, limit)
    if fmt == "lengths-csv":
        return from_lengths_csv(path, arrivals or ArrivalSpec(), seed, limit)
    raise TraceError(path, 0, None, f"unknown format '{fmt}' (known: {', '.join(FORMATS)})")
