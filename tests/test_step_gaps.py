"""Inter-token latency: each step counted once per sequence it gave a token, percentiles by hand; where long
prompts are prefilled among decodes, the median gap is the plain decode step, below the median TPOT."""

import math

import pandas as pd
import pytest

from kvsim.cli import main
from kvsim.engine.step_gaps import StepGaps


def test_percentiles_weight_each_step_by_the_tokens_it_gave():
    g = StepGaps()
    g.add(0.0, 0.010, 3)  # three gaps of 10 ms
    g.add(0.01, 0.050, 1)  # one of 50 ms (a step that also prefilled)
    g.add(0.06, 0.5, 0)  # a prefill alone: no gap
    g.add_run(0.06, [0.020, 0.020], 2)  # two decode steps of two sequences: four gaps of 20 ms
    # eight gaps: 10, 10, 10, 20, 20, 20, 20, 50 ms
    assert g.percentiles((50, 90, 99)) == {50: 0.020, 90: 0.050, 99: 0.050}
    assert g.percentiles((10,)) == {10: 0.010}
    # after a warm-up that ended at 0.01 s: one gap of 50 ms and four of 20
    assert g.percentiles((50, 90), since_s=0.01) == {50: 0.020, 90: 0.050}
    assert all(math.isnan(v) for v in StepGaps().percentiles((50, 99)).values())


def _run(tmp_path, name, args):
    out = tmp_path / name
    base = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--no-plots", "--out", str(out)]
    assert main([*base, *args]) == 0
    return pd.read_csv(out / "runs.csv").iloc[0]


def test_one_stream_alone_its_gaps_are_its_tpot(tmp_path):
    r = _run(
        tmp_path,
        "one",
        [
            "--dataset-name",
            "random",
            "--num-prompts",
            "1",
            "--random-input-len",
            "100",
            "--random-output-len",
            "200",
            "--ignore-eos",
        ],
    )
    assert r.itl_p50_s == pytest.approx(r.tpot_p50_s, rel=0.02)


def test_long_prompts_among_decodes_stall_tpot_more_than_the_median_gap(tmp_path):
    """16 clients of 8,192-token prompts and 512 outputs: every few steps computes a prompt chunk, which the
    TPOT of every running stream averages in; most gaps are plain decode steps."""
    r = _run(
        tmp_path,
        "long",
        [
            "--bench",
            "vllm-random",
            "--dataset-name",
            "random",
            "--num-prompts",
            "64",
            "--random-input-len",
            "8192",
            "--random-output-len",
            "512",
            "--ignore-eos",
            "--max-concurrency",
            "16",
        ],
    )
    assert r.itl_p50_s < 0.8 * r.tpot_p50_s
    assert r.itl_p99_s > r.tpot_p50_s  # the stalls are the tail
