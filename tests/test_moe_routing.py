"""--moe-routing: how many distinct experts a step's tokens activate, and what that does to MoE time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvsim.latency.routing import ROUTINGS, active_experts


def _generator_active(tokens: int, experts: int, top_k: int, alpha: float, draws: int, rng) -> float:
    """AIConfigurator's power-law workload generator, as its collector describes it (loads from p(x) ~ x^-alpha,
    scaled to tokens x top_k, rounded, the deficit topped up on the most loaded experts): mean distinct experts."""
    routed = tokens * top_k
    lo, hi = (1.0, 0.8 * tokens) if routed > experts else (0.01, 2.0)
    g = 1.0 - alpha
    x = ((hi**g - lo**g) * rng.random((draws, experts)) + lo**g) ** (1.0 / g)
    counts = np.round(x / x.sum(axis=1, keepdims=True) * routed)
    deficit = routed - counts.sum(axis=1)
    active = (counts > 0).sum(axis=1)
    # the top-ups go to the most loaded experts first: they add experts only beyond those already active
    return float(np.mean(np.where(deficit > 0, np.maximum(active, np.minimum(experts, deficit)), active)))


def test_uniform_and_balanced_by_hand():
    assert active_experts("uniform", 8, 32, 4) == pytest.approx(32 * (1 - (1 - 4 / 32) ** 8))
    assert active_experts("uniform", 1, 128, 4) == pytest.approx(4)
    assert active_experts("balanced", 3, 128, 4) == 12
    assert active_experts("balanced", 100, 128, 4) == 128


def test_power_law_by_hand():
    # 32 tokens x top-4 of 128 experts (alpha 1.2): loads drawn on [0.01, 2], mean
    # ((2^0.8 - 0.01^0.8) / 0.8) / ((2^-0.2 - 0.01^-0.2) / -0.2) = 0.26137, scaled by 128 / (128 x 0.26137) = 3.826:
    # an expert rounds to a token when its load reaches 0.5 / 3.826 = 0.13069, which
    # (2^-0.2 - 0.13069^-0.2) / (2^-0.2 - 0.01^-0.2) = 0.3849 of them do: 49.27 experts
    g = -0.2
    mean = (2**0.8 - 0.01**0.8) / 0.8 / ((2**g - 0.01**g) / g)
    y = 0.5 / (128 / (128 * mean))
    expected = 128 * (2**g - y**g) / (2**g - 0.01**g)
    assert expected == pytest.approx(49.27, abs=0.01)
    assert active_experts("power-law-1.2", 32, 128, 4) == pytest.approx(expected)
    # fewer than uniform routing's, more than top-k
    assert 4 < expected < active_experts("uniform", 32, 128, 4)


@pytest.mark.parametrize("experts,top_k", [(32, 4), (128, 4), (256, 8), (384, 8)])
@pytest.mark.parametrize("alpha", [1.01, 1.2])
def test_power_law_follows_the_generator(experts, top_k, alpha):
    rng = np.random.default_rng(7)
    name = f"power-law-{alpha:g}"
    for tokens in (2, 8, 16, 32, 64, 256, 2048):
        sampled = _generator_active(tokens, experts, top_k, alpha, 400, rng)
        assert active_experts(name, tokens, experts, top_k) == pytest.approx(sampled, rel=0.07), tokens


def test_arrays_equal_scalars():
    t = np.array([1, 4, 32, 32, 500])
    for name in ROUTINGS:
        arr = active_experts(name, t, 128, np.full(5, 4))
        assert [float(a) for a in arr] == pytest.approx([float(active_experts(name, int(x), 128, 4)) for x in t])


def test_routing_orders_the_moe_time():
    from kvsim.latency.base import StepShape
    from kvsim.options import config_from_options
    from kvsim.latency import build_latency

    def decode_s(routing: str) -> float:
        cfg = config_from_options(
            {"model": "gpt-oss-120b", "gpu": "h100-80gb", "tensor_parallel_size": 2, "moe_routing": routing}
        )
        return build_latency(cfg).step_time(StepShape.decode(32, 32 * 1000))

    t = {r: decode_s(r) for r in ROUTINGS}
    assert t["power-law-1.2"] < t["uniform"] < t["balanced"]
    # one token activates its top-k whatever the routing
    one = {r: active_experts(r, 1, 128, 4) for r in ROUTINGS}
    assert all(math.isclose(v, 4) for v in one.values())


def test_dense_model_ignores_routing():
    from kvsim.latency.base import StepShape
    from kvsim.options import config_from_options
    from kvsim.latency import build_latency

    shape = StepShape.decode(8, 8 * 500)
    times = {
        build_latency(config_from_options({"model": "llama-3-8b", "gpu": "h100-80gb", "moe_routing": r})).step_time(
            shape
        )
        for r in ROUTINGS
    }
    assert len(times) == 1
