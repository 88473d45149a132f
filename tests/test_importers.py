import json
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings, strategies as st

import pytest

from kvsim.cli import main
from kvsim.errors import TraceError
from kvsim.trace import load_trace
from kvsim.trace.generate import ArrivalSpec, LengthSpec
from kvsim.trace.importers import convert
from kvsim.trace.scenarios import ScenarioSpec, generate_scenario


def test_mooncake_excerpt():
    c = convert("mooncake", "traces/mooncake_excerpt_raw.jsonl")
    first = json.loads(open("traces/mooncake_excerpt_raw.jsonl").readline())
    r = c.requests[0]
    assert c.rows == len(c.requests) == 393 and not c.skipped
    assert (r.prompt_tokens, r.output_tokens, list(r.hash_ids)) == (
        first["input_length"],
        first["output_length"],
        first["hash_ids"],
    )
    assert r.hash_block_tokens == 512 and r.arrival_s == 0.0
    assert all(len(q.hash_ids) == -(-q.prompt_tokens // 512) for q in c.requests)


def test_ideal_prefix_reuse_of_the_mooncake_excerpt(capsys):
    from kvsim.trace.stats import trace_stats

    st = trace_stats(load_trace("traces/mooncake_excerpt.jsonl").requests)
    assert st["ideal_prefix_reuse"] == pytest.approx(0.691, abs=0.001)
    assert main(["trace", "stats", "traces/mooncake_excerpt.jsonl"]) == 0
    assert "ideal prefix reuse (infinite cache): 69.1%" in capsys.readouterr().out


def test_azure_excerpt_times_are_relative_and_precise():
    c = convert("azure", "traces/azure_conv_excerpt.csv")
    assert len(c.requests) == 300
    # rows 1 and 2: 18:15:46.6805900 and 18:15:50.9951690
    assert c.requests[1].arrival_s == pytest.approx(4.314579, abs=1e-9)
    assert (c.requests[0].prompt_tokens, c.requests[0].output_tokens) == (374, 44)


def test_burstgpt_failed_rows_are_dropped_and_counted():
    c = convert("burstgpt", "tests/data/burstgpt_sample.csv")
    assert c.rows == 5 and len(c.requests) == 3
    assert c.skipped["failed request (0 response tokens)"] == 2
    assert [r.arrival_s for r in c.requests] == [0.0, 113.0, 125.0]
    assert "skipped 2: failed request" in "\n".join(c.report("x"))


def test_vidur_and_lengths_csv():
    c = convert("vidur", "tests/data/vidur_sample.csv")
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in c.requests] == [
        (0.0, 120, 37),
        (0.25, 980, 12),
        (1.75, 45, 301),
    ]
    c = convert("lengths-csv", "traces/sharegpt_lengths_excerpt.csv", arrivals=ArrivalSpec("poisson", 2.0), seed=1)
    assert len(c.requests) == 300 and c.requests[0].prompt_tokens == 74
    assert c.requests[-1].arrival_s > 50  # ~150 s at 2 req/s
    again = convert("lengths-csv", "traces/sharegpt_lengths_excerpt.csv", arrivals=ArrivalSpec("poisson", 2.0), seed=1)
    assert again.requests == c.requests


def test_bad_rows_name_file_line_field(tmp_path):
    p = tmp_path / "v.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1,ten,5\n")
    with pytest.raises(TraceError, match=r"v.csv:3: field 'num_prefill_tokens': not a number"):
        convert("vidur", str(p))
    p.write_text("arrived_at,num_decode_tokens\n0,5\n")
    with pytest.raises(TraceError, match="num_prefill_tokens.*column missing"):
        convert("vidur", str(p))
    m = tmp_path / "m.jsonl"
    m.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n{"timestamp": 5}\n')
    with pytest.raises(TraceError, match=r"m.jsonl:2: field 'input_length'"):
        convert("mooncake", str(m))


def test_convert_cli_roundtrip(tmp_path, capsys):
    out = tmp_path / "b.jsonl"
    assert main(["trace", "convert", "--from", "burstgpt", "tests/data/burstgpt_sample.csv", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "5 rows -> 3 requests" in text and "skipped 2" in text
    assert len(load_trace(out).requests) == 3


@pytest.mark.parametrize("name", ["system-prompt", "few-shot", "multi-turn", "doc-summary"])
def test_scenarios_carry_consistent_hash_ids(name):
    spec = ScenarioSpec(name, shared_tokens=256, num_prefixes=3, hash_block_tokens=16)
    reqs = generate_scenario(
        spec, 200, ArrivalSpec("poisson", 5.0), LengthSpec(prompt_mean=200, output_mean=50), seed=3
    )
    assert len(reqs) == 200 and all(r.hash_ids and r.hash_block_tokens == 16 for r in reqs)
    assert all(len(r.hash_ids) == -(-r.prompt_tokens // 16) for r in reqs)
    assert [r.arrival_s for r in reqs] == sorted(r.arrival_s for r in reqs)
    firsts = {r.hash_ids[:16] for r in reqs if r.prompt_tokens >= 256}
    if name in ("system-prompt", "doc-summary"):
        assert len(firsts) == 1  # everyone shares the 256-token prefix
    elif name == "few-shot":
        assert len(firsts) == 3
    else:  # multi-turn: some prompt extends an earlier one's identified blocks
        ids = [r.hash_ids for r in reqs]
        assert any(len(b) > 1 and b[: len(a) - 1] == a[:-1] and len(a) > 1 for a in ids for b in ids if a is not b)
    again = generate_scenario(
        spec, 200, ArrivalSpec("poisson", 5.0), LengthSpec(prompt_mean=200, output_mean=50), seed=3
    )
    assert again == reqs


def test_scenario_sharing_shows_up_as_hits(tmp_path):
    from kvsim.options import config_from_args
    from kvsim.runner import simulate

    reqs = generate_scenario(
        ScenarioSpec("system-prompt", shared_tokens=1024),
        150,
        ArrivalSpec("poisson", 4.0),
        LengthSpec(prompt_mean=200, output_mean=100),
        seed=0,
    )
    cfg = config_from_args([])
    s = simulate(reqs, cfg, "paged:16+prefix").summary
    assert s["prefix_hit_rate_tokens"] > 0.7  # 1024 shared of ~1224 prompt tokens
    assert simulate(reqs, cfg, "paged:16").summary["prefix_hit_rate_tokens"] == 0


def test_every_format_starts_at_zero_and_shipped_format_samples_convert():
    vd = convert("vidur", "traces/formats/vidur_sample.csv")  # first arrival at 0.5 s in the file
    assert [r.arrival_s for r in vd.requests] == pytest.approx([0.0, 0.24, 0.81, 1.12, 1.9])
    bg = convert("burstgpt", "traces/formats/burstgpt_sample.csv")
    assert len(bg.requests) == 5 and bg.skipped["failed request (0 response tokens)"] == 1
    assert bg.requests[0].arrival_s == 0.0


@settings(max_examples=80, deadline=None)
@given(
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2037, 12, 31)),
    st.integers(0, 10**7 - 1),
    st.integers(0, 3 * 86400),
    st.integers(0, 10**7 - 1),
    st.sampled_from(["", "Z", "+00:00", "+02:00", "-0530"]),
)
def test_azure_times_are_utc_whatever_the_machine_time_zone(t, f1, gap, f2, zone):
    """The same CSV gives the same gaps on every machine: naive times are UTC (a DST change in the
    machine's zone changes nothing), fractions are kept, offsets are honoured."""
    import os
    import time

    from kvsim.trace.importers import _parse_azure_time

    t = t.replace(microsecond=0)
    u = t + timedelta(seconds=gap)
    old = os.environ.get("TZ")
    try:
        for tz in ("America/New_York", "Europe/Berlin", "UTC"):
            os.environ["TZ"] = tz
            time.tzset()
            a = _parse_azure_time(f"{t:%Y-%m-%d %H:%M:%S}.{f1:07d}{zone}", "x.csv", 2)
            b = _parse_azure_time(f"{u:%Y-%m-%d %H:%M:%S}.{f2:07d}{zone}", "x.csv", 3)
            assert (b[0] - a[0]) + (b[1] - a[1]) == pytest.approx(gap + (f2 - f1) / 1e7, abs=1e-9)
            assert a[1] == pytest.approx(f1 / 1e7)
            if zone in ("", "Z", "+00:00"):
                assert a[0] == int(t.replace(tzinfo=timezone.utc).timestamp())
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_azure_time_offsets_and_a_dst_night():
    from kvsim.trace.importers import _parse_azure_time

    assert (
        _parse_azure_time("2023-11-16 18:15:46+02:00", "x", 1)[0] == _parse_azure_time("2023-11-16 16:15:46", "x", 1)[0]
    )
    # 01:30 to 03:30 on the night New York springs forward is still two hours in the trace's clock (UTC)
    a, b = _parse_azure_time("2023-03-12 01:30:00", "x", 1), _parse_azure_time("2023-03-12 03:30:00", "x", 2)
    assert b[0] - a[0] == 7200
    with pytest.raises(Exception, match="not a date-time"):
        _parse_azure_time("yesterday", "x", 1)


def test_ideal_prefix_reuse_counts_chained_prefixes_only():
    from kvsim.trace.request import Request
    from kvsim.trace.stats import ideal_prefix_reuse

    a = Request("a", 0.0, 64, 1, hash_ids=(1, 2, 3, 4), hash_block_tokens=16)
    # ids that an earlier prompt holds, but not as its prefix: an unbounded cache serves nothing
    shifted = Request("b", 1.0, 48, 1, hash_ids=(2, 3, 4), hash_block_tokens=16)
    assert ideal_prefix_reuse([a, shifted]) == 0.0
    # the first two ids in place: 32 of the 64 + 48 prompt tokens
    prefix = Request("c", 1.0, 48, 1, hash_ids=(1, 2, 9), hash_block_tokens=16)
    assert ideal_prefix_reuse([a, prefix]) == pytest.approx(32 / 112)
    # the same ids at another granularity are other tokens
    other = Request("d", 1.0, 64, 1, hash_ids=(1, 2, 3, 4), hash_block_tokens=8)
    assert ideal_prefix_reuse([a, other]) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=6), min_size=1, max_size=12))
def test_ideal_prefix_reuse_is_what_an_unbounded_cache_serves(prompts):
    """Requests far apart in time on a pool that never evicts: the simulator's hits equal the ideal (blocks
    of the hash size; the last token of a prompt is always computed, so prompts end one token past their ids)."""
    from kvsim.allocators import make_allocator
    from kvsim.engine.simulator import Simulation
    from kvsim.trace.request import Request
    from kvsim.trace.stats import ideal_prefix_reuse
    from helpers import FixedLatency, sched

    reqs = [
        Request(str(i), 100.0 * i, 16 * len(ids) + 1, 1, hash_ids=tuple(ids) + (10**6 + i,), hash_block_tokens=16)
        for i, ids in enumerate(prompts)
    ]
    res = Simulation(reqs, make_allocator("paged:16+prefix", 10**6, 4096), FixedLatency(), sched()).run()
    total = sum(r.prompt_tokens for r in reqs)
    assert res.extra["hit_tokens"] / total == pytest.approx(ideal_prefix_reuse(reqs))


def test_trace_csvs_saved_with_a_byte_order_mark_convert(tmp_path):
    """A spreadsheet's BOM once hid the first column (TIMESTAMP missing from the header)."""
    bom = tmp_path / "azure.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + open("traces/azure_conv_excerpt.csv", "rb").read())
    assert [r.arrival_s for r in convert("azure", str(bom)).requests] == [
        r.arrival_s for r in convert("azure", "traces/azure_conv_excerpt.csv").requests
    ]
