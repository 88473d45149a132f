"""vLLM V1's async scheduling (the default from vLLM 0.14): the engine schedules each step while the one before
it runs, so a request that arrives during a step joins the step after the next; with nothing running it joins at
once. Hand-computed times with a fixed-latency model (prefill steps 0.1 s, decode steps 0.01 s)."""

import pytest

from helpers import FixedLatency, req, sched
from kvsim.allocators import make_allocator
from kvsim.engine.simulator import Simulation
from kvsim.errors import ConfigError
from kvsim.options import config_from_args


def run(reqs, async_scheduling, fast_forward=True):
    cfg = sched(async_scheduling=async_scheduling)
    alloc = make_allocator("paged:16", 10_000, cfg.max_model_len)
    return Simulation(reqs, alloc, FixedLatency(), cfg, fast_forward=fast_forward).run()


@pytest.mark.parametrize("fast_forward", [True, False])
def test_an_arrival_during_a_step_waits_one_step_more(fast_forward):
    """A: prefill [0, 0.1), decodes every 0.01 s. B arrives at 0.125, inside the step [0.12, 0.13). In step with
    the GPU it joins the step at 0.13 (first token at 0.23); scheduled ahead, the step [0.13, 0.14) was already
    planned when it came, so it joins at 0.14 (first token at 0.24)."""
    reqs = [req(0, 0.0, 100, 50), req(1, 0.125, 100, 5)]
    sync, ahead = run(reqs, False, fast_forward), run(reqs, True, fast_forward)
    assert sync.sequences[1].first_token_s == pytest.approx(0.23)
    assert ahead.sequences[1].first_token_s == pytest.approx(0.24)
    # A's tokens: the same count of decode steps, one of them the 0.1 s mixed step either way
    assert sync.sequences[0].finish_s == pytest.approx(ahead.sequences[0].finish_s)


def test_with_nothing_running_an_arrival_starts_at_once():
    """A finishes at 0.11 (prefill, one decode); B arrives at 0.105, during A's last step: nothing runs after it,
    so the next step is scheduled when A's ends and takes B in either way. An idle engine starts B on arrival."""
    reqs = [req(0, 0.0, 100, 2), req(1, 0.105, 100, 1)]
    for ahead in (False, True):
        assert run(reqs, ahead).sequences[1].first_token_s == pytest.approx(0.21)
    assert run([req(0, 1.0, 100, 1)], True).sequences[0].first_token_s == pytest.approx(0.1)


def test_the_release_decides_when_not_told():
    """On from vLLM 0.14 (PR #27614), with pipeline stages from 0.15 (PR #32359); never for the V0 engine; the
    CPU time overlaps the GPU's (vllm-v1 becomes its overlapped form)."""
    from kvsim.latency import build_latency

    assert config_from_args([]).runs_async and config_from_args(["--vllm-version", "0.14.0"]).runs_async
    assert not config_from_args(["--vllm-version", "0.13.0"]).runs_async
    assert not config_from_args(["--vllm-engine", "v0"]).runs_async
    assert not config_from_args(["--no-async-scheduling"]).runs_async
    assert not config_from_args(
        ["--model", "llama-3-70b", "--gpu", "h100-80gb", "--pp", "2", "--vllm-version", "0.14.1"]
    ).runs_async
    assert config_from_args(
        ["--model", "llama-3-70b", "--gpu", "h100-80gb", "--pp", "2", "--vllm-version", "0.15.0"]
    ).runs_async
    assert config_from_args(["--cpu-overhead", "vllm-v1-async", "--vllm-version", "0.12"]).runs_async
    on, off = (build_latency(config_from_args(a)) for a in ([], ["--no-async-scheduling"]))
    assert on.cpu.overlapped and not off.cpu.overlapped and on.cpu.base_s == off.cpu.base_s
    assert config_from_args([]).engine_scheduler().async_scheduling
    assert not config_from_args(["--no-async-scheduling"]).engine_scheduler().async_scheduling


def test_contradictions_are_refused():
    with pytest.raises(ConfigError, match="V0 engine"):
        config_from_args(["--vllm-engine", "v0", "--async-scheduling"])
    with pytest.raises(ConfigError, match="vllm-v1-async"):
        config_from_args(["--cpu-overhead", "vllm-v1-async", "--no-async-scheduling"])
