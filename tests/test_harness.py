"""Batch recording, kernel replay, the bench sweep and calibration (CPU pipeline)."""

import json
import math

import pandas as pd
import pytest

from kvsim.cli import main

TINY = "custom:name=tiny,layers=4,kv_heads=2,q_heads=4,head_dim=32,params=1e8"


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    trace = d / "t.jsonl"
    main(
        [
            "trace",
            "generate",
            "-o",
            str(trace),
            "-n",
            "60",
            "--rate",
            "20",
            "--seed",
            "1",
            "--prompt-mean",
            "120",
            "--output-mean",
            "40",
            "--max-total",
            "512",
        ]
    )
    path = d / "rec.jsonl.gz"
    assert (
        main(
            [
                "run",
                "--trace",
                str(trace),
                "--allocator",
                "paged:16",
                "--model",
                TINY,
                "--kv-pool-gb",
                "0.0005",
                "--max-seq-len",
                "512",
                "--record-batches",
                str(path),
                "--no-plots",
                "--out",
                str(d / "o"),
            ]
        )
        == 0
    )
    return path


def test_record_format_is_complete(record):
    from kvsim.replay.record import read_record

    header, groups = read_record(str(record))
    assert header["format"] == "kvsim-batch-record" and header["block_size"] == 16
    assert header["model"] == {
        "name": "tiny",
        "layers": 4,
        "q_heads": 4,
        "kv_heads": 2,
        "head_dim": 32,
        "dtype": "fp16",
    }
    n = 0
    runs = 0
    for g in groups:
        n += 1
        runs += g["steps"] > 1
        for sid, ctx, new in g["seqs"]:
            last_ctx = ctx + (g["steps"] - 1)
            table = g["tables"][str(sid)]
            assert len(table) >= -(-last_ctx // 16)  # the table covers every token of the group
            assert all(0 <= b < header["num_blocks"] for b in table)
            assert 1 <= new <= ctx
    assert n > 10 and runs > 0  # decode runs are recorded as one group each


def test_replay_on_cpu_matches_reference(record, tmp_path):
    out = tmp_path / "replay.csv"
    assert main(["kernels", "replay", str(record), "--sample", "5", "-o", str(out)]) == 0
    df = pd.read_csv(out)
    from kvsim.replay.measure import MEASUREMENT_COLUMNS

    assert set(MEASUREMENT_COLUMNS) <= set(df.columns)
    assert len(df) == 5 and df.ok.all() and (df.time_s > 0).all()
    assert set(df.kind) <= {"decode", "mixed"}
    assert df.impl.str.contains("pipeline check").all()  # CPU timings are labelled, never passed off as GPU numbers


def test_bench_cpu_pipeline(tmp_path, capsys):
    out = tmp_path / "bench.csv"
    assert (
        main(
            [
                "kernels",
                "bench",
                "--device",
                "cpu",
                "--batch",
                "1,2",
                "--context",
                "20,40",
                "--block-size",
                "8,16",
                "--q-heads",
                "4",
                "--kv-heads",
                "2",
                "--head-dim",
                "32",
                "--dtype",
                "fp32",
                "--prefill",
                "16:0,8:24",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "nan" not in printed.lower() and "no peak bandwidth to compare with" in printed  # a CPU has no preset
    df = pd.read_csv(out)
    assert len(df) == 8 + 4 and (df.kind == "prefill").sum() == 4
    p = df[(df.kind == "prefill") & (df.new_tokens == 8) & (df.block_size == 8)].iloc[0]
    assert p.total_context == 32 and p.kv_bytes == 32 * 2 * 32 * 2 * 4
    # bytes read = batch x context x kv_heads x head_dim x 2 (K and V) x 4 bytes
    r = df[(df.kind == "decode") & (df.num_seqs == 2) & (df.max_context == 40)].iloc[0]
    assert r.kv_bytes == 2 * 40 * 2 * 32 * 2 * 4
    assert math.isclose(r.achieved_bw, r.kv_bytes / r.time_s) and r.ratio_vs_sdpa > 0


def test_calibrate_recovers_a_known_decode_attention_model(tmp_path):
    """Kernel timings made from known constants (floor 9 us, ramp 3 us, 0.7 of the H100's bandwidth, 20 ns
    per sequence) come back out of `kvsim calibrate`."""
    rows = []
    for n in (1, 4, 16, 64, 128):
        for ctx in (256, 1024, 4096, 16384):
            nbytes = n * ctx * 8 * 128 * 2 * 2
            t = max(9e-6, 3e-6 + 2e-8 * n + nbytes / (3.35e12 * 0.7))
            rows.append(
                {
                    "kind": "decode",
                    "num_seqs": n,
                    "kv_bytes": nbytes,
                    "time_s": t,
                    "device": "cuda",
                    "impl": "synthetic",
                }
            )
    p = tmp_path / "m.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    out = tmp_path / "c.json"
    assert main(["calibrate", str(p), "--gpu", "h100-80gb", "-o", str(out)]) == 0
    c = json.loads(out.read_text())
    d = c["decode_attention"]
    assert d["floor_s"] == pytest.approx(9e-6, rel=1e-3) and d["ramp_s"] == pytest.approx(3e-6, rel=1e-2)
    assert d["bw_eff"] == pytest.approx(0.7, rel=1e-3) and d["per_seq_s"] == pytest.approx(2e-8, rel=0.05)
    assert c["measured_on"] == "gpu" and c["gpu"] == "h100-80gb" and "kernels bench" in c["sources"]["decode_attention"]


def test_a_cpu_interpreter_calibration_runs_with_a_clear_warning(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    main(["trace", "generate", "-o", str(trace), "-n", "30", "--rate", "2"])
    assert (
        main(
            [
                "compare",
                "--trace",
                str(trace),
                "--allocators",
                "paged:16",
                "--latency",
                "kernels/calibrations/cpu-reference.json",
                "--no-plots",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "cpu-interpreter" in err and "not GPU times" in err and "calibrated on h200-141gb" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["compare", "--trace", str(trace), "--latency", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "not a usable latency calibration" in capsys.readouterr().err


def test_record_needs_block_tables(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    main(["trace", "generate", "-o", str(trace), "-n", "5"])
    assert (
        main(
            [
                "run",
                "--trace",
                str(trace),
                "--allocator",
                "max",
                "--record-batches",
                str(tmp_path / "r.gz"),
                "--no-plots",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "needs a paged allocator" in capsys.readouterr().err


def test_fuzzed_records_are_read_or_named(record, tmp_path):
    """Hostile batch records (a field dropped or replaced, bad lines, tables too short for their contexts):
    reading them gives the groups or one ConfigError naming the line, never another exception."""
    import gzip
    import random

    from hypothesis import HealthCheck, example, given, settings, strategies as st

    from kvsim.errors import ConfigError
    from kvsim.replay.record import read_record

    with gzip.open(record, "rt") as f:
        lines = [json.loads(x) for x in f]
    values = [0, -1, 1, 1e300, 2**70, "x", None, [], {}, [[1, 2]], [1, 2, 3], True, {"0": [10**9]}]
    path = tmp_path / "r.jsonl.gz"

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.integers(0, 10**6), st.integers(1, 4))
    @example(0, 1)
    def check(seed, edits):
        rng = random.Random(seed)
        docs = json.loads(json.dumps(lines[:8]))
        for _ in range(edits):
            i = rng.randrange(len(docs))
            d = docs[i]
            if i == 0 and rng.random() < 0.5:
                d = d["model"]
            key = rng.choice(sorted(d))
            if rng.random() < 0.2:
                del d[key]
            else:
                d[key] = rng.choice(values)
        text = "\n".join(json.dumps(d) for d in docs) + ("\n{not json" if rng.random() < 0.1 else "")
        with gzip.open(path, "wt") as f:
            f.write(text + "\n")
        try:
            header, groups = read_record(str(path))
            B = header["block_size"]
            for g in groups:
                for sid, ctx, _ in g["seqs"]:  # what was read is what replay may rely on
                    assert len(g["tables"][str(sid)]) * B >= ctx + g["steps"] - 1
        except ConfigError as e:
            assert str(path) in str(e)

    check()


def test_a_tiny_record_cannot_ask_for_a_huge_pool(record, tmp_path, capsys):
    """A small record naming 4,096 KV heads of 4,096 dimensions: one error line, no allocation in proportion."""
    import gzip

    with gzip.open(record, "rt") as f:
        header, first = json.loads(f.readline()), f.readline()
    header["model"].update(q_heads=4096, kv_heads=4096, head_dim=4096)
    path = tmp_path / "huge.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(header) + "\n" + first)
    rc = main(["kernels", "replay", str(path), "--device", "cpu", "-o", str(tmp_path / "o.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
