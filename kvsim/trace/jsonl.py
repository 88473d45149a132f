"""Read and write the kvsim JSONL trace format (see schema.json), validating every line."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvsim.errors import TraceError
from kvsim.trace.request import MAX_EXACT_INT, Request
from kvsim.validation import is_finite, shown


@dataclass
class LoadedTrace:
    requests: list[Request]  # sorted by arrival_s (stable)
    path: str
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, reason) of lines left out
    was_unsorted: bool = False

    def notes(self) -> list[str]:
        """Human-readable remarks about what loading changed or left out."""
        out = []
        if self.skipped:
            out.append(f"{self.path}: skipped {len(self.skipped)} invalid line(s) (--skip-invalid):")
            for line, why in self.skipped[:5]:
                out.append(f"  line {line}: {why}")
            if len(self.skipped) > 5:
                out.append(f"  ... and {len(self.skipped) - 5} more")
        if self.was_unsorted:
            out.append(f"{self.path}: arrivals were not in time order; sorted them by arrival_s")
        return out


MAX_TOKENS = 1 << 40  # per request; beyond it no model has context and counts stop fitting int64 sums
MAX_SAMPLES = 4096  # parallel samples (n) of one request


def _int_field(
    obj: dict, name: str, path: str, line: int, minimum: int | None = None, default=None, maximum: int = MAX_TOKENS
):
    if name not in obj:
        if default is not None:
            return default
        raise TraceError(path, line, name, "missing")
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TraceError(path, line, name, f"must be an integer, got {json.dumps(v)}")
    if isinstance(v, float):
        if not v.is_integer():
            raise TraceError(path, line, name, f"must be an integer, got {v}")
        v = int(v)
    if minimum is not None and v < minimum:
        raise TraceError(path, line, name, f"must be >= {minimum}, got {v}")
    if abs(v) > maximum:
        raise TraceError(
            path,
            line,
            name,
            f"must be at most {maximum:,} in size, got {shown(v) if abs(v) > 10**20 else format(v, '.3g')}",
        )
    return v


# the fields of most trace lines: such a line whose values have their plain types and ranges needs no other check
_PLAIN_FIELDS = frozenset(("id", "arrival_s", "prompt_tokens", "output_tokens"))


def parse_request(obj: object, path: str, line: int, index: int) -> Request:
    """Validate one decoded JSON value and turn it into a Request."""
    if type(obj) is dict and obj.keys() <= _PLAIN_FIELDS:
        # the common line, checked at once (the same Request as the checks below give it; anything else, or
        # anything out of range, takes them and their messages): a million-line trace loads in half the time
        get = obj.get
        t: Any = get("arrival_s")
        p: Any = get("prompt_tokens")
        o: Any = get("output_tokens")
        rid: Any = get("id", index)
        tt, tr = type(t), type(rid)
        if (
            ((tt is float and 0.0 <= t < math.inf) or (tt is int and 0 <= t <= MAX_EXACT_INT))
            and type(p) is int
            and type(o) is int
            and 1 <= p <= MAX_TOKENS
            and 1 <= o <= MAX_TOKENS
            and (tr is int or (tr is str and rid.isascii()))
        ):
            return Request(str(rid), float(t), p, o, 0, None, None, 1, line, None)
    return checked_request(obj, path, line, index)


def checked_request(obj: object, path: str, line: int, index: int) -> Request:
    """:func:`parse_request` field by field, naming the first bad one."""
    if not isinstance(obj, dict):
        raise TraceError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    if "arrival_s" not in obj:
        raise TraceError(path, line, "arrival_s", "missing")
    t = obj["arrival_s"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not is_finite(t):
        raise TraceError(path, line, "arrival_s", f"must be a finite number of seconds, got {shown(t)}")
    if t < 0:
        raise TraceError(path, line, "arrival_s", f"must be >= 0, got {t}")
    prompt = _int_field(obj, "prompt_tokens", path, line, minimum=1)
    output = _int_field(obj, "output_tokens", path, line, minimum=1)
    priority = _int_field(obj, "priority", path, line, default=0)
    n = _int_field(obj, "n", path, line, minimum=1, default=1, maximum=MAX_SAMPLES)
    rid = obj.get("id", index)
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise TraceError(path, line, "id", f"must be a string or integer, got {json.dumps(rid)}")
    try:
        str(rid).encode("utf-8")
    except UnicodeEncodeError:
        raise TraceError(path, line, "id", f"is not valid Unicode text ({ascii(rid)})") from None
    hash_ids = hbt = None
    if obj.get("hash_ids") is not None:
        ids = obj["hash_ids"]
        if not isinstance(ids, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in ids):
            raise TraceError(path, line, "hash_ids", "must be a list of integers")
        if any(abs(x) >= 1 << 63 for x in ids):
            raise TraceError(path, line, "hash_ids", "ids must fit in 64 bits")
        if "hash_block_tokens" not in obj:
            raise TraceError(path, line, "hash_block_tokens", "missing (required with hash_ids)")
        hbt = _int_field(obj, "hash_block_tokens", path, line, minimum=1)
        if len(ids) > -(-prompt // hbt):
            raise TraceError(
                path,
                line,
                "hash_ids",
                f"{len(ids)} ids but the prompt of {prompt} tokens has only {-(-prompt // hbt)} blocks of {hbt}",
            )
        hash_ids = tuple(ids)
    session = obj.get("session")
    if session is not None:
        if isinstance(session, bool) or not isinstance(session, (str, int)):
            raise TraceError(path, line, "session", f"must be a string or integer, got {json.dumps(session)}")
        session = str(session)
    return Request(str(rid), float(t), prompt, output, priority, hash_ids, hbt, n, line, session)


def load_jsonl(path: str | Path, skip_invalid: bool = False) -> LoadedTrace:
    """Load a kvsim JSONL trace. Raises TraceError on the first bad line unless ``skip_invalid``
    (kvsim/trace/loading.py: any trace file)."""
    path = str(path)
    from kvsim.trace.plain_columns import read_plain_columns

    plain = read_plain_columns(path, MAX_TOKENS)
    if plain is not None:
        return _in_time_order(plain, path, [])
    try:
        fh = open(path, encoding="utf-8")
    except OSError as e:
        raise TraceError(path, 0, None, f"cannot open: {e.strerror}") from None
    requests: list[Request] = []
    skipped: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    with fh:
        lineno = 0
        try:
            for lineno, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                _add_line(text, path, lineno, requests, skipped, seen, skip_invalid)
        except UnicodeDecodeError:
            raise TraceError(path, lineno + 1, None, "not UTF-8 text (a binary file?)") from None
    if not requests and not skipped:
        raise TraceError(path, 0, None, "no requests in file")
    if not requests:
        line, why = skipped[0]
        raise TraceError(
            path, line, None, f"no valid request: all {len(skipped)} line(s) are invalid (the first: {why})"
        )
    return _in_time_order(requests, path, skipped)


def _in_time_order(requests: list[Request], path: str, skipped: list[tuple[int, str]]) -> LoadedTrace:
    unsorted = any(requests[i].arrival_s > requests[i + 1].arrival_s for i in range(len(requests) - 1))
    if unsorted:
        requests.sort(key=lambda r: r.arrival_s)
    return LoadedTrace(requests, path, skipped, unsorted)


_scan = getattr(json.JSONDecoder(), "scan_once")  # json.loads' own scanner, without its per-call wrapping
_LINE_ENDS = ("\n", "", "\r\n")


def _decode_line(text: str):
    """``json.loads(text)``, twice as fast on a line that is one JSON value and its line ending; any other
    line goes to json.loads itself (the same value or the same error)."""
    try:
        obj, end = _scan(text, 0)
    except Exception:  # noqa: BLE001 (json.loads gives the reason)
        return json.loads(text)
    if text[end:] not in _LINE_ENDS:
        return json.loads(text)
    return obj


def _add_line(text: str, path: str, lineno: int, requests: list, skipped: list, seen: dict, skip_invalid: bool) -> None:
    """Parse one line into ``requests`` (or, with ``skip_invalid``, record why not in ``skipped``)."""
    try:
        try:
            obj = _decode_line(text)
        except json.JSONDecodeError as e:
            hint = (
                " (a CSV? convert it with `kvsim trace convert`)"
                if "," in text and not text.lstrip().startswith("{")
                else ""
            )
            raise TraceError(path, lineno, None, f"not valid JSON ({e.msg} at column {e.colno}){hint}") from None
        except RecursionError:
            raise TraceError(path, lineno, None, "JSON nested too deeply") from None
        except ValueError as e:  # an integer of over 4,300 digits
            raise TraceError(path, lineno, None, f"not readable JSON ({e})") from None
        req = parse_request(obj, path, lineno, len(requests) + len(skipped))
        if req.id in seen:
            raise TraceError(path, lineno, "id", f"duplicate id '{req.id}' (first on line {seen[req.id]})")
    except TraceError as e:
        if not skip_invalid:
            raise
        skipped.append((lineno, (f"field '{e.field}': " if e.field else "") + e.reason))
        return
    seen[req.id] = lineno
    requests.append(req)


def request_to_dict(r: Request) -> dict:
    d: dict = {
        "id": r.id,
        "arrival_s": round(r.arrival_s, 6),
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
    }
    if r.priority:
        d["priority"] = r.priority
    if r.n != 1:
        d["n"] = r.n
    if r.hash_ids is not None:
        d["hash_ids"] = list(r.hash_ids)
        d["hash_block_tokens"] = r.hash_block_tokens
    if r.session is not None:
        d["session"] = r.session
    return d


def write_trace(requests: list[Request], path: str | Path) -> None:
    """Write requests as kvsim JSONL (atomically). Each is checked exactly as loading checks it, so kvsim
    never writes a trace it would then reject."""
    from kvsim.files import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for i, r in enumerate(requests):
            fh.write(request_line(r, path, i))


def request_line(r: Request, path: str | Path, i: int) -> str:
    """Request ``r``, the ``i``-th (from 0) of a trace written to ``path``, as its JSONL line, checked exactly as
    loading checks it."""
    d = request_to_dict(r)
    parse_request(d, f"request {r.id!r} to be written to {path}", i + 1, i)
    return json.dumps(d, separators=(",", ":"), allow_nan=False) + "\n"
