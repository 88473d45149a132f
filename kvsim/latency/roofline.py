"""The roofline latency model (`--latency roofline`): kvsim's first, uncalibrated model.

max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth) + fixed overhead, per GPU.
FLOPs = 2 x active params x new tokens (the dense layers; a mixture of experts counts the experts a token
is routed to) + 4 x layers x heads x head_dim per attended pair. Bytes = weights + KV bytes of every token
read or written (windows and recurrent layers are not modelled here: use the per-operation model). Tensor-parallel ranks each take 1/tp of
weights, heads and KV; communication is not modelled. Kept for comparison: the per-operation model
(perop.py) is tied to measured GPU times.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.hardware import GpuSpec, ModelSpec
from kvsim.latency.base import LatencyModel, StepShape, sum_max_of_two_affine
from kvsim.option_table import check_fields, option_default
from kvsim.validation import NON_NEGATIVE, require


@dataclass(frozen=True)
class RooflineParams:
    """Achievable fractions of the datasheet peaks, and fixed per-iteration overhead."""

    flops_efficiency: float = option_default("flops_efficiency")
    bandwidth_efficiency: float = option_default("bandwidth_efficiency")
    step_overhead_s: float = option_default("step_overhead_ms") / 1000

    def __post_init__(self) -> None:
        check_fields(self)  # the efficiencies, by their options' rules
        require(self.step_overhead_s, NON_NEGATIVE, "step_overhead_s")


class RooflineModel(LatencyModel):
    name = "roofline"

    def __init__(self, model: ModelSpec, gpu: GpuSpec, params: RooflineParams = RooflineParams(), tp: int = 1):
        self.flops_per_token = 2 * model.active_params / tp
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

    def decode_step_times(self, n: int, s0: int, k: int, contexts=None) -> list[float]:
        a_c = (self.flops_per_token * n + self.flops_per_pair * s0) / self.flops_rate
        b_c = self.flops_per_pair * n / self.flops_rate
        a_m = (self.weight_bytes + self.kv_bytes_per_token * s0) / self.byte_rate
        b_m = self.kv_bytes_per_token * n / self.byte_rate
        o = self.overhead
        return [max(a_c + b_c * i, a_m + b_m * i) + o for i in range(k)]

    def decode_run_time(self, n: int, s0: int, k: int, contexts=None) -> float:
        a_c = (self.flops_per_token * n + self.flops_per_pair * s0) / self.flops_rate
        b_c = self.flops_per_pair * n / self.flops_rate
        a_m = (self.weight_bytes + self.kv_bytes_per_token * s0) / self.byte_rate
        b_m = self.kv_bytes_per_token * n / self.byte_rate
        return sum_max_of_two_affine(a_c, b_c, a_m, b_m, k) + self.overhead * k
