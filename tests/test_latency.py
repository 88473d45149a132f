import math

import pytest

from hypothesis import given, strategies as st

from kvsim.latency.roofline import RooflineParams
from kvsim.latency.base import StepShape, chunk_shape_terms, sum_max_of_two_affine
from kvsim.latency.roofline import RooflineModel
from kvsim.hardware import get_gpu, get_model

fl = st.floats(-100, 100, allow_nan=False)


@given(fl, fl, fl, fl, st.integers(0, 60))
def test_sum_max_of_two_affine_matches_loop(a1, b1, a2, b2, k):
    brute = sum(max(a1 + b1 * i, a2 + b2 * i) for i in range(k))
    assert math.isclose(sum_max_of_two_affine(a1, b1, a2, b2, k), brute, rel_tol=1e-9, abs_tol=1e-6)


@pytest.mark.parametrize(
    "a1,b1,a2,b2,k",
    [
        (0.0, 5e-324, 1.0, 0.0, 10),  # slopes differ by a subnormal: the crossing is at +inf
        (1.0, 0.0, 0.0, 5e-324, 3),
        (0.0, -5e-324, 1e-300, 0.0, 7),
        (-1.0, 2.0, 1.0, 2.0 - 1e-16, 5),
    ],
)
def test_sum_max_of_two_affine_extreme_slopes(a1, b1, a2, b2, k):
    """Regression: a crossing at +-inf used to raise 'cannot convert float NaN to integer'."""
    brute = sum(max(a1 + b1 * i, a2 + b2 * i) for i in range(k))
    assert math.isclose(sum_max_of_two_affine(a1, b1, a2, b2, k), brute, rel_tol=1e-9, abs_tol=1e-6)


def roofline(model="llama-2-7b", gpu="a100-40gb"):
    return RooflineModel(get_model(model), get_gpu(gpu), RooflineParams())


@given(st.integers(1, 256), st.integers(1, 4096), st.integers(1, 400))
def test_roofline_decode_run_equals_step_sum(n, ctx, k):
    m = roofline()
    s0 = n * ctx
    step = sum(m.step_time(StepShape(n, n, s0 + n * i, s0 + n * i)) for i in range(k))
    assert math.isclose(m.decode_run_time(n, s0, k), step, rel_tol=1e-9)


@given(st.integers(1, 64), st.integers(1, 2000), st.floats(0.0001, 5.0), st.integers(1, 500))
def test_decode_steps_until_is_first_crossing(n, ctx, budget, k_max):
    m = roofline()
    s0 = n * ctx
    k = m.decode_steps_until(n, s0, budget, k_max)
    assert 1 <= k <= k_max
    if m.decode_run_time(n, s0, k) >= budget:
        assert k == 1 or m.decode_run_time(n, s0, k - 1) < budget
    else:
        assert k == k_max


def test_roofline_hand_numbers():
    """Llama-2-7B on A100-40GB, one decode of batch 1 at context 1: memory bound.
    bytes = 13.48e9 weights + 524288 KV -> / (1.555e12 x 0.8) = 10.836 ms, + 2 ms overhead."""
    m = roofline()
    t = m.step_time(StepShape(1, 1, 1, 1))
    assert math.isclose(t, (6.74e9 * 2 + 524288) / (1.555e12 * 0.8) + 0.002, rel_tol=1e-12)
    # a 4096-token prefill is compute bound: 2 x 6.74e9 x 4096 + 4 x 32 x 32 x 128 x 4096 x 4097 / 2 FLOPs
    pairs, kv = chunk_shape_terms(0, 4096)
    assert pairs == 4096 * 4097 // 2 and kv == 4096
    flops = 2 * 6.74e9 * 4096 + 4 * 32 * 32 * 128 * pairs
    assert math.isclose(m.step_time(StepShape(4096, 1, pairs, kv)), flops / (312e12 * 0.6) + 0.002, rel_tol=1e-12)


def test_windowed_prefill_tiles_in_closed_form_equal_the_walk():
    """Query tiles past the first window repeat: the closed form sums whole periods, the walk every tile."""
    from hypothesis import given, settings, strategies as st

    from kvsim.latency.perop import windowed_tiles

    @settings(max_examples=300, deadline=None)
    @given(
        st.sampled_from(["sliding", "chunked"]),
        st.sampled_from([1, 7, 16, 100, 4096, 8191, 8192]),
        st.sampled_from([16, 64, 128]),
        st.sampled_from([16, 64, 128]),
        st.integers(1, 300_000),
        st.integers(0, 20_000),
        st.sampled_from([0.0, 1.0, 2.0]),
    )
    def check(kind, window, tq, tkv, new, cached, ovh):
        walk = windowed_tiles(new, cached, kind, window, tq, tkv, ovh, explicit_limit=10**9)
        assert windowed_tiles(new, cached, kind, window, tq, tkv, ovh, explicit_limit=4) == walk

    check()
