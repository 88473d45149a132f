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
  the embedding, and the gather of the logits; each latency + bytes / bandwidth, measured.
- CPU: the serving engine's own time per iteration (cpu.py), added to the GPU time, or overlapped.

Times are seconds; shapes are tokens; bytes are per GPU. The total is the sum of the four parts.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.hardware import GpuSpec, ModelSpec
from kvsim.latency.base import LatencyModel, StepShape, sum_max_of_two_affine
from kvsim.latency.calibration import Calibration, ElementwiseParams, GemmParams
from kvsim.latency.cpu import CpuOverhead

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

    def seconds(self, calib: Calibration, gpu: GpuSpec, tokens: int, dtype_bytes: int) -> float:
        if not self.kind:
            return gemm_seconds(calib.gemm, gpu, tokens, self.k, self.n, dtype_bytes)
        return elementwise_seconds(calib.elementwise[self.kind], gpu, tokens, self.row, self.bytes_per_token)


def layer_ops(model: ModelSpec, tp: int) -> list[Op]:
    """The kernels of one decoder layer on one tensor-parallel rank (attention itself excluded)."""
    d, h, hd = model.dtype_bytes, model.hidden_size, model.head_dim
    qh, kvh = max(1, model.q_heads // tp), max(1, model.kv_heads // tp)
    ff = -(-model.intermediate_size // tp)
    up = ff * (2 if model.gated_mlp else 1)
    return [
        Op("input_layernorm", kind="norm", row=h, bytes_per_token=2 * h * d),
        Op("attn_pre_proj", h, (qh + 2 * kvh) * hd),
        Op("attn_rope", kind="rope", row=(qh + kvh) * hd, bytes_per_token=2 * (qh + kvh) * hd * d),
        Op("attn_post_proj", qh * hd, h),
        Op("post_attention_layernorm", kind="norm", row=h, bytes_per_token=2 * h * d),
        Op("mlp_up_proj", h, up),
        Op("mlp_act", kind="act", row=ff, bytes_per_token=(3 if model.gated_mlp else 2) * ff * d),
        Op("mlp_down_proj", ff, h),
        Op("add", kind="add", row=h, bytes_per_token=3 * h * d),
    ]


def embedding_op(model: ModelSpec) -> Op:
    h = model.hidden_size
    return Op("emb", kind="emb", row=h, bytes_per_token=2 * h * model.dtype_bytes)


def gemm_formula(p: GemmParams, gpu: GpuSpec, m, k, n, dtype_bytes):
    """Seconds of GEMMs of (m x k) activations by (k x n) weights; works on numpy arrays too."""
    tf = 2.0 * m * k * n / (gpu.bf16_flops * p.flops_eff)
    tb = dtype_bytes * (k * n + m * k + m * n) / (gpu.hbm_bandwidth * p.bw_eff)
    q = p.knee
    return p.t0_s + (tf ** q + tb ** q) ** (1.0 / q)


def elementwise_formula(p: ElementwiseParams, gpu: GpuSpec, m, row_elems, bytes_per_token):
    """Seconds of element-wise kernels over m tokens; works on numpy arrays too."""
    stream = m * bytes_per_token / (gpu.hbm_bandwidth * p.bw_eff)
    serial = p.serial_s * row_elems
    return p.t0_s + (serial if serial > stream else stream) if not hasattr(stream, "shape") else \
        p.t0_s + (serial * (serial > stream) + stream * (serial <= stream))


def gemm_seconds(p: GemmParams, gpu: GpuSpec, m: int, k: int, n: int, dtype_bytes: int) -> float:
    """One GEMM of an (m x k) activation by a (k x n) weight."""
    return gemm_formula(p, gpu, m, k, n, dtype_bytes) if m > 0 else 0.0


def elementwise_seconds(p: ElementwiseParams, gpu: GpuSpec, m: int, row_elems: int, bytes_per_token: float) -> float:
    return elementwise_formula(p, gpu, m, row_elems, bytes_per_token) if m > 0 else 0.0


class PerOpModel(LatencyModel):
    name = "per-op"

    def __init__(self, model: ModelSpec, gpu: GpuSpec, calib: Calibration, cpu: CpuOverhead, tp: int = 1,
                 interconnect: str = "nvswitch"):
        self.model, self.gpu, self.calib, self.cpu, self.tp = model, gpu, calib, cpu, tp
        d = self.dtype_bytes = model.dtype_bytes
        h, hd = model.hidden_size, model.head_dim
        self.layers = model.layers
        self.qh = max(1, model.q_heads // tp)
        self.kvh = max(1, model.kv_heads // tp)
        self.hd = hd
        self.ops = layer_ops(model, tp)
        self.emb = embedding_op(model)
        self.vocab = -(-model.vocab_size // tp)
        self.kv_bytes_per_token_layer = 2 * self.kvh * hd * model.kv_dtype_bytes  # FP8 KV halves the reads
        self.hidden_bytes = h * d
        self._links = calib.link(tp, interconnect) if tp > 1 else None
        self._dense_cache: dict[tuple[int, int], float] = {}
        self._comm_cache: dict[tuple[int, int], float] = {}
        pa = calib.prefill_attention
        self._tile_s = 4.0 * pa.tile_q * pa.tile_kv * hd / (gpu.bf16_flops / gpu.sms * pa.flops_eff)

    # --- parts -------------------------------------------------------------------------------
    def dense_s(self, tokens: int, sampled: int) -> float:
        """GEMMs and element-wise kernels of all layers, the embedding, the LM head and the sampler."""
        key = (tokens, sampled)
        t = self._dense_cache.get(key)
        if t is not None:
            return t
        calib, gpu, d = self.calib, self.gpu, self.dtype_bytes
        layer = sum(op.seconds(calib, gpu, tokens, d) for op in self.ops)
        t = self.layers * layer + self.emb.seconds(calib, gpu, tokens, d)
        t += gemm_seconds(calib.gemm, gpu, sampled, self.model.hidden_size, self.vocab, d)
        t += elementwise_seconds(calib.elementwise["act"], gpu, sampled, 0, self.vocab * SAMPLER_BYTES_PER_VOCAB)
        if len(self._dense_cache) < 65536:
            self._dense_cache[key] = t
        return t

    def decode_attention_layer_s(self, num_seqs: int, kv_tokens: int) -> float:
        if num_seqs <= 0:
            return 0.0
        p = self.calib.decode_attention
        stream = p.ramp_s + p.per_seq_s * num_seqs + \
            kv_tokens * self.kv_bytes_per_token_layer / (self.gpu.hbm_bandwidth * p.bw_eff)
        return max(p.floor_s, stream)

    def prefill_attention_layer_s(self, chunks) -> float:
        """FlashAttention-style prefill of (new tokens, cached tokens) chunks, causal within each chunk."""
        if not chunks:
            return 0.0
        p = self.calib.prefill_attention
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
        dn, dkv, chunks = shape.split()
        return self.layers * (self.decode_attention_layer_s(dn, dkv) + self.prefill_attention_layer_s(chunks))

    def communication_s(self, tokens: int, sampled: int) -> float:
        """Two all-reduces per layer and one for the embedding (tokens x hidden), the logits gather."""
        link = self._links
        if link is None or tokens <= 0:
            return 0.0
        key = (tokens, sampled)
        t = self._comm_cache.get(key)
        if t is None:
            act = link.latency_s + tokens * self.hidden_bytes / link.bandwidth
            logits = link.latency_s + sampled * self.vocab * self.dtype_bytes / link.bandwidth
            t = (2 * self.layers + 1) * act + logits
            if len(self._comm_cache) < 65536:
                self._comm_cache[key] = t
        return t

    def _combine(self, gpu_s: float, num_seqs: int) -> tuple[float, float]:
        """(total, exposed CPU seconds) of an iteration whose GPU part takes ``gpu_s``."""
        c = self.cpu
        cpu = c.seconds(num_seqs)
        if c.overlapped:
            exposed = max(0.0, cpu - gpu_s) + c.sync_s
        else:
            exposed = cpu
        return gpu_s + exposed, exposed

    # --- the interface ------------------------------------------------------------------------
    def breakdown(self, shape: StepShape) -> dict[str, float]:
        dense = self.dense_s(shape.new_tokens, shape.num_seqs)
        attn = self.attention_s(shape)
        comm = self.communication_s(shape.new_tokens, shape.num_seqs)
        total, cpu = self._combine(dense + attn + comm, shape.num_seqs)
        return {"total_s": total, "dense_s": dense, "attention_s": attn, "communication_s": comm, "cpu_s": cpu}

    def step_time(self, shape: StepShape) -> float:
        gpu_s = self.dense_s(shape.new_tokens, shape.num_seqs) + self.attention_s(shape) + \
            self.communication_s(shape.new_tokens, shape.num_seqs)
        return self._combine(gpu_s, shape.num_seqs)[0]

    def _decode_run_terms(self, n: int, s0: int) -> tuple[float, float, float, float, float]:
        """Per step i of a decode run: base + max(floor, a + b*i) (serialized CPU) or, overlapped,
        sync + max(max(floor, cpu), a + b*i): (floor, a, b, per-step constant, overlapped CPU)."""
        p = self.calib.decode_attention
        base = self.dense_s(n, n) + self.communication_s(n, n)
        per_byte = self.kv_bytes_per_token_layer / (self.gpu.hbm_bandwidth * p.bw_eff)
        L = self.layers
        floor = base + L * p.floor_s
        a = base + L * (p.ramp_s + p.per_seq_s * n + s0 * per_byte)
        b = L * n * per_byte
        c = self.cpu
        if c.overlapped:
            return max(floor, c.seconds(n)), a, b, c.sync_s, 1.0
        return floor, a, b, c.seconds(n), 0.0

    def decode_step_times(self, n: int, s0: int, k: int) -> list[float]:
        floor, a, b, const, _ = self._decode_run_terms(n, s0)
        return [const + (floor if floor > a + b * i else a + b * i) for i in range(k)]

    def decode_run_time(self, n: int, s0: int, k: int) -> float:
        """k decode steps of n sequences, step i attending to s0 + n*i KV tokens, in closed form: per step
        const + layers x max(floor, stream_i) with stream_i affine in i, and a constant CPU part."""
        if k <= 0:
            return 0.0
        floor, a, b, const, _ = self._decode_run_terms(n, s0)
        return sum_max_of_two_affine(floor, 0.0, a, b, k) + k * const
