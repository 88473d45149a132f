"""`kvsim trace convert` streams timestamped CSV traces (Azure 2023/2024, BurstGPT, Vidur): the same file as
the in-memory importer, byte for byte, with memory that does not grow with the trace."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from kvsim.errors import TraceError
from kvsim.trace import write_trace
from kvsim.trace.importers import convert, stream_convert

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = {
    "azure": ROOT / "traces/azure_conv_excerpt.csv",
    "burstgpt": ROOT / "traces/formats/burstgpt_sample.csv",
    "vidur": ROOT / "traces/formats/vidur_sample.csv",
}


@pytest.mark.parametrize("fmt", list(SAMPLES))
@pytest.mark.parametrize("limit", [None, 7])
def test_streamed_file_is_the_in_memory_one(tmp_path, fmt, limit):
    held = convert(fmt, str(SAMPLES[fmt]), limit)
    write_trace(held.requests, tmp_path / "held.jsonl")
    streamed = stream_convert(fmt, str(SAMPLES[fmt]), str(tmp_path / "streamed.jsonl"), limit)
    assert (tmp_path / "held.jsonl").read_bytes() == (tmp_path / "streamed.jsonl").read_bytes()
    assert streamed.count == len(held.requests) and streamed.rows == held.rows and streamed.skipped == held.skipped
    assert streamed.report("x") == held.report("x")


def test_out_of_order_rows_are_rebased_on_the_earliest(tmp_path):
    src = tmp_path / "b.csv"
    src.write_text("Timestamp,Request tokens,Response tokens\n10.5,100,5\n3.0,50,2\n7,20,1\n")
    out = tmp_path / "o.jsonl"
    stream_convert("burstgpt", str(src), str(out))
    assert [line.split(",")[1] for line in out.read_text().splitlines()] == [
        '"arrival_s":7.5',
        '"arrival_s":0.0',
        '"arrival_s":4.0',
    ]


def test_nothing_usable_leaves_an_existing_output_alone(tmp_path):
    src = tmp_path / "b.csv"
    src.write_text("Timestamp,Request tokens,Response tokens\n1,100,0\n2,50,0\n")
    out = tmp_path / "o.jsonl"
    out.write_text("mine\n")
    with pytest.raises(TraceError, match=r"no usable requests to write \(2 rows; skipped 2: failed request"):
        stream_convert("burstgpt", str(src), str(out))
    assert out.read_text() == "mine\n"


def test_memory_stays_flat_however_long_the_trace(tmp_path):
    src = tmp_path / "long.csv"
    with open(src, "w") as fh:
        fh.write("Timestamp,Request tokens,Response tokens\n")
        for i in range(50_000):
            fh.write(f"{i * 0.01:.2f},{100 + i % 900},{1 + i % 300}\n")
    tracemalloc.start()
    try:
        conv = stream_convert("burstgpt", str(src), str(tmp_path / "o.jsonl"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert conv.count == 50_000
    assert peak < 2 << 20  # 50,000 requests held would take over 15 MB
