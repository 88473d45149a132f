"""A large kvsim JSONL trace of plain lines (``id``, ``arrival_s``, ``prompt_tokens``, ``output_tokens`` and nothing
else, the lines `kvsim trace generate` writes) read as columns by Arrow's JSON reader and checked a column at a
time: a million lines in about a third of the time of reading them one by one.

The result is the list :func:`kvsim.trace.jsonl.load_jsonl` would build, Request for Request, or None, and then the
reader takes the lines one by one (and says what is wrong with one, if anything is): any field but those four, a
value of another type or out of range, a missing field, a blank line, two objects on a line, a line ended by a
carriage return alone, any byte beyond ASCII (a byte-order mark, text in ids), duplicate ids, or no pyarrow."""

from __future__ import annotations

import json
import os
import re

from kvsim.trace.request import MAX_EXACT_INT, Request

MIN_BYTES = 4 << 20  # below this, reading the lines one by one is fast enough to leave Arrow unimported
BLOCK_BYTES = 1 << 20  # of the file, parsed at a time
_PLAIN = frozenset(("id", "arrival_s", "prompt_tokens", "output_tokens"))
_BLANK_AFTER_BREAK = re.compile(rb"\n[ \t\r\f\v]*\n")
_BLANK_FIRST = re.compile(rb"[ \t\r\f\v]*\n")
_LONE_CR = re.compile(rb"\r(?!\n)")


def read_plain_columns(path: str, max_tokens: int) -> list[Request] | None:
    """The trace's requests in file order, or None when it is not a large file of plain, valid lines."""
    try:
        with open(path, "rb") as fh:  # (a small file, or one whose first line is not plain, is not read here)
            if os.fstat(fh.fileno()).st_size < MIN_BYTES or not _plain_first_line(fh.readline()):
                return None
            fh.seek(0)
            data = fh.read()
    except OSError:
        return None
    if not data.isascii():  # plain lines are ASCII, ids included
        return None
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        return None
    requests: list[Request] = []
    seen: set[str] = set()
    try:  # a megabyte of lines at a time: the whole file's columns would take twice its size beside it
        # the C library's allocator gives the parser's buffers back, Arrow's default one keeps them (~40 MiB)
        reader = pj.open_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(block_size=BLOCK_BYTES),
            memory_pool=pa.system_memory_pool(),
        )
        schema = reader.schema
        names = set(schema.names)
        if not names <= _PLAIN or not names >= _PLAIN - {"id"} or not _plain_types(schema, pa):
            return None  # another field, or a value of another type (known from the first block)
        if _odd_lines(data):
            return None
        for batch in reader:
            block = _block_requests(batch, names, len(requests) + 1, max_tokens, pa)
            if block is None:
                return None
            seen.update(r.id for r in block)
            requests += block
    except pa.ArrowException:
        return None  # not JSON objects (the line reader says where), or a type that changes down the file
    if len(requests) != data.count(b"\n") + (not data.endswith(b"\n")) or len(seen) != len(requests):
        return None  # a line that is not one object, or an id twice (the line reader names both lines)
    return requests


def _plain_first_line(line: bytes) -> bool:
    """Whether a file's first line is a JSON object of plain fields only: a look before reading the whole file
    (a Mooncake or multi-turn trace leaves at once)."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # (not JSON, or not UTF-8)
        return False
    return isinstance(obj, dict) and obj.keys() <= _PLAIN


def _plain_types(schema, pa) -> bool:
    t, p, o = (schema.field(n).type for n in ("arrival_s", "prompt_tokens", "output_tokens"))
    rid = schema.field("id").type if "id" in schema.names else pa.string()
    return (
        (pa.types.is_float64(t) or pa.types.is_int64(t))
        and pa.types.is_int64(p)
        and pa.types.is_int64(o)
        and (pa.types.is_int64(rid) or pa.types.is_string(rid))
    )


def _block_requests(batch, names: set[str], first_line: int, max_tokens: int, pa) -> list[Request] | None:
    """One block's requests (its first on line ``first_line``), or None where a value is missing or out of range."""
    import pyarrow.compute as pc

    if any(batch.column(n).null_count for n in names):
        return None  # a field missing from some line
    t, p, o = (batch.column(n) for n in ("arrival_s", "prompt_tokens", "output_tokens"))
    if pa.types.is_floating(t.type) and pc.any(pc.is_nan(t)).as_py():
        return None
    for col, lo, hi in ((t, 0, MAX_EXACT_INT), (p, 1, max_tokens), (o, 1, max_tokens)):
        low, high = pc.min_max(col).values()
        if low.as_py() is None or low.as_py() < lo or not high.as_py() <= hi:
            return None
    if "id" in names:
        rid = batch.column("id")
        ids = [str(x) for x in rid.to_pylist()] if pa.types.is_int64(rid.type) else rid.to_pylist()
    else:  # the line reader's default: the request's index in the file
        ids = [str(i) for i in range(first_line - 1, first_line - 1 + batch.num_rows)]
    times, prompts, outputs = pc.cast(t, pa.float64()).to_pylist(), p.to_pylist(), o.to_pylist()
    return [
        Request(i, a, n, m, 0, None, None, 1, k, None)
        for k, (i, a, n, m) in enumerate(zip(ids, times, prompts, outputs), start=first_line)
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
