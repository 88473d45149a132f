"""A large trace of plain lines read as columns (kvsim/trace/plain_columns.py) gives exactly the requests the line
reader gives, or leaves the file to it."""

import json

import pytest
from hypothesis import given, settings, strategies as st

from kvsim.errors import TraceError
from kvsim.trace import plain_columns
from kvsim.trace.jsonl import MAX_TOKENS, load_jsonl

pytest.importorskip("pyarrow")

VALUE = st.one_of(
    st.integers(-3, 10),
    st.integers(MAX_TOKENS - 1, MAX_TOKENS + 1),
    st.integers(2**53 - 1, 2**53 + 1),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1.0, max_value=1e6),
    st.sampled_from([0.5, -0.0, 7.0, 1e20]),
    st.text(max_size=3),
    st.booleans(),
    st.none(),
)
ID = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.sampled_from(["é", "x", "0"]), st.none(), st.just(1.0))


@st.composite
def trace_text(draw) -> str:
    """JSONL text: mostly valid plain lines, some with a field of another type, missing, extra, or a blank line."""
    lines = []
    ids_int = draw(st.booleans())
    times = st.floats(0, 100) if draw(st.booleans()) else st.integers(0, 100)
    for i in range(draw(st.integers(1, 8))):
        obj = {
            "id": draw(ID) if draw(st.integers(0, 6)) == 0 else (i if ids_int else f"r{i}"),
            "arrival_s": draw(VALUE) if draw(st.integers(0, 25)) == 0 else draw(times),
            "prompt_tokens": draw(VALUE) if draw(st.integers(0, 25)) == 0 else draw(st.integers(1, 9000)),
            "output_tokens": draw(VALUE) if draw(st.integers(0, 25)) == 0 else draw(st.integers(1, 9000)),
        }
        for name in list(obj):
            if draw(st.integers(0, 40)) == 0:
                del obj[name]
        if draw(st.integers(0, 40)) == 0:
            obj["priority"] = 1
        lines.append(json.dumps(obj))
        if draw(st.integers(0, 40)) == 0:
            lines.append(draw(st.sampled_from(["", "  ", "\r"])))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    return end.join(lines) + draw(st.sampled_from([end, ""]))


def _read(path, columns: bool, block: int = 1 << 20):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plain_columns, "MIN_BYTES", 0 if columns else 1 << 62)
        mp.setattr(plain_columns, "BLOCK_BYTES", block)
        try:
            return load_jsonl(path)
        except TraceError as e:
            return str(e)


@settings(max_examples=400, deadline=None)
@given(text=trace_text(), block=st.sampled_from([300, 1 << 20]))
def test_columns_give_the_line_readers_requests(tmp_path_factory, text, block):
    """Also in blocks of a few lines (ids by default index, line numbers and types carried across blocks)."""
    path = tmp_path_factory.mktemp("t") / "t.jsonl"
    path.write_bytes(text.encode("utf-8"))
    by_lines = _read(path, False)
    by_columns = _read(path, True, block)
    if isinstance(by_lines, str):
        assert by_columns == by_lines  # an error: the columns gave up and the line reader said it
        return
    assert by_columns.requests == by_lines.requests
    assert by_columns.was_unsorted == by_lines.was_unsorted and by_columns.skipped == by_lines.skipped
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plain_columns, "MIN_BYTES", 0)
        mp.setattr(plain_columns, "BLOCK_BYTES", block)
        columns = plain_columns.read_plain_columns(str(path), MAX_TOKENS)
    if columns is not None:  # read as columns: the same types too
        for a, b in zip(by_columns.requests, by_lines.requests):
            assert (type(a.id), type(a.arrival_s), repr(a.arrival_s)) == (
                type(b.id),
                type(b.arrival_s),
                repr(b.arrival_s),
            )


def test_a_plain_trace_is_read_as_columns(tmp_path, monkeypatch):
    """Golden: three plain lines (string, integer and absent ids) are read by the column path itself."""
    lines = [
        '{"id":"a","arrival_s":0.25,"prompt_tokens":10,"output_tokens":3}',
        '{"id":"b","arrival_s":0,"prompt_tokens":7,"output_tokens":1}',
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(plain_columns, "MIN_BYTES", 0)
    got = plain_columns.read_plain_columns(str(path), MAX_TOKENS)
    assert [(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.line) for r in got] == [
        ("a", 0.25, 10, 3, 1),
        ("b", 0.0, 7, 1, 2),
    ]
    loaded = load_jsonl(path)
    assert [r.id for r in loaded.requests] == ["b", "a"] and loaded.was_unsorted
    path.write_text(
        '{"arrival_s":1.5,"prompt_tokens":2,"output_tokens":2}\n{"arrival_s":2,"prompt_tokens":2,"output_tokens":2}'
    )
    assert [(r.id, r.line) for r in plain_columns.read_plain_columns(str(path), MAX_TOKENS)] == [("0", 1), ("1", 2)]
    path.write_text('{"id":"a","arrival_s":0.25,"prompt_tokens":10,"output_tokens":3,"n":2}\n')
    assert plain_columns.read_plain_columns(str(path), MAX_TOKENS) is None  # another field: the line reader's
