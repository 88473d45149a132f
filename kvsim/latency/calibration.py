"""Calibrations: the measured constants of the per-operation latency model, and where they come from.

A calibration belongs to one GPU and says whether it was measured on a real GPU or in the CPU
interpreter (a pipeline check). Its parameters are kernel floors (seconds) and achieved fractions of the
GPU preset's peak FLOP/s and HBM bandwidth, so a calibration of one chip carries over to another memory
configuration of the same chip (A100-80GB -> A100-40GB, H100 -> H200) with that GPU's own peaks.

Shipped calibrations live in ``kvsim/latency/calibrations/<gpu>.json``; `kvsim calibrate` writes new ones.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from math import log
from pathlib import Path

from kvsim.errors import ConfigError
from kvsim.files import read_json_object, write_text_atomically
from kvsim.hardware import GpuSpec
from kvsim.hardware.gpus import GPU_PRESETS
from kvsim.latency.gemm_shapes import GemmGrid
from kvsim.latency.moe_shapes import check_table
from kvsim.releases import RELEASES_DIR, RELEASES_INDEX, SHIPPED, release_calibration  # noqa: F401 (re-exported)
from kvsim.releases import kernel_mismatches, priced_release, release_key, vllm_releases

FORMAT = "kvsim-latency-calibration"
VERSION = 2
ELEMENTWISE_KINDS = ("norm", "rope", "act", "add", "emb")
V1_KINDS = ("norm", "rope", "act", "add")  # those vLLM V1 runs as its own kernels (the embedding: a gather)


@dataclass(frozen=True)
class GemmParams:
    """t = t0 + ((FLOPs / (peak x flops_eff))^knee + (bytes / (bandwidth x bw_eff))^knee)^(1/knee)"""

    t0_s: float = 5e-6
    flops_eff: float = 0.73
    bw_eff: float = 0.83
    knee: float = 1.4  # 1: compute and memory time add up; large: the larger one alone (roofline)


@dataclass(frozen=True)
class ElementwiseParams:
    """t = t0 + max(serial_s x row elements, bytes / (bandwidth x bw_eff)): a kernel with one block per
    token walks a token's row serially, which sets its time until the bytes take longer."""

    t0_s: float = 3e-6
    bw_eff: float = 0.6
    serial_s: float = 0.0  # seconds per element of one token's row


@dataclass(frozen=True)
class DecodeAttentionParams:
    """Per layer: t = max(floor, ramp + per_seq x sequences + (KV tokens + per_seq_tokens x sequences) x
    token bytes / (bandwidth x bw_eff)). The floor is the shortest the KV-write, attention and split-merge
    kernels together take; above it the pass streams the KV at the achieved bandwidth. ``per_seq_tokens``:
    what each sequence costs beyond its tokens, as tokens of its own KV width (a partly filled last KV tile
    and its split's merge scale with the heads read, not with the sequence count alone)."""

    floor_s: float = 14e-6
    ramp_s: float = 2e-6
    bw_eff: float = 0.76
    per_seq_s: float = 0.0
    per_seq_tokens: float = 0.0
    # an FP8 (1-byte) KV cache: its bandwidth efficiency and an extra time above the floor (the kernels
    # dequantize as they stream, so half the bytes do not take half the time; 0: as bf16)
    kv8_bw_eff: float = 0.0
    kv8_ramp_s: float = 0.0
    # what each sequence costs beyond its tokens with an FP8 cache, in FP8 tokens (0: per_seq_tokens): the merge
    # of its splits and its last tile's fixed work do not halve with the bytes
    kv8_per_seq_tokens: float = 0.0
    # Kernels that split a sequence's KV over several CTAs only for grouped queries (vLLM's FlashAttention-2
    # decode: its split-KV path runs where query heads are folded into the KV heads' rows): with one query
    # head per KV head each (sequence, KV head) CTA walks its whole context, at most one CTA per SM at a
    # time, streaming ``unsplit_cta_bw`` bytes/s, with a floor, ramp and per-sequence tokens of its own (no
    # split-merge kernel). 0: every layout splits.
    unsplit_cta_bw: float = 0.0
    unsplit_floor_s: float = 0.0
    unsplit_ramp_s: float = 0.0
    unsplit_per_seq_tokens: float = 0.0
    # absorbed MLA decode: the fraction of peak FLOP/s its attention reaches (0: the prefill tile efficiency)
    flops_eff: float = 0.0

    def unsplit(self) -> "DecodeAttentionParams | None":
        """These parameters as the unsplit kernel runs them (its floor, ramp, per-sequence tokens; the
        bandwidth efficiencies shared), or None when every layout splits."""
        if not self.unsplit_cta_bw:
            return None
        return replace(
            self,
            floor_s=self.unsplit_floor_s,
            ramp_s=self.unsplit_ramp_s,
            per_seq_s=0.0,
            per_seq_tokens=self.unsplit_per_seq_tokens,
            kv8_per_seq_tokens=0.0,
        )

    def unsplit_token_s(self, token_bytes, ctas, sms):
        """Seconds per KV token (``token_bytes`` bytes) when ``ctas`` CTAs (sequences x KV heads) walk their
        contexts, at most ``sms`` at once (works on numpy arrays)."""
        import numpy as np

        lanes = np.minimum(ctas, sms) if np.ndim(ctas) else min(ctas, sms)
        return token_bytes / (lanes * self.unsplit_cta_bw)

    def bw_for(self, kv_dtype_bytes) -> float:
        """The bandwidth efficiency for KV elements of ``kv_dtype_bytes`` bytes (a number or a numpy array)."""
        if not self.kv8_bw_eff:
            return self.bw_eff
        import numpy as np

        if np.ndim(kv_dtype_bytes) == 0:
            return self.kv8_bw_eff if kv_dtype_bytes == 1 else self.bw_eff
        return np.where(kv_dtype_bytes == 1, self.kv8_bw_eff, self.bw_eff)

    def stream_s(self, num_seqs, kv_tokens, token_s, kv8=False):
        """The part above the floor, for ``num_seqs`` sequences over ``kv_tokens`` context tokens in all,
        ``token_s`` seconds to stream one token's KV (``kv8``: an FP8 cache, a bool or an array of them); works
        on numpy arrays too."""
        per_seq = self.per_seq_tokens
        if self.kv8_per_seq_tokens:
            per_seq = per_seq + (self.kv8_per_seq_tokens - per_seq) * kv8
        return (
            self.ramp_s + self.kv8_ramp_s * kv8 + self.per_seq_s * num_seqs + (kv_tokens + per_seq * num_seqs) * token_s
        )


@dataclass(frozen=True)
class PrefillAttentionParams:
    """Per layer, a FlashAttention-style tile model: each (query tile, head) is one unit of work that walks
    the KV tiles it attends to plus ``cta_overhead_tiles`` of start-up; units spread over the SMs, and the
    pass takes floor + max(total work / SMs, the longest unit) x tile time, or the KV read if longer."""

    floor_s: float = 10e-6
    flops_eff: float = 0.62  # steady-state fraction of peak FLOP/s of one tile iteration
    cta_overhead_tiles: float = 2.0
    tile_q: int = 128
    tile_kv: int = 64
    bw_eff: float = 0.76
    # a tile iteration costs as if the head were this many dimensions wider: the softmax and rescaling do not
    # shrink with the head (0: time in proportion to head_dim)
    tile_extra_dims: float = 0.0


@dataclass(frozen=True)
class MoeParams:
    """A fused MoE layer (vLLM's fused_moe: routing, permute, the two grouped GEMMs, activation, combine) on
    one GPU: a fixed time, a time per expert the batch activates there, a time per routing pair of the whole
    layer, and a soft roofline over the FLOPs routed there and the bytes of the active experts' weights and the
    routed activations."""

    t0_s: float = 10e-6
    per_expert_s: float = 0.0
    # per (token, expert) routing pair of the whole layer and 4,096 hidden elements: permuting and combining move
    # every token's top-k copies of its hidden state on each rank, even those other expert-parallel ranks compute
    per_route_s: float = 0.0
    # the same, added under expert parallelism: the grouped GEMMs' grid still walks every routed copy, the other
    # ranks' ones masked out
    per_route_ep_s: float = 0.0
    flops_eff: float = 0.6
    bw_eff: float = 0.7
    knee: float = 1.4
    # fixed time added under expert parallelism (the expert map, masking the other ranks' copies): the measured
    # tables' expert-parallel rows sit about 25 us above the tensor-parallel ones at a few tokens
    t0_ep_s: float = 0.0


# Quantized experts kvsim prices from their own measured MoE kernels: the expert dtype (ModelSpec) -> (the
# moe_dtype of NVIDIA AIConfigurator's tables that serves it in vLLM, the operands its GEMMs run on
# (GpuSpec.tensor_core_speedup: FP8 and FP4 tensor cores where the GPU has them), the weight bytes per element
# with their scales of those kernels). FP8 checkpoints (DeepSeek-V3, Qwen3-FP8) carry 128x128 block scales;
# gpt-oss's MXFP4 experts run as 4-bit weights with bf16 activations on Hopper; int4 experts (AWQ, GPTQ,
# compressed-tensors W4A16) as 4-bit weights with a 16-bit scale per 128, bf16 compute; NVFP4 on FP4 tensor cores.
MOE_QUANT = {
    "fp8": ("fp8_block", "fp8", 1.0),
    "mxfp4": ("w4a16_mxfp4", "bf16", 0.53125),
    "int4": ("int4_wo", "bf16", 0.515625),
    "nvfp4": ("nvfp4", "fp4", 0.5625),
}
# the expert dtypes whose measured MoE times include the router's top-k selection: AIConfigurator times MXFP4
# experts through vLLM's whole FusedMoE layer, the others through fused_experts on given top-k ids
# (perop.expert_selection prices it for those)
MOE_TIMED_WITH_SELECTION = frozenset({"mxfp4"})

# The fused-MoE kernels vLLM can run (its --moe-backend; before it, environment variables such as
# VLLM_MXFP4_USE_MARLIN or VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8), as AIConfigurator's kernel_source names them.
# ``flashinfer-trtllm-mxfp8``: MXFP4 experts with activations quantized to MXFP8 (Blackwell), the
# w4a8_mxfp4_mxfp8 rows of the tables.
MOE_BACKENDS = {
    "triton": "Triton fused MoE (vLLM's own, or OpenAI's triton_kernels for MXFP4)",
    "marlin": "Marlin weight-only kernels (4-bit weights, bf16 math)",
    "flashinfer-cutlass": "FlashInfer's CUTLASS fused MoE",
    "flashinfer-trtllm": "FlashInfer's TensorRT-LLM-gen fused MoE",
    "flashinfer-trtllm-mxfp8": "FlashInfer's TensorRT-LLM-gen MXFP4 MoE with MXFP8 activations",
}
MOE_BACKEND_CHOICES = ("auto", *MOE_BACKENDS)  # --moe-backend (auto: vLLM's pick for the model and GPU)


def moe_backend_of(kernel_source: str, moe_dtype: str) -> str | None:
    """The MOE_BACKENDS family of a MoE table row's ``kernel_source`` (None: a name that does not say, such as
    the older tables' ``vllm_fused_moe``)."""
    k = kernel_source.lower()
    if moe_dtype == "w4a8_mxfp4_mxfp8":
        return "flashinfer-trtllm-mxfp8" if "trtllm" in k else None
    for key, backend in (
        ("marlin", "marlin"),
        ("trtllm", "flashinfer-trtllm"),
        ("flashinfer_cutlass", "flashinfer-cutlass"),
        ("triton", "triton"),
    ):
        if key in k:
            return backend
    return "triton" if k == "vllm_fused_moe" else None  # vLLM's fused_moe kernels are Triton kernels


def with_moe_backend(calib: "Calibration", backend: str, quant: str | None) -> "Calibration":
    """``calib`` pricing MoE layers of ``quant`` experts (None: bf16) with the ``backend`` kernels' own fit
    ('auto': as it is, fitted on every kernel the tables timed for the dtype)."""
    if backend == "auto":
        return calib
    dtype = quant or "bf16"
    fits = calib.moe_backends.get(dtype, {})
    if backend not in fits:
        have = ", ".join(sorted(fits)) or "none"
        raise ConfigError(
            f"--moe-backend {backend}: no measured {dtype} MoE kernels of that backend for "
            f"{calib.gpu} in this calibration (measured: {have}); use auto"
        )
    p = fits[backend]
    # the measured shapes' ratios are to the fit of every kernel of the dtype: the backend's own fit prices it
    shapes = {k: v for k, v in calib.moe_shapes.items() if k != dtype}
    calib = replace(calib, moe_shapes=shapes)
    return replace(calib, moe_quant={**calib.moe_quant, quant: p}) if quant else replace(calib, moe=p)


# Quantized dense GEMMs (projections and dense MLPs of a quantized checkpoint; the embedding, LM head and MoE
# router stay bf16, as vLLM loads them), priced from their own measured kernels where a calibration has them:
# the scheme (ModelSpec.weight_quant) -> (gemm_dtype of AIConfigurator's tables, or None where they have none;
# weight bytes per element with their scales; the operands the tensor cores multiply). ``fp8``: per-tensor or
# per-channel scales (vLLM's CUTLASS scaled_mm); ``fp8_block``: 128x128 block scales (DeepSeek-V3, Qwen3-FP8:
# DeepGEMM / FlashInfer block kernels); ``nvfp4``: 4-bit values, one 8-bit scale per 16 (FP4 tensor cores);
# ``w4a16`` / ``w8a16``: 4- or 8-bit weights with a 16-bit scale per 128, dequantized in the kernel and
# multiplied in bf16 (Marlin: AWQ, GPTQ, compressed-tensors); ``w8a8_int8``: int8 weights and activations
# (per-channel / per-token scales) on int8 tensor cores. A scheme the calibration has no fit for, or whose tensor
# cores the GPU lacks (FP8 on Ampere, NVFP4 before Blackwell: vLLM's weight-only Marlin kernels), is priced with
# the bf16 GEMM parameters reading the scheme's weight bytes.
GEMM_QUANT = {
    "fp8": ("fp8", 1.0, "fp8"),
    "fp8_block": ("fp8_block", 1.0, "fp8"),
    "nvfp4": ("nvfp4", 0.5625, "fp4"),
    "w4a16": (None, 0.515625, "bf16"),
    "w8a16": (None, 1.015625, "bf16"),
    "w8a8_int8": (None, 1.0, "int8"),
}


@dataclass(frozen=True)
class LinkParams:
    """One all-reduce among n GPUs: t = latency + message bytes / bandwidth, or, where a second line is
    given, the faster of the two: vLLM runs small messages through its CUDA-graph custom all-reduce (a few
    microseconds) and large ones through NCCL (more latency, more bandwidth).

    Where the measured times are kept (``points``), a message between the smallest and the largest measured
    size takes the time interpolated between its measured neighbours (straight on log-log axes): two lines
    cannot follow the custom all-reduce's switch from one-shot to two-shot (H100, 4 GPUs: 7.1 us at 256 KiB,
    11.4 at 512 KiB, where the lines say 8.2), nor NCCL's protocol steps. Outside them, the lines, scaled to
    meet the nearest measured point (no jump where the measurements end)."""

    latency_s: float
    bandwidth: float  # bytes/s (message bytes per second for large messages)
    large_latency_s: float = 0.0  # the second line (0: none)
    large_bandwidth: float = 0.0
    points: tuple[tuple[float, float], ...] = ()  # measured (message bytes, seconds), sizes ascending

    def line_seconds(self, message_bytes: float) -> float:
        """The lines' time (the faster of the two)."""
        t = self.latency_s + message_bytes / self.bandwidth
        if self.large_bandwidth > 0:
            t = min(t, self.large_latency_s + message_bytes / self.large_bandwidth)
        return t

    def seconds(self, message_bytes: float) -> float:
        pts = self.points
        if not pts:
            return self.line_seconds(message_bytes)
        end = pts[0] if message_bytes <= pts[0][0] else pts[-1] if message_bytes >= pts[-1][0] else None
        if end is not None:  # outside the measured sizes: the line through the nearest one
            return self.line_seconds(message_bytes) * end[1] / self.line_seconds(end[0])
        i = bisect_left(pts, (message_bytes,))  # pts[i - 1] < message_bytes <= pts[i]
        (s0, t0), (s1, t1) = pts[i - 1], pts[i]
        return t0 * (t1 / t0) ** (log(message_bytes / s0) / log(s1 / s0))

    def slower(self, ratio: float) -> "LinkParams":
        """These parameters over a link ``ratio`` times slower in bandwidth (the same latencies): each line's
        bandwidth / ratio, and each measured time longer by what its bytes take at the extra cost (the bytes over
        the bandwidth of the line that is faster at that size, times ratio - 1)."""
        pts = tuple((b, t + (ratio - 1) * b / self._line_bandwidth(b)) for b, t in self.points)
        large = self.large_bandwidth / ratio if self.large_bandwidth > 0 else 0.0
        return LinkParams(self.latency_s, self.bandwidth / ratio, self.large_latency_s, large, pts)

    def _line_bandwidth(self, message_bytes: float) -> float:
        """The bandwidth of the line that is faster for ``message_bytes``."""
        if self.large_bandwidth > 0 and (
            self.large_latency_s + message_bytes / self.large_bandwidth
            < self.latency_s + message_bytes / self.bandwidth
        ):
            return self.large_bandwidth
        return self.bandwidth

    def nccl_line(self) -> "LinkParams":
        """The NCCL line alone (the only line where there is one; no measured points, which are the faster
        of both): collectives other than vLLM's custom all-reduce run through NCCL."""
        if self.large_bandwidth > 0:
            return LinkParams(self.large_latency_s, self.large_bandwidth)
        return LinkParams(self.latency_s, self.bandwidth)


def _link_tables(d: dict, key: str) -> dict:
    """A calibration's ``key`` table of collectives: interconnect -> group size -> LinkParams."""
    return {
        ic: {_group_size(n): _link(p) for n, p in _object(table, ic).items()}
        for ic, table in _object(d.get(key, {}), key).items()
    }


def _link(p) -> LinkParams:
    """One group size's LinkParams, its measured points checked: [message bytes, seconds] pairs of positive
    finite numbers, sizes strictly ascending."""
    from kvsim.validation import is_finite

    p = dict(_object(p, "an all-reduce group"))
    raw = p.pop("points", [])
    if not isinstance(raw, (list, tuple)):
        raise TypeError("LinkParams.points must be a list of [message bytes, seconds] pairs")
    points = []
    for pair in raw:
        if (
            not isinstance(pair, (list, tuple))
            or len(pair) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and is_finite(v) and v > 0 for v in pair)
        ):
            raise ValueError(f"LinkParams.points: each entry is [message bytes, seconds] > 0, got {pair!r:.60}")
        if points and pair[0] <= points[-1][0]:
            raise ValueError("LinkParams.points: message sizes must be strictly ascending")
        points.append((float(pair[0]), float(pair[1])))
    return replace(_build(LinkParams, p), points=tuple(points))


def _nearest_group(table: dict, n: int) -> "LinkParams":
    """The parameters of group size ``n``, or of the nearest measured one (the larger on a tie)."""
    best = min((int(k) for k in table), key=lambda s: (abs(s - n), -s))
    return table[str(best)]


@dataclass(frozen=True)
class Calibration:
    gpu: str
    measured_on: str = "gpu"  # "gpu", or "cpu-interpreter" for pipeline checks
    gemm: GemmParams = field(default_factory=GemmParams)
    elementwise: dict = field(default_factory=lambda: {k: ElementwiseParams() for k in ELEMENTWISE_KINDS})
    decode_attention: DecodeAttentionParams = field(default_factory=DecodeAttentionParams)
    prefill_attention: PrefillAttentionParams = field(default_factory=PrefillAttentionParams)
    # interconnect ("nvswitch", "pairwise") -> GPUs in the group (as a string) -> params
    all_reduce: dict = field(default_factory=dict)
    # the same layout for NCCL's all-gather + reduce-scatter of one buffer (a MoE layer's exchange among
    # data-parallel ranks): message bytes = the gathered buffer
    exchange: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)  # parameter group -> where its numbers come from
    fit: dict = field(default_factory=dict)  # fit and validation statistics
    derived_from: str = ""  # a calibration of the same chip this one was derived from
    moe: MoeParams | None = None  # fused MoE layers (None: priced with the GEMM parameters)
    # fused MoE layers with quantized experts, by the experts' dtype (MOE_QUANT); one missing: ``moe`` with the
    # quantized weights' bytes
    moe_quant: dict = field(default_factory=dict)
    # MLA decode (DeepSeek-V3 style), fitted on measured MLA modules: what the module takes beyond its
    # projection GEMMs (None: priced as decode_attention prices any attention)
    mla_decode: DecodeAttentionParams | None = None
    mla_prefill: PrefillAttentionParams | None = None  # the same for MLA prefill (None: as prefill_attention)
    # dense GEMMs of quantized weights, by scheme (GEMM_QUANT); one missing: ``gemm``, as bf16
    gemm_quant: dict = field(default_factory=dict)
    # fused MoE layers by the kernels that ran them (vLLM's --moe-backend): experts' dtype ("bf16" or MOE_QUANT)
    # -> backend (MOE_BACKENDS) -> MoeParams fitted on that kernel's rows alone (``moe``/``moe_quant`` are
    # fitted on every row of the dtype, whichever kernel a table timed)
    moe_backends: dict = field(default_factory=dict)
    # measured / fitted MoE layer times of the shapes the tables timed (kvsim/latency/moe_shapes.py): experts'
    # dtype ("bf16" or MOE_QUANT) -> shape key -> routing -> [[tokens], [ratios]]
    moe_shapes: dict = field(default_factory=dict)
    # measured / fitted dense GEMM times on a grid of shapes the tables timed (kvsim/latency/gemm_shapes.py):
    # weight format ("bf16" or a GEMM_QUANT key) -> GemmGrid
    gemm_shapes: dict = field(default_factory=dict)
    # vLLM V1's element-wise kernels (the residual add fused into RMSNorm; kvsim/latency/perop.py), by kind
    # (V1_KINDS): fitted on measured vLLM kernels; empty: ``elementwise`` prices V1's too
    v1_elementwise: dict = field(default_factory=dict)

    def link(self, n: int, interconnect: str) -> LinkParams:
        """All-reduce parameters for n GPUs (the nearest measured group size if n itself was not)."""
        table = self.all_reduce.get(interconnect) or self.all_reduce.get("nvswitch") or {}
        if not table:
            raise ConfigError(
                f"calibration for {self.gpu} has no all-reduce measurements; tensor parallelism "
                "needs them (calibrate from an all_reduce.csv)"
            )
        return _nearest_group(table, n)

    def exchange_link(self, n: int, interconnect: str) -> LinkParams | None:
        """All-gather + reduce-scatter parameters for n GPUs (the nearest measured group size), or None where
        the calibration has no such measurements."""
        table = self.exchange.get(interconnect) or self.exchange.get("nvswitch") or {}
        return _nearest_group(table, n) if table else None

    def to_json(self) -> dict:
        d = asdict(self)
        d["gemm_shapes"] = {q: g.to_json() for q, g in self.gemm_shapes.items()}
        return {"format": FORMAT, "version": VERSION, **d}

    @staticmethod
    def from_json(d: dict, where: str = "calibration") -> "Calibration":
        try:
            if d.get("format") != FORMAT or d.get("version") != VERSION:
                raise ValueError(
                    f"not a {FORMAT} version {VERSION} file (format {d.get('format')!r}, version {d.get('version')!r})"
                )
            return Calibration(
                gpu=str(d["gpu"]),
                measured_on=str(d.get("measured_on", "gpu")),
                gemm=_build(GemmParams, d["gemm"]),
                elementwise=_elementwise(d["elementwise"]),
                decode_attention=_build(DecodeAttentionParams, d["decode_attention"]),
                prefill_attention=_build(PrefillAttentionParams, d["prefill_attention"]),
                all_reduce=_link_tables(d, "all_reduce"),
                exchange=_link_tables(d, "exchange"),
                sources=dict(d.get("sources", {})),
                fit=dict(d.get("fit", {})),
                derived_from=str(d.get("derived_from", "")),
                moe=_optional(MoeParams, d, "moe"),
                moe_quant={
                    _moe_quant_key(k): _build(MoeParams, v)
                    for k, v in _object(d.get("moe_quant", {}), "moe_quant").items()
                },
                mla_decode=_optional(DecodeAttentionParams, d, "mla_decode"),
                mla_prefill=_optional(PrefillAttentionParams, d, "mla_prefill"),
                gemm_quant={
                    _quant_key(k, GEMM_QUANT, "gemm_quant"): _build(GemmParams, v)
                    for k, v in _object(d.get("gemm_quant", {}), "gemm_quant").items()
                },
                moe_backends={
                    _quant_key(q, {"bf16": 0, **MOE_QUANT}, "moe_backends"): {
                        _quant_key(b, MOE_BACKENDS, f"moe_backends {q}"): _build(MoeParams, v)
                        for b, v in _object(t, f"moe_backends {q}").items()
                    }
                    for q, t in _object(d.get("moe_backends", {}), "moe_backends").items()
                },
                moe_shapes={
                    _quant_key(q, {"bf16": 0, **MOE_QUANT}, "moe_shapes"): check_table(t, f"moe_shapes {q}")
                    for q, t in _object(d.get("moe_shapes", {}), "moe_shapes").items()
                },
                gemm_shapes={
                    _quant_key(q, {"bf16": 0, **GEMM_QUANT}, "gemm_shapes"): GemmGrid.from_json(t, f"gemm_shapes {q}")
                    for q, t in _object(d.get("gemm_shapes", {}), "gemm_shapes").items()
                },
                v1_elementwise={
                    _quant_key(k, dict.fromkeys(V1_KINDS), "v1_elementwise"): _build(ElementwiseParams, p)
                    for k, p in _object(d.get("v1_elementwise", {}), "v1_elementwise").items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"{where}: not a usable latency calibration ({type(e).__name__}: {e})") from None


# What a calibration field may hold beyond "a finite number from 0 to 1e16" (what the formulas divide by or
# raise to, and the tile sizes they count in): (lowest, highest, whole number)
_FIELD_RANGES = {
    "flops_eff": (1e-6, 1.0, False),
    "bw_eff": (1e-6, 1.0, False),
    "kv8_bw_eff": (0.0, 1.0, False),
    "unsplit_cta_bw": (0.0, 1e16, False),
    ("DecodeAttentionParams", "flops_eff"): (0.0, 1.0, False),  # 0: the prefill tile efficiency
    "knee": (1.0, 100.0, False),
    "tile_q": (1, 65536, True),
    "tile_kv": (1, 65536, True),
    "bandwidth": (1.0, 1e16, False),
}


def _elementwise(v) -> dict:
    kinds = _object(v, "elementwise")
    missing = [k for k in ELEMENTWISE_KINDS if k not in kinds]
    if missing:
        raise ValueError(
            f"elementwise lacks the kind(s) {', '.join(missing)} (it holds {', '.join(ELEMENTWISE_KINDS)})"
        )
    return {k: _build(ElementwiseParams, p) for k, p in kinds.items()}


def _optional(cls, d: dict, key: str):
    """The ``cls`` parameters under ``key``, or None where the calibration has none."""
    return _build(cls, d[key]) if d.get(key) is not None else None


def _moe_quant_key(key) -> str:
    """A moe_quant entry's expert dtype: one kvsim prices (an unknown one would be silently unused)."""
    return _quant_key(key, MOE_QUANT, "moe_quant")


def _quant_key(key, known: dict, table: str) -> str:
    """An entry of a calibration's ``table`` of quantized kernels: a scheme kvsim prices (an unknown one would be
    silently unused)."""
    if key not in known:
        raise ValueError(f"{table} has parameters for {key!r:.40}; kvsim prices {', '.join(known)}")
    return key


def _group_size(key) -> str:
    """An all-reduce table's key: a number of GPUs, written as a plain whole number."""
    if not (
        isinstance(key, str) and key.isascii() and key.isdigit() and str(int(key)) == key and 1 <= int(key) <= 4096
    ):
        raise ValueError(
            f"all-reduce group sizes are whole numbers of GPUs from 1 to 4096 written plainly, got {key!r:.40}"
        )
    return key


def _object(v, name: str) -> dict:
    if not isinstance(v, dict):
        raise TypeError(f"{name} must be an object")
    return v


# fields whose 0 switches a path off and whose tiny values would make every time infinite
_OFF_OR_AT_LEAST = {"kv8_bw_eff": 1e-6, "unsplit_cta_bw": 1e6, "flops_eff": 1e-6}


def _build(cls, values: dict):
    from kvsim.validation import is_finite, shown

    if not isinstance(values, dict):
        raise TypeError(f"{cls.__name__} must be an object")
    known = {f.name for f in fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(sorted(unknown))}")
    obj = cls(**values)
    for f in fields(cls):
        v = getattr(obj, f.name)
        if isinstance(v, tuple):  # a list field (LinkParams.points): its own reader checks it
            continue
        lo, hi, whole = _FIELD_RANGES.get((cls.__name__, f.name)) or _FIELD_RANGES.get(f.name, (0.0, 1e16, False))
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or not is_finite(v)
            or not lo <= v <= hi
            or (whole and v != int(v))
        ):
            raise ValueError(
                f"{cls.__name__}.{f.name} must be a finite {'whole ' if whole else ''}number from {lo:g} "
                f"to {hi:g}, got {shown(v)}"
            )
        if 0 < v < _OFF_OR_AT_LEAST.get(f.name, 0):
            raise ValueError(
                f"{cls.__name__}.{f.name} must be 0 (off) or at least {_OFF_OR_AT_LEAST[f.name]:g}, got {v!r}"
            )
        if whole:
            object.__setattr__(obj, f.name, int(v))
    return obj


_NUMBER_LIST = re.compile(r"\[\s*(-?[0-9][-+0-9.eE]*(?:,\s*-?[0-9][-+0-9.eE]*)*)\s*\]")


def save_calibration(calib: Calibration, path: str | Path) -> None:
    text = json.dumps(calib.to_json(), indent=1)
    # lists of numbers on one line each (moe_shapes holds thousands of them)
    text = _NUMBER_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    write_text_atomically(path, text + "\n")


def load_calibration(path: str | Path) -> Calibration:
    return Calibration.from_json(read_json_object(path, f"--latency {path}"), f"--latency {path}")


# architectures nothing was measured on, and the measured one whose efficiencies stand in for theirs
# (MI300X/MI325X: HBM accelerators of H100's class; vLLM runs other kernels on them, ROCm's, none of them measured)
STAND_IN_ARCH = {"cdna3": ("hopper", "NVIDIA Hopper efficiencies: no AMD kernel was measured")}


def on_slower_nvlink(c: Calibration, measured: GpuSpec | None, gpu: GpuSpec) -> Calibration:
    """``c`` (collectives measured on ``measured``) for ``gpu``: where ``gpu``'s NVLink is slower (H800 and A800,
    the export parts of H100 and A100: 200 GB/s each way against 450 and 300), the collectives among GPUs one
    NVLink domain joins (through NVSwitch or pairwise links) take their bandwidth-bound part that many times
    slower (:meth:`LinkParams.slower`); groups beyond the domain cross the NICs, as measured. Unchanged where
    either bandwidth is not stated."""
    if measured is None or not (0 < gpu.nvlink_bytes_s < measured.nvlink_bytes_s):
        return c
    ratio = measured.nvlink_bytes_s / gpu.nvlink_bytes_s

    def scaled(tables: dict) -> dict:
        return {
            kind: {n: link.slower(ratio) if int(n) <= gpu.nvlink_gpus else link for n, link in table.items()}
            for kind, table in tables.items()
        }

    return replace(c, all_reduce=scaled(c.all_reduce), exchange=scaled(c.exchange))


def calibration_source(gpu: GpuSpec) -> tuple[str, str]:
    """The measured GPU whose calibration prices ``gpu`` and a note on it ("" for its own): its own; else a
    measured GPU of the same architecture, of the same die first (RTX 5090 -> rtx-pro-6000, both GB202); else,
    with a warning, the stand-in of its architecture (:data:`STAND_IN_ARCH`) or, for an architecture nothing
    stands in for (a custom GPU without arch=), the measured GPU nearest in the roofline sense (the ratio of
    FLOP/s to bandwidth, and bandwidth)."""
    import math

    if f"{gpu.name}.json" != RELEASES_INDEX and (SHIPPED / f"{gpu.name}.json").exists():
        return gpu.name, ""
    measured = sorted(p.stem for p in SHIPPED.glob("*.json") if p.name != RELEASES_INDEX)  # same on every disk
    known = [n for n in measured if n in GPU_PRESETS]
    same = [n for n in known if gpu.arch and GPU_PRESETS[n].arch == gpu.arch]
    same.sort(key=lambda n: not (gpu.chip and GPU_PRESETS[n].chip == gpu.chip))  # stable: by name within
    if same:
        return same[0], f"{gpu.name}: calibration derived from {same[0]} (same architecture, {gpu.name}'s own peaks)"
    arch, said = STAND_IN_ARCH.get(gpu.arch, ("", ""))
    stand_in = [n for n in known if arch and GPU_PRESETS[n].arch == arch]
    if stand_in:
        chip = stand_in[0]
        why = f"{chip}'s kernel efficiencies ({said})"
    else:

        def distance(n: str) -> float:
            g = GPU_PRESETS[n]
            ridge = math.log((gpu.bf16_flops / gpu.hbm_bandwidth) / (g.bf16_flops / g.hbm_bandwidth))
            return abs(ridge) + abs(math.log(gpu.hbm_bandwidth / g.hbm_bandwidth))

        chip = min(known, key=distance) if known else measured[0]
        why = f"the kernel efficiencies of {chip}, the measured GPU nearest in FLOP/s per byte and bandwidth" + (
            "" if gpu.arch else " (name its arch= to borrow its architecture's)"
        )
    return chip, (
        f"warning: no latency calibration for {gpu.name} ({gpu.arch or 'architecture not given'}); using "
        f"{why} with {gpu.name}'s own peaks, unvalidated (calibrate one with `kvsim calibrate`)"
    )


def slow_quant_gemms(c: Calibration, gpu: GpuSpec) -> list[str]:
    """The quantized GEMM schemes whose fit runs compute-bound GEMMs no faster than the bf16 fit although ``gpu``'s
    tensor cores multiply their operands at least twice as fast as bf16: a table that timed another path than the
    kernel vLLM serves with, not a kernel (CUTLASS's FP8 scaled_mm runs 1.3-1.9x bf16's rate in every other
    table). It picks out the FP8 rows of every vLLM 0.14 table (H100, H200, GB200, GB300, L40S: at 2k-8k tokens
    they take 1.0-1.9x bf16's time where 0.18-0.24's take 0.55-0.8x) and Blackwell's 0.19 FP8 rows (1.1x)."""
    base = c.gemm.flops_eff
    return sorted(
        q
        for q, p in c.gemm_quant.items()
        if (speed := gpu.tensor_core_speedup(GEMM_QUANT[q][2])) > 1
        and p.flops_eff * speed <= base
        and not (q == "fp8_block" and "fp8" in c.gemm_quant)  # priced by the per-tensor fit (perop.quant_gemm_scheme)
    )


def gemm_table(c: Calibration, q: str, release: str) -> str:
    """The vLLM release whose table ``c`` (the calibration of ``release``) fitted its ``q`` GEMMs on: its own, or,
    where its tables have no rows of the scheme, the older release's it took (``fit.aic.versions``)."""
    versions = c.fit.get("aic", {}).get("versions", {})
    return versions.get(f"gemm_perf:{q}", release) if isinstance(versions, dict) else release


def _slow_gemm_table(chip: str, releases: dict[str, str], table: str, q: str) -> bool:
    """Whether release ``table``'s own fit of ``q`` GEMMs on ``chip`` is a slow one (:func:`slow_quant_gemms`),
    judged against that release's bf16 fit (the same collection); a table of no measured release is not judged."""
    if table not in releases:
        return False
    return q in slow_quant_gemms(_read_shipped(SHIPPED / releases[table]), GPU_PRESETS[chip])


@dataclass(frozen=True)
class Borrowed:
    """An op a release's calibration prices with another release's fit: what, from which release, and why."""

    op: str
    release: str
    why: str
    experts: str | None = None  # a MoE op: the expert dtype (MOE_QUANT key) whose kernels it is
    # a MoE op: whether the rows of a kernel named by --moe-backend were taken too (False: only the default path's)
    backend_rows: bool = True


def _take(c: Calibration, attr: str, key: str, source: Calibration) -> Calibration:
    """``c`` with ``source``'s fit of ``attr[key]`` (dropped where ``source`` has none), and for MoE and quantized
    GEMMs its measured shapes (their ratios are to that fit)."""
    have = dict(getattr(c, attr))
    if key in getattr(source, attr):
        have[key] = getattr(source, attr)[key]
    else:
        have.pop(key, None)
    c = replace(c, **{attr: have})
    if attr == "gemm_quant":
        grids = {q: g for q, g in c.gemm_shapes.items() if q != key}
        if key in have and key in source.gemm_shapes:  # the fit just taken, with its ratios
            grids[key] = source.gemm_shapes[key]
        c = replace(c, gemm_shapes=grids)
    if attr in ("moe_quant", "moe_backends"):
        shapes = dict(c.moe_shapes)
        if key in source.moe_shapes:
            shapes[key] = source.moe_shapes[key]
        else:
            shapes.pop(key, None)
        c = replace(c, moe_shapes=shapes)
    return c


def _mend_release(c: Calibration, chip: str, release: str | None) -> tuple[Calibration, list[Borrowed]]:
    """Release ``release``'s calibration of ``chip`` with every op its tables are known not to time as vLLM runs
    it priced by another release: a known kernel mismatch (kvsim.releases.KERNEL_MISMATCHES) by the newest
    measured release; a quantized GEMM no faster than bf16 (:func:`slow_quant_gemms`, judged on the release whose
    table it was fitted on, :func:`gemm_table`) by the nearest release whose fit of that scheme comes from another
    table that is plausible, later ones first (the kernel vLLM has served with since)."""
    releases = vllm_releases().get(chip, {})
    if release is None or not releases:
        return c, []
    borrowed: list[Borrowed] = []
    wrong = kernel_mismatches(chip, release)
    if wrong:
        top = max(releases, key=release_key)
        newest = _read_shipped(SHIPPED / releases[top])
        for m in wrong:
            c = _take(c, *m.group, newest)
        first = {m.op.split(" by ")[0]: m for m in reversed(wrong)}  # each op's first entry says why
        backends = {m.op.split(" by ")[0] for m in wrong if m.group[0] == "moe_backends"}
        for op, m in sorted(first.items()):
            moe = m.group[0].startswith("moe_")
            experts = m.group[1] if moe else None
            borrowed.append(Borrowed(op, top, f"{release}'s table {m.why}", experts, not moe or op in backends))
    gpu = GPU_PRESETS[chip]
    # a release whose tables have no rows of a scheme took an older release's (gemm_table): judged as that release's
    slow = [q for q in c.gemm_quant if _slow_gemm_table(chip, releases, gemm_table(c, q, release), q)]
    if slow:
        later = sorted((r for r in releases if release_key(r) > release_key(release)), key=release_key)
        earlier = sorted((r for r in releases if release_key(r) < release_key(release)), key=release_key, reverse=True)
        others = [(r, _read_shipped(SHIPPED / releases[r])) for r in later + earlier]
        for q in slow:
            own = gemm_table(c, q, release)
            # another table of the scheme, not a slow one: a later release may hold the same (slow) rows as this one
            good = [
                t
                for r, o in others
                if q in o.gemm_quant
                and (t := gemm_table(o, q, r)) != own
                and t in releases
                and not _slow_gemm_table(chip, releases, t, q)
            ]
            speed = gpu.tensor_core_speedup(GEMM_QUANT[q][2])
            rows = f"{release}'s {q} GEMM rows" + (f" (vLLM {own}'s table)" if own != release else "")
            why = f"{rows} run no faster than its bf16 ones at compute-bound sizes, on tensor cores {speed:g}x as fast"
            if good:
                c = _take(c, "gemm_quant", q, _read_shipped(SHIPPED / releases[good[0]]))
                borrowed.append(Borrowed(f"{q} GEMMs", good[0], why))
            else:
                c = _take(c, "gemm_quant", q, replace(c, gemm_quant={}))
                borrowed.append(Borrowed(f"{q} GEMMs", "", why + "; priced at the bf16 fit's efficiencies"))
    return c, borrowed


# Experts' dtypes whose measured MoE shapes carry over between releases of one chip: their tables time one kernel
# family in every measured release (Triton's fused MoE; FlashInfer's for NVFP4), except where KERNEL_MISMATCHES
# says a release's table times another. INT4 and MXFP4 experts switch kernels between releases (Marlin / Triton
# W4A16; Marlin / OpenAI's Triton / FlashInfer MXFP4) and keep their own release's shapes only.
SHAPES_CARRY_OVER = ("bf16", "fp8", "nvfp4")


def shape_sources(chip: str, release: str, dtype: str) -> list[str]:
    """The other measured releases of ``chip`` whose measured shapes of ``dtype`` experts price the shapes
    ``release``'s own tables did not time, in the order they are taken (nearest first; of two as near, the
    later): none for a dtype that does not carry over (:data:`SHAPES_CARRY_OVER`) or whose table in ``release``
    times another kernel, and never a release whose table times another kernel or that is the same file."""
    releases = vllm_releases().get(chip, {})

    def other_kernel(r: str) -> bool:
        return any(m.group[0].startswith("moe") and m.group[1] == dtype for m in kernel_mismatches(chip, r))

    if dtype not in SHAPES_CARRY_OVER or release not in releases or other_kernel(release):
        return []
    order = sorted(releases, key=release_key)
    here = order.index(release)
    others = [i for i, r in enumerate(order) if releases[r] != releases[release] and not other_kernel(r)]
    return [order[i] for i in sorted(others, key=lambda i: (abs(i - here), -i))]


def moe_shape_origin(chip: str, release: str | None, dtype: str, key: str) -> str | None:
    """The measured release whose tables time MoE shape ``key`` (moe_shapes.shape_key) of ``dtype`` experts where
    ``release`` of ``chip`` prices it: ``release`` itself, the release :func:`shape_sources` carries it from, ""
    for a chip with one calibration (nothing per release) that times it, or None: no table times it, and the
    fitted MoE model alone prices it."""
    releases = vllm_releases().get(chip, {})
    own = SHIPPED / (releases[release] if release in releases else f"{chip}.json")
    if key in _read_shipped(own).moe_shapes.get(dtype, {}):
        return release if release in releases else ""
    for r in shape_sources(chip, release, dtype) if release else []:
        if key in _read_shipped(SHIPPED / releases[r]).moe_shapes.get(dtype, {}):
            return r
    return None


def _with_other_releases_shapes(c: Calibration, chip: str, release: str) -> Calibration:
    """``c`` (release ``release`` of ``chip``) with the measured MoE shapes its tables did not time taken from the
    releases :func:`shape_sources` names: a shape's measured / fitted ratio is the kernel's efficiency on that
    shape (its tile configurations for those widths and expert counts), which the one fit of every shape misses by
    10-50% and which holds across releases of the same kernel. Checked on the shapes several releases timed
    (every chip, bf16 / FP8 / NVFP4 experts, each release's shape priced from its nearest other release's): median
    |error| 12.2% with the fit alone, 5.8% with the other release's ratio, p90 50% and 29%
    (benchmarks/moe_shapes_carry_over.py). A release that times the shape keeps its own."""
    releases = vllm_releases().get(chip, {})
    shapes = dict(c.moe_shapes)
    for q in SHAPES_CARRY_OVER:
        if q != "bf16" and q not in c.moe_quant:
            continue  # no fit of its own for these experts: another release's ratios would scale nothing
        have = dict(shapes.get(q, {}))
        for r in shape_sources(chip, release, q):
            for key, ratios in _read_shipped(SHIPPED / releases[r]).moe_shapes.get(q, {}).items():
                have.setdefault(key, ratios)
        if have:
            shapes[q] = have
    return replace(c, moe_shapes=shapes)


def _borrowed_note(
    vllm_version: str | None,
    chip: str,
    borrowed: list[Borrowed],
    experts: str | None = "any",
    moe_backend: str = "auto",
) -> str:
    """The warning that says which release priced each borrowed op and why (empty when none); ``experts``: the
    model's expert dtype (calibration.MOE_QUANT key, None for bf16 or no MoE) to name only its own MoE kernels,
    "any" to name every one; ``moe_backend``: the MoE kernels that price the experts (a backend's own rows are
    named only where they were borrowed too; "auto": the calibration's default fit)."""
    if experts != "any":
        borrowed = [b for b in borrowed if b.experts is None or b.experts == experts]
    if moe_backend != "auto":
        borrowed = [b for b in borrowed if b.experts is None or b.backend_rows]
    if not borrowed:
        return ""
    parts = [
        f"{b.op} priced by vLLM {b.release}'s kernels ({b.why})" if b.release else f"{b.op}: {b.why}" for b in borrowed
    ]
    return f"warning: --vllm-version {vllm_version} on {chip}: " + "; ".join(parts) + ", every other op by its own"


def shipped_calibration_files() -> list[Path]:
    """Every shipped calibration file: each chip's newest and its earlier releases' (not the releases index)."""
    paths = sorted(SHIPPED.glob("*.json")) + sorted(RELEASES_DIR.glob("*.json"))
    return [p for p in paths if p.name != RELEASES_INDEX]


def _read_shipped(path: Path) -> Calibration:
    """A shipped calibration file, parsed once per version of the file: a run builds its latency model, describes
    it and notes it from the same file, a sweep or a plan once per configuration (a file rewritten by a refit is
    read anew)."""
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:  # load_calibration says what is missing
        return load_calibration(path)
    return _parsed(path, stamp)


@lru_cache(maxsize=64)
def _parsed(path: Path, stamp: int) -> Calibration:
    return load_calibration(path)


def shipped_calibration(
    gpu: GpuSpec, vllm_version: str | None = None, experts: str | None = "any", moe_backend: str = "auto"
) -> tuple[Calibration, str]:
    """The packaged calibration for ``gpu``, and a note on where it comes from. A GPU without one borrows a
    calibration of the same architecture (efficiencies carry over; peaks are the GPU's own); a GPU of an
    architecture nothing was measured on borrows the nearest and the note says so as a warning.
    ``vllm_version``: the kernels of that vLLM release (:func:`release_calibration`); None: the newest.
    ``experts``: the expert dtype of the model it prices (None: bf16 or no MoE), so that the note names only the
    MoE kernels that model runs ("any": all; the calibration is the same either way), and ``moe_backend`` the
    kernels they are priced by (``--moe-backend``; "auto": the default fit)."""
    chip, note = calibration_source(gpu)
    path, release_note = release_calibration(chip, vllm_version)
    c = _read_shipped(path or SHIPPED / f"{chip}.json")
    release = priced_release(chip, vllm_version)
    if path is not None:  # a release's own tables: never price an op with a table of another kernel
        c, borrowed = _mend_release(c, chip, release)
        borrowed_note = _borrowed_note(vllm_version, chip, borrowed, experts, moe_backend)
        release_note = "; ".join(n for n in (release_note, borrowed_note) if n)
    if release is not None:
        c = _with_other_releases_shapes(c, chip, release)
    if chip != gpu.name:
        c = on_slower_nvlink(replace(c, gpu=gpu.name, derived_from=chip), GPU_PRESETS.get(chip), gpu)
    elif c.derived_from and not note:
        note = f"{gpu.name}: calibration derived from {c.derived_from} measurements (same chip)"
    return c, "; ".join(n for n in (note, release_note) if n)
