"""Loading any trace file: kvsim JSONL (kvsim/trace/jsonl.py), or a user's own CSV / JSONL of times and lengths
under common column names (kvsim/trace/own_format.py)."""

from __future__ import annotations

import json
from pathlib import Path

from kvsim.collector import paused
from kvsim.trace.jsonl import LoadedTrace, load_jsonl


def load_trace(path: str | Path, skip_invalid: bool = False) -> LoadedTrace:
    """Load a trace. Raises TraceError on the first bad line unless ``skip_invalid``. A CSV, or a JSONL whose
    objects name their fields otherwise (timestamp, input_tokens, ...), is read by its column names."""
    with paused():  # reading lines into requests makes no cycles (kvsim/collector.py)
        return _load(str(path), skip_invalid)


def _load(path: str, skip_invalid: bool) -> LoadedTrace:
    if path.lower().endswith(".csv"):
        from kvsim.trace.own_format import load_csv_trace

        return load_csv_trace(path, skip_invalid)
    first = _first_object(path)
    if first is not None and "arrival_s" not in first and "prompt_tokens" not in first:
        from kvsim.trace.own_format import load_jsonl_rows

        return load_jsonl_rows(path, first, skip_invalid)
    return load_jsonl(path, skip_invalid)


def _first_object(path: str) -> dict | None:
    """The first non-blank line's JSON object, or None (not one, or unreadable: the JSONL reader says why)."""
    try:
        with open(path, encoding="utf-8") as fh:
            for text in fh:
                if text.strip():
                    obj = json.loads(text)
                    return obj if isinstance(obj, dict) else None
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return None
