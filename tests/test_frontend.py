"""The API server in front of an engine (kvsim/frontend.py): a request reaches the scheduler after the
server has taken it in (1.5 ms + 2.5 us per prompt token with the vllm preset, one request at a time per
server, in the order sent), and the client hears of each token 8 ms after the engine made it. Hand-computed
single requests, a queue of two, parallel servers, a closed-loop client, and what ``auto`` picks."""

import pytest

from kvsim.frontend import FRONTEND_PRESETS, V1_DELIVER_S, V1_TOKEN_S, FrontEnd, Intake, get_frontend
from kvsim.errors import ConfigError
from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
from kvsim.latency import build_latency
from kvsim.latency.base import StepShape
from kvsim.options import config_from_args
from kvsim.runner import simulate
from kvsim.trace.request import Request

BASE = ["--gpu", "a100-80gb", "--max-model-len", "4096"]
INTAKE_1000 = 1.5e-3 + 1000 * V1_TOKEN_S
DELIVER = V1_DELIVER_S
assert (V1_TOKEN_S, V1_DELIVER_S) == (2.5e-6, 8e-3)  # the fitted constants (benchmarks/fit_v1_frontend.py)


def _run(reqs, *args):
    cfg = config_from_args([*BASE, *args])
    return cfg, simulate(reqs, cfg, "paged:16").requests


def test_one_request_by_hand():
    """TTFT = intake + the prefill step + delivery; the finish comes a delivery after the last step, so TPOT is
    the engine's."""
    cfg, r = _run([Request("a", 0.0, 1000, 3)])
    lat = build_latency(cfg)
    prefill = lat.step_time(StepShape.of([(1000, 0)]))
    steps = [lat.step_time(StepShape.of([(1, 1000 + k)])) for k in range(2)]
    row = r.iloc[0]
    assert row.frontend_s == pytest.approx(INTAKE_1000 + DELIVER, rel=1e-12)
    assert row.queue_s == pytest.approx(INTAKE_1000, rel=1e-12)  # admitted the moment the engine has it
    assert row.ttft_s == pytest.approx(INTAKE_1000 + prefill + DELIVER, rel=1e-12)
    assert row.e2e_s == pytest.approx(INTAKE_1000 + prefill + sum(steps) + DELIVER, rel=1e-12)
    assert row.tpot_s == pytest.approx(sum(steps) / 2, rel=1e-12)
    _, none = _run([Request("a", 0.0, 1000, 3)], "--frontend", "none")
    assert none.iloc[0].frontend_s == 0.0
    assert none.iloc[0].ttft_s == pytest.approx(prefill, rel=1e-12)
    assert none.iloc[0].tpot_s == pytest.approx(row.tpot_s, rel=1e-12)


def test_one_server_takes_requests_one_at_a_time_and_two_in_parallel():
    """Two 1,000-token prompts sent together: with one API server its event loop runs a's handler (1.5 ms) then
    b's (to 3 ms) while its tokenizer thread takes a's prompt (1.5-4 ms) then b's (4-6.5 ms): a reaches the
    engine at 4 ms, b at 6.5; with two servers both at 4 ms, sharing a prefill."""
    reqs = [Request("a", 0.0, 1000, 2), Request("b", 0.0, 1000, 2)]
    _, one = _run(reqs)
    assert one.queue_s.min() == pytest.approx(INTAKE_1000, rel=1e-12)
    assert (one.frontend_s - DELIVER).tolist() == pytest.approx(
        [INTAKE_1000, INTAKE_1000 + 1000 * V1_TOKEN_S], rel=1e-12
    )
    _, two = _run(reqs, "--api-server-count", "2")
    assert (two.frontend_s - DELIVER).tolist() == pytest.approx([INTAKE_1000] * 2, rel=1e-12)
    assert two.first_token_s.nunique() == 1  # one prefill iteration for both


def test_requests_reach_the_engine_in_the_order_sent():
    """Two servers: a long prompt sent first is still being tokenized when a short one is done; the short one
    reaches the engine with it, not before."""
    fe = FrontEnd("t", request_s=1e-3, token_s=1e-6, servers=2)
    intake = Intake(fe)
    first = intake.ready(100_000, 0.0)
    assert first == pytest.approx(0.101)
    assert intake.ready(10, 0.001) == first
    assert intake.ready(10, 0.2) == pytest.approx(0.2 + 1e-3 + 10e-6)  # both servers free again


def test_a_closed_loop_client_sends_when_it_has_the_last_token():
    """One client: the second request is sent when the client receives the first's last token (its finish,
    delivery included), and its latencies count from then."""
    reqs = [Request("a", 0.0, 200, 4), Request("b", 0.0, 200, 4)]
    _, r = _run(reqs, "--max-concurrency", "1")
    a, b = r.iloc[0], r.iloc[1]
    assert b.arrival_s == pytest.approx(a.finish_s, rel=1e-12)
    assert b.frontend_s == pytest.approx(
        1.5e-3 + 200 * V1_TOKEN_S + DELIVER, rel=1e-12
    )  # no queue: the server was free


def test_auto_follows_the_latency_model_and_names_are_checked():
    assert config_from_args(BASE).serving_frontend().name == "vllm"
    assert config_from_args([*BASE, "--latency", "roofline"]).serving_frontend().name == "none"
    assert config_from_args([*BASE, "--cpu-overhead", "none"]).serving_frontend().name == "none"
    assert config_from_args([*BASE, "--latency", "roofline", "--frontend", "vllm"]).serving_frontend().name == "vllm"
    assert get_frontend("vllm", 3).servers == 3
    with pytest.raises(ConfigError, match="unknown front end"):
        get_frontend("tgi")
    with pytest.raises(ConfigError, match="--api-server-count: must be >= 1"):
        config_from_args([*BASE, "--api-server-count", "0"])


def test_a_fleet_of_one_is_the_single_engine_behind_its_api_server():
    """Every replica has its own API server; a fleet of one gives the single engine's numbers bit for bit."""
    reqs = [Request(str(i), 0.002 * i, 300 + 50 * (i % 7), 20 + i % 5) for i in range(60)]
    cfg, single = _run(reqs, "--api-server-count", "2")
    fleet = simulate_fleet(reqs, [ReplicaGroup("g", cfg, "paged:16", 1)], "round-robin")
    cols = ["arrival_s", "first_token_s", "finish_s", "ttft_s", "frontend_s"]
    assert fleet.requests[cols].equals(single[cols])


def test_the_v0_api_server_hands_a_burst_to_the_engine_together():
    """V0's API server (V0_REQUEST_S + 1 us per prompt token per request, one at a time): three 1,000-token prompts sent
    at once reach the engine together when the last is in (3 x each), and one prefill computes all three; a
    request sent after the server has gone idle is handed over on its own."""
    from kvsim.frontend import V0_REQUEST_S

    each, v0_deliver = V0_REQUEST_S + 1000 * 1e-6, 0.5e-3
    reqs = [Request(x, 0.0, 1000, 2) for x in "abc"] + [Request("d", 5.0, 1000, 2)]
    cfg, r = _run(reqs, "--vllm-engine", "v0")
    assert cfg.serving_frontend().name == "vllm-v0" and cfg.serving_frontend().batched
    burst = r[r.id != "d"]
    # all sent at 0 reach the engine at 3 x each (one at a time they would at 1, 2 and 3 x each)
    assert (burst.frontend_s - v0_deliver).tolist() == pytest.approx([3 * each] * 3, rel=1e-12)
    assert burst.queue_s.tolist() == pytest.approx([3 * each] * 3, rel=1e-12)
    assert burst.first_token_s.nunique() == 1
    assert r[r.id == "d"].frontend_s.iloc[0] - v0_deliver == pytest.approx(each, rel=1e-12)
    # V1's API server: handlers 0-1.5, 1.5-3 and 3-4.5 ms on its event loop, prompts tokenized on a thread until
    # 4, 6.5 and 9 ms; a's hand-off queues behind c's handler (sent before a's prompt came back): 4.5 ms
    _, v1 = _run(reqs)
    handler = 1.5e-3
    assert (v1[v1.id != "d"].frontend_s - DELIVER).tolist() == pytest.approx(
        [3 * handler, INTAKE_1000 + 1000 * V1_TOKEN_S, INTAKE_1000 + 2000 * V1_TOKEN_S], rel=1e-12
    )


def test_intake_batches_only_requests_that_queue_behind_another():
    i = Intake(FrontEnd("x", request_s=1.0, batched=True))
    assert not i.busy_at(0.0)
    assert i.ready(0, 0.0) == 1.0
    assert i.busy_at(0.5) and not i.busy_at(1.0)


def test_a_v1_burst_reaches_the_engine_together_and_holds_up_the_streams(monkeypatch):
    """One V1 API server, 1 s of event-loop work per request and no tokenization time: three requests sent at 0
    run their handlers 0-1, 1-2, 2-3 s; each hand-off queues behind the handlers sent before its prompt came
    back, so all three reach the engine at 3 s (a burst goes together); one sent alone at 10 s at 11 s. A token
    made at 0.5 s for a request on that server is streamed when the loop is done with the handlers sent before
    it (at 3 s); one made at 3.5 s at once; a request sent after the token does not hold it up."""
    fe = FrontEnd("x", request_s=1.0)
    assert fe.loop_s == 1.0 and not FrontEnd("v0", request_s=1.0, batched=True).loop_s
    reqs = [Request(x, 0.0, 10, 2) for x in "abc"] + [Request("d", 10.0, 10, 2)]
    monkeypatch.setitem(FRONTEND_PRESETS, "vllm", fe)
    r = simulate(reqs, config_from_args(BASE), "paged:16").requests
    assert r.queue_s.tolist() == pytest.approx([3.0, 3.0, 3.0, 1.0], rel=1e-12)
    assert r.first_token_s.iloc[:3].nunique() == 1
    i = Intake(fe)
    i.ready(0, 0.0)
    i.ready(0, 0.0)
    assert i.delivered(0, 0.5) == 2.0 and i.delivered(0, 3.5) == 3.5
    i.ready(0, 5.0)
    assert i.delivered(0, 4.0) == 4.0  # sent after the token
    assert i.delivered(0, 5.5) == 6.0


def test_streaming_takes_the_event_loop_by_hand():
    """One API server streaming 6 us a token plus 34 us a chunk (the vllm preset's constants). 100 tokens made by a
    step ending at 10 ms: 4 ms of streaming, done at 14 ms, so a request sent at 12 ms starts its 1.5 ms handler
    then; a token made at 13 ms waits for them, one made at 20 ms does not. A run of 2 steps of 1 ms from 20 ms
    with 100 tokens each: the first step's tokens take 21-25 ms; at the second's end (22 ms) the loop is 3 ms
    behind, so each stream's tokens merge into a chunk with the waiting one: 0.6 + 3.4 x 1/4 ms, done at 26.45
    ms, which a token made at 21.5 ms waits for. A long run settles where a step's streaming takes a step: 7.5 ms
    behind (0.6 + 3.4 / (1 + 7.5) = 1 ms), done 8.5 ms after the run."""
    fe = get_frontend("vllm")
    assert (fe.stream_token_s, fe.stream_chunk_s) == (6e-6, 34e-6) and fe.streams_on_loop
    i = Intake(fe)
    assert i.streamed(100, 0.0, 0.010, 1) == pytest.approx([0.014], rel=1e-12)
    i.ready(0, 0.012, now=0.010)
    assert i.last_handled == pytest.approx(0.0155, rel=1e-12)
    assert i.delivered(0, 0.013) == pytest.approx(0.0155, rel=1e-12)
    assert i.delivered(0, 0.020) == 0.020
    assert i.streamed(100, 0.020, 0.022, 2) == pytest.approx([0.02645], rel=1e-12)
    assert i.delivered(0, 0.0225) == pytest.approx(0.02645, rel=1e-12)
    assert i.streamed(100, 1.0, 2.0, 1000) == pytest.approx([2.0085], rel=1e-6)
    two = Intake(get_frontend("vllm", servers=2))
    assert two.streamed(100, 0.0, 0.010, 1) == pytest.approx([0.012, 0.012], rel=1e-12)  # 50 tokens each


def test_stream_interval_builds_a_chunk_every_n_tokens():
    """--stream-interval N: a chunk's cost spread over N tokens; releases before 0.11.1 have no such flag; the
    V0 front end and none stream off the loop."""
    assert get_frontend("vllm", stream_interval=10).stream_chunk_s == pytest.approx(3.4e-6, rel=1e-12)
    assert not get_frontend("vllm-v0").streams_on_loop and not get_frontend("none").streams_on_loop
    with pytest.raises(ConfigError, match="stream_interval"):
        get_frontend("vllm", stream_interval=0)
    assert config_from_args([*BASE, "--stream-interval", "10"]).serving_frontend().stream_chunk_s == pytest.approx(
        3.4e-6, rel=1e-12
    )
    with pytest.raises(ConfigError, match="0.11.1"):
        config_from_args([*BASE, "--stream-interval", "10", "--vllm-version", "0.11.0"])


def test_a_loop_busy_streaming_delays_the_first_tokens_of_new_requests():
    """512 closed-loop clients of Qwen3-0.6B on an H100, lengths 100-300: the loop streams more than it can at a token a chunk,
    so new requests' handlers and first tokens wait behind it (TTFT up); with --stream-interval 10 it keeps up
    and TTFT is as without streaming work; the engine's own step times are the same in all three."""
    reqs = [Request(f"r{k}", 0.0, 100 + 37 * k % 200, 100 + 53 * k % 200) for k in range(2048)]
    args = ["--model", "qwen3-0.6b", "--gpu", "h100-80gb", "--max-concurrency", "512"]
    _, every = _run(reqs, *args)
    _, ten = _run(reqs, *args, "--stream-interval", "10")
    streamed = every.output_tokens.sum() / (every.finish_s.max() - every.arrival_s.min())
    assert streamed * 40e-6 > 0.9  # the loop's work at a token a chunk, per second
    late, late10 = every.iloc[1024:], ten.iloc[1024:]  # the clients long out of their first burst
    assert late.ttft_s.median() > 1.2 * late10.ttft_s.median()
    assert late.tpot_s.median() == pytest.approx(late10.tpot_s.median(), rel=0.05)


def test_the_api_servers_busy_share_is_reported_and_warned_about(capsys):
    """One request of 3 output tokens: the loop runs its 1.5 ms handler and streams one token after each of the
    3 iterations (40 us each), 1.62 ms of work over the run (its last iteration ends a delivery before the
    finish). A run whose loop works over 90% of the time warns, naming vLLM's ways out."""
    from kvsim.commands.simulate import warn_if_api_server_busy

    cfg = config_from_args(BASE)
    out = simulate([Request("a", 0.0, 1000, 3)], cfg, "paged:16")
    end = out.requests.finish_s.max() - DELIVER
    assert out.summary["api_server_busy"] == pytest.approx((1.5e-3 + 3 * 40e-6) / end, rel=1e-9)
    none = simulate([Request("a", 0.0, 1000, 3)], config_from_args([*BASE, "--frontend", "none"]), "paged:16")
    assert "api_server_busy" not in none.summary
    warn_if_api_server_busy("x", 0.95)
    err = capsys.readouterr().err
    assert "busy 95%" in err and "--api-server-count" in err and "--stream-interval" in err
    warn_if_api_server_busy("x", 0.5)
    assert capsys.readouterr().err == ""
