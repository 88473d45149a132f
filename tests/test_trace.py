import json

import pytest

from kvsim.errors import ConfigError, TraceError
from kvsim.trace import load_trace, write_trace
from kvsim.trace.generate import ArrivalSpec, LengthSpec, generate
from kvsim.trace.stats import trace_stats


def write_lines(tmp_path, lines, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


GOOD = '{"arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 5}'


def test_load_valid_defaults_and_hash_ids(tmp_path):
    p = write_lines(
        tmp_path,
        [
            GOOD,
            "",
            '{"id": "x", "arrival_s": 1, "prompt_tokens": 1024, "output_tokens": 1,'
            ' "priority": 2, "hash_ids": [1, 2], "hash_block_tokens": 512}',
        ],
    )
    t = load_trace(p)
    assert [r.id for r in t.requests] == ["0", "x"]
    assert t.requests[1].hash_ids == (1, 2) and t.requests[1].hash_block_tokens == 512
    assert t.requests[1].priority == 2 and t.requests[1].line == 3
    assert not t.skipped and not t.was_unsorted


@pytest.mark.parametrize(
    "line,field,reason",
    [
        ('{"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 5}', "prompt_tokens", ">= 1"),
        ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2.5}', "output_tokens", "integer"),
        ('{"arrival_s": -1, "prompt_tokens": 3, "output_tokens": 2}', "arrival_s", ">= 0"),
        ('{"arrival_s": "soon", "prompt_tokens": 3, "output_tokens": 2}', "arrival_s", "finite number"),
        ('{"prompt_tokens": 3, "output_tokens": 2}', "arrival_s", "missing"),
        ('{"arrival_s": 0, "output_tokens": 2}', "prompt_tokens", "missing"),
        ('{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 2}', "prompt_tokens", "integer"),
        ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2, "hash_ids": [1]}', "hash_block_tokens", "missing"),
        (
            '{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2, "hash_ids": [1, 2], "hash_block_tokens": 4}',
            "hash_ids",
            "only 1 blocks",
        ),
        (
            '{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2, "hash_ids": ["a"], "hash_block_tokens": 4}',
            "hash_ids",
            "integers",
        ),
        ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2, "id": [1]}', "id", "string or integer"),
    ],
)
def test_bad_field_names_file_line_field(tmp_path, line, field, reason):
    p = write_lines(tmp_path, [GOOD, line])
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert e.value.line == 2 and e.value.field == field and reason in e.value.reason
    assert str(p) in str(e.value) and f":2: field '{field}'" in str(e.value)


def test_bad_json_and_non_object(tmp_path):
    with pytest.raises(TraceError, match=r":1: not valid JSON"):
        load_trace(write_lines(tmp_path, ["{nope"]))
    with pytest.raises(TraceError, match="expected a JSON object"):
        load_trace(write_lines(tmp_path, ["[1, 2]"]))
    with pytest.raises(TraceError, match="cannot open"):
        load_trace(tmp_path / "missing.jsonl")
    with pytest.raises(TraceError, match="no requests"):
        load_trace(write_lines(tmp_path, [""]))


def test_duplicate_id(tmp_path):
    p = write_lines(
        tmp_path,
        [
            '{"id": 1, "arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2}',
            '{"id": "1", "arrival_s": 1, "prompt_tokens": 3, "output_tokens": 2}',
        ],
    )
    with pytest.raises(TraceError, match="duplicate id '1' .first on line 1"):
        load_trace(p)


def test_skip_invalid_counts_and_reasons(tmp_path):
    p = write_lines(tmp_path, [GOOD, "{bad", '{"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 1}', GOOD])
    t = load_trace(p, skip_invalid=True)
    assert len(t.requests) == 2
    assert [ln for ln, _ in t.skipped] == [2, 3]
    notes = "\n".join(t.notes())
    assert "skipped 2 invalid line(s)" in notes and "prompt_tokens" in notes


def test_unsorted_is_sorted_and_said(tmp_path):
    p = write_lines(tmp_path, ['{"arrival_s": 5, "prompt_tokens": 3, "output_tokens": 2}', GOOD])
    t = load_trace(p)
    assert [r.arrival_s for r in t.requests] == [0.5, 5.0]
    assert t.was_unsorted and any("sorted" in n for n in t.notes())


def test_generate_is_seeded_and_roundtrips(tmp_path):
    a = generate(200, ArrivalSpec("gamma", 4.0, 3.0), LengthSpec(max_total=512), seed=3)
    b = generate(200, ArrivalSpec("gamma", 4.0, 3.0), LengthSpec(max_total=512), seed=3)
    c = generate(200, ArrivalSpec("gamma", 4.0, 3.0), LengthSpec(max_total=512), seed=4)
    assert a == b and a != c
    assert all(r.total_tokens <= 512 and r.prompt_tokens >= 1 and r.output_tokens >= 1 for r in a)
    write_trace(a, tmp_path / "g.jsonl")
    back = load_trace(tmp_path / "g.jsonl").requests
    assert [(r.id, r.prompt_tokens, r.output_tokens) for r in back] == [
        (r.id, r.prompt_tokens, r.output_tokens) for r in a
    ]
    assert all(abs(x.arrival_s - y.arrival_s) < 1e-6 for x, y in zip(back, a))


def test_generate_rate_and_burstiness():
    import numpy as np

    pois = generate(4000, ArrivalSpec("poisson", 10.0), LengthSpec(), seed=1)
    gaps = np.diff([r.arrival_s for r in pois])
    assert abs(gaps.mean() - 0.1) < 0.01 and abs(gaps.std() / gaps.mean() - 1) < 0.1
    bursty = generate(4000, ArrivalSpec("gamma", 10.0, 4.0), LengthSpec(), seed=1)
    g2 = np.diff([r.arrival_s for r in bursty])
    assert g2.std() / g2.mean() > 2.5


def test_empirical_lengths_csv(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens\n100,7\n200,9\n0,5\n")
    reqs = generate(50, ArrivalSpec(), LengthSpec(lengths_csv=str(p)), seed=0)
    assert {(r.prompt_tokens, r.output_tokens) for r in reqs} <= {(100, 7), (200, 9)}
    bad = tmp_path / "b.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="no length columns"):
        generate(5, ArrivalSpec(), LengthSpec(lengths_csv=str(bad)))


def test_stats():
    reqs = generate(100, ArrivalSpec("poisson", 2.0), LengthSpec(), seed=0)
    st = trace_stats(reqs)
    assert st["requests"] == 100 and st["prompt_p50"] <= st["prompt_p99"] <= st["prompt_max"]
    assert 1.0 < st["rate_req_s"] < 4.0


def test_schema_matches_loader():
    import importlib.resources

    schema = json.loads(importlib.resources.files("kvsim.trace").joinpath("schema.json").read_text())
    assert set(schema["required"]) == {"arrival_s", "prompt_tokens", "output_tokens"}
    assert {"id", "priority", "hash_ids", "hash_block_tokens", "n"} <= set(schema["properties"])
