"""Benchmark clients' workloads (kvsim/trace/bench_load.py): `vllm bench serve --dataset-name random`, InferenceMAX's
client and GenAI-Perf, as kvsim requests and send times; `kvsim run` / `compare` with only the client's flags, and
`kvsim trace generate --bench`. Golden values are worked out by hand from the harnesses' rules (docs/traces.md)."""

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from helpers import FixedLatency, sched
from kvsim.allocators import make_allocator
from kvsim.cli import main
from kvsim.engine.preemption import get_victim_policy
from kvsim.engine.simulator import Simulation
from kvsim.errors import ConfigError
from kvsim.metrics import requests_frame
from kvsim.options import normalize
from kvsim.trace import load_trace
from kvsim.trace.bench_load import BenchLoad, from_options


def lengths(load: BenchLoad):
    reqs = load.requests()
    return np.array([r.prompt_tokens for r in reqs]), np.array([r.output_tokens for r in reqs])


# --- lengths


def test_range_ratio_zero_gives_every_request_the_same_lengths():
    p, o = lengths(BenchLoad(num_prompts=50, input_len=1000, output_len=1000))
    assert (p == 1000).all() and (o == 1000).all()


def test_vllm_range_ratio_is_symmetric_around_the_length():
    """[floor(100 x 0.5), ceil(100 x 1.5)] = [50, 150] and [floor(7 x 0.5), ceil(7 x 1.5)] = [3, 11]; 3,000 draws
    reach both ends."""
    p, o = lengths(BenchLoad(num_prompts=3000, input_len=100, output_len=7, range_ratio=0.5))
    assert p.min() == 50 and p.max() == 150 and o.min() == 3 and o.max() == 11
    assert abs(p.mean() - 100) < 2
    assert BenchLoad(input_len=100, output_len=7, range_ratio=0.5).length_bounds() == ((50, 150), (3, 11))


def test_inferencemax_draws_lengths_below_the_length_only():
    """InferenceMAX's client (vLLM's older rule): [int(1024 x 0.8), 1024] = [819, 1024], for 10 x 8 prompts."""
    load = from_options(
        {"bench": "inferencemax", "max_concurrency": 8, "random_input_len": 1024, "random_output_len": 1024}
    )
    assert load.num_prompts == 80 and load.ignore_eos and load.range_ratio == 0.8
    assert load.length_bounds() == ((819, 1024), (819, 1024))
    p, o = lengths(load)
    assert p.min() >= 819 and p.max() <= 1024 and o.min() >= 819 and o.max() <= 1024


def test_outputs_are_never_shorter_than_one_token():
    """floor(1 x 0.25) = 0 is raised to 1, as vLLM does; prompts [floor(20 x 0.25), ceil(20 x 1.75)] = [5, 35]."""
    p, o = lengths(BenchLoad(num_prompts=400, input_len=20, output_len=1, range_ratio=0.75))
    assert o.min() == 1 and o.max() == 2 and p.min() == 5 and p.max() == 35


def test_genai_perf_lengths_are_normal_and_positive():
    p, o = lengths(
        BenchLoad("genai-perf", num_prompts=4000, input_len=550, output_len=5, input_stddev=50, output_stddev=10)
    )
    assert abs(p.mean() - 550) < 5 and abs(p.std() - 50) < 5
    assert o.min() >= 1  # N(5, 10) is often negative: drawn again
    assert (lengths(BenchLoad("genai-perf", num_prompts=3, input_len=550, output_len=9))[0] == 550).all()


# --- shared prefix


def test_a_shared_prefix_is_the_same_hash_ids_in_every_prompt():
    """40 prefix tokens in blocks of 16: two whole blocks (ids 0, 1) shared; the third block mixes prefix and own
    tokens, so it, like everything after it, is the request's own."""
    reqs = BenchLoad(num_prompts=5, input_len=100, output_len=3, prefix_len=40).requests()
    seen: set[int] = set()
    for r in reqs:
        assert r.prompt_tokens == 140 and r.hash_block_tokens == 16
        assert len(r.hash_ids) == math.ceil(140 / 16) and r.hash_ids[:2] == (0, 1)
        own = set(r.hash_ids[2:])
        assert not own & seen and not own & {0, 1}
        seen |= own
    assert all(r.hash_ids is None for r in BenchLoad(num_prompts=3).requests())  # nothing shared: no ids


def test_the_shared_prefix_hits_the_prefix_cache():
    from kvsim.trace.stats import ideal_prefix_reuse

    reqs = BenchLoad(num_prompts=10, input_len=64, output_len=2, prefix_len=64).requests()
    assert ideal_prefix_reuse(reqs) == pytest.approx(9 * 64 / (10 * 128))


# --- a dataset of prompts sent again (GenAI-Perf, AIPerf)


def test_genai_perf_sends_its_100_prompts_in_turn_with_the_same_ids_each_time():
    load = from_options(normalize({"bench": "genai-perf", "num_prompts": 250, "random_input_len": 40}))
    assert load.dataset_entries == 100 and load.sampling == "sequential"
    reqs = load.requests()
    assert len(reqs) == 250 and all(r.prompt_tokens == 40 for r in reqs)
    # request i sends prompt i mod 100: 40 tokens = 3 blocks of 16, numbered per prompt
    assert reqs[0].hash_ids == (0, 1, 2) and reqs[1].hash_ids == (3, 4, 5)
    assert reqs[100].hash_ids == reqs[0].hash_ids and reqs[201].hash_ids == reqs[1].hash_ids
    assert len({r.hash_ids for r in reqs}) == 100
    assert any("250 requests take 100 distinct prompts" in n for n in load.notes())


def test_aiperf_takes_as_many_prompts_as_requests_unless_told():
    own = from_options(normalize({"bench": "aiperf", "num_prompts": 320}))
    assert (own.num_prompts, own.dataset_entries) == (320, 320)
    assert from_options(normalize({"bench": "aiperf"})).dataset_entries == 100  # its default --request-count: 10
    shuffled = from_options(
        normalize(
            {"bench": "aiperf", "num_prompts": 30, "num_dataset_entries": 10, "dataset_sampling_strategy": "shuffle"}
        )
    ).requests()
    passes = [sorted(r.hash_ids for r in shuffled[k : k + 10]) for k in (0, 10, 20)]
    assert passes[0] == passes[1] == passes[2]  # every prompt once per pass
    assert [r.hash_ids for r in shuffled[:10]] != [r.hash_ids for r in shuffled[10:20]]  # in a fresh order
    drawn = BenchLoad(
        harness="aiperf", num_prompts=50, input_len=16, dataset_entries=10, sampling="random", seed=3
    ).requests()
    assert len({r.hash_ids for r in drawn}) < 10 or len({r.hash_ids for r in drawn}) == 10
    assert {r.hash_ids for r in drawn} <= {(j,) for j in range(10)}


def test_prompts_sent_again_hit_the_prefix_cache():
    from kvsim.trace.stats import ideal_prefix_reuse

    reqs = BenchLoad(harness="genai-perf", num_prompts=30, input_len=64, output_len=2, dataset_entries=10).requests()
    assert ideal_prefix_reuse(reqs) == pytest.approx(20 / 30)  # the second and third passes, whole


@pytest.mark.parametrize(
    "values,msg",
    [
        ({"num_dataset_entries": 10, "bench": "vllm-random"}, "a prompt of its own"),
        ({"bench": "aiperf", "random_range_ratio": 0.2}, "aiperf draws lengths from normal distributions"),
        ({"bench": "genai-perf", "dataset_sampling_strategy": "rand"}, "not one of sequential, shuffle, random"),
    ],
)
def test_bad_datasets_name_the_flag(values, msg):
    with pytest.raises(ConfigError, match=msg):
        from_options(values)


# --- a client's warm-up, drained before the measured requests


def test_the_clients_wait_for_the_warm_up_to_drain():
    """Two clients, three warm-up requests, then three measured ones, by hand: the warm-up's third goes when the
    first is done; the measured ones go together once the last warm-up is done, then one per completion."""
    from kvsim.engine.clock import ClientLimit

    c = ClientLimit([0.0] * 6, 2, barrier=3)
    assert c.times[:2] == [0.0, 0.0] and c.times[2:] == [math.inf] * 4
    c.freed(1, 1.0)  # warm-up 0 done: warm-up 2 goes
    assert c.times[2] == 1.0 and c.times[3] == math.inf
    c.freed(1, 2.0)  # warm-up 1 done: its client waits for warm-up 2
    assert c.times[3] == math.inf
    c.freed(1, 3.0)  # the warm-up drained: both clients send
    assert c.times[3:] == [3.0, 3.0, math.inf] and c.start_s == 3.0
    c.freed(1, 4.0)
    assert c.times[5] == 4.0


def test_warm_up_requests_come_first_and_share_the_dataset():
    """aiperf 0.9 on: a dataset of --request-count prompts in order; the warm-up takes the first ones, so the last
    measured requests send the warm-up's prompts again."""
    load = from_options(
        normalize({"bench": "aiperf", "num_prompts": 6, "max_concurrency": 2, "warmup_request_count": 2, "isl": 32})
    )
    reqs = load.requests()
    assert [r.id for r in reqs] == ["warmup-0", "warmup-1", "0", "1", "2", "3", "4", "5"]
    assert [r.warmup for r in reqs] == [True] * 2 + [False] * 6
    assert [r.line for r in reqs[2:]] == [1, 2, 3, 4, 5, 6]
    ids = [r.hash_ids for r in reqs]
    assert len(set(ids)) == 6 and ids[6:] == ids[:2]
    assert from_options(normalize({"bench": "inferencemax", "max_concurrency": 8})).warmup == 16
    assert from_options(normalize({"bench": "inferencemax", "max_concurrency": 8, "num_warmups": 0})).warmup == 0
    with pytest.raises(ConfigError, match="need a closed loop"):
        from_options(normalize({"bench": "aiperf", "warmup_request_count": 4}))


def test_a_run_leaves_the_warm_up_out_of_its_results(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["--max-concurrency", "4", "--random-input-len", "64", "--random-output-len", "8", "--num-prompts", "12"]
    args += ["--bench", "vllm-random"]
    assert main(["run", *args, "--warmup-request-count", "8", "--out", "w", *RUN]) == 0
    assert "8 warm-up requests first, drained before the 12 measured ones" in capsys.readouterr().err
    df = pd.read_csv(tmp_path / "w" / "requests.csv")
    assert list(df.id) == list(range(12)) and (df.status == "finished").all()
    drained = df.arrival_s.min()
    assert drained > 0 and (df.arrival_s.nsmallest(4) == drained).all()  # all four clients at the drain
    runs = pd.read_csv(tmp_path / "w" / "runs.csv")
    assert runs.duration_s.iloc[0] == pytest.approx(df.finish_s.max() - drained)
    assert runs.throughput_tok_s.iloc[0] == pytest.approx(12 * 8 / (df.finish_s.max() - drained))
    assert main(["cluster", "--replicas", "2", *args, "--warmup-request-count", "8", "--out", "c", *RUN[:-1]]) != 0
    assert "does not simulate a client's warm-up" in capsys.readouterr().err


# --- send times


def test_inf_rate_sends_everything_at_once():
    assert {r.arrival_s for r in BenchLoad(num_prompts=20, request_rate=math.inf).requests()} == {0.0}


def test_vllm_gaps_are_scaled_so_the_last_request_goes_at_n_over_rate():
    """vLLM's get_request: N gamma gaps (the first request waits one too), scaled so the sum is N / rate."""
    t = [r.arrival_s for r in BenchLoad(num_prompts=400, request_rate=8.0, burstiness=0.5).requests()]
    assert t[0] > 0 and t[-1] == pytest.approx(400 / 8.0) and (np.diff(t) >= 0).all()
    assert np.mean(np.diff([0.0, *t])) == pytest.approx(1 / 8.0)


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_older_clients_gamma_gaps_have_mean_one_over_rate(burstiness):
    """InferenceMAX's (older vLLM's) client: the first request at 0, then gamma gaps of shape b, scale 1/(rate b);
    the CV is 1/sqrt(b), so 20,000 gaps pin the mean to within 1.5% (>= 5 sigma)."""
    t = np.array(
        [
            r.arrival_s
            for r in BenchLoad("inferencemax", num_prompts=20001, request_rate=4.0, burstiness=burstiness).requests()
        ]
    )
    gaps = np.diff(t)
    assert t[0] == 0.0 and gaps.mean() == pytest.approx(0.25, rel=0.015)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_infinite_burstiness_and_genai_perf_rates_are_constant_gaps():
    t = [r.arrival_s for r in BenchLoad(num_prompts=5, request_rate=2.0, burstiness=math.inf).requests()]
    assert t == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.5])
    t = [r.arrival_s for r in BenchLoad("genai-perf", num_prompts=4, request_rate=4.0).requests()]
    assert t == pytest.approx([0.0, 0.25, 0.5, 0.75])


# --- determinism and counts


def test_the_same_seed_gives_the_same_requests_bit_for_bit():
    a = BenchLoad(num_prompts=300, range_ratio=0.3, prefix_len=20, request_rate=3.0, burstiness=0.7, seed=11)
    assert a.requests() == BenchLoad(**a.__dict__).requests()
    assert a.requests() != BenchLoad(**{**a.__dict__, "seed": 12}).requests()


def test_defaults_are_vllms():
    """`vllm bench serve --dataset-name random` with nothing else: 1000 prompts of 1024 tokens, 128 out, at once."""
    load = from_options({"dataset_name": "random"})
    assert (
        load.harness,
        load.num_prompts,
        load.input_len,
        load.output_len,
        load.range_ratio,
        load.prefix_len,
        load.request_rate,
        load.seed,
        load.ignore_eos,
    ) == ("vllm-random", 1000, 1024, 128, 0.0, 0, math.inf, 0, False)
    assert from_options({"max_concurrency": 4}) is None  # no dataset flag: the run reads a trace
    assert from_options(normalize({"bench": "genai-perf"})).num_prompts == 100


@pytest.mark.parametrize(
    "values,msg",
    [
        ({"random_range_ratio": 1.0}, "--random-range-ratio: must be < 1"),
        ({"bench": "inferencemax"}, "needs --max-concurrency"),
        ({"bench": "genai-perf", "random_range_ratio": 0.2}, "normal distributions"),
        ({"bench": "vllm-random", "synthetic_input_tokens_stddev": 3.0}, "GenAI-Perf's"),
        ({"random_input_len": 1, "random_range_ratio": 0.5, "random_range_ratio_mode": "lower-bound"}, "0 tokens"),
    ],
)
def test_bad_workloads_name_the_flag(values, msg):
    with pytest.raises(ConfigError, match=msg):
        from_options(values)


# --- the client limit


def test_inf_rate_and_max_concurrency_is_a_closed_loop_of_c_clients():
    """All 12 at t = 0 with 3 clients: 3 in flight from the start, never more, and each later request goes when
    one finishes."""
    reqs = BenchLoad(num_prompts=12, input_len=32, output_len=4, range_ratio=0.5).requests()
    sim = Simulation(
        reqs,
        make_allocator("paged:16", 4096, 4096),
        FixedLatency(0.1, 0.01),
        sched(),
        get_victim_policy("lifo"),
        max_concurrency=3,
    )
    df = requests_frame(sim.run())
    assert (df.status == "finished").all() and len(df) == 12
    events = sorted([(t, 1) for t in df.arrival_s] + [(t, -1) for t in df.finish_s])
    assert int(max(np.cumsum([d for _, d in events]))) == 3
    assert sorted(df.arrival_s)[:3] == [0.0, 0.0, 0.0]
    finishes = sorted(df.finish_s)
    assert sorted(df.arrival_s)[3:] == pytest.approx(finishes[:9])


# --- property


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["vllm-random", "inferencemax", "genai-perf", "aiperf"]),
    st.integers(1, 60),
    st.integers(1, 3000),
    st.integers(1, 500),
    st.floats(0, 0.99),
    st.integers(0, 300),
    st.sampled_from([math.inf, 0.5, 20.0]),
    st.sampled_from([0.25, 1.0, math.inf]),
    st.integers(0, 2**32),
)
def test_every_request_is_accounted_for_within_its_bounds(harness, n, ilen, olen, ratio, prefix, rate, burst, seed):
    genai = harness in ("genai-perf", "aiperf")
    try:
        load = BenchLoad(
            harness,
            n,
            ilen,
            olen,
            0.0 if genai else ratio,
            "lower-bound" if harness == "inferencemax" else "symmetric",
            prefix,
            30.0 if genai else 0.0,
            5.0 if genai else 0.0,
            rate,
            burst,
            None,
            seed,
            dataset_entries=max(1, n // 3) if genai else None,  # prompts sent again
            sampling=("sequential", "shuffle", "random")[seed % 3],
        )
    except ConfigError as e:  # a window whose shortest prompt has 0 tokens, refused as vLLM refuses it
        assert "0 tokens" in str(e) and prefix == 0
        return
    reqs = load.requests()
    again = genai and (max(1, n // 3) < n or load.sampling == "random")  # fewer prompts than requests, or drawn
    assert len(reqs) == n and [r.id for r in reqs] == [str(i) for i in range(n)]
    t = [r.arrival_s for r in reqs]
    assert all(math.isfinite(x) and x >= 0 for x in t) and t == sorted(t)
    bounds = load.length_bounds()
    for r in reqs:
        assert r.prompt_tokens >= max(1, prefix) and r.output_tokens >= 1
        if bounds:
            (pl, ph), (ol, oh) = bounds
            assert pl <= r.prompt_tokens <= ph and ol <= r.output_tokens <= oh
        if prefix or again:
            assert len(r.hash_ids) == -(-r.prompt_tokens // 16)
    if again:  # a prompt sent again is the same prompt
        assert len({(r.hash_ids, r.prompt_tokens) for r in reqs}) == len({r.hash_ids for r in reqs}) <= max(1, n // 3)
    if rate != math.inf and harness == "vllm-random":
        assert t[-1] == pytest.approx(n / rate)
    assert reqs == load.requests()


# --- command line

RUN = ["--latency", "roofline", "--model", "llama-3-8b", "--gpu", "h100", "--no-plots"]


def test_run_with_only_the_clients_flags(tmp_path, capsys, monkeypatch):
    """`kvsim run --max-concurrency C --random-input-len I --random-output-len O` means a closed-loop benchmark of
    those numbers as public ones run (InferenceMAX's client: lengths in [0.8 L, L], 2 x C warm-ups drained first,
    --ignore-eos), and says so; `--random-range-ratio 0` (or `--bench vllm-random`) is vllm bench serve's identical
    lengths. The results folder is named after the workload."""
    monkeypatch.chdir(tmp_path)
    numbers = ["--max-concurrency", "4", "--random-input-len", "64", "--random-output-len", "8", "--num-prompts", "24"]
    assert main(["run", *numbers, *RUN]) == 0
    cap = capsys.readouterr()
    assert "inferencemax-64-8" in cap.out and "no --bench: 4 clients in a closed loop" in cap.err
    assert "8 warm-up requests first" in cap.err and "without --ignore-eos" not in cap.err
    folders = list((tmp_path / "kvsim-out").glob("run-inferencemax-64-8*"))
    assert len(folders) == 1
    df = pd.read_csv(folders[0] / "requests.csv")
    assert len(df) == 24 and (df.status == "finished").all()
    assert df.prompt_tokens.between(51, 64).all() and df.prompt_tokens.nunique() > 1  # [int(0.8 x 64), 64]
    assert df.output_tokens.between(6, 8).all()
    events = sorted([(t, 1) for t in df.arrival_s] + [(t, -1) for t in df.finish_s])
    assert int(max(np.cumsum([d for _, d in events]))) == 4
    assert (
        "InferenceMAX benchmark_serving.py --dataset-name random --random-input-len 64"
        in (folders[0] / "summary.md").read_text()
    )
    # vLLM's client named, or its range ratio given: every request the same, as `vllm bench serve` sends them
    for extra in (["--random-range-ratio", "0"], ["--bench", "vllm-random"]):
        assert main(["run", *numbers, *extra, "--out", "v", *RUN]) == 0
        cap = capsys.readouterr()
        assert "without --ignore-eos" in cap.err and "no --bench" not in cap.err
        df = pd.read_csv(tmp_path / "v" / "requests.csv")
        assert len(df) == 24 and (df.prompt_tokens == 64).all() and (df.output_tokens == 8).all()
        assert (
            "vllm bench serve --dataset-name random --random-input-len 64"
            in (tmp_path / "v" / "summary.md").read_text()
        )
    # an open loop (a request rate) is vLLM's client as before
    assert from_options({"random_input_len": 64, "request_rate": 5.0}).harness == "vllm-random"
    assert from_options({"max_concurrency": 4, "random_input_len": 64, "request_rate": 5.0}).harness == "vllm-random"
    assert from_options({"max_concurrency": 4, "random_input_len": 64, "burstiness": 0.5}).harness == "vllm-random"
    assert from_options({"max_concurrency": 4, "random_input_len": 64}).harness == "inferencemax"


def test_compare_takes_a_workload_and_seed_is_random_seed(tmp_path, capsys):
    out1, out2 = tmp_path / "a", tmp_path / "b"
    common = [
        "--dataset-name",
        "random",
        "--random-input-len",
        "40",
        "--random-output-len",
        "6",
        "--random-range-ratio",
        "0.5",
        "--num-prompts",
        "10",
        "--request-rate",
        "50",
        *RUN,
    ]
    assert main(["compare", *common, "--allocators", "max,paged:16", "--seed", "5", "--out", str(out1)]) == 0
    assert main(["compare", *common, "--allocators", "max,paged:16", "--random-seed", "5", "--out", str(out2)]) == 0
    a, b = pd.read_csv(out1 / "requests.csv"), pd.read_csv(out2 / "requests.csv")
    assert len(a) == 20 and a.prompt_tokens.tolist() == b.prompt_tokens.tolist()
    assert sorted(a.prompt_tokens.unique()) != [40]


def test_generated_trace_is_the_same_workload(tmp_path, capsys):
    p = tmp_path / "w.jsonl"
    assert (
        main(
            [
                "trace",
                "generate",
                "--bench",
                "vllm-random",
                "--random-input-len",
                "50",
                "--random-output-len",
                "9",
                "--random-range-ratio",
                "0.4",
                "--random-prefix-len",
                "20",
                "--num-prompts",
                "30",
                "--request-rate",
                "5",
                "--burstiness",
                "2",
                "--seed",
                "3",
                "-o",
                str(p),
            ]
        )
        == 0
    )
    assert "wrote 30 requests" in capsys.readouterr().out
    got = load_trace(p).requests
    want = BenchLoad(
        num_prompts=30,
        input_len=50,
        output_len=9,
        range_ratio=0.4,
        prefix_len=20,
        request_rate=5.0,
        burstiness=2.0,
        seed=3,
    ).requests()
    assert [(r.prompt_tokens, r.output_tokens, r.hash_ids) for r in got] == [
        (r.prompt_tokens, r.output_tokens, r.hash_ids) for r in want
    ]
    assert [r.arrival_s for r in got] == pytest.approx([r.arrival_s for r in want], abs=1e-6)
    assert json.loads(p.read_text().splitlines()[0])["hash_block_tokens"] == 16


@pytest.mark.parametrize(
    "args,msg",
    [
        (
            ["run", "--trace", "traces/chat.jsonl", "--random-input-len", "10"],
            "--random-input-len describes a generated",
        ),
        (["run", "--max-concurrency", "2"], "--trace is required, or a benchmark client's workload"),
        (["run", "--dataset-name", "random", "--random-range-ratio", "1.5"], "--random-range-ratio: must be <= 1"),
        (["trace", "generate", "-o", "x.jsonl", "--bench", "genai-perf", "--rate", "2"], "--rate: the lognormal"),
    ],
)
def test_bad_command_lines_are_one_line(args, msg, tmp_path):
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    args = [str(root / a) if a.startswith("traces/") else a for a in args]
    r = subprocess.run([sys.executable, "-m", "kvsim.cli", *args], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_ramp_up_rates_and_send_times_by_hand():
    """vllm bench serve's ramp-up: request i at start + (end - start) i / (N - 1) (linear) or
    start (end / start) ^ (i / (N - 1)) (exponential); constant gaps of 1 / rate (burstiness inf), summed."""
    lin = BenchLoad(
        num_prompts=3, ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=3, burstiness=math.inf
    )
    assert list(lin.rates()) == [1.0, 2.0, 3.0]
    assert [r.arrival_s for r in lin.requests()] == pytest.approx([1.0, 1.5, 1.5 + 1 / 3])
    exp = BenchLoad(
        num_prompts=3, ramp_up_strategy="exponential", ramp_up_start_rps=1, ramp_up_end_rps=4, burstiness=math.inf
    )
    assert list(exp.rates()) == pytest.approx([1.0, 2.0, 4.0])
    assert [r.arrival_s for r in exp.requests()] == pytest.approx([1.0, 1.5, 1.75])
    assert "--ramp-up-strategy exponential --ramp-up-start-rps 1 --ramp-up-end-rps 4" in exp.describe()


def test_ramp_up_poisson_gaps_follow_each_requests_rate():
    load = BenchLoad(num_prompts=20_000, ramp_up_strategy="linear", ramp_up_start_rps=2, ramp_up_end_rps=50)
    t = np.array([r.arrival_s for r in load.requests()])
    expected = (1.0 / load.rates()).sum()  # no rescaling: the sum of the mean gaps
    assert t[-1] == pytest.approx(expected, rel=0.03)
    first, last = np.diff(t[:2001]).mean(), np.diff(t[-2001:]).mean()
    assert first == pytest.approx((1 / load.rates()[1:2001]).mean(), rel=0.1)
    assert last == pytest.approx((1 / load.rates()[-2000:]).mean(), rel=0.1)


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1}, "needs both"),
        ({"ramp_up_start_rps": 1, "ramp_up_end_rps": 2}, "with --ramp-up-strategy"),
        ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 5, "ramp_up_end_rps": 2}, "a ramp-up climbs"),
        ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 0, "ramp_up_end_rps": 2}, "--ramp-up-start-rps"),
        (
            {"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 2, "request_rate": 4.0},
            "drop --request-rate",
        ),
        (
            {"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 2, "harness": "genai-perf"},
            "vllm-random",
        ),
    ],
)
def test_ramp_up_refuses_what_vllm_refuses(kw, message):
    with pytest.raises(ConfigError, match=message):
        BenchLoad(**kw)


def test_ramp_up_from_the_command_line(tmp_path, capsys):
    from kvsim.cli import main

    out = tmp_path / "r.jsonl"
    argv = ["trace", "generate", "--dataset-name", "random", "--num-prompts", "50", "--random-input-len", "64"]
    argv += ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "10", "-o", str(out)]
    assert main(argv) == 0
    assert main(argv[:-2] + ["--request-rate", "3", "-o", str(out)]) == 2
    assert "drop --request-rate" in capsys.readouterr().err


def test_genai_perf_flags_are_aliases_and_its_stddevs_name_its_client(tmp_path):
    """A GenAI-Perf command line's flags give its workload: --synthetic-input-tokens-mean, --output-tokens-mean,
    --concurrency, --request-count as kvsim's, and a standard deviation picks GenAI-Perf's client."""
    theirs, ours = tmp_path / "theirs.jsonl", tmp_path / "ours.jsonl"
    genai = ["--synthetic-input-tokens-mean", "300", "--synthetic-input-tokens-stddev", "30"]
    genai += ["--output-tokens-mean", "90", "--request-count", "64", "--concurrency", "8"]
    kvsim_flags = ["--bench", "genai-perf", "--random-input-len", "300", "--synthetic-input-tokens-stddev", "30"]
    kvsim_flags += ["--random-output-len", "90", "--num-prompts", "64", "--max-concurrency", "8"]
    assert main(["trace", "generate", *genai, "-o", str(theirs)]) == 0
    assert main(["trace", "generate", *kvsim_flags, "-o", str(ours)]) == 0
    assert theirs.read_bytes() == ours.read_bytes()
    prompts = [json.loads(line)["prompt_tokens"] for line in theirs.read_text().splitlines()]
    assert len(prompts) == 64 and len(set(prompts)) > 10  # normal draws, not one length


def test_cluster_takes_the_clients_flags_as_run_does(tmp_path, capsys):
    """`kvsim cluster` generates the benchmark's workload as `kvsim run` does: one replica behind a router is
    the single engine's run, request for request, and --seed stays the routers' (the workload's is
    --random-seed)."""
    import pandas as pd

    load = ["--max-concurrency", "3", "--random-input-len", "40", "--random-output-len", "6", "--num-prompts", "9"]
    load += ["--random-range-ratio", "0.5", "--random-seed", "2", "--model", "llama-2-7b", "--gpu", "a100-80gb"]
    assert main(["run", *load, "--out", str(tmp_path / "run")]) == 0
    cluster = ["cluster", *load, "--replicas", "1", "--routers", "round-robin", "--seed", "7"]
    assert main([*cluster, "--out", str(tmp_path / "cl")]) == 0
    assert "random-40-6" in capsys.readouterr().out
    run = pd.read_csv(tmp_path / "run" / "requests.csv").sort_values("id")
    cl = pd.read_csv(tmp_path / "cl" / "requests.csv").sort_values("id")
    assert len(cl) == 9 and (cl.status == "finished").all()
    assert list(cl.prompt_tokens) == list(run.prompt_tokens) and list(cl.output_tokens) == list(run.output_tokens)
    assert list(cl.ttft_s) == pytest.approx(list(run.ttft_s))
    r = subprocess.run(
        [sys.executable, "-m", "kvsim.cli", *cluster, "--trace", str(tmp_path / "x.jsonl")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 2 and "--max-concurrency describes" not in r.stderr
    assert "describes a generated benchmark workload and --trace a recorded one" in r.stderr


def test_cluster_groups_send_the_generated_workload_as_run_does(tmp_path):
    """A fleet of explicit groups (--groups, --prefill/--decode) gets the same send times as `kvsim run`: the
    workload's --request-rate and --burstiness spaced them once (a group's configuration re-timed them as
    Poisson arrivals at that rate, losing --burstiness: a regression)."""
    load = ["--random-input-len", "100", "--random-output-len", "10", "--num-prompts", "40", "--request-rate", "3.6"]
    load += ["--burstiness", "100", "--model", "llama-3-8b", "--gpu", "h100-80gb"]
    assert main(["run", *load, "--out", str(tmp_path / "run")]) == 0
    sent = pd.read_csv(tmp_path / "run" / "requests.csv").sort_values("id").arrival_s.tolist()
    gaps = np.diff(sent)
    assert gaps.std() / gaps.mean() < 0.2  # gamma gaps of shape 100: CV 0.1
    for fleet in (["--groups", "h100-80gb:2"], ["--prefill", "h100-80gb:1", "--decode", "h100-80gb:1"]):
        out = tmp_path / fleet[0].strip("-")
        assert main(["cluster", *load, *fleet, "--routers", "round-robin", "--out", str(out)]) == 0
        cl = pd.read_csv(out / "requests.csv").sort_values("id")
        assert cl.arrival_s.tolist() == pytest.approx(sent)


def test_run_with_data_parallel_ranks_is_the_one_replica_cluster(tmp_path, capsys):
    """`kvsim run -dp 2` runs the replica of two engines behind vLLM's load balancer, as `kvsim cluster
    --replicas 1 --routers dp-lb` does, and says so; --record-batches (one engine's batches) is refused."""
    load = ["--max-concurrency", "4", "--random-input-len", "40", "--random-output-len", "6", "--num-prompts", "12"]
    load += ["--model", "llama-2-7b", "--gpu", "a100-80gb", "-dp", "2"]
    assert main(["run", *load, "--no-plots", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "run as `kvsim cluster --replicas 1 --routers dp-lb`" in err and "--no-plots unused" in err
    assert main(["cluster", *load, "--replicas", "1", "--routers", "dp-lb", "--out", str(tmp_path / "cl")]) == 0
    for name in ("requests.csv", "replicas.csv"):
        assert (tmp_path / "run" / name).read_text() == (tmp_path / "cl" / name).read_text()
    assert main(["run", *load, "--record-batches", str(tmp_path / "b.jsonl.gz")]) == 2
    assert "a data-parallel replica runs several" in capsys.readouterr().err
