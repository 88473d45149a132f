"""The JSONL loader's fast path for the common line (kvsim/trace/jsonl.py: _decode_line, parse_request) gives
exactly what the full checks give: the same Request, or the same error naming the same field."""

import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvsim.errors import TraceError
from kvsim.trace.jsonl import _decode_line, checked_request, load_jsonl, parse_request

FIELDS = ("id", "arrival_s", "prompt_tokens", "output_tokens")
values = st.one_of(
    st.integers(min_value=-3, max_value=5000),
    st.integers(min_value=2**52, max_value=2**54),
    st.integers(min_value=(1 << 40) - 2, max_value=(1 << 40) + 2),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=10**308, max_value=10**310),  # no float holds them
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, 1e308, float("nan")]),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.sampled_from(["\ud800", "é", "7"]),
    st.lists(st.integers(), max_size=2),
)
plausible = st.fixed_dictionaries(
    {
        "arrival_s": st.one_of(st.floats(min_value=0, max_value=1e6), st.integers(0, 100), values),
        "prompt_tokens": st.one_of(st.integers(-1, 3), st.integers(1, 1 << 41), values),
        "output_tokens": st.one_of(st.integers(-1, 3), st.integers(1, 5000), values),
    },
    optional={"id": st.one_of(st.integers(-5, 5), st.text(max_size=3), values), "priority": values},
)
lines = st.one_of(
    plausible, st.dictionaries(st.sampled_from(FIELDS + ("priority", "n", "session")), values, max_size=6)
)


def outcome(f, obj):
    try:
        return f(obj, "t.jsonl", 3, 2)
    except TraceError as e:
        return ("error", e.field, e.reason)


@settings(max_examples=400, deadline=None)
@given(lines)
@example({"id": "\ud800", "arrival_s": 1.0, "prompt_tokens": 5, "output_tokens": 2})
@example({"id": "é", "arrival_s": 1.0, "prompt_tokens": 5, "output_tokens": 2})
@example({"arrival_s": 10**309, "prompt_tokens": 5, "output_tokens": 2})
@example({"arrival_s": True, "prompt_tokens": 5, "output_tokens": 2})
@example({"arrival_s": 1, "prompt_tokens": 5.0, "output_tokens": 2})
@example({"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 1 << 41})
def test_fast_path_equals_the_checks(obj):
    assert repr(outcome(parse_request, obj)) == repr(outcome(checked_request, obj))  # repr: 5.0 is not 5


@settings(max_examples=300, deadline=None)
@given(lines, st.sampled_from(["\n", "", "\r\n", " \n", "x\n", "}\n", ",{}\n"]), st.sampled_from(["", " ", "\t"]))
def test_decode_line_equals_json_loads(obj, end, start):
    text = start + json.dumps(obj, ensure_ascii=False) + end
    for t in (text, text[: len(text) // 2]):
        try:
            want = ("ok", json.loads(t))
        except Exception as e:  # noqa: BLE001
            want = (type(e), str(e))
        try:
            got = ("ok", _decode_line(t))
        except Exception as e:  # noqa: BLE001
            got = (type(e), str(e))
        assert repr(got) == repr(want)  # repr: NaN equals itself there


def test_a_loaded_trace_keeps_every_field(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        '{"id": "a", "arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n'
        '{"arrival_s": 1.5, "prompt_tokens": 7, "output_tokens": 1, "priority": 2}\n'
        "\n"
        '{"id": 9, "arrival_s": 2.0, "prompt_tokens": 3.0, "output_tokens": 4}\r\n'
    )
    rs = load_jsonl(p).requests
    assert [(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.priority, r.line) for r in rs] == [
        ("a", 0.0, 5, 2, 0, 1),
        ("1", 1.5, 7, 1, 2, 2),
        ("9", 2.0, 3, 4, 0, 4),
    ]
