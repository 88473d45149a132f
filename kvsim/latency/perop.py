"""The per-operation latency model (`--latency per-op`, the default).

One iteration of a tensor-parallel rank, from the model's real shapes (per GPU: heads and FFN width / tp):

- dense, per layer: input and post-attention norms, the QKV / output / gate+up / down GEMMs, rotary
  embedding, MLP activation and the residual add; once per iteration: the embedding lookup, the LM head
  GEMM and the sampler (one row of logits per scheduled sequence). GEMMs follow a soft roofline with a
  knee (calibration.GemmParams); element-wise kernels a floor plus bytes at an achieved bandwidth.
- attention, per layer: decode sequences stream their KV (bytes / achieved bandwidth, never below the
  kernels' floor); prefill chunks go through a FlashAttention-style tile and wave model over the
  query x key pairs of each chunk against its cached context and itself.
- communication (tensor parallelism): two all-reduces of the layer's activations per layer, one for
  the embedding, and the gather of the logits; each latency + bytes / bandwidth, measured. A QK norm over
  all heads (MiniMax-M2) adds one all-reduce of 2 fp32 values a token per attention layer.
- CPU: the serving engine's own time per iteration (cpu.py), added to the GPU time, or overlapped.

Models whose layers differ (ModelSpec.layer_types, MLA, MoE) are priced layer class by layer class:

- sliding-window and chunked layers attend to at most their window: a prefill query tile walks only the
  KV tiles inside its window; a decode reads min(context, window) tokens (sliding) or its own chunk's
  tokens (chunked), counted sequence by sequence by the engine (StepShape.window_reads, and each
  context through a decode run); a shape without those counts is bounded by sequences x window;
- MLA layers project through the low-rank latent (q_a/q_b, kv_a/kv_b, o) and decode reads the cached
  latent + rotary key per token, which at 128 heads is compute-heavy: each KV token costs the larger of its
  bytes and its 2 x heads x (latent + rope + latent) FLOPs;
- mamba layers cost per token (in/x/dt/out projections, the conv and scan as element-wise passes) plus,
  per scheduled sequence, reading and writing its recurrent state; never per context token;
- mixture-of-experts FFNs hold every expert, but an iteration of N tokens with top-k routing over E
  experts reads the expected number of distinct experts (E x (1 - (1 - k/E)^N) with uniform routing; other
  routings in routing.py, `--moe-routing`), and does 2 x N x k x expert FLOPs: one grouped GEMM in the soft
  roofline; shared experts and the router are plain GEMMs, and the router's top-k selection a chain of small
  kernels (one fused kernel from vLLM 0.11.1).

Times are seconds; shapes are tokens; bytes are per GPU. The total is the sum of the four parts.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, replace

from kvsim.errors import ConfigError
from kvsim.hardware import GpuSpec, ModelSpec
from kvsim.hardware.gpus import NIC_BYTES_S
from kvsim.hardware.layer_kinds import KINDS, ChunkedLocal, SlidingWindow
from kvsim.latency.base import BREAKDOWN_COLUMNS, LatencyModel, StepShape, sum_max_of_two_affine
from kvsim.latency.calibration import (
    GEMM_QUANT,
    MOE_QUANT,
    MOE_TIMED_WITH_SELECTION,
    Calibration,
    DecodeAttentionParams,
    ElementwiseParams,
    GemmParams,
)
from kvsim.latency.cpu import CpuOverhead
from kvsim.latency.moe_shapes import shape_factor, shape_key
from kvsim.latency.routing import DEFAULT_ROUTING, active_experts

SAMPLER_BYTES_PER_VOCAB = 4 * 3  # fp32 logits, about three passes (temperature/softmax, top-p, sample)


@dataclass(frozen=True)
class Op:
    """One kernel of a layer (names as in Vidur's profiles): a GEMM of (tokens x k) by (k x n), or an
    element-wise kernel of ``kind`` over rows of ``row`` elements moving ``bytes_per_token``."""

    name: str
    k: int = 0
    n: int = 0
    kind: str = ""  # element-wise kind (calibration.ELEMENTWISE_KINDS); "" for GEMMs
    row: int = 0
    bytes_per_token: float = 0.0
    quant: str | None = None  # a GEMM of quantized weights: its scheme (calibration.GEMM_QUANT)
    fused_quant: bool = False  # its FP8 activation quantization runs inside the kernel before it (FUSED_QUANT)
    # an element-wise op that is a chain of small kernels: its time at no bytes, in the kind's fixed costs
    fixed_costs: float = 1.0

    def seconds(self, calib: Calibration, gpu: GpuSpec, tokens: int, dtype_bytes: int) -> float:
        if not self.kind:
            if tokens <= 0:
                return 0.0
            if self.quant is None:
                scheme: str | None = "bf16"
                t = gemm_seconds(calib.gemm, gpu, tokens, self.k, self.n, dtype_bytes)
            else:  # scheme None: a weight-only kernel on the bf16 fit, which bf16's measured ratios do not describe
                scheme = quant_gemm_scheme(calib, gpu, self.quant)
                p = calib.gemm if scheme is None else calib.gemm_quant[scheme]
                t = quant_gemm_seconds(p, gpu, tokens, self.k, self.n, self.quant)
            grid = calib.gemm_shapes.get(scheme) if scheme is not None else None
            if grid is not None:
                t *= grid.factor(tokens, self.n, self.k)
            if self.fused_quant and scheme in FP8_ACTIVATIONS and self.quant is not None:
                # the measured quant kernel's launch, not run; at most half the GEMM (a measured ratio well
                # below 1 can leave less than that fixed time)
                t -= min(0.5 * t, max(0.0, calib.gemm_quant[scheme].t0_s - calib.gemm.t0_s))
            # Never faster than the weights stream from HBM at the datasheet peak: in serving a layer's weights
            # are long gone from L2 when the next step reads them, while a table that times a few copies of a
            # small weight in a loop reads them from L2 (L40S's 96 MiB, RTX PRO 6000's 128: 16 MB weights timed
            # at 1.2-2.7x the HBM peak; GPUs whose tables stream from HBM never reach this bound)
            floor = (dtype_bytes if self.quant is None else GEMM_QUANT[self.quant][1]) * self.k * self.n
            floor /= gpu.hbm_bandwidth
            return t if t > floor else floor
        p = calib.elementwise[self.kind]
        return elementwise_seconds(p, gpu, tokens, self.row, self.bytes_per_token) + (self.fixed_costs - 1.0) * p.t0_s


# The GEMMs whose FP8 input vLLM quantizes inside the kernel before them: torch.compile (Inductor, or from 0.12 the
# fusion passes) fuses the per-token quantization into the RMSNorm before qkv and gate_up and the SiLU-and-mul
# before down; o_proj's input comes from attention, whose quant fusion is off by default. AIConfigurator's FP8
# GEMM tables time each GEMM through vLLM's linear layer, its quant kernel included (collector/vllm/
# collect_gemm.py: RowParallelLinear.forward -> Fp8LinearMethod.apply -> QuantFP8, then cutlass_scaled_mm), so a
# fused GEMM is priced without that kernel's fixed cost: the fit's fixed cost over bf16's.
FUSED_QUANT = frozenset({"attn_pre_proj", "mlp_up_proj", "mlp_down_proj"})
FP8_ACTIVATIONS = ("fp8", "fp8_block")
# weights whose tensor cores the GPU lacks -> the weight-only scheme of as many bits vLLM runs them as (Marlin:
# FP8 checkpoints on Ampere, NVFP4 before Blackwell)
WEIGHT_ONLY_AS = {"fp8": "w8a16", "fp8_block": "w8a16", "nvfp4": "w4a16"}


def quant_gemm_scheme(calib: Calibration, gpu: GpuSpec, quant: str) -> str | None:
    """The scheme whose fit (``calib.gemm_quant``) and measured shapes price ``quant`` weights, or None: the bf16
    fit's. A scheme prices its own weights where the calibration has its fit and the GPU has the tensor cores it
    ran on; weights whose tensor cores the GPU lacks run vLLM's weight-only kernels and take that fit
    (WEIGHT_ONLY_AS); without a fit, the bf16 one prices them (calibration.GEMM_QUANT). 128x128 block FP8 takes
    the per-tensor FP8 fit where there is one: AIConfigurator's fp8_block rows time a path serving does not run
    (vLLM 0.19's with fp16 activations, which keep the block GEMM off DeepGEMM and FlashInfer and on a padded
    CUTLASS fallback; 0.22 on, one module launched eagerly: the CPU's time), while vLLM's block-scaled kernels run
    as fast as per-tensor ones at small batches (PR #49363 on H100: 26.9 against 25.6 us)."""
    served = served_scheme(gpu, quant)
    if served != quant:
        return served if served in calib.gemm_quant else None
    if quant == "fp8_block" and "fp8" in calib.gemm_quant:
        quant = "fp8"
    return quant if quant in calib.gemm_quant else None


def served_scheme(gpu: GpuSpec, quant: str) -> str | None:
    """The kind of kernel vLLM runs ``quant`` weights with on ``gpu``: the scheme itself where the GPU has its
    tensor cores, else the weight-only scheme of as many bits (WEIGHT_ONLY_AS; None: no such kernel known)."""
    operands = GEMM_QUANT[quant][2]
    if operands != "bf16" and gpu.tensor_core_speedup(operands) == 1.0:
        return WEIGHT_ONLY_AS.get(quant)
    return quant


def quantized(ops: list[Op], quant: str | None) -> list[Op]:
    """``ops`` with their GEMMs marked as running on ``quant`` weights (the MoE router's stays bf16, as vLLM
    loads it); unchanged for None."""
    if quant is None:
        return ops
    fused = quant in FP8_ACTIVATIONS
    return [
        replace(op, quant=quant, fused_quant=fused and op.name in FUSED_QUANT)
        if not op.kind and op.name != "moe_router"
        else op
        for op in ops
    ]


def layer_ops(model: ModelSpec, tp: int) -> list[Op]:
    """The kernels of one decoder layer on one tensor-parallel rank (attention itself excluded)."""
    return decoder_layer(model, attention_ops(model, tp), ffn_ops(model, tp, model.intermediate_size))


def decoder_layer(model: ModelSpec, mix: list[Op], ffn: list[Op]) -> list[Op]:
    """A layer's kernels around its token mixer ``mix`` and FFN ``ffn``, GEMMs on the checkpoint's weights
    (the mixer's projections in the model's dtype when the checkpoint keeps its attention so)."""
    q = model.weight_quant
    return [
        input_norm(model),
        *(mix if model.attention_unquantized else quantized(mix, q)),
        post_norm(model),
        *quantized(ffn, q),
        residual_add(model),
    ]


LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")


def fuse_residual_adds(ops: list[Op]) -> list[Op]:
    """A layer's kernels as vLLM V1 runs them: each residual add inside the RMSNorm after it (vLLM's
    fused_add_rms_norm, or Inductor's fusion under torch.compile), which then also reads and writes the
    residual stream (twice a plain norm's bytes); the separate add kernel is gone."""
    return [
        replace(op, bytes_per_token=2 * op.bytes_per_token) if op.name in LAYER_NORMS else op
        for op in ops
        if op.kind != "add"
    ]


def input_norm(model: ModelSpec) -> Op:
    h = model.hidden_size
    return Op("input_layernorm", kind="norm", row=h, bytes_per_token=2 * h * model.dtype_bytes)


def post_norm(model: ModelSpec) -> Op:
    h = model.hidden_size
    return Op("post_attention_layernorm", kind="norm", row=h, bytes_per_token=2 * h * model.dtype_bytes)


def residual_add(model: ModelSpec) -> Op:
    h = model.hidden_size
    return Op("add", kind="add", row=h, bytes_per_token=3 * h * model.dtype_bytes)


def attention_ops(model: ModelSpec, tp: int) -> list[Op]:
    """A GQA attention layer's projections and rotary embedding on one rank (attention itself excluded)."""
    d, h, hd = model.dtype_bytes, model.hidden_size, model.head_dim
    qh, kvh = max(1, model.q_heads // tp), model.kv_heads_per_gpu(tp)
    return [
        Op("attn_pre_proj", h, (qh + 2 * kvh) * hd),
        Op("attn_rope", kind="rope", row=(qh + kvh) * hd, bytes_per_token=2 * (qh + kvh) * hd * d),
        Op("attn_post_proj", qh * hd, h),
    ]


def mla_ops(model: ModelSpec, tp: int) -> list[Op]:
    """An MLA layer's projections on one rank (DeepSeek-V2/V3): queries through the q_lora_rank bottleneck,
    the latent + rotary key from the hidden state, the latent up to per-head keys and values (or, decoding,
    the absorbed equivalent of the same weights), and the output projection."""
    h, d = model.hidden_size, model.dtype_bytes
    qh = max(1, model.q_heads // tp)
    hd, rope, v = model.head_dim, model.qk_rope_head_dim, model.v_head_dim or model.head_dim
    q = (
        [Op("attn_q_a_proj", h, model.q_lora_rank), Op("attn_q_b_proj", model.q_lora_rank, qh * hd)]
        if model.q_lora_rank
        else [Op("attn_q_proj", h, qh * hd)]
    )
    return q + [
        Op("attn_kv_a_proj", h, model.kv_lora_rank + rope),
        Op("attn_kv_b_proj", model.kv_lora_rank, qh * (hd - rope + v)),
        Op("attn_rope", kind="rope", row=(qh + 1) * rope, bytes_per_token=2 * (qh + 1) * rope * d),
        Op("attn_post_proj", qh * v, h),
    ]


def mla_decode_token_flops(model: ModelSpec, q_heads: int, tile_extra_dims: float) -> float:
    """FLOPs of absorbed MLA decode per KV token of one layer for ``q_heads`` query heads: scores over the latent
    + rope and values over the latent, plus, per query-key pair, the head-independent share of a tile iteration
    (``tile_extra_dims``, as prefill prices it)."""
    return 2.0 * q_heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim + 2 * tile_extra_dims)


def mamba_ops(model: ModelSpec, tp: int) -> list[Op]:
    """A Mamba layer's per-token kernels on one rank (inner channels split over ranks): the in-projection
    (x and gate), the causal conv, the dt/B/C projection and dt's up-projection, the selective scan as an
    element-wise pass over inner channels x state, and the out-projection. A Gated DeltaNet layer (Qwen3-Next,
    Qwen3.5): its projections, conv and recurrence; the state each sequence reads and writes once per step is
    priced with every recurrent layer's state (:meth:`PerOpModel.recurrent_state_s`)."""
    h, d = model.hidden_size, model.dtype_bytes
    di = -(-model.mamba_d_inner // tp)
    ds = model.mamba_d_state
    if model.gdn_key_width:  # Gated DeltaNet: q, k, v, z and the gates in; the delta-rule recurrence; out
        kw, heads = -(-model.gdn_key_width // tp), -(-model.gdn_value_heads // tp)
        conv = -(-model.mamba_conv_channels // tp)
        return [
            Op("gdn_in_proj", h, 2 * kw + 2 * di + 2 * heads),
            Op("gdn_conv", kind="act", row=conv, bytes_per_token=2 * conv * d),
            Op("gdn_recurrence", kind="act", row=di, bytes_per_token=(2 * kw + 3 * di) * d),
            Op("gdn_out_proj", di, h),
        ]
    dt_rank = -(-h // 16)
    return [
        Op("mamba_in_proj", h, 2 * di),
        Op("mamba_conv", kind="act", row=di, bytes_per_token=2 * di * d),
        Op("mamba_x_proj", di, dt_rank + 2 * ds),
        Op("mamba_dt_proj", dt_rank, di),
        Op("mamba_scan", kind="act", row=di, bytes_per_token=(3 * di + 2 * ds) * d),
        Op("mamba_out_proj", di, h),
    ]


def ffn_ops(model: ModelSpec, tp: int, width: int) -> list[Op]:
    """A dense (gated) MLP of ``width`` on one rank."""
    h, d = model.hidden_size, model.dtype_bytes
    ff = -(-width // tp)
    return [
        Op("mlp_up_proj", h, ff * (2 if model.gated_mlp else 1)),
        Op("mlp_act", kind="act", row=ff, bytes_per_token=(3 if model.gated_mlp else 2) * ff * d),
        Op("mlp_down_proj", ff, h),
    ]


@dataclass(frozen=True)
class MoeOp:
    """The routed experts of one MoE layer on one rank: each expert's width split over the tensor-parallel
    ranks, or (expert parallelism, ``ep`` ranks) whole experts, E / ep of them on each rank."""

    hidden: int
    width: int  # one expert's FFN width on this rank
    experts: int  # experts of the layer (all ranks)
    top_k: int
    weight_bytes: float  # bytes per expert weight element
    gated: bool = True
    ep: int = 1  # expert-parallel ranks the experts are spread over
    quant: str | None = None  # the experts' quantized dtype (calibration.MOE_QUANT), None: bf16
    routing: str = DEFAULT_ROUTING  # how the router spreads tokens over experts (kvsim.latency.routing)
    shape: str = ""  # its moe_shapes.shape_key: where the calibration has the shape's measured times

    def distinct(self, tokens: int) -> float:
        """Expected experts (of all ranks) that ``tokens`` tokens activate under the layer's routing."""
        return float(active_experts(self.routing, tokens, self.experts, self.top_k))

    def seconds(self, calib: Calibration, gpu: GpuSpec, tokens: int, dtype_bytes: int) -> float:
        if tokens <= 0:
            return 0.0
        distinct = self.distinct(tokens)
        t = moe_formula(
            calib,
            gpu,
            tokens,
            self.hidden,
            self.width,
            self.experts,
            self.top_k,
            self.ep,
            self.weight_bytes,
            dtype_bytes,
            self.gated,
            self.quant,
            distinct,
        )
        table = calib.moe_shapes.get(self.quant or "bf16")
        if table:
            t *= shape_factor(table, self.shape, self.routing, tokens)
        # never faster than the activated experts' weights stream from HBM (Op.seconds: a table that times one
        # module over and over keeps a small activated set in L2; L40S's 1-token Qwen3-30B-A3B row: 0.4x HBM)
        floor = distinct / self.ep * (3 if self.gated else 2) * self.hidden * self.width
        floor *= self.weight_bytes / gpu.hbm_bandwidth
        return t if t > floor else floor


def moe_formula(
    calib: Calibration,
    gpu: GpuSpec,
    tokens,
    hidden,
    width,
    experts,
    top_k,
    ep,
    weight_bytes,
    dtype_bytes,
    gated=True,
    quant: str | None = None,
    distinct=None,
):
    """Seconds of a fused MoE layer on one rank (works on numpy arrays too): ``tokens`` tokens each routed to
    ``top_k`` of ``experts`` experts, activating ``distinct`` of them (all ranks; default: uniform routing),
    a rank of ``ep`` holding 1/ep of the routed copies and of the activated experts, experts ``width`` wide on
    this rank. With the calibration's MoE parameters (those of the ``quant`` experts where it has them, their
    FLOPs at the FP8 rate where they run on FP8 tensor cores), their fixed and per-active-expert times plus a
    soft roofline; without, the GEMM parameters' (twice the fixed time) plus the activation as an element-wise
    kernel."""
    mats = 3 if gated else 2
    routed = tokens * top_k / ep
    if distinct is None:
        distinct = active_experts("uniform", tokens, experts, top_k)
    active = distinct / ep
    flops = 2.0 * routed * mats * hidden * width
    weights = active * mats * hidden * width * weight_bytes
    acts = dtype_bytes * routed * (2 * hidden + (mats - 1) * width)
    p, peak = calib.moe, gpu.bf16_flops
    if quant in calib.moe_quant:
        p = calib.moe_quant[quant]
        peak *= gpu.tensor_core_speedup(MOE_QUANT[quant][1])
    if p is not None:
        tf = flops / (peak * p.flops_eff)
        tb = (weights + acts) / (gpu.hbm_bandwidth * p.bw_eff)
        q = p.knee
        # every routed copy of every token, on each rank
        route = (p.per_route_s + p.per_route_ep_s * (ep > 1)) * tokens * top_k * hidden / 4096
        return p.t0_s + p.t0_ep_s * (ep > 1) + p.per_expert_s * active + route + (tf**q + tb**q) ** (1.0 / q)
    g = calib.gemm
    tf = flops / (gpu.bf16_flops * g.flops_eff)
    tb = (weights + acts) / (gpu.hbm_bandwidth * g.bw_eff)
    q = g.knee
    act = elementwise_formula(calib.elementwise["act"], gpu, routed, width, 3 * width * dtype_bytes)
    return 2 * g.t0_s + (tf**q + tb**q) ** (1.0 / q) + act


def expert_quant(model: ModelSpec) -> str | None:
    """The quantized dtype whose measured MoE kernels price ``model``'s routed experts (calibration.MOE_QUANT), or
    None: bf16 experts (or a dtype kvsim has no MoE kernels of, priced with the bf16 fit and its own bytes)."""
    dtype = model.expert_weight_dtype
    return dtype if dtype in MOE_QUANT else None


# The router's top-k selection (softmax or sigmoid over the logits, the top k, renormalized), in the V1 element-wise
# kernels' fixed costs: vLLM PR #26717's GPU trace of it, 4.0 us as one kernel and 10.4 us as the chain before
# (cast to fp32, topk_softmax, sum, divide), is 2.1 and 5.5 of H100's measured 1.9 us.
TOPK_FIXED_COSTS = {True: 2.0, False: 5.0}


def expert_selection(model: ModelSpec, fused: bool) -> Op:
    """The kernels that pick each token's experts from the router's logits: one kernel reading the bf16 logits
    and writing k weights and ids (``fused``: vLLM 0.11.1 and later, releases.fuses_topk), or the chain before it,
    which also writes and reads an fp32 copy of the logits. AIConfigurator's MoE tables time the experts on
    given top-k ids (its collector's fused_experts), so this is priced apart; its MXFP4 rows time vLLM's whole
    FusedMoE layer, selection included (calibration.MOE_TIMED_WITH_SELECTION)."""
    e, k = model.num_experts, model.experts_per_token
    per_token = 2 * e + 12 * k if fused else 10 * e + 24 * k
    return Op("moe_select", kind="act", row=e, bytes_per_token=per_token, fixed_costs=TOPK_FIXED_COSTS[fused])


def layer_classes(
    model: ModelSpec,
    tp: int,
    expert_parallel: bool = False,
    dp: int = 1,
    routing: str = DEFAULT_ROUTING,
    fused_topk: bool = True,
) -> list[tuple[int, list[Op], MoeOp | None]]:
    """(layers, kernels, routed experts or None) per class of identical layers; a plain model has one class
    whose kernels are :func:`layer_ops`. The routed experts span all ``dp`` x ``tp`` GPUs of a replica (``dp``
    data-parallel ranks of ``tp`` GPUs): each expert split in width over them, or, with ``expert_parallel``
    (vLLM's --enable-expert-parallel), spread whole; shared experts stay tensor-parallel within a rank.
    ``routing``: how the router spreads tokens over the experts (routing.py); ``fused_topk``: whether the
    release selects the experts in one kernel (:func:`expert_selection`)."""
    if not model.is_hybrid and not model.is_mla and not model.is_moe:
        return [(model.layers, layer_ops(model, tp), None)]
    h = model.hidden_size
    attn = mla_ops(model, tp) if model.is_mla else attention_ops(model, tp)
    out = []
    for (mixer, moe, has_ffn), n in sorted(
        Counter(
            ("attn" if KINDS[t].attention else "mamba", m, f)
            for t, m, f in zip(model.mixers, model.moe_mask, model.ffn_mask)
        ).items()
    ):
        mix = mamba_ops(model, tp) if mixer == "mamba" else attn
        if not has_ffn:  # a mixer block alone (Nemotron-H)
            ffn, experts = [], None
        elif moe:
            quant = expert_quant(model)
            ffn = [Op("moe_router", h, model.num_experts)]
            if quant not in MOE_TIMED_WITH_SELECTION:
                ffn.append(expert_selection(model, fused_topk))
            if model.shared_experts:
                ffn += ffn_ops(model, tp, model.shared_experts * model.moe_intermediate_size)
            ranks = tp * dp
            ep = ranks if expert_parallel else 1
            wb = model.expert_dtype_bytes if model.expert_dtype else model.weight_dtype_bytes
            split = ranks // ep  # the ranks each expert's width is split over
            experts = MoeOp(
                h,
                -(-model.moe_intermediate_size // split),
                model.num_experts,
                model.experts_per_token,
                wb,
                model.gated_mlp,
                ep,
                quant,
                routing,
                shape_key(h, model.moe_intermediate_size, model.num_experts, model.experts_per_token, split, ep),
            )
        else:
            ffn, experts = ffn_ops(model, tp, model.intermediate_size), None
        out.append((n, decoder_layer(model, mix, ffn), experts))
    return out


def embedding_op(model: ModelSpec) -> Op:
    h = model.hidden_size
    return Op("emb", kind="emb", row=h, bytes_per_token=2 * h * model.dtype_bytes)


def gemm_formula(p: GemmParams, gpu: GpuSpec, m, k, n, dtype_bytes):
    """Seconds of GEMMs of (m x k) activations by (k x n) weights; works on numpy arrays too."""
    tf = 2.0 * m * k * n / (gpu.bf16_flops * p.flops_eff)
    tb = dtype_bytes * (k * n + m * k + m * n) / (gpu.hbm_bandwidth * p.bw_eff)
    return _soft_roofline(p, tf, tb)


def _soft_roofline(p: GemmParams, tf, tb):
    """A GEMM's seconds from its compute and memory times at the fitted efficiencies: near the ridge they add
    up (``knee``)."""
    q = p.knee
    return p.t0_s + (tf**q + tb**q) ** (1.0 / q)


def elementwise_formula(p: ElementwiseParams, gpu: GpuSpec, m, row_elems, bytes_per_token):
    """Seconds of element-wise kernels over m tokens; works on numpy arrays too."""
    stream = m * bytes_per_token / (gpu.hbm_bandwidth * p.bw_eff)
    serial = p.serial_s * row_elems
    return (
        p.t0_s + (serial if serial > stream else stream)
        if not hasattr(stream, "shape")
        else p.t0_s + (serial * (serial > stream) + stream * (serial <= stream))
    )


def quant_gemm_formula(p: GemmParams, gpu: GpuSpec, m, k, n, quant: str):
    """Seconds of GEMMs of (m x k) bf16 activations by (k x n) ``quant`` weights (calibration.GEMM_QUANT: the
    weights' bytes with their scales, the tensor cores' peak over bf16); works on numpy arrays too."""
    _, weight_bytes, operands = GEMM_QUANT[quant]
    speed = gpu.tensor_core_speedup(operands)
    tf = 2.0 * m * k * n / (gpu.bf16_flops * speed * p.flops_eff)
    tb = (weight_bytes * k * n + 2 * (m * k + m * n)) / (gpu.hbm_bandwidth * p.bw_eff)
    return _soft_roofline(p, tf, tb)


def quant_gemm_seconds(p: GemmParams, gpu: GpuSpec, m: int, k: int, n: int, quant: str) -> float:
    """One GEMM of an (m x k) activation by a (k x n) ``quant`` weight."""
    return quant_gemm_formula(p, gpu, m, k, n, quant) if m > 0 else 0.0


def gemm_seconds(p: GemmParams, gpu: GpuSpec, m: int, k: int, n: int, dtype_bytes: int) -> float:
    """One GEMM of an (m x k) activation by a (k x n) weight."""
    return gemm_formula(p, gpu, m, k, n, dtype_bytes) if m > 0 else 0.0


def elementwise_seconds(p: ElementwiseParams, gpu: GpuSpec, m: int, row_elems: int, bytes_per_token: float) -> float:
    return elementwise_formula(p, gpu, m, row_elems, bytes_per_token) if m > 0 else 0.0


class PerOpModel(LatencyModel):
    name = "per-op"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        calib: Calibration,
        cpu: CpuOverhead,
        tp: int = 1,
        interconnect: str = "nvswitch",
        expert_parallel: bool = False,
        pp: int = 1,
        dp: int = 1,
        graph_sizes: tuple[int, ...] = (),
        steps_per_schedule: int = 1,
        routing: str = DEFAULT_ROUTING,
        v1_kernels: bool = False,
        fused_topk: bool = True,
    ):
        cpu = cpu.for_ranks(tp)
        if v1_kernels and calib.v1_elementwise:
            # vLLM V1: its element-wise kernels at their measured times (Calibration.v1_elementwise)
            calib = replace(calib, elementwise={**calib.elementwise, **calib.v1_elementwise})
        self.model, self.gpu, self.calib, self.cpu, self.tp, self.pp = model, gpu, calib, cpu, tp, pp
        # a decode step's CPU: the whole of it, or with multi-step scheduling its share of a schedule's (cpu.py)
        self.decode_cpu = cpu.spread(steps_per_schedule)
        # token counts CUDA graphs were captured for (ascending; empty: eager): a step of at most the largest
        # runs its dense layers and all-reduces padded up to the next one (one pipeline stage only)
        self.graph_sizes = tuple(sorted(set(graph_sizes))) if pp == 1 else ()
        d = self.dtype_bytes = model.dtype_bytes
        h, hd = model.hidden_size, model.head_dim
        self.layers = model.layers
        self.layer_reduces = model.layers + sum(model.ffn_mask)  # one after each mixer, one after each FFN
        # MiniMax-M2's QK norm over all heads: each attention layer sums its tokens' q and k variances over the ranks
        self.qk_reduces = model.attention_layers if model.qk_norm_all_heads and tp > 1 else 0
        self.qh = max(1, model.q_heads // tp)
        self.kvh = model.kv_heads_per_gpu(tp)
        self.hd = hd
        fused = fuse_residual_adds if v1_kernels else list
        self.ops = fused(layer_ops(model, tp))
        # expert parallelism changes only the routed experts' kernels: every rank still has every token (the
        # attention is tensor-parallel), so the layer's output is still combined by one all-reduce
        self.classes = [
            (n, fused(ops), e) for n, ops, e in layer_classes(model, tp, expert_parallel, dp, routing, fused_topk)
        ]
        # data-parallel attention (a MoE model's dp ranks, each an engine of its own): every MoE layer gathers
        # the tokens of all ranks, runs its experts on them and scatters the results back (vLLM's default
        # allgather_reducescatter all2all backend, NCCL, within the rank's peers on the other ranks). This rank
        # prices the experts and the exchange with each other rank decoding as many sequences as it samples
        # itself (ranks kept level by the load balancer, prefills rarer than decodes); the other ranks'
        # prefill chunks and the lockstep wait for the busiest rank are not modelled.
        self.dp = dp if model.is_moe else 1
        self.moe_layers = sum(model.moe_mask) if self.dp > 1 else 0
        self._dispatch = None
        if self.moe_layers:
            self._dispatch = calib.exchange_link(self.dp, interconnect)
            if self._dispatch is None:  # no all-gather/reduce-scatter measured: the NCCL all-reduce line
                try:
                    self._dispatch = calib.link(self.dp, interconnect).nccl_line()
                except ConfigError:
                    raise ConfigError(
                        f"calibration for {calib.gpu} has no collective measurements; data-parallel "
                        "ranks price the MoE layers' exchange with them"
                    ) from None
        self.emb = embedding_op(model)
        self.vocab = -(-model.vocab_size // tp)
        # FP8 KV halves the reads; MLA's latent is read whole by every rank
        self.kv_bytes_per_token_layer = (
            model.kv_bytes_per_token_layer(tp) if model.is_mla else 2 * self.kvh * hd * model.kv_dtype_bytes
        )
        pd, pa = calib.decode_attention, calib.prefill_attention
        if model.is_mla and calib.mla_decode is not None:  # measured on MLA modules
            pd = calib.mla_decode
        self._decode_params = pd
        self._kv8 = model.kv_dtype_bytes == 1  # an FP8 KV cache streams at its own efficiency
        self._decode_token_s = self.kv_bytes_per_token_layer / (gpu.hbm_bandwidth * pd.bw_for(model.kv_dtype_bytes))
        if model.is_mla:  # absorbed MLA decode: scores over latent + rope, values over the latent, every head
            flops = mla_decode_token_flops(model, self.qh, pa.tile_extra_dims)
            self._decode_token_s = max(self._decode_token_s, flops / (gpu.bf16_flops * (pd.flops_eff or pa.flops_eff)))
        # one query head per KV head: kernels that split the KV only for grouped queries walk it unsplit
        self._unsplit = pd.unsplit() if self.qh == self.kvh and not model.is_mla else None
        # attention layers by the span they attend to: (layers, kind, window tokens; 0 = everything)
        spans = Counter((t, model.window_of(t)) for t in model.mixers if KINDS[t].attention)
        self.attn_kinds = [(n, kind, w) for (kind, w), n in sorted(spans.items())]
        self.windows = tuple((kind, w) for _, kind, w in self.attn_kinds if w)
        self.mamba_layers = model.state_layers  # recurrent layers: their state's traffic
        self.state_bytes = model.state_bytes_per_layer(tp) if self.mamba_layers else 0
        self.plain = len(self.attn_kinds) == 1 and not self.attn_kinds[0][2] and not self.mamba_layers and pp == 1
        # pipeline stages: the slowest holds ceil(layers / pp) layers and the LM head (ModelSpec.pipeline_stage)
        # and sends each micro-batch's hidden states on, one GPU to one GPU (priced as a 2-GPU exchange)
        self._stage_frac = -(-model.layers // pp) / model.layers
        self._send = None
        if pp > 1:
            try:
                self._send = calib.link(2, interconnect)
            except ConfigError:
                raise ConfigError(
                    f"calibration for {calib.gpu} has no all-reduce measurements; pipeline "
                    "parallelism prices the send between stages with them"
                ) from None
        self.hidden_bytes = h * d
        self._links = calib.link(tp, interconnect) if tp > 1 else None
        self._dense_cache: dict[tuple[int, int], float] = {}
        self._comm_cache: dict[tuple[int, int], float] = {}
        self._pad_cache: dict[tuple[int, int], float] = {}
        pa = calib.prefill_attention
        if model.is_mla and calib.mla_prefill is not None:  # measured on MLA modules
            pa = calib.mla_prefill
        self._prefill_params = pa
        self._tile_s = (
            4.0 * pa.tile_q * pa.tile_kv * (hd + pa.tile_extra_dims) / (gpu.bf16_flops / gpu.sms * pa.flops_eff)
        )

    # --- parts -------------------------------------------------------------------------------
    def dense_s(self, tokens: int, sampled: int) -> float:
        """GEMMs and element-wise kernels of all layers, the embedding, the LM head and the sampler."""
        key = (tokens, sampled)
        t = self._dense_cache.get(key)
        if t is not None:
            return t
        calib, gpu, d = self.calib, self.gpu, self.dtype_bytes
        t = 0.0
        for n, ops, experts in self.classes:
            layer = sum(op.seconds(calib, gpu, tokens, d) for op in ops)
            if experts is not None:
                layer += experts.seconds(calib, gpu, self._moe_tokens(tokens, sampled), d)
            t += n * layer
        for part in self._head_parts(tokens, sampled):
            t += part
        if len(self._dense_cache) < 65536:
            self._dense_cache[key] = t
        return t

    def _head_parts(self, tokens: int, sampled: int) -> tuple[float, float, float]:
        """The embedding, the LM head and the sampler: once per iteration, not per layer (the first and the last
        pipeline stage). The sampler's passes over the logits are priced as one-pass activation kernels (on V1
        the measured row kernels of ``Calibration.v1_elementwise``)."""
        calib, gpu, d = self.calib, self.gpu, self.dtype_bytes
        return (
            self.emb.seconds(calib, gpu, tokens, d),
            gemm_seconds(calib.gemm, gpu, sampled, self.model.hidden_size, self.vocab, d),
            elementwise_seconds(calib.elementwise["act"], gpu, sampled, 0, self.vocab * SAMPLER_BYTES_PER_VOCAB),
        )

    def decode_attention_layer_s(self, num_seqs: int, kv_tokens: int, window: int = 0) -> float:
        """One layer's decode attention for ``num_seqs`` sequences over ``kv_tokens`` context tokens in all; a
        windowed layer reads at most ``window`` tokens per sequence."""
        if num_seqs <= 0:
            return 0.0
        if window:
            kv_tokens = min(kv_tokens, num_seqs * window)
        p, token_s = self._decode_terms(num_seqs)
        return max(p.floor_s, p.stream_s(num_seqs, kv_tokens, token_s, self._kv8))

    def _decode_terms(self, num_seqs: int) -> tuple[DecodeAttentionParams, float]:
        """The decode attention parameters for a batch of ``num_seqs`` sequences and the seconds one KV token
        of a layer takes: bytes at the achieved bandwidth (or FLOPs, MLA), or, unsplit, at what the CTAs
        walking the contexts stream (one per sequence and KV head, at most one per SM)."""
        u = self._unsplit
        if u is None:
            return self._decode_params, self._decode_token_s
        return u, max(
            self._decode_token_s, u.unsplit_token_s(self.kv_bytes_per_token_layer, num_seqs * self.kvh, self.gpu.sms)
        )

    def windowed_prefill_layer_s(self, chunks, kind: str, window: int) -> float:
        """Prefill of a sliding-window or chunked-local layer: each query tile walks the KV tiles from the
        first key its first query may see (``window`` back, or its chunk's start) to its last query."""
        if not chunks:
            return 0.0
        p = self._prefill_params
        tq, tkv, ovh = p.tile_q, p.tile_kv, p.cta_overhead_tiles
        work = longest = kv_tokens = 0.0
        for new, cached in chunks:
            total, most = windowed_tiles(new, cached, kind, window, tq, tkv, ovh)
            work += self.qh * total
            longest = max(longest, most)
            kv_tokens += min(cached, window) + new
        compute = self._tile_s * max(work / self.gpu.sms, longest)
        memory = kv_tokens * self.kv_bytes_per_token_layer / (self.gpu.hbm_bandwidth * p.bw_eff)
        return p.floor_s + max(compute, memory)

    def recurrent_state_s(self, num_seqs: int) -> float:
        """All mamba layers reading and writing each scheduled sequence's state once."""
        if not self.mamba_layers or num_seqs <= 0:
            return 0.0
        return self.mamba_layers * elementwise_seconds(
            self.calib.elementwise["act"], self.gpu, num_seqs, 0, 2 * self.state_bytes
        )

    def prefill_attention_layer_s(self, chunks) -> float:
        """FlashAttention-style prefill of (new tokens, cached tokens) chunks, causal within each chunk."""
        if not chunks:
            return 0.0
        p = self._prefill_params
        tq, tkv, ovh = p.tile_q, p.tile_kv, p.cta_overhead_tiles
        r = tq // tkv  # KV tiles per query tile (tile_q is a multiple of tile_kv)
        work = longest = kv_tokens = 0.0
        for new, cached in chunks:
            # query tile j attends to cached + min((j + 1) * tq, new) keys, in tiles of tkv
            full, part = divmod(new, tq)
            tiles = full * -(-cached // tkv) + r * full * (full + 1) // 2
            if part:
                tiles += -(-(cached + new) // tkv)
            q_tiles = full + (1 if part else 0)
            work += self.qh * (tiles + ovh * q_tiles)
            longest = max(longest, -(-(cached + new) // tkv) + ovh)
            kv_tokens += cached + new
        compute = self._tile_s * max(work / self.gpu.sms, longest)
        memory = kv_tokens * self.kv_bytes_per_token_layer / (self.gpu.hbm_bandwidth * p.bw_eff)
        return p.floor_s + max(compute, memory)

    def attention_s(self, shape: StepShape) -> float:
        """Attention of every attention layer, and the recurrent layers' state traffic."""
        dn, dkv, chunks = shape.split()
        if self.plain:
            return self.layers * (self.decode_attention_layer_s(dn, dkv) + self.prefill_attention_layer_s(chunks))
        t = self.recurrent_state_s(shape.num_seqs)
        counted = dict(zip(self.windows, shape.window_reads))  # exact windowed reads, when the engine counted
        for n, kind, w in self.attn_kinds:
            if not w:
                t += n * (self.decode_attention_layer_s(dn, dkv) + self.prefill_attention_layer_s(chunks))
                continue
            reads = counted.get((kind, w))
            dec = (
                self.decode_attention_layer_s(dn, dkv, w) if reads is None else self.decode_attention_layer_s(dn, reads)
            )
            t += n * (dec + self.windowed_prefill_layer_s(chunks, kind, w))
        return t

    def communication_s(self, tokens: int, sampled: int) -> float:
        """Two all-reduces per layer (one for a layer without an FFN) and one for the embedding (tokens x hidden),
        the logits gather; with data-parallel ranks, each MoE layer's exchange with the other ranks in place of
        its FFN all-reduce."""
        if tokens <= 0 or (self._links is None and self._dispatch is None):
            return 0.0
        key = (tokens, sampled)
        t = self._comm_cache.get(key)
        if t is None:
            act, logits = self._comm_parts(tokens, sampled)
            t = (self.layer_reduces + 1 - self.moe_layers) * act + logits + self._qk_norm_s(tokens)
            if self.moe_layers:
                t += self.moe_layers * self.dispatch_s(self._moe_tokens(tokens, sampled))
            if len(self._comm_cache) < 65536:
                self._comm_cache[key] = t
        return t

    def _moe_tokens(self, tokens: int, sampled: int) -> int:
        """Tokens the MoE layers take when this rank schedules ``tokens``: with data-parallel ranks, also each
        other rank's, priced as decoding as many sequences as this one samples."""
        return tokens + (self.dp - 1) * sampled

    def dispatch_s(self, tokens: int) -> float:
        """One MoE layer's exchange among dp ranks that schedule ``tokens`` tokens together: an all-gather of
        every rank's hidden states and a reduce-scatter of the experts' outputs, NCCL over the dp GPUs that hold
        the same tensor-parallel shard, priced on the calibration's measured all-gather + reduce-scatter (within
        a node; without them, its NCCL all-reduce line: a ring all-reduce moves the same bytes). A group beyond one
        NVLink domain (an HGX node's 8 GPUs, an NVL72 rack's 72) runs its rings at most at one NIC's bandwidth per
        GPU."""
        link = self._dispatch
        if link is None or tokens <= 0:
            return 0.0
        size = tokens * self.hidden_bytes
        t = link.seconds(size)
        if self.dp * self.tp > self.gpu.nvlink_gpus:
            n = self.dp
            t = max(t, link.latency_s + size * 2 * (n - 1) / n / NIC_BYTES_S)
        return t

    def _comm_parts(self, tokens: int, sampled: int) -> tuple[float, float]:
        """One all-reduce of the hidden states and the logits gather (0, 0 without tensor parallelism)."""
        link = self._links
        if link is None or tokens <= 0:
            return 0.0, 0.0
        return link.seconds(tokens * self.hidden_bytes), link.seconds(sampled * self.vocab * self.dtype_bytes)

    def _combine(self, gpu_s: float, num_seqs: int, decode: bool = False) -> tuple[float, float]:
        """(total, exposed CPU seconds) of an iteration whose GPU part takes ``gpu_s`` (``decode``: all its
        sequences decode, which multi-step scheduling schedules together)."""
        c = self.decode_cpu if decode else self.cpu
        cpu = c.seconds(num_seqs)
        if c.overlapped:
            exposed = max(0.0, cpu - gpu_s) + c.sync_s
        else:
            exposed = cpu
        return gpu_s + exposed, exposed

    # --- composition: every term's per-step and decode-run forms meet here --------------------------
    def graph_tokens(self, tokens: int) -> int:
        """Tokens a step of ``tokens`` runs its dense layers on: the next captured CUDA-graph size, or itself
        above the largest (vLLM runs those eagerly)."""
        sizes = self.graph_sizes
        if not sizes or tokens > sizes[-1]:
            return tokens
        return sizes[bisect_left(sizes, tokens)]

    def _padding_s(self, tokens: int, sampled: int) -> float:
        """Extra dense and all-reduce seconds of running ``tokens`` padded to their CUDA graph's size (the LM
        head and the sampler take the sampled rows only)."""
        padded = self.graph_tokens(tokens)
        if padded == tokens:
            return 0.0
        key = (tokens, sampled)
        t = self._pad_cache.get(key)
        if t is None:  # once per shape: every step prices it
            # (never negative: a fitted table's noise between neighbouring sizes is not a gain)
            t = max(
                0.0,
                self.dense_s(padded, sampled)
                - self.dense_s(tokens, sampled)
                + self.communication_s(padded, sampled)
                - self.communication_s(tokens, sampled),
            )
            if len(self._pad_cache) < 65536:
                self._pad_cache[key] = t
        return t

    def _gpu_parts(self, shape: StepShape) -> tuple[float, float, float, float]:
        """(dense, attention, communication, graph padding) seconds of one iteration: the GPU parts of PARTS.
        With pipeline stages an iteration is a rotation of micro-batches (:meth:`_rotation`)."""
        if self.pp > 1:
            return (*self._rotation([self._stage_parts(mb) for mb in micro_batches(shape, self.pp)]), 0.0)
        tokens, seqs = shape.new_tokens, shape.num_seqs
        return (
            self.dense_s(tokens, seqs),
            self.attention_s(shape),
            self.communication_s(tokens, seqs),
            self._padding_s(tokens, seqs),
        )

    def _stage_parts(self, mb: StepShape) -> tuple[float, float, float]:
        """(dense, attention, communication) of one micro-batch on the slowest pipeline stage: its share of the
        layers, the LM head and sampler, and the send of its hidden states to the next stage."""
        tokens, seqs = mb.new_tokens, mb.num_seqs
        f, head = self._stage_frac, sum(self._head_parts(tokens, seqs))
        return (
            f * (self.dense_s(tokens, seqs) - head) + head,
            f * self.attention_s(mb),
            self._stage_comm_s(tokens, seqs),
        )

    def _stage_comm_s(self, tokens: int, sampled: int) -> float:
        """Communication of one micro-batch on the slowest stage: its layers' all-reduces, the embedding's and the
        logits gather, and the send of its hidden states to the next stage."""
        act, logits = self._comm_parts(tokens, sampled)
        return (
            self._stage_frac * (self.layer_reduces * act + self._qk_norm_s(tokens))
            + act
            + logits
            + self._send.seconds(tokens * self.hidden_bytes)
        )

    def _qk_norm_s(self, tokens: int) -> float:
        """The QK norm's all-reduces of every layer (``qk_reduces``): a token's q and k variances, 2 fp32 values."""
        if not self.qk_reduces or self._links is None:
            return 0.0
        return self.qk_reduces * self._links.seconds(tokens * 8)

    def _rotation(self, stages: list) -> tuple:
        """Parts of a rotation of micro-batches, from each one's parts on the slowest stage: that stage works
        through all of them (their sum), and no micro-batch comes round before it has passed every stage (pp
        times the slowest one's); the parts are scaled to the larger, so they still add up."""
        totals = [sum(p) for p in stages]
        busy = sum(totals)
        scale = max(1.0, self.pp * max(totals) / busy) if busy > 0 else 1.0
        return tuple(scale * sum(p[i] for p in stages) for i in range(len(stages[0])))

    def _run_constant_s(self, n: int) -> float:
        """Seconds of each step of a decode run of n sequences that do not grow with the context: the dense
        part, communication and (recurrent layers) state traffic. Attention grows with it: see the run forms
        in :meth:`_decode_run_terms` (one attention span) and :meth:`_mixed_step_times`."""
        return self.dense_s(n, n) + self.communication_s(n, n) + self._padding_s(n, n) + self.recurrent_state_s(n)

    # --- the interface ------------------------------------------------------------------------
    def breakdown(self, shape: StepShape) -> dict[str, float]:
        dense, attn, comm, pad = self._gpu_parts(shape)
        decode = self.decode_cpu is not self.cpu and shape.new_tokens == shape.num_seqs  # (multi-step only)
        total, cpu = self._combine(dense + attn + comm + pad, shape.num_seqs, decode)
        return dict(zip(BREAKDOWN_COLUMNS, (total, dense, attn, comm, pad, cpu)))

    def step_time(self, shape: StepShape) -> float:
        dense, attn, comm, pad = self._gpu_parts(shape)
        # an all-decode step pays a decode step's CPU share (which differs only with multi-step scheduling)
        decode = self.decode_cpu is not self.cpu and shape.new_tokens == shape.num_seqs
        return self._combine(dense + attn + comm + pad, shape.num_seqs, decode)[0]

    def _decode_run_terms(self, n: int, s0: int) -> tuple[float, float, float, float, float]:
        """Per step i of a decode run: base + max(floor, a + b*i) (serialized CPU) or, overlapped,
        sync + max(max(floor, cpu), a + b*i): (floor, a, b, per-step constant, overlapped CPU)."""
        base = self._run_constant_s(n)
        p, per_token = self._decode_terms(n)  # as a single step prices it
        L = self.layers
        floor = base + L * p.floor_s
        a = base + L * p.stream_s(n, s0, per_token, self._kv8)
        b = L * n * per_token
        c = self.decode_cpu
        if c.overlapped:
            return max(floor, c.seconds(n)), a, b, c.sync_s, 1.0
        return floor, a, b, c.seconds(n), 0.0

    def _mixed_step_times(self, n: int, s0: int, k: int, contexts=None):
        """Step times of a decode run of a model with several attention spans (numpy, vectorised). Windowed
        layers read each sequence's window (``contexts``: the n contexts at the first step), or, without
        them, at most sequences x window; with pipeline stages, rotations of micro-batches."""
        if self.pp > 1:
            gpu = self._pipeline_run_gpu(n, s0, k)
        else:
            gpu = self._run_gpu(n, s0, k, contexts)
        return self._combine_run(gpu, n)

    def _combine_run(self, gpu, n: int):
        """Seconds of decode steps of n sequences whose GPU parts take ``gpu`` (a numpy vector): the CPU's part
        added as :meth:`_combine` adds it to one step."""
        import numpy as np

        c = self.decode_cpu
        cpu = c.seconds(n)
        return c.sync_s + np.maximum(cpu, gpu) if c.overlapped else gpu + cpu

    def _run_gpu(self, n: int, s0: float, k: int, contexts=None):
        """GPU seconds of each of k decode steps of n sequences (numpy; see :meth:`_mixed_step_times`)."""
        import numpy as np

        from kvsim.latency.base import window_reads

        p, token_s = self._decode_terms(n)
        i = np.arange(k, dtype=np.float64)
        kv = s0 + n * i
        gpu = self._run_constant_s(n)
        if contexts is not None and self.windows:
            steps = np.arange(k, dtype=np.int64)[:, None] + np.asarray(contexts, dtype=np.int64)[None, :]
        for layers, kind, w in self.attn_kinds:
            if not w:
                reads = kv
            elif contexts is not None:
                reads = window_reads(kind, w, steps).astype(np.float64)
            else:
                reads = np.minimum(kv, n * w)
            gpu = gpu + layers * np.maximum(p.floor_s, p.stream_s(n, reads, token_s, self._kv8))
        return gpu if np.ndim(gpu) else np.full(k, gpu)  # a model without attention layers: constant steps

    def _pipeline_run_gpu(self, n: int, s0: float, k: int):
        """GPU seconds of each of k rotations of a decode run under pipeline parallelism: the micro-batches of
        :func:`micro_batches`, each on the slowest stage as :meth:`_stage_parts` prices a step, rotated as
        :meth:`_rotation` does."""
        import numpy as np

        f, stages = self._stage_frac, []
        for m, share in decode_split(n, self.pp):
            full = self._run_gpu(m, s0 * share, k)  # dense + attention + all-reduces of the whole model
            head = sum(self._head_parts(m, m))
            stages.append(f * (full - head - self.communication_s(m, m)) + head + self._stage_comm_s(m, m))
        busy = sum(stages)
        return np.maximum(busy, self.pp * np.maximum.reduce(stages))

    def decode_step_times(self, n: int, s0: int, k: int, contexts=None) -> list[float]:
        if not self.plain:
            return self._mixed_step_times(n, s0, k, contexts).tolist() if k > 0 else []
        floor, a, b, const, _ = self._decode_run_terms(n, s0)
        return [const + (floor if floor > a + b * i else a + b * i) for i in range(k)]

    def decode_run_time(self, n: int, s0: int, k: int, contexts=None) -> float:
        """k decode steps of n sequences, step i attending to s0 + n*i KV tokens, in closed form: per step
        const + layers x max(floor, stream_i) with stream_i affine in i, and a constant CPU part."""
        if k <= 0:
            return 0.0
        if not self.plain:  # summed in order, as decode_steps_until accumulates
            return float(self._mixed_step_times(n, s0, k, contexts).cumsum()[-1])
        floor, a, b, const, _ = self._decode_run_terms(n, s0)
        return sum_max_of_two_affine(floor, 0.0, a, b, k) + k * const

    def decode_steps_until(self, n: int, s0: int, budget_s: float, k_max: int, contexts=None) -> int:
        if self.plain:
            return super().decode_steps_until(n, s0, budget_s, k_max)
        import numpy as np

        total = np.cumsum(self._mixed_step_times(n, s0, k_max, contexts))
        k = int(np.searchsorted(total, budget_s, side="left")) + 1  # the first k whose k steps reach the budget
        return max(1, min(k, k_max))


def windowed_tiles(
    new: int, cached: int, kind: str, window: int, tq: int, tkv: int, ovh: float, explicit_limit: int = 4096
) -> tuple[float, float]:
    """KV tiles summed over a windowed prefill chunk's query tiles (``new`` queries after ``cached``), and
    the most any query tile walks. Beyond ``explicit_limit`` query tiles, in closed form: a sliding layer's
    tiles grow until the window fills and are constant after; a chunked layer's grow within each chunk and
    repeat every lcm(chunk, tile) positions, so a huge chunk costs a few sums, not one step per tile. ``kind``: a
    layer kind or its name (layer_kinds.py); a kind of neither rule is walked tile by tile."""
    end = cached + new
    spec = KINDS[kind] if isinstance(kind, str) else kind
    first_attended = spec.first_attended

    def tiles_at(lo: int) -> int:
        hi = min(lo + tq, end) - 1  # last query position of the tile
        return -(-(hi - first_attended(window, lo) + 1) // tkv) + ovh

    closed = (
        _sliding_full_tiles
        if isinstance(spec, SlidingWindow)
        else _chunked_full_tiles
        if isinstance(spec, ChunkedLocal)
        else None
    )
    if -(-new // tq) <= explicit_limit or closed is None:
        t = [tiles_at(lo) for lo in range(cached, end, tq)]
        return float(sum(t)), float(max(t, default=0))
    full = new // tq  # whole query tiles: j = 0 .. full - 1 start at cached + j * tq
    total, most = closed(full, cached, window, tq, tkv)
    total, most = total + full * ovh, most + ovh
    if new % tq:  # the last, partial tile
        last = tiles_at(cached + full * tq)
        total, most = total + last, max(most, last)
    return float(total), float(most)


def _ceil_sum(n: int, step: int, start: int, tkv: int) -> int:
    """sum over i < n of ceil((start + step * i) / tkv), for start + step * i > 0."""
    return floor_sum(n, tkv, step, start + tkv - 1)


def _sliding_full_tiles(full: int, cached: int, window: int, tq: int, tkv: int) -> tuple[int, int]:
    """Sum and most of ceil((tile end - first key) / tkv) over a sliding layer's whole query tiles: from key 0
    while the window reaches back to it, then a constant tq + window - 1 keys."""
    j0 = min(full, max(0, (window - 1 - cached) // tq + 1)) if window - 1 >= cached else 0
    steady = -(-(tq + window - 1) // tkv)
    head = _ceil_sum(j0, tq, cached + tq, tkv)
    most = max(-(-(cached + j0 * tq) // tkv) if j0 else 0, steady if full > j0 else 0)
    return head + (full - j0) * steady, most


def _chunked_full_tiles(full: int, cached: int, chunk: int, tq: int, tkv: int) -> tuple[int, int]:
    """Sum and most of ceil((tile end - its chunk's start) / tkv) over a chunked layer's whole query tiles: the
    tiles whose first query lies in one chunk form an arithmetic run (one floor sum each), and the pattern
    repeats every chunk / gcd(chunk, tq) tiles."""
    import math

    period = chunk // math.gcd(chunk, tq)

    def runs(n: int) -> tuple[int, int]:  # tiles j < n, run by run (at most tq / gcd + 1 chunks)
        total = most = j = 0
        while j < n:
            lo = cached + j * tq
            q = lo // chunk
            j_end = min(n, -(-((q + 1) * chunk - cached) // tq))  # first tile starting in the next chunk
            total += _ceil_sum(j_end - j, tq, lo - q * chunk + tq, tkv)
            most = max(most, -(-(cached + (j_end - 1) * tq - q * chunk + tq) // tkv))
            j = j_end
        return total, most

    reps, rest = divmod(full, period)
    if reps == 0:
        return runs(full)
    cycle, most = runs(period)
    return reps * cycle + runs(rest)[0], most


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum over i < n of floor((a * i + b) / m) for whole a, b >= 0, m >= 1, in O(log) steps (the Euclid-like
    reduction of competitive programming's floor_sum)."""
    total = 0
    while n > 0:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y = a * n + b
        if y < m:
            break
        n, b = divmod(y, m)
        m, a = a, m
    return total


def decode_split(n: int, pp: int) -> list[tuple[int, float]]:
    """``n`` decoding sequences dealt over ``pp`` micro-batches: (sequences, share of the KV tokens) of each
    non-empty one (sizes differ by at most one; KV in proportion)."""
    sizes = [n // pp + (i < n % pp) for i in range(pp)]
    return [(m, m / n) for m in sizes if m]


def micro_batches(shape: StepShape, pp: int) -> list[StepShape]:
    """An iteration's sequences as ``pp`` micro-batches (vLLM V1 keeps as many batches in flight as stages):
    decodes dealt evenly (their KV in proportion), each prefill chunk, largest first, to the micro-batch with
    the fewest new tokens so far."""
    dn, dkv, chunks = shape.split()
    parts = [[m, dkv * share, []] for m, share in decode_split(dn, pp)] if dn else []
    parts += [[0, 0, []] for _ in range(pp - len(parts))]
    for chunk in sorted(chunks, reverse=True):
        min(parts, key=lambda q: q[0] + sum(c[0] for c in q[2]))[2].append(chunk)
    return [StepShape.of(c, decodes=m, decode_kv=kv) for m, kv, c in parts if m or c]
