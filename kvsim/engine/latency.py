"""Iteration latency models.

A model maps the shape of one iteration (how many tokens are computed, how much KV is read) to
seconds. Pure-decode runs are the hot path: over k decode steps of a fixed batch of n sequences
every context grows by one token per step, so the shape is affine in the step index and models
give the total time of k steps in closed form instead of summing step by step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from kvsim.config import RooflineParams
from kvsim.hardware import GpuSpec, ModelSpec


@dataclass(frozen=True, slots=True)
class StepShape:
    new_tokens: int  # tokens computed this iteration, all sequences together
    num_seqs: int
    attn_pairs: int  # sum over new tokens of the key positions each attends to (incl. itself)
    kv_tokens: int  # sum over sequences of KV tokens read or written (context incl. new tokens)


def chunk_shape_terms(computed: int, new: int) -> tuple[int, int]:
    """(attn_pairs, kv_tokens) of one sequence computing ``new`` tokens after ``computed`` cached ones."""
    return new * computed + new * (new + 1) // 2, computed + new


def sum_affine(a: float, b: float, lo: int, hi: int) -> float:
    """sum_{i=lo}^{hi-1} (a + b*i)."""
    n = hi - lo
    return n * a + b * n * (lo + hi - 1) / 2 if n > 0 else 0.0


def sum_max_of_two_affine(a1: float, b1: float, a2: float, b2: float, k: int) -> float:
    """sum_{i=0}^{k-1} max(a1 + b1*i, a2 + b2*i), exactly."""
    if k <= 0:
        return 0.0
    if b1 == b2:
        return sum_affine(max(a1, a2), b1, 0, k)
    # Where the lines cross, clamped to [-1, k + 1]: a tiny (even subnormal) slope difference can put
    # it at +-inf, and inf // 1 is NaN.
    x = min(max((a2 - a1) / (b1 - b2), -1.0), k + 1.0)
    if b1 > b2:  # line 1 on top for i >= x
        c = min(max(int(-(-x // 1)), 0), k)
        return sum_affine(a2, b2, 0, c) + sum_affine(a1, b1, c, k)
    c = min(max(int(x // 1) + 1, 0), k)  # line 1 on top for i <= x
    return sum_affine(a1, b1, 0, c) + sum_affine(a2, b2, c, k)


class LatencyModel(ABC):
    """Seconds per iteration. Subclasses may override the decode-run methods with closed forms."""

    name: str = "latency"

    @abstractmethod
    def step_time(self, shape: StepShape) -> float: ...

    def decode_run_time(self, n: int, s0: int, k: int) -> float:
        """Total seconds of k decode steps of n sequences; step i reads s0 + n*i KV tokens."""
        return sum(self.step_time(StepShape(n, n, s0 + n * i, s0 + n * i)) for i in range(k))

    def decode_steps_until(self, n: int, s0: int, budget_s: float, k_max: int) -> int:
        """Smallest k in [1, k_max] whose k steps take >= budget_s seconds, or k_max if none do."""
        if self.decode_run_time(n, s0, k_max) < budget_s:
            return k_max
        lo, hi = 0, k_max  # time(lo) < budget <= time(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.decode_run_time(n, s0, mid) >= budget_s:
                hi = mid
            else:
                lo = mid
        return max(hi, 1)


class RooflineModel(LatencyModel):
    """max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth) + fixed overhead, per GPU.

    FLOPs = 2 x params x new tokens (the dense layers) + 4 x layers x heads x head_dim per attended pair.
    Bytes = weights + KV bytes of every token read or written. Tensor-parallel ranks each take 1/tp of
    weights, heads and KV; communication is not modelled.
    """

    name = "roofline"

    def __init__(self, model: ModelSpec, gpu: GpuSpec, params: RooflineParams = RooflineParams(), tp: int = 1):
        self.flops_per_token = 2 * model.params / tp
        self.flops_per_pair = model.attn_flops_per_pair / tp
        self.weight_bytes = model.weight_bytes / tp
        self.kv_bytes_per_token = model.kv_bytes_per_token / tp
        self.flops_rate = gpu.bf16_flops * params.flops_efficiency
        self.byte_rate = gpu.hbm_bandwidth * params.bandwidth_efficiency
        self.overhead = params.step_overhead_s

    def step_time(self, shape: StepShape) -> float:
        flops = self.flops_per_token * shape.new_tokens + self.flops_per_pair * shape.attn_pairs
        bytes_ = self.weight_bytes + self.kv_bytes_per_token * shape.kv_tokens
        return max(flops / self.flops_rate, bytes_ / self.byte_rate) + self.overhead

    def decode_run_time(self, n: int, s0: int, k: int) -> float:
        a_c = (self.flops_per_token * n + self.flops_per_pair * s0) / self.flops_rate
        b_c = self.flops_per_pair * n / self.flops_rate
        a_m = (self.weight_bytes + self.kv_bytes_per_token * s0) / self.byte_rate
        b_m = self.kv_bytes_per_token * n / self.byte_rate
        return sum_max_of_two_affine(a_c, b_c, a_m, b_m, k) + self.overhead * k
