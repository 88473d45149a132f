"""A large kvsim JSONL trace of plain lines (``id``, ``arrival_s``, ``prompt_tokens``, ``output_tokens`` and nothing
else, the lines `kvsim trace generate` writes) read as columns by Arrow's JSON reader and checked a column at a
time: a million lines in about a third of the time of reading them one by one.

The result is the list :func:`kvsim.trace.jsonl.load_jsonl` would build, Request for Request, or None, and then the
reader takes the lines one by one (and says what is wrong with one, if anything is): any field but those four, a
value of another type or out of range, a missing field, a blank line, two objects on a line, a byte-order mark,
text that is not UTF-8, a line ended by a carriage return alone, duplicate ids, ids that are not ASCII, or no pyarrow."""

from __future__ import annotations

import re

from kvsim.trace.request import Request

MIN_BYTES = 4 << 20  # below this, reading the lines one by one is fast enough to leave Arrow unimported
_PLAIN = frozenset(("id", "arrival_s", "prompt_tokens", "output_tokens"))
_BLANK_AFTER_BREAK = re.compile(rb"\n[ \t\r\f\v]*\n")
_BLANK_FIRST = re.compile(rb"[ \t\r\f\v]*\n")
_LONE_CR = re.compile(rb"\r(?!\n)")
_MAX_EXACT_INT = 1 << 53


def read_plain_columns(path: str, max_tokens: int) -> list[Request] | None:
    """The trace's requests in file order, or None when it is not a large file of plain, valid lines."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if len(data) < MIN_BYTES or data.startswith(b"\xef\xbb\xbf") or _odd_lines(data):
        return None
    try:
        data.decode("utf-8")
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj
    except (UnicodeDecodeError, ImportError):
        return None
    try:
        table = pj.read_json(pa.BufferReader(data))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    lines = data.count(b"\n") + (not data.endswith(b"\n"))
    names = set(table.column_names)
    if table.num_rows != lines or not names <= _PLAIN or not names >= _PLAIN - {"id"}:
        return None  # another field, or a line that is not one object
    if any(table.column(n).null_count for n in names):
        return None  # a field missing from some line
    t, p, o = (table.column(n) for n in ("arrival_s", "prompt_tokens", "output_tokens"))
    if not (pa.types.is_floating(t.type) or pa.types.is_int64(t.type)):
        return None
    if not (pa.types.is_int64(p.type) and pa.types.is_int64(o.type)):
        return None
    if pa.types.is_floating(t.type) and pc.any(pc.is_nan(t)).as_py():
        return None
    for col, lo, hi in ((t, 0, _MAX_EXACT_INT), (p, 1, max_tokens), (o, 1, max_tokens)):
        low, high = pc.min_max(col).values()
        if low.as_py() is None or low.as_py() < lo or not high.as_py() <= hi:
            return None
    if "id" in names:
        rid = table.column("id")
        if pa.types.is_int64(rid.type):
            ids = [str(x) for x in rid.to_pylist()]
        elif pa.types.is_string(rid.type) and pc.all(pc.string_is_ascii(rid)).as_py() is not False:
            ids = rid.to_pylist()
        else:
            return None
    else:
        rid, ids = None, [str(i) for i in range(table.num_rows)]
    if len(set(ids)) != len(ids):
        return None
    times, prompts, outputs = pc.cast(t, pa.float64()).to_pylist(), p.to_pylist(), o.to_pylist()
    del table, t, p, o, rid, data
    pa.default_memory_pool().release_unused()  # Arrow's allocator would keep the file's pages for later tables
    return [
        Request(i, a, n, m, 0, None, None, 1, k, None)
        for k, (i, a, n, m) in enumerate(zip(ids, times, prompts, outputs), start=1)
    ]


def _odd_lines(data: bytes) -> bool:
    """A blank line (Python's reader skips it, so line numbers would differ from Arrow's rows), or a carriage
    return that ends a line alone (Python's reader breaks the line there, Arrow's does not)."""
    last = data[data.rfind(b"\n") + 1 :]
    return bool(
        _BLANK_FIRST.match(data)
        or _BLANK_AFTER_BREAK.search(data)
        or (last and not last.strip())
        or (b"\r" in data and _LONE_CR.search(data))
    )
