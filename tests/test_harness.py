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
    main(["trace", "generate", "-o", str(trace), "-n", "60", "--rate", "20", "--seed", "1",
          "--prompt-mean", "120", "--output-mean", "40", "--max-total", "512"])
    path = d / "rec.jsonl.gz"
    assert main(["run", "--trace", str(trace), "--allocator", "paged:16", "--model", TINY, "--kv-pool-gb", "0.0005",
                 "--max-seq-len", "512", "--record-batches", str(path), "--no-plots", "--out", str(d / "o")]) == 0
    return path


def test_record_format_is_complete(record):
    from kvsim.replay.record import read_record

    header, groups = read_record(str(record))
    assert header["format"] == "kvsim-batch-record" and header["block_size"] == 16
    assert header["model"] == {"name": "tiny", "layers": 4, "q_heads": 4, "kv_heads": 2, "head_dim": 32, "dtype": "fp16"}
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


def test_bench_cpu_pipeline(tmp_path):
    out = tmp_path / "bench.csv"
    assert main(["kernels", "bench", "--device", "cpu", "--batch", "1,2", "--context", "20,40", "--block-size", "8,16",
                 "--q-heads", "4", "--kv-heads", "2", "--head-dim", "32", "--dtype", "fp32", "-o", str(out)]) == 0
    df = pd.read_csv(out)
    assert len(df) == 8
    # bytes read = batch x context x kv_heads x head_dim x 2 (K and V) x 4 bytes
    r = df[(df.num_seqs == 2) & (df.max_context == 40)].iloc[0]
    assert r.kv_bytes == 2 * 40 * 2 * 32 * 2 * 4
    assert math.isclose(r.achieved_bw, r.kv_bytes / r.time_s) and r.ratio_vs_sdpa > 0


def test_calibrate_recovers_a_known_model(tmp_path):
    rows = []
    for n in (1, 4, 16, 64):
        for ctx in (256, 1024, 4096):
            nbytes = n * ctx * 8 * 128 * 2 * 2
            rows.append({"kind": "decode", "num_seqs": n, "kv_bytes": nbytes, "time_s": 5e-6 + 2e-7 * n + nbytes / 4e12,
                         "device": "cuda", "impl": "synthetic"})
    p = tmp_path / "m.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    out = tmp_path / "c.json"
    assert main(["calibrate", str(p), "-o", str(out)]) == 0
    c = json.loads(out.read_text())
    assert c["coef"]["c0"] == pytest.approx(5e-6, rel=1e-6)
    assert c["coef"]["c_seq"] == pytest.approx(2e-7, rel=1e-6)
    assert c["coef"]["c_byte"] == pytest.approx(1 / 4e12, rel=1e-6)
    assert c["fit"]["holdout_points"] == 3 and c["fit"]["holdout_mape"] < 1e-9


def test_calibrated_model_decode_runs_and_cli(tmp_path):
    from kvsim.calibration import load_calibrated_model
    from kvsim.config import RooflineParams
    from kvsim.engine.latency import StepShape
    from kvsim.hardware import get_gpu, get_model

    m = load_calibrated_model("kernels/calibrations/cpu-reference.json", get_model("llama-2-7b"), get_gpu("a100-40gb"),
                              RooflineParams(), 1)
    n, s0, k = 12, 12 * 300, 37
    step = sum(m.step_time(StepShape(n, n, s0 + n * i, s0 + n * i)) for i in range(k))
    assert math.isclose(m.decode_run_time(n, s0, k), step, rel_tol=1e-12)
    trace = tmp_path / "t.jsonl"
    main(["trace", "generate", "-o", str(trace), "-n", "30", "--rate", "2"])
    assert main(["compare", "--trace", str(trace), "--allocators", "paged:16", "--latency",
                 "kernels/calibrations/cpu-reference.json", "--no-plots", "--out", str(tmp_path / "o")]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["compare", "--trace", str(trace), "--latency", str(bad), "--out", str(tmp_path / "o")]) == 2


def test_record_needs_block_tables(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    main(["trace", "generate", "-o", str(trace), "-n", "5"])
    assert main(["run", "--trace", str(trace), "--allocator", "max", "--record-batches", str(tmp_path / "r.gz"),
                 "--no-plots", "--out", str(tmp_path / "o")]) == 2
    assert "needs a paged allocator" in capsys.readouterr().err
