"""Transformer shapes that decide KV-cache size and per-iteration work.

Presets carry the fields of each model's public Hugging Face ``config.json`` (hidden_size,
intermediate_size, num_attention_heads, num_key_value_heads, num_hidden_layers, head_dim, vocab_size,
max_position_embeddings, torch_dtype, tie_word_embeddings) and its published parameter count.
``--model`` also takes a path to such a ``config.json`` (models.py: :func:`model_from_hf_config`).

Today's models are not one kind of layer. Each layer has a token mixer (``layer_types``):

- ``full``: attention over the whole context (K and V per KV head, or one MLA latent per token);
- ``sliding``: attention over the last ``sliding_window`` tokens (the token itself included);
- ``chunked``: attention within the token's ``attention_chunk`` (Llama 4's local layers);
- ``mamba``: a recurrent layer holding a fixed-size state per sequence (conv + SSM state).

and an FFN that is dense or a mixture of experts (``moe_layers``). kv_layout.py turns this into the
per-layer cache kinds allocators work with.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from kvsim.errors import ConfigError
from kvsim.validation import is_finite, shown

DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1, "int8": 1}
DTYPE_BYTES["mxfp4"] = 0.53125  # 4-bit values + one 8-bit scale per 32 (gpt-oss experts): 4.25 bits
DTYPE_BYTES["nvfp4"] = 0.5625  # 4-bit values + one FP8 scale per 16 (NVIDIA ModelOpt / compressed-tensors NVFP4)
DTYPE_BYTES["int4"] = 0.5  # 4-bit integers; their group scales (and zero points) per ModelSpec.weight_group_size
# GEMM schemes of quantized weights (latency.calibration.GEMM_QUANT): fp8 and fp8_block on FP8 tensor cores, nvfp4
# on FP4 ones, w4a16 / w8a16 weight-only (Marlin: 4- or 8-bit weights, bf16 compute), w8a8_int8 on int8 tensor cores
WEIGHT_QUANT = ("fp8", "fp8_block", "nvfp4", "w4a16", "w8a16", "w8a8_int8")
KV_CACHE_DTYPES = ("auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2")  # vLLM's --kv-cache-dtype (auto: the model's)
HF_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8"}


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, as far as KV memory and iteration time care."""

    name: str
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    params: float  # parameter count (weights), not bytes
    max_context: int  # tokens
    dtype: str = "fp16"  # dtype of weights and KV cache
    hidden_size: int = 0  # 0: q_heads x head_dim
    intermediate_size: int = 0  # FFN width; 0: derived from params (gated MLP assumed)
    vocab_size: int = 32000
    gated_mlp: bool = True  # SwiGLU-style up (gate + up) projection; False: one up projection (OPT, phi)
    tie_word_embeddings: bool = False
    kv_dtype: str | None = None  # dtype of the KV cache (vLLM --kv-cache-dtype); None: the weights' dtype
    # --- per-layer structure (module docstring); the defaults describe a dense full-attention model ---
    layer_types: tuple[str, ...] = ()  # token mixer per layer; (): every layer "full"
    sliding_window: int = 0  # tokens a sliding layer attends to, the token itself included
    attention_chunk: int = 0  # tokens per chunk of chunked-local layers
    kv_lora_rank: int = 0  # MLA: latent width cached per token and layer (0: K and V per KV head)
    qk_rope_head_dim: int = 0  # MLA: decoupled rotary key width cached beside the latent
    q_lora_rank: int = 0  # MLA: query down-projection width (0: none)
    v_head_dim: int = 0  # MLA: value width per head (0: head_dim)
    mamba_d_inner: int = 0  # recurrent layers: inner width (expand x hidden)
    mamba_d_state: int = 0  # recurrent layers: SSM state per inner channel
    mamba_d_conv: int = 0  # recurrent layers: causal conv kernel width
    mamba_conv_channels: int = 0  # channels of the conv state (Mamba-1: d_inner; Mamba-2: d_inner + 2 groups x d_state)
    # recurrent layers that are Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5) instead of Mamba: d_inner is
    # value heads x value dims, d_state the key dims (the state is a key x value matrix per value head), and
    # gdn_key_width = key heads x key dims; 0: Mamba
    gdn_key_width: int = 0
    state_dtype: str | None = None  # dtype of the recurrent (SSM) state; None: the model's (vLLM's "auto")
    num_experts: int = 0  # routed experts per MoE layer (0: dense FFN everywhere)
    experts_per_token: int = 0  # top-k routing
    moe_intermediate_size: int = 0  # FFN width of one expert
    shared_experts: int = 0  # always-active experts per MoE layer, each moe_intermediate_size wide
    moe_layers: tuple[bool, ...] = ()  # per layer: FFN is MoE; () with num_experts: every layer
    # per layer: it has an FFN; (): every layer (Nemotron-H's mixers and MLPs are separate blocks: a mixer
    # block followed by another mixer has none)
    ffn_layers: tuple[bool, ...] = ()
    expert_dtype: str | None = None  # dtype of the expert weights (gpt-oss: mxfp4); None: as the other weights
    weight_dtype: str | None = None  # dtype of the checkpoint's weights if quantized (DeepSeek-V3: fp8); None: dtype
    # how a quantized checkpoint's dense GEMMs run (WEIGHT_QUANT): fp8 (per-tensor/channel scales), fp8_block
    # (128x128 block scales: DeepSeek-V3), nvfp4; None: in the model's dtype
    weight_quant: str | None = None
    # integer weights (int4, int8) carry one fp16 scale per this many weights along the input dimension, and with
    # ``weight_zero_points`` one zero point of the weights' width too (AWQ); 0: per output channel (negligible)
    weight_group_size: int = 0
    weight_zero_points: bool = False
    quant_method: str | None = None  # the checkpoint's quantization_config quant_method (vLLM's --quantization name)
    # the checkpoint leaves its attention projections unquantized (its exclusion list names them): they stay in
    # the model's dtype, in memory and in GEMM time
    attention_unquantized: bool = False
    # layers (0-based) whose attention projections / dense MLP the exclusion list keeps in the model's dtype when
    # it names only some layers (memory; their GEMMs are priced as the quantized ones)
    unquantized_attention_layers: tuple[int, ...] = ()
    unquantized_mlp_layers: tuple[int, ...] = ()
    # speculative decoding (kvsim.speculative): the draft's attention layers, whose KV every token also takes in
    # the same pool (same per-layer bytes), and the bytes of the draft's own weights (embedding / LM head shared)
    draft_layers: int = 0
    draft_weight_bytes: float = 0.0
    # channels per head that rotary position embeddings turn (None: the whole head, MLA's rope part; 0: no RoPE)
    rotary_dim: int | None = None
    # the KV cache dtype the checkpoint declares (ModelOpt kv_cache_quant_algo, compressed-tensors
    # kv_cache_scheme): what vLLM's --kv-cache-dtype auto stores; None: the model's dtype
    checkpoint_kv_dtype: str | None = None
    # read from a user's config.json (the checkpoint's own quantization is then the truth; presets can be priced
    # in another published format: checkpoints.py)
    from_config: bool = False
    format_note: str = ""  # how kvsim chose this weight format, for the user (checkpoints.py); "" if as given

    def __post_init__(self) -> None:
        if self.hidden_size <= 0 and self.q_heads > 0 and self.head_dim > 0:
            object.__setattr__(self, "hidden_size", self.q_heads * self.head_dim)
        if self.intermediate_size <= 0 and self.hidden_size > 0 and self.layers > 0:
            object.__setattr__(self, "intermediate_size", self._ffn_from_params())

    @property
    def embedding_params(self) -> int:
        """Parameters of the embedding and the LM head (one matrix when they are tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def _ffn_from_params(self) -> int:
        """The FFN width that makes the parameter count add up (for specs that give only ``params``)."""
        h = self.hidden_size
        embed = self.embedding_params
        attn = h * (self.q_heads + 2 * self.kv_heads) * self.head_dim + self.q_heads * self.head_dim * h
        mlp_per_layer = (self.params - embed) / self.layers - attn - 2 * h
        return max(1, int(round(mlp_per_layer / ((3 if self.gated_mlp else 2) * h))))

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.kv_dtype or self.dtype]

    # --- layer structure -----------------------------------------------------------------------
    @property
    def mixers(self) -> tuple[str, ...]:
        """Token mixer of each layer (module docstring)."""
        return self.layer_types or ("full",) * self.layers

    @property
    def attention_layers(self) -> int:
        return sum(1 for t in self.mixers if t != "mamba")

    def count(self, mixer: str) -> int:
        return sum(1 for t in self.mixers if t == mixer)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def moe_mask(self) -> tuple[bool, ...]:
        """Per layer: its FFN is a mixture of experts."""
        if not self.is_moe:
            return (False,) * self.layers
        return self.moe_layers or (True,) * self.layers

    @property
    def ffn_mask(self) -> tuple[bool, ...]:
        """Per layer: it has an FFN (dense or experts)."""
        return self.ffn_layers or (True,) * self.layers

    def _ffn_of(self, moe: bool, has_ffn: bool) -> float:
        return self.ffn_params(moe) if has_ffn else 0.0

    @property
    def is_hybrid(self) -> bool:
        """Some layer is not full attention (sliding, chunked or recurrent)."""
        return any(t != "full" for t in self.mixers)

    def kv_bytes_per_token_layer(self, tp: int = 1) -> int:
        """Bytes one token's cache takes in one attention layer on one GPU: K and V of the rank's KV heads
        (2 x kv_heads/tp x head_dim x KV dtype bytes), or MLA's latent + rotary key, which every rank
        holds whole ((kv_lora_rank + qk_rope_head_dim) x KV dtype bytes)."""
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        return 2 * self.kv_heads_per_gpu(tp) * self.head_dim * self.kv_dtype_bytes

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads one of ``tp`` ranks holds: its share, or one (replicated) when there are more ranks than heads,
        as vLLM does."""
        return max(1, self.kv_heads // tp)

    def state_bytes_per_layer(self, tp: int = 1) -> int:
        """Bytes of one sequence's recurrent state in one mamba (or Gated DeltaNet) layer on one GPU (conv state
        channels x (d_conv - 1) + SSM state d_inner x d_state, in the weights' dtype, as vLLM's default mamba
        cache dtype, the SSM state in ``state_dtype`` where the checkpoint names one), channels split over
        tensor-parallel ranks."""
        conv = self.mamba_conv_channels * max(0, self.mamba_d_conv - 1)
        ssm = self.mamba_d_inner * self.mamba_d_state
        if self.state_dtype is None or DTYPE_BYTES[self.state_dtype] == self.dtype_bytes:
            return int((conv + ssm) // tp * self.dtype_bytes)
        return int(conv // tp * self.dtype_bytes + ssm // tp * DTYPE_BYTES[self.state_dtype])

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one token's KV occupies if every attention layer kept every token (what a cache that
        treats all layers as full attention holds): attention layers x per-layer bytes. For a plain
        model, 2 x layers x kv_heads x head_dim x KV dtype bytes."""
        return self.kv_bytes_per_token_gpu(1)

    def kv_bytes_per_token_gpu(self, tp: int = 1) -> int:
        return (self.attention_layers + self.draft_layers) * self.kv_bytes_per_token_layer(tp)

    def window_of(self, mixer: str) -> int:
        """Tokens a layer of this kind can attend back over: the sliding window, the chunk, or 0 (no bound)."""
        return self.sliding_window if mixer == "sliding" else self.attention_chunk if mixer == "chunked" else 0

    def tokens_held(self, mixer: str, context: int) -> int:
        """Tokens a layer of this kind must hold to compute the last token of a ``context``-token
        sequence: all of them (full), the last ``sliding_window`` (sliding), those of the token's own
        chunk (chunked), none (mamba)."""
        if mixer == "mamba" or context <= 0:
            return 0
        return context - first_attended(mixer, self.window_of(mixer), context - 1)

    def sequence_bytes(self, context: int, tp: int = 1) -> int:
        """Exact bytes one sequence of ``context`` tokens needs on one GPU (no block rounding): per
        attention layer the tokens it holds (:meth:`tokens_held`) x per-layer bytes, plus each mamba
        layer's state."""
        per_tok, state = self.kv_bytes_per_token_layer(tp), self.state_bytes_per_layer(tp)
        return sum(state if t == "mamba" else self.tokens_held(t, context) * per_tok for t in self.mixers) + \
            self.draft_layers * self.tokens_held("full", context) * per_tok

    def tp_problem(self, tp: int) -> str | None:
        """Why ``tp`` ranks cannot split this model's KV, or None (MLA's latent is held whole by every rank)."""
        if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
            return "must be a positive integer"
        if not self.is_mla and self.attention_layers and self.kv_heads % tp and tp % self.kv_heads:
            return (f"must divide the model's kv_heads ({self.kv_heads}) or be a multiple of it (each rank then holds "
                    "a replica of one KV head, as vLLM does)")
        if self.attention_layers and self.q_heads % tp:
            return f"must divide the model's attention heads ({self.q_heads}), as vLLM requires"
        return None

    def pp_problem(self, pp: int) -> str | None:
        """Why this model cannot be split into ``pp`` pipeline stages here, or None."""
        if isinstance(pp, bool) or not isinstance(pp, int) or pp <= 0:
            return "must be a positive integer"
        if pp > self.layers:
            return f"is more stages than the model's {self.layers} layers"
        if pp > 1 and self.is_hybrid:
            return ("pipeline parallelism is modelled for models whose layers all keep full attention; "
                    f"{self.name} has {', '.join(sorted(set(self.mixers) - {'full'}))} layers")
        return None

    def pipeline_stage(self, pp: int) -> "ModelSpec":
        """The largest of ``pp`` pipeline stages as a model of its own, for memory per GPU: its ceil(layers / pp)
        layers (the last ones: the heaviest for models whose first layers are dense), their share of the layers'
        parameters, and one vocabulary matrix (the first stage holds the embedding, the last the LM head)."""
        if pp == 1:
            return self
        n = -(-self.layers // pp)
        h = self.hidden_size
        attn, mamba = self.attention_params(), self.mamba_params()
        per_layer = [(mamba if m == "mamba" else attn) + self._ffn_of(moe, f) + 2 * h
                     for m, moe, f in zip(self.mixers, self.moe_mask, self.ffn_mask)]
        embed = self.embedding_params
        scale = max(0.0, self.params - embed - h) / sum(per_layer)  # presets' counts need not match the shapes
        first = self.layers - n
        return replace(self, layers=n, params=self.vocab_size * h + scale * sum(per_layer[-n:]),
                       layer_types=self.layer_types[-n:], moe_layers=self.moe_layers[-n:],
                       ffn_layers=self.ffn_layers[-n:],
                       unquantized_attention_layers=tuple(i - first for i in self.unquantized_attention_layers
                                                          if i >= first),
                       unquantized_mlp_layers=tuple(i - first for i in self.unquantized_mlp_layers if i >= first))

    def check_tp(self, tp: int) -> None:
        problem = self.tp_problem(tp)
        if problem:
            raise ConfigError(f"--tensor-parallel-size {tp!r}: {problem}")

    def with_kv_cache_dtype(self, kv_cache_dtype: str) -> "ModelSpec":
        """This model with its KV cache stored as ``kv_cache_dtype`` ('auto': as the checkpoint declares, else as
        the weights, as vLLM resolves it)."""
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(f"--kv-cache-dtype '{kv_cache_dtype}': not one of {', '.join(KV_CACHE_DTYPES)}")
        return replace(self, kv_dtype=self.checkpoint_kv_dtype if kv_cache_dtype == "auto" else kv_cache_dtype)

    def with_quantization(self, quantization: str | None) -> "ModelSpec":
        """This model as vLLM's ``--quantization`` serves it (kvsim/hardware/checkpoints.py): ``fp8`` keeps an FP8
        checkpoint's own scheme and quantizes a bf16 one on loading; another method's name keeps a checkpoint of
        that method as it is, prices a preset as that method's published checkpoints hold it, and is refused for
        a config.json of another method, as vLLM refuses it; None: as the checkpoint is."""
        from kvsim.hardware.checkpoints import quantize

        spec, note = quantize(self, quantization, self.from_config)
        return replace(spec, format_note=note) if note else spec

    def expert_params(self) -> float:
        """Parameters of the routed experts (all of them, all MoE layers)."""
        width = 3 if self.gated_mlp else 2
        return sum(self.moe_mask) * self.num_experts * width * self.hidden_size * self.moe_intermediate_size

    @property
    def active_params(self) -> float:
        """Parameters one token passes through: all but the routed experts it is not sent to."""
        if not self.is_moe:
            return self.params
        experts = self.expert_params()
        return self.params - experts + experts * self.experts_per_token / self.num_experts

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights (every expert is held, whichever a batch routes to). A quantized checkpoint keeps
        its embedding and LM head in the model's dtype, as vLLM loads them."""
        experts = self.expert_params() if self.expert_dtype and self.is_moe else 0.0
        embed = self.embedding_params if self.weight_dtype else 0
        total = ((self.params - experts - embed) * self.weight_dtype_bytes + embed * self.dtype_bytes
                 + (experts * self.expert_dtype_bytes if experts else 0.0)) + self.draft_weight_bytes
        if self.weight_dtype:
            mixers, moe = self.mixers, self.moe_mask
            attn = self.attention_layers if self.attention_unquantized else \
                sum(1 for i in self.unquantized_attention_layers if mixers[i] != "mamba")
            mlp = sum(1 for i in self.unquantized_mlp_layers if not moe[i])
            total += (attn * self.attention_params() + mlp * self.ffn_params(False)) * (
                self.dtype_bytes - self.weight_dtype_bytes)
        return total

    def expert_weight_bytes(self) -> float:
        """Bytes of the routed experts (all of them, all MoE layers), in the experts' dtype; 0 for a dense model."""
        if not self.is_moe:
            return 0.0
        return self.expert_params() * (self.expert_dtype_bytes if self.expert_dtype else self.weight_dtype_bytes)

    @property
    def expert_dtype_bytes(self) -> float:
        """Bytes per routed-expert weight held in ``expert_dtype``, with its group scales: 4-bit integer experts
        (Kimi-K2.5's W4A16) carry a bf16 scale per ``weight_group_size`` weights."""
        b = DTYPE_BYTES[self.expert_dtype]
        if self.expert_dtype in ("int4", "int8") and self.weight_group_size:
            b += 2 / self.weight_group_size
        return b

    def gpu_weight_bytes(self, tp: int = 1, dp: int = 1, gpu=None) -> float:
        """Bytes of weights one GPU holds when each of ``dp`` data-parallel ranks spans ``tp`` GPUs: every weight
        split over the rank's tp GPUs, except the routed experts, which vLLM spreads over all dp x tp GPUs (a
        dense model's ranks are whole copies). ``gpu`` (a GpuSpec): as vLLM's kernels for it hold them
        (:meth:`zero_point_extra_bytes`)."""
        experts = self.expert_weight_bytes() if dp > 1 else 0.0
        return (self.weight_bytes + self.zero_point_extra_bytes(gpu) - experts) / tp + experts / (tp * dp) \
            + self.rope_cache_bytes + self.expert_padding_bytes(gpu, tp * dp)

    def expert_padding_bytes(self, gpu=None, ranks: int = 1) -> float:
        """Bytes one GPU's MXFP4 experts take beyond their checkpoint size on ``gpu``, the routed experts split in
        width over ``ranks`` GPUs: vLLM's MXFP4 MoE kernels pad each expert (vllm/model_executor/layers/
        quantization/mxfp4.py, ``create_weights``): Marlin (Ampere, Ada, Hopper, RTX Blackwell) the rank's
        intermediate width to a multiple of 128 and the hidden size to 256; FlashInfer's TRT-LLM kernels
        (B200/B300 class) both to 256. gpt-oss-120b on one H100: 2,880 x 2,880 experts held as 2,944 x 3,072,
        5.0 GiB more (public logs: 64.4-66.0 GiB loaded against 60.8 GiB of checkpoint)."""
        if gpu is None or self.expert_dtype != "mxfp4" or not self.is_moe:
            return 0.0
        i_align, h_align = (256, 256) if gpu.name in MXFP4_TRTLLM_GPUS else (128, 256)
        width = self.moe_intermediate_size / ranks
        padded = -(-width // i_align) * i_align * (-(-self.hidden_size // h_align) * h_align)
        per_expert = (3 if self.gated_mlp else 2) * (padded - width * self.hidden_size) * DTYPE_BYTES["mxfp4"]
        return sum(self.moe_mask) * self.num_experts * per_expert

    @property
    def rope_cache_bytes(self) -> float:
        """Bytes of vLLM's rotary cos/sin cache: one table of max_position_embeddings x rotary_dim values in the
        model's dtype, shared by the layers (get_rope hands out one instance per shape) and held whole on every
        GPU (32 MiB for Llama-3.1's 131,072 positions; public logs: the bf16 8B model loads 14.989 GiB, its
        parameters 14.958)."""
        dim = self.rotary_dim
        if dim is None:
            dim = self.qk_rope_head_dim or self.head_dim
        return float(self.max_context * dim * DTYPE_BYTES[self.dtype])

    def zero_point_extra_bytes(self, gpu=None) -> float:
        """Bytes the zero points of integer weights take on ``gpu`` beyond their packed width: on Hopper vLLM runs
        the dense layers' AWQ-style weights through Machete, which holds each group's zero point pre-multiplied
        by its scale in 16 bits (Marlin elsewhere, and the fused-MoE kernels, keep them packed); 0 otherwise."""
        dtype = self.weight_dtype or self.dtype
        if gpu is None or gpu.arch != "hopper" or not self.weight_zero_points or dtype not in ("int4", "int8") \
                or not self.weight_group_size:
            return 0.0
        experts = self.expert_params() if self.is_moe else 0.0
        embed = self.embedding_params
        return (self.params - experts - embed) * (2 - DTYPE_BYTES[dtype]) / self.weight_group_size

    def dp_problem(self, dp: int, pp: int = 1) -> str | None:
        """Why ``dp`` data-parallel ranks cannot be modelled for this model here, or None."""
        if isinstance(dp, bool) or not isinstance(dp, int) or dp <= 0:
            return "must be a positive integer"
        if dp > 1 and pp > 1:
            return "data-parallel ranks with pipeline stages are not modelled; use one or the other"
        return None

    @property
    def quant_detail(self) -> str:
        """How quantized weights are held, for tables ('' when they are not): 'fp8_block', 'awq w4a16, groups
        of 128 + zero points'."""
        if not self.weight_quant:
            return ""
        dtype = self.weight_dtype or self.dtype
        detail = " ".join(d for d in (self.quant_method, self.weight_quant) if d and d != dtype)
        if dtype in ("int4", "int8"):
            detail += f", groups of {self.weight_group_size}" if self.weight_group_size else ", per channel"
            detail += " + zero points" if self.weight_zero_points else ""
        if self.attention_unquantized:
            detail += f", attention in {self.dtype}"
        kept = [f"{len(t)} {what}" for t, what in ((self.unquantized_attention_layers, "layers' attention"),
                                                   (self.unquantized_mlp_layers, "layers' MLP")) if t]
        if kept:
            detail += f", {' and '.join(kept)} in {self.dtype}"
        return detail

    @property
    def weight_dtype_bytes(self) -> float:
        """Bytes per weight of the quantized layers with their scales: an integer weight's bits / 8 plus, per
        group of ``weight_group_size``, an fp16 scale and (``weight_zero_points``) a zero point of its width."""
        dtype = self.weight_dtype or self.dtype
        b = DTYPE_BYTES[dtype]
        if dtype in ("int4", "int8") and self.weight_group_size:
            b += (2 + (b if self.weight_zero_points else 0)) / self.weight_group_size
        return b

    @property
    def attn_flops_per_pair(self) -> int:
        """FLOPs for one (query token, key token) pair over all layers: QK^T and PV, 2 FLOPs per MAC each."""
        return 4 * self.layers * self.q_heads * self.head_dim

    def attention_params(self) -> float:
        """Parameters of one attention layer's projections."""
        h, q, hd = self.hidden_size, self.q_heads, self.head_dim
        if self.is_mla:
            v, rope = self.v_head_dim or hd, self.qk_rope_head_dim
            qp = h * self.q_lora_rank + self.q_lora_rank * q * hd if self.q_lora_rank else h * q * hd
            kv = h * (self.kv_lora_rank + rope) + self.kv_lora_rank * q * (hd - rope + v)
            return qp + kv + q * v * h
        return h * (q + 2 * self.kv_heads) * hd + q * hd * h

    @property
    def gdn_value_heads(self) -> int:
        """Gated DeltaNet layers: value heads (d_inner / key dims: key and value heads are equally wide in every
        released model); 0 for Mamba."""
        return self.mamba_d_inner // self.mamba_d_state if self.gdn_key_width and self.mamba_d_state else 0

    def mamba_params(self) -> float:
        """Parameters of one recurrent layer (in/out projections, conv, dt/B/C projections, A and D; Gated
        DeltaNet: q, k, v, z and the beta/alpha gates in, conv, out)."""
        h, di, ds = self.hidden_size, self.mamba_d_inner, self.mamba_d_state
        if self.gdn_key_width:
            return h * (2 * self.gdn_key_width + 2 * di + 2 * self.gdn_value_heads) \
                + self.mamba_conv_channels * self.mamba_d_conv + di * h
        return 2 * h * di + di * h + self.mamba_conv_channels * self.mamba_d_conv + 4 * di * ds

    def ffn_params(self, moe: bool) -> float:
        width = 3 if self.gated_mlp else 2
        h = self.hidden_size
        if moe:
            return (self.num_experts + self.shared_experts) * width * h * self.moe_intermediate_size \
                + h * self.num_experts
        return width * h * self.intermediate_size

    def shape_params(self) -> float:
        """Parameters implied by the shapes (embeddings, mixers, FFNs or experts, norms)."""
        h = self.hidden_size
        embed = self.embedding_params
        attn, mamba = self.attention_params(), self.mamba_params()
        total = embed + h
        for mixer, moe, has_ffn in zip(self.mixers, self.moe_mask, self.ffn_mask):
            total += (mamba if mixer == "mamba" else attn) + self._ffn_of(moe, has_ffn) + 2 * h
        return total

    def validate(self) -> "ModelSpec":
        for f in ("layers", "q_heads", "kv_heads", "head_dim", "max_context", "hidden_size", "intermediate_size",
                  "vocab_size"):
            v = getattr(self, f)
            top = MAX_LAYERS if f == "layers" else MAX_DIM
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > top:
                raise ConfigError(f"model '{self.name}': {f} must be a positive integer up to {top:,}, got {shown(v)}")
        if isinstance(self.params, bool) or not isinstance(self.params, (int, float)) or not is_finite(self.params) \
                or self.params <= 0:
            raise ConfigError(f"model '{self.name}': params must be a positive number, got {self.params!r}")
        if self.q_heads % self.kv_heads:
            raise ConfigError(f"model '{self.name}': q_heads ({self.q_heads}) must be a multiple of kv_heads ({self.kv_heads})")
        for f in ("dtype", "kv_dtype", "weight_dtype", "expert_dtype"):
            v = getattr(self, f)
            if (v is not None or f == "dtype") and v not in DTYPE_BYTES:
                raise ConfigError(f"model '{self.name}': unknown {f} '{v}' (known: {', '.join(DTYPE_BYTES)})")
        g = self.weight_group_size
        if isinstance(g, bool) or not isinstance(g, int) or g < 0 or g > MAX_DIM:
            raise ConfigError(f"model '{self.name}': weight_group_size must be a whole number >= 0, got {shown(g)}")
        if self.weight_quant is not None and self.weight_quant not in WEIGHT_QUANT:
            raise ConfigError(f"model '{self.name}': unknown weight_quant '{self.weight_quant}' (known: "
                              f"{', '.join(WEIGHT_QUANT)})")
        self._validate_structure()
        return self

    def _validate_structure(self) -> None:
        where = f"model '{self.name}'"
        if self.layer_types:
            if len(self.layer_types) != self.layers:
                raise ConfigError(f"{where}: {len(self.layer_types)} layer types for {self.layers} layers")
            unknown = sorted(set(self.layer_types) - set(MIXERS))
            if unknown:
                raise ConfigError(f"{where}: unknown layer type(s) {', '.join(unknown)} (known: {', '.join(MIXERS)})")
        for f in ("moe_layers", "ffn_layers"):
            v = getattr(self, f)
            if v and len(v) != self.layers:
                raise ConfigError(f"{where}: {len(v)} {f} entries for {self.layers} layers")
        need = {"sliding": ("sliding_window",), "chunked": ("attention_chunk",),
                "mamba": ("mamba_d_inner", "mamba_d_state", "mamba_d_conv")}
        for mixer, fields in need.items():
            if self.count(mixer):
                for f in fields:
                    v = getattr(self, f)
                    if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > MAX_DIM:
                        raise ConfigError(f"{where}: {mixer} layers need a positive integer {f}, got {v!r}")
        if self.is_moe:
            if not 0 < self.experts_per_token <= self.num_experts or self.moe_intermediate_size <= 0:
                raise ConfigError(f"{where}: a mixture of experts needs 0 < experts_per_token <= num_experts and a"
                                  f" positive moe_intermediate_size (got {self.experts_per_token}, {self.num_experts},"
                                  f" {self.moe_intermediate_size})")
            if self.moe_layers and len(self.moe_layers) != self.layers:
                raise ConfigError(f"{where}: {len(self.moe_layers)} MoE layer flags for {self.layers} layers")


# GPUs whose MXFP4 experts vLLM runs on FlashInfer's TRT-LLM kernels by default (SM100 class); others: Marlin
MXFP4_TRTLLM_GPUS = ("b200", "gb200", "b300", "gb300")
MAX_DIM = 1 << 40  # any model dimension or context length beyond this is a typo, not a model
MAX_NAME = 120  # characters of a model name taken from a config
MAX_LAYERS = 100_000  # kvsim keeps per-layer structure (mixers, MoE flags): a bound on the work a config asks for
MIXERS = ("full", "sliding", "chunked", "mamba")


def _m(name, layers, hidden, q, kv, ffn, vocab, ctx, params, dtype="fp16", head_dim=0, gated=True, tied=False, **more):
    return ModelSpec(name, layers, q, kv, head_dim or hidden // q, params, ctx, dtype, hidden, ffn, vocab, gated, tied,
                     **more)


def first_attended(mixer: str, window: int, position):
    """The first key position a query at ``position`` (0-based) attends to in a layer of this kind: 0 (full),
    ``window`` - 1 back (sliding), its chunk's start (chunked). Works on numpy arrays of positions too."""
    if mixer == "sliding":
        d = position - window + 1
        return d * (d > 0)
    if mixer == "chunked":
        return position // window * window
    return position * 0


def _pattern(layers: int, mixer) -> tuple[str, ...]:
    """Layer types from a rule: ``mixer(i)`` gives layer i's type."""
    return tuple(mixer(i) for i in range(layers))


# Shapes from each model's Hugging Face config.json; params as published (model cards).
MODEL_PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        _m("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 6.74e9),
        _m("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 13.0e9),
        _m("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 69.0e9),
        _m("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 8.03e9, "bf16"),
        _m("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 70.6e9, "bf16"),
        _m("codellama-34b", 48, 8192, 64, 8, 22016, 32000, 16384, 33.7e9, "bf16"),
        _m("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768, 7.24e9, "bf16"),
        _m("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 32768, 7.62e9, "bf16", head_dim=128),
        _m("qwen-72b", 80, 8192, 64, 64, 24576, 152064, 32768, 72.3e9, "bf16"),
        _m("internlm-20b", 60, 5120, 40, 40, 13824, 103168, 4096, 20.0e9, "bf16"),
        _m("phi-2", 32, 2560, 32, 32, 10240, 51200, 2048, 2.78e9, gated=False, rotary_dim=32),  # partial 0.4
        _m("opt-13b", 40, 5120, 40, 40, 20480, 50272, 2048, 12.9e9, gated=False, tied=True, rotary_dim=0),
        # --- today's layer mixes; numbers from each repository's config.json on Hugging Face ---
        # mistralai/Mistral-7B-v0.1: every layer a 4096-token sliding window.
        _m("mistral-7b-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768, 7.24e9, "bf16",
           layer_types=("sliding",) * 32, sliding_window=4096),
        # google/gemma-2-9b: head_dim 256, sliding_window 4096 on even layers (0, 2, ...), full on odd ones.
        _m("gemma-2-9b", 42, 3584, 16, 8, 14336, 256000, 8192, 9.24e9, "bf16", head_dim=256, tied=True,
           layer_types=_pattern(42, lambda i: "sliding" if i % 2 == 0 else "full"), sliding_window=4096),
        # google/gemma-3-12b-it (text_config): sliding_window 1024, every 6th layer full
        # (sliding_window_pattern 6); params include the vision tower vLLM loads.
        _m("gemma-3-12b", 48, 3840, 16, 8, 15360, 262208, 131072, 12.2e9, "bf16", head_dim=256, tied=True,
           layer_types=_pattern(48, lambda i: "full" if (i + 1) % 6 == 0 else "sliding"), sliding_window=1024),
        # openai/gpt-oss-20b: layer_types alternate sliding_attention (128) / full_attention; 32 experts,
        # top-4, experts in MXFP4.
        _m("gpt-oss-20b", 24, 2880, 64, 8, 2880, 201088, 131072, 20.9e9, "bf16", head_dim=64,
           layer_types=_pattern(24, lambda i: "sliding" if i % 2 == 0 else "full"), sliding_window=128,
           num_experts=32, experts_per_token=4, moe_intermediate_size=2880, expert_dtype="mxfp4",
           quant_method="mxfp4"),
        # meta-llama/Llama-4-Scout-17B-16E (text_config): attention_chunk_size 8192 on RoPE layers, every 4th
        # layer global NoPE attention (no_rope_layer_interval 4); 16 experts top-1 + a shared expert;
        # 109 B params with the vision tower.
        _m("llama-4-scout", 48, 5120, 40, 8, 16384, 202048, 10485760, 109e9, "bf16", head_dim=128,
           layer_types=_pattern(48, lambda i: "full" if (i + 1) % 4 == 0 else "chunked"), attention_chunk=8192,
           num_experts=16, experts_per_token=1, moe_intermediate_size=8192, shared_experts=1),
        # deepseek-ai/DeepSeek-V3: MLA (kv_lora_rank 512, qk_rope_head_dim 64, qk_nope 128 -> head_dim 192,
        # v_head_dim 128, q_lora_rank 1536); first_k_dense_replace 3, then 256 routed experts top-8 + 1 shared;
        # FP8 weights (671 B params without the MTP module); torch_dtype bfloat16, so the KV cache is BF16.
        _m("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 163840, 671e9, "bf16", head_dim=192,
           kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=1536, v_head_dim=128, weight_dtype="fp8",
           weight_quant="fp8_block", quant_method="fp8",
           num_experts=256, experts_per_token=8, moe_intermediate_size=2048, shared_experts=1,
           moe_layers=(False,) * 3 + (True,) * 58),
        # --- models served now (config.json of each Hugging Face repository; architecture numbers also in
        # THUDM/slime's scripts/models/*.sh) ---
        # meta-llama/Llama-3.1-8B: Llama-3-8B's shapes, 131,072 positions (rope_scaling llama3, factor 8).
        _m("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072, 8.03e9, "bf16"),
        # meta-llama/Llama-3.1-70B and Llama-3.3-70B-Instruct: Llama-3-70B's shapes, 131,072 positions.
        _m("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072, 70.6e9, "bf16"),
        _m("llama-3.3-70b", 80, 8192, 64, 8, 28672, 128256, 131072, 70.6e9, "bf16"),
        # Qwen/Qwen3-8B, Qwen3-32B: head_dim 128 (not hidden / heads for 32B), 40,960 positions, untied.
        _m("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, 40960, 8.19e9, "bf16", head_dim=128),
        _m("qwen3-32b", 64, 5120, 64, 8, 25600, 151936, 40960, 32.8e9, "bf16", head_dim=128),
        # Qwen/Qwen3-235B-A22B: 94 layers, all MoE: 128 experts top-8 of width 1536, no shared expert.
        _m("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 40960, 235.1e9, "bf16", head_dim=128,
           num_experts=128, experts_per_token=8, moe_intermediate_size=1536),
        # openai/gpt-oss-120b: gpt-oss-20b's layer mix over 36 layers, 128 experts top-4 in MXFP4.
        _m("gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 131072, 116.8e9, "bf16", head_dim=64,
           layer_types=_pattern(36, lambda i: "sliding" if i % 2 == 0 else "full"), sliding_window=128,
           num_experts=128, experts_per_token=4, moe_intermediate_size=2880, expert_dtype="mxfp4",
           quant_method="mxfp4"),
        # deepseek-ai/DeepSeek-R1: DeepSeek-V3's architecture and FP8 weights.
        _m("deepseek-r1", 61, 7168, 128, 128, 18432, 129280, 163840, 671e9, "bf16", head_dim=192,
           kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=1536, v_head_dim=128, weight_dtype="fp8",
           weight_quant="fp8_block", quant_method="fp8",
           num_experts=256, experts_per_token=8, moe_intermediate_size=2048, shared_experts=1,
           moe_layers=(False,) * 3 + (True,) * 58),
        # moonshotai/Kimi-K2-Instruct: DeepSeek-V3's MLA with 64 heads; first_k_dense_replace 1, then 384 experts
        # top-8 + 1 shared; FP8 weights; 163,840 vocabulary, 131,072 positions.
        _m("kimi-k2", 61, 7168, 64, 64, 18432, 163840, 131072, 1.027e12, "bf16", head_dim=192,
           kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=1536, v_head_dim=128, weight_dtype="fp8",
           weight_quant="fp8_block", quant_method="fp8",
           num_experts=384, experts_per_token=8, moe_intermediate_size=2048, shared_experts=1,
           moe_layers=(False,) + (True,) * 60),
        # moonshotai/Kimi-K2.5 (text_config; a 27-layer MoonViT vision tower of ~0.46 B params beside it, in the
        # count): Kimi-K2's shapes with 262,144 positions; compressed-tensors W4A16 routed experts (symmetric INT4,
        # a bf16 scale per 32), everything else (MLA attention, shared experts, layer 0's dense MLP) in bf16.
        _m("kimi-k2.5", 61, 7168, 64, 64, 18432, 163840, 262144, 1.0275e12, "bf16", head_dim=192,
           kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=1536, v_head_dim=128, expert_dtype="int4",
           weight_group_size=32, quant_method="compressed-tensors",
           num_experts=384, experts_per_token=8, moe_intermediate_size=2048, shared_experts=1,
           moe_layers=(False,) + (True,) * 60),
        # MiniMaxAI/MiniMax-M2 (M2.1 and M2.5 share it): 62 layers of ordinary GQA attention (attn_type_list all
        # 1), 48 heads x 128 over a 3,072 hidden size, 8 KV heads, half of each head rotary; 256 experts top-8 of
        # width 1,536, no shared expert, no dense layer; FP8 128x128 block weights (the router and LM head not);
        # 229 B params as published.
        _m("minimax-m2", 62, 3072, 48, 8, 1536, 200064, 196608, 229e9, "bf16", head_dim=128, rotary_dim=64,
           num_experts=256, experts_per_token=8, moe_intermediate_size=1536, weight_dtype="fp8",
           weight_quant="fp8_block", quant_method="fp8"),
        # ai21labs/AI21-Jamba-1.5-Mini: attention every 8th layer from 4 (attn_layer_period 8, offset 4),
        # Mamba-1 elsewhere (d_state 16, d_conv 4, expand 2); MoE every 2nd layer from 1, 16 experts top-2.
        _m("jamba-1.5-mini", 32, 4096, 32, 8, 14336, 65536, 262144, 51.6e9, "bf16", head_dim=128, rotary_dim=0,
           layer_types=_pattern(32, lambda i: "full" if i % 8 == 4 else "mamba"),
           mamba_d_inner=8192, mamba_d_state=16, mamba_d_conv=4, mamba_conv_channels=8192,
           num_experts=16, experts_per_token=2, moe_intermediate_size=14336,
           moe_layers=tuple(i % 2 == 1 for i in range(32))),
    ]
}
# Qwen/Qwen3-8B-FP8, -32B-FP8, -235B-A22B-FP8: the bf16 models' shapes, quantization_config fp8 with
# weight_block_size [128, 128] (block-scaled FP8 weights; the embedding and LM head stay bf16)
for _name in ("qwen3-8b", "qwen3-32b", "qwen3-235b-a22b"):
    MODEL_PRESETS[f"{_name}-fp8"] = replace(MODEL_PRESETS[_name], name=f"{_name}-fp8", weight_dtype="fp8",
                                            weight_quant="fp8_block", quant_method="fp8")
del _name


def parse_custom_model(text: str) -> ModelSpec:
    """Parse ``custom:layers=32,kv_heads=8,head_dim=128,params=8e9[,q_heads=..,dtype=..,max_context=..,
    hidden_size=..,intermediate_size=..,vocab_size=..,gated_mlp=0|1]``; windows: ``sliding_window=W`` or
    ``attention_chunk=C`` makes every layer windowed, ``full_every=K`` keeps every K-th one full; MLA:
    ``kv_lora_rank=..,qk_rope_head_dim=..``."""
    body = text.split(":", 1)[1] if ":" in text else ""
    fields: dict[str, str] = {}
    for part in filter(None, body.split(",")):
        if "=" not in part:
            raise ConfigError(f"custom model: '{part}' is not key=value")
        k, v = part.split("=", 1)
        fields[k.strip()] = v.strip()
    required = ("layers", "kv_heads", "head_dim", "params")
    missing = [k for k in required if k not in fields]
    if missing:
        raise ConfigError(f"custom model: missing {', '.join(missing)} (need {', '.join(required)})")
    ints = {"q_heads", "max_context", "hidden_size", "intermediate_size", "vocab_size", "sliding_window",
            "attention_chunk", "full_every", "kv_lora_rank", "qk_rope_head_dim"}
    known = set(required) | ints | {"dtype", "name", "gated_mlp"}
    unknown = set(fields) - known
    if unknown:
        raise ConfigError(f"custom model: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        kv = int(fields["kv_heads"])
        params = float(fields["params"])
        if not math.isfinite(params):
            raise ValueError(f"params must be finite, got {fields['params']}")
        spec = ModelSpec(
            name=fields.get("name", "custom"),
            layers=int(fields["layers"]),
            q_heads=int(fields.get("q_heads", kv)),
            kv_heads=kv,
            head_dim=int(fields["head_dim"]),
            params=params,
            max_context=int(fields.get("max_context", 4096)),
            dtype=fields.get("dtype", "fp16"),
            hidden_size=int(fields.get("hidden_size", 0)),
            intermediate_size=int(fields.get("intermediate_size", 0)),
            vocab_size=int(fields.get("vocab_size", 32000)),
            gated_mlp=fields.get("gated_mlp", "1") not in ("0", "false", "False"),
            kv_lora_rank=int(fields.get("kv_lora_rank", 0)),
            qk_rope_head_dim=int(fields.get("qk_rope_head_dim", 0)),
        )
        window, chunk = int(fields.get("sliding_window", 0)), int(fields.get("attention_chunk", 0))
        every = int(fields.get("full_every", 0))
        if window and chunk:
            raise ValueError("give sliding_window or attention_chunk, not both")
        if window or chunk:
            kind = "sliding" if window else "chunked"
            types = tuple("full" if every and (i + 1) % every == 0 else kind for i in range(spec.layers))
            spec = replace(spec, layer_types=types, sliding_window=window, attention_chunk=chunk)
        elif every:
            raise ValueError("full_every needs sliding_window or attention_chunk")
    except ValueError as e:
        raise ConfigError(f"custom model: {e}") from None
    return spec.validate()


def model_from_hf_config(path: str) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` (fields named in the module docstring)."""
    from kvsim.files import read_json_object

    cfg = read_json_object(path, f"--model {path}")
    if "num_hidden_layers" not in cfg and "text_config" in cfg:
        text = cfg["text_config"]
        if not isinstance(text, dict):
            raise ConfigError(f"{path}: field 'text_config' must be an object (the language model's config), got "
                              f"{type(text).__name__}")
        # a multimodal checkpoint keeps its dtype and quantization beside the language model's config
        cfg = {**{k: cfg[k] for k in OUTER_FIELDS if k in cfg}, **text}
    # fields a family's published configs leave to transformers' defaults
    cfg = {**HF_FAMILY_DEFAULTS.get(str(cfg.get("model_type", "")), {}), **cfg}

    def need(*keys, default=None):
        for k in keys:
            if k in cfg and cfg[k] is not None:
                v = cfg[k]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_finite(v) or v <= 0 \
                        or v > MAX_DIM or int(v) != v:
                    raise ConfigError(f"{path}: field '{k}' must be a positive integer up to {MAX_DIM:,}, got "
                                      f"{shown(v)}")
                return int(v)
        if default is not None:
            return default
        raise ConfigError(f"{path}: field '{keys[0]}' missing (a Hugging Face config.json is expected)")

    blocks = _nemotron_h_blocks(cfg, path)
    layers = len(blocks["layer_types"]) if blocks else need("num_hidden_layers", "n_layer", "num_layers")
    if layers > MAX_LAYERS:
        raise ConfigError(f"{path}: {layers:,} layers is beyond the {MAX_LAYERS:,} kvsim models layer by layer")
    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head")
    kv = need("num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = need("head_dim", "attention_head_dim", default=hidden // heads)
    ffn = need("intermediate_size_mlp", "intermediate_size", "ffn_dim", "n_inner", default=4 * hidden)
    vocab = need("vocab_size")
    ctx = need("max_position_embeddings", "n_positions", "max_seq_len", default=4096)
    dtype = HF_DTYPES.get(str(cfg.get("torch_dtype", cfg.get("dtype", "float16"))), "fp16")  # dtype: transformers 5
    if dtype == "fp32":  # vLLM's dtype "auto" serves a float32 checkpoint in bf16 (it says so at start-up)
        dtype = "bf16"
    tied = cfg.get("tie_word_embeddings", False)
    if isinstance(tied, str) and tied.strip().lower() in ("true", "false"):
        tied = tied.strip().lower() == "true"
    if tied not in (True, False, 0, 1, None):
        raise ConfigError(f"{path}: field 'tie_word_embeddings' must be true or false, got {shown(tied)}")
    tied = bool(tied)
    model_type = str(cfg.get("model_type", ""))
    hidden_act = str(cfg.get("hidden_act", cfg.get("activation_function", "silu")))
    # the families whose MLP is one up projection; the others gate it (Llama's SwiGLU, Gemma's GeGLU with
    # gelu_pytorch_tanh, ...)
    gated = model_type not in NON_GATED_MLP if model_type else hidden_act in ("silu", "swiglu", "geglu",
                                                                                "gelu_pytorch_tanh")
    file = Path(path)
    name = str(cfg.get("_name_or_path") or (file.parent.name if file.stem == "config" else file.stem) or "hf-model")
    if len(name) > MAX_NAME:  # it titles tables and plots
        name = name[:MAX_NAME - 3] + "..."
    more = _structure_from_hf(cfg, path, layers, hidden, need, blocks)
    if more.get("kv_lora_rank"):
        head_dim = need("qk_nope_head_dim") + more["qk_rope_head_dim"]
        kv = heads
    if more.get("num_experts") and "moe_intermediate_size" not in more:
        more["moe_intermediate_size"] = ffn
    more["rotary_dim"] = _rotary_dim_from_hf(cfg, path, model_type, head_dim)
    spec = ModelSpec(name, layers, heads, kv, head_dim, 0.0, ctx, dtype, hidden, ffn, vocab, gated, tied, **more)
    spec = replace(spec, params=spec.shape_params(), from_config=True)
    return spec.validate()


NO_ROPE = {"opt", "gpt2", "bloom", "mpt", "gpt_bigcode", "jamba", "mamba", "mamba2", "falcon_mamba"}
# a multimodal config's top-level fields that describe its language model too
OUTER_FIELDS = ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings")
# transformers' defaults for fields that a family's published config.json files omit (Gemma 3's omit its
# vocabulary, context, tying and local/global pattern: transformers' Gemma3TextConfig defaults, which vLLM reads)
HF_FAMILY_DEFAULTS = {
    "gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "sliding_window_pattern": 6,
                    "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma2": {"tie_word_embeddings": True},
    "gemma": {"tie_word_embeddings": True},
}


def _rotary_dim_from_hf(cfg: dict, path: str, model_type: str, head_dim: int) -> int | None:
    """Channels per head a config's rotary embedding turns: 0 for families without RoPE (learned positions,
    ALiBi, none), a part of the head with ``partial_rotary_factor`` / ``rotary_pct`` / ``rotary_dim``, else None
    (the whole head; MLA: its rope part)."""
    if model_type in NO_ROPE or cfg.get("alibi") is True:
        return 0
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    for key in ("partial_rotary_factor", "rotary_pct"):
        f = cfg.get(key, rope.get(key))  # transformers 5 keeps RoPE's settings in rope_parameters
        if f is None:
            continue
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not is_finite(f) or not 0 < f <= 1:
            raise ConfigError(f"{path}: field '{key}' must be a fraction in (0, 1], got {shown(f)}")
        return int(head_dim * f)
    d = cfg.get("rotary_dim")
    if d is not None:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 < d <= head_dim:
            raise ConfigError(f"{path}: field 'rotary_dim' must be a whole number from 1 to the head size "
                              f"({head_dim}), got {shown(d)}")
        return d
    return None


def _state_dtype(cfg: dict, path: str) -> dict:
    """The recurrent state's dtype a checkpoint names (``mamba_ssm_dtype`` / ``mamba_ssm_cache_dtype``, e.g.
    Qwen3.5's float32), which vLLM's mamba_ssm_cache_dtype 'auto' takes from the model config; {} if none."""
    for key in ("mamba_ssm_cache_dtype", "mamba_ssm_dtype"):
        v = cfg.get(key)
        if v is None or v == "auto":
            continue
        if str(v) not in HF_DTYPES:
            raise ConfigError(f"{path}: field '{key}' must be one of {', '.join(HF_DTYPES)} or auto, got {shown(v)}")
        return {"state_dtype": HF_DTYPES[str(v)]}
    return {}


NON_GATED_MLP = {"opt", "gpt2", "gpt_neox", "gptj", "phi", "falcon", "bloom", "gpt_bigcode", "starcoder2", "mpt",
                 "nemotron_h"}  # Nemotron-H: squared-ReLU MLPs and experts
HF_LAYER_TYPES = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
                  "chunked_attention": "chunked", "mamba": "mamba", "linear_attention": "mamba"}
# config.json fields of hybrid families whose layers kvsim does not model: refused rather than priced as attention
UNMODELLED_LAYER_FIELDS = {
    "attn_type_list": "MiniMax-01's lightning (linear) attention layers (attn_type_list entries 0)",
    "linear_attn_config": "Kimi-Linear's KDA layers",
}


def _nemotron_h_blocks(cfg: dict, path: str) -> dict | None:
    """Nemotron-H's ``hybrid_override_pattern`` (one character per block: M mamba, * attention, - MLP, E MoE) as
    kvsim layers' ModelSpec fields (layer_types, ffn_layers, moe_layers): each mixer block is a layer, and the MLP
    or MoE block after it is that layer's FFN (a mixer followed by another mixer has none). None when the config
    has no pattern."""
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is None:
        return None
    if not isinstance(pattern, str) or not pattern or set(pattern) - set("M*-E"):
        raise ConfigError(f"{path}: field 'hybrid_override_pattern' must be a string of M (mamba), * (attention), "
                          f"- (MLP) and E (MoE) blocks, got {shown(pattern)}")
    blocks = cfg.get("num_hidden_layers")
    if blocks is not None and blocks != len(pattern):
        raise ConfigError(f"{path}: field 'hybrid_override_pattern' has {len(pattern)} blocks, num_hidden_layers "
                          f"says {shown(blocks)}")
    mixers: list[str] = []
    ffn: list[bool] = []
    moe: list[bool] = []
    for i, b in enumerate(pattern):
        if b in "M*":
            mixers.append("mamba" if b == "M" else "full")
            ffn.append(False)
            moe.append(False)
        elif not mixers or ffn[-1]:
            raise ConfigError(f"{path}: field 'hybrid_override_pattern': block {i} ('{b}') follows no mixer block "
                              "without an FFN; kvsim pairs each MLP or MoE block with the mixer before it")
        else:
            ffn[-1], moe[-1] = True, b == "E"
    return {"layer_types": tuple(mixers), "ffn_layers": tuple(ffn), "moe_layers": tuple(moe)}


def _structure_from_hf(cfg: dict, path: str, layers: int, hidden: int, need, blocks: dict | None = None) -> dict:
    """ModelSpec's per-layer fields from the config.json conventions of the model families that use them:
    ``layer_types`` (gpt-oss, Gemma 3 in recent transformers), ``layers_block_type`` (Bamba),
    Gemma 2's alternation, Gemma 3's ``sliding_window_pattern``, Mistral's ``sliding_window``, Llama 4's
    ``attention_chunk_size`` / ``no_rope_layers``, DeepSeek's MLA and MoE fields, Jamba's periods."""
    more: dict = {}

    def count(key: str) -> int:
        """An optional whole number >= 0 (an offset, a count that may be none); 0 when absent or null."""
        v = cfg.get(key)
        if v is None:
            return 0
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_finite(v) or v < 0 \
                or v > MAX_DIM or int(v) != v:
            raise ConfigError(f"{path}: field '{key}' must be a whole number from 0 to {MAX_DIM:,}, got {shown(v)}")
        return int(v)

    model_type = str(cfg.get("model_type", ""))
    for f, what in UNMODELLED_LAYER_FIELDS.items():
        if f == "attn_type_list" and isinstance(cfg.get(f), list) and all(
                t == 1 and not isinstance(t, bool) for t in cfg[f]):
            continue  # every layer ordinary softmax attention (1; 0 is lightning attention): MiniMax-M2's
        if cfg.get(f) is not None:
            raise ConfigError(f"{path}: field '{f}': {what} are not modelled; kvsim would price every layer as "
                              "attention (describe the model with a config whose layer_types kvsim knows, or custom:)")
    window = cfg.get("sliding_window")
    key = "layer_types" if cfg.get("layer_types") is not None else "layers_block_type"
    types = cfg.get(key)
    if types is not None and not isinstance(types, list):
        raise ConfigError(f"{path}: field '{key}' must be a list of layer types, got {type(types).__name__}")
    if blocks:  # Nemotron-H
        more.update(blocks)
    elif types:
        bad = [t for t in types if not isinstance(t, str) or t not in HF_LAYER_TYPES]
        if bad or len(types) != layers:
            raise ConfigError(f"{path}: field '{key}' must list one of {', '.join(HF_LAYER_TYPES)} per layer"
                              f" ({layers}); got {len(types)} entries" + (f", unknown '{bad[0]}'" if bad else ""))
        more["layer_types"] = tuple(HF_LAYER_TYPES[t] for t in types)
    elif cfg.get("full_attention_interval") and "linear_num_value_heads" in cfg:  # Qwen3-Next: GDN, every k-th full
        k = need("full_attention_interval")
        more["layer_types"] = tuple("full" if (i + 1) % k == 0 else "mamba" for i in range(layers))
    elif "attn_layer_period" in cfg:  # Jamba
        period, offset = need("attn_layer_period"), count("attn_layer_offset")
        more["layer_types"] = tuple("full" if i % period == offset else "mamba" for i in range(layers))
    elif cfg.get("attention_chunk_size"):  # Llama 4: RoPE layers are chunked, NoPE layers global
        rope = cfg.get("no_rope_layers")
        if isinstance(rope, list) and len(rope) == layers:
            more["layer_types"] = tuple("chunked" if r else "full" for r in rope)
        else:
            interval = need("no_rope_layer_interval", default=4)
            more["layer_types"] = tuple("full" if (i + 1) % interval == 0 else "chunked" for i in range(layers))
    elif window and cfg.get("use_sliding_window", True) is not False:
        if model_type.startswith("gemma2"):
            more["layer_types"] = tuple("sliding" if i % 2 == 0 else "full" for i in range(layers))
        elif cfg.get("sliding_window_pattern"):
            k = need("sliding_window_pattern")
            more["layer_types"] = tuple("full" if (i + 1) % k == 0 else "sliding" for i in range(layers))
        else:
            more["layer_types"] = ("sliding",) * layers
    mixers = set(more.get("layer_types", ()))
    if "sliding" in mixers:
        more["sliding_window"] = need("sliding_window")
    if "chunked" in mixers:
        more["attention_chunk"] = need("attention_chunk_size")
    if "mamba" in mixers and "linear_num_value_heads" in cfg:  # Gated DeltaNet (Qwen3-Next, Qwen3.5), as vLLM's
        # gated_delta_net_state_shape: conv over q, k and v channels; a key x value state per value head
        nk, nv = need("linear_num_key_heads"), need("linear_num_value_heads")
        dk, dv = need("linear_key_head_dim"), need("linear_value_head_dim")
        more.update(mamba_d_inner=nv * dv, mamba_d_state=dk, mamba_d_conv=need("linear_conv_kernel_dim", default=4),
                    mamba_conv_channels=2 * nk * dk + nv * dv, gdn_key_width=nk * dk)
    elif "mamba" in mixers and "mamba_num_heads" in cfg:  # Nemotron-H's Mamba-2: heads x head dims inner channels
        d_state, d_inner, groups = need("ssm_state_size"), need("mamba_num_heads") * need("mamba_head_dim"), \
            count("n_groups")
        more.update(mamba_d_inner=d_inner, mamba_d_state=d_state, mamba_d_conv=need("conv_kernel", default=4),
                    mamba_conv_channels=d_inner + 2 * groups * d_state)
    elif "mamba" in mixers:
        d_state, d_conv = need("mamba_d_state"), need("mamba_d_conv")
        d_inner = need("mamba_expand") * hidden
        groups = count("mamba_n_groups")  # Mamba-2: B and C are convolved too
        more.update(mamba_d_inner=d_inner, mamba_d_state=d_state, mamba_d_conv=d_conv,
                    mamba_conv_channels=d_inner + 2 * groups * d_state)
    if "mamba" in mixers:
        more.update(_state_dtype(cfg, path))
    if cfg.get("kv_lora_rank"):
        more.update(kv_lora_rank=need("kv_lora_rank"), qk_rope_head_dim=need("qk_rope_head_dim"),
                    v_head_dim=need("v_head_dim"), q_lora_rank=count("q_lora_rank"))
    experts = cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts")
    if experts:
        more.update(num_experts=need("n_routed_experts", "num_local_experts", "num_experts"),
                    experts_per_token=need("num_experts_per_tok", "experts_per_token", "moe_topk"))
        if cfg.get("moe_intermediate_size"):
            more["moe_intermediate_size"] = need("moe_intermediate_size")
        more["shared_experts"] = count("n_shared_experts")
        # Qwen-MoE: a shared expert of its own width; Nemotron-H: n_shared_experts of a wider one
        shared_width = count("shared_expert_intermediate_size") or count("moe_shared_expert_intermediate_size")
        if shared_width and (not more["shared_experts"] or "moe_shared_expert_intermediate_size" in cfg):
            more["shared_experts"] = max(1, round(shared_width / more.get("moe_intermediate_size", shared_width)))
        if "expert_layer_period" in cfg:  # Jamba
            period, offset = need("expert_layer_period"), count("expert_layer_offset")
            more["moe_layers"] = tuple(i % period == offset for i in range(layers))
        elif cfg.get("first_k_dense_replace"):  # DeepSeek
            k = need("first_k_dense_replace")
            more["moe_layers"] = tuple(i >= k for i in range(layers))
        elif model_type.startswith("llama4"):  # experts of intermediate_size + a shared one; dense FFNs between
            more.update(moe_intermediate_size=need("intermediate_size"), shared_experts=1)
            step = need("interleave_moe_layer_step", default=1)
            more["moe_layers"] = tuple((i + 1) % step == 0 for i in range(layers))
    if cfg.get("quantization_config") is not None:
        more.update(quantization_from_hf(cfg["quantization_config"], path, bool(experts), layers))
        kept = more.pop("unquantized_attention_layers", ())
        mixers = more.get("layer_types") or ("full",) * layers
        if kept and set(kept) >= {i for i, t in enumerate(mixers) if t != "mamba"}:
            more["attention_unquantized"] = True  # every attention layer: in memory and in GEMM time
        elif kept:
            more["unquantized_attention_layers"] = kept
    return more


# vLLM's --quantization names kvsim takes (checkpoints.py: the format each names)
from kvsim.hardware.checkpoints import QUANTIZATION_FLAGS  # noqa: E402


def quantization_from_hf(quant, path: str, has_experts: bool, layers: int = 0) -> dict:
    """ModelSpec's weight fields from a config.json's ``quantization_config``, as vLLM loads each method:

    - ``fp8`` (DeepSeek-V3, Qwen3-FP8): FP8 weights, 128x128 block scales where ``weight_block_size`` says so;
    - ``mxfp4`` (gpt-oss): the routed experts in MXFP4, everything else in the model's dtype;
    - ``awq`` (4-bit, group scales and zero points) and ``gptq`` (4- or 8-bit, group scales; zero points only when
      not symmetric): integer weights run by the Marlin kernels (weight-only: bf16 compute);
    - ``compressed-tensors`` (llm-compressor): the scheme of its Linear config group: FP8 (per tensor/channel, or
      block), NVFP4, W4A16 / W8A16 integers, W8A8 int8;
    - ``modelopt`` (NVIDIA ModelOpt): FP8 (per tensor) or NVFP4.

    The embedding and LM head stay in the model's dtype (ModelSpec.weight_bytes). A method kvsim does not price
    is refused, never read as bf16."""
    where = f"{path}: quantization_config"
    if not isinstance(quant, dict):
        raise ConfigError(f"{where} must be an object, got {type(quant).__name__}")
    if not quant:
        return {}
    method = str(quant.get("quant_method", "")).strip().lower()
    # ModelOpt's older layout nests its fields in a "quantization" object
    inner = quant["quantization"] if isinstance(quant.get("quantization"), dict) else quant
    return {**_quant_scheme(quant, inner, where, method, has_experts), **_exclusions(inner, where, layers),
            **_checkpoint_kv_cache(quant, inner, where, method)}


def _checkpoint_kv_cache(quant: dict, inner: dict, where: str, method: str) -> dict:
    """{'checkpoint_kv_dtype': 'fp8', 'kv_dtype': 'fp8'} for a checkpoint that declares an FP8 KV cache (ModelOpt
    ``kv_cache_quant_algo`` FP8, compressed-tensors ``kv_cache_scheme`` of 8-bit floats), which vLLM's
    ``--kv-cache-dtype auto`` follows (vLLM PR #29980, Dec 2025); {} when none is declared. Another declared
    KV format is refused (kvsim prices bf16/fp16 and FP8 caches)."""
    if method in ("modelopt", "modelopt_fp4"):
        algo = inner.get("kv_cache_quant_algo")
        if algo is None:
            return {}
        if str(algo).strip().upper() != "FP8":
            raise ConfigError(f"{where}: kv_cache_quant_algo {shown(algo)} is not priced (kvsim prices FP8 KV "
                              "caches); a copy of the config without the field models a cache in the model's dtype")
        return {"checkpoint_kv_dtype": "fp8", "kv_dtype": "fp8"}
    scheme = quant.get("kv_cache_scheme") if method == "compressed-tensors" else None
    if scheme is None:
        return {}
    if not isinstance(scheme, dict):
        raise ConfigError(f"{where}: field 'kv_cache_scheme' must be an object, got {type(scheme).__name__}")
    bits, kind = scheme.get("num_bits"), str(scheme.get("type", "")).lower()
    if bits != 8 or kind != "float":
        raise ConfigError(f"{where}: kv_cache_scheme of {shown(kind)} {shown(bits)}-bit values is not priced (kvsim "
                          "prices FP8 KV caches)")
    return {"checkpoint_kv_dtype": "fp8", "kv_dtype": "fp8"}


TOWER_MODULES = ("vision", "visual", "audio", "mm_projector", "multi_modal")  # encoders beside the language model


def _exclusions(fields: dict, where: str, layers: int) -> dict:
    """The layers (of ``layers``) whose attention projections and dense MLP the checkpoint's list of modules it
    left unquantized (ModelOpt ``exclude_modules``, compressed-tensors ``ignore``, AWQ/GPTQ
    ``modules_to_not_convert``) keeps in the model's dtype: {'unquantized_attention_layers': (...),
    'unquantized_mlp_layers': (...)}, each present when not empty. Entries are matched against the language
    model's module names (model.layers.N.self_attn.q_proj, ...mlp.gate_proj) as each tool matches them: ``re:``
    regular expressions, ``*`` patterns, or whole dotted components ('self_attn', 'model.layers.3'). The
    embedding, LM head and MoE router stay unquantized anyway; a vision or audio tower's modules are not the
    language model's."""
    import fnmatch
    import re

    for key in ("exclude_modules", "ignore", "modules_to_not_convert"):
        names = fields.get(key)
        if names is None:
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"{where}: field '{key}' must be a list of module names")
        if len(names) > MAX_EXCLUSIONS:
            raise ConfigError(f"{where}: field '{key}' lists {len(names):,} modules; kvsim matches at most "
                              f"{MAX_EXCLUSIONS:,}")
        pats = []
        for n in names:
            if n.startswith("re:") and (len(n) > MAX_PATTERN or NESTED_QUANTIFIER.search(n)):
                raise ConfigError(f"{where}: field '{key}': {n[:60]!r} is a regular expression kvsim will not run "
                                  f"(longer than {MAX_PATTERN} characters, or a repeated group that itself repeats, "
                                  "which can take exponential time)")
            if any(t in n for t in TOWER_MODULES):
                continue
            n = n.replace("model.language_model.", "model.").replace("language_model.model.", "model.")
            n = n.replace("feed_forward", "mlp").replace("self_attention", "self_attn")
            n = re.sub(r"(?<![a-z_])(attn|attention)(?![a-z_])", "self_attn", n)
            pats.append(n)

        compiled = {}
        for p in pats:
            if p.startswith("re:"):
                try:
                    compiled[p] = re.compile(p[3:])
                except (re.error, RecursionError, OverflowError):
                    raise ConfigError(f"{where}: field '{key}': {p[:60]!r} is not a regular expression") from None
        if layers * len(pats) > MAX_EXCLUSION_WORK:
            raise ConfigError(f"{where}: field '{key}': {len(pats):,} modules over {layers:,} layers is more matching "
                              "than kvsim does for a config")

        def hit(name: str) -> bool:
            for p in pats:
                if p.startswith("re:"):
                    if compiled[p].match(name):
                        return True
                elif any(c in p for c in "*?["):
                    if fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, p + ".*"):
                        return True
                elif f".{p}." in f".{name}.":
                    return True
            return False

        attn = tuple(i for i in range(layers) if any(hit(f"model.layers.{i}.self_attn.{m}") for m in ATTENTION_PROJ))
        mlp = tuple(i for i in range(layers) if any(hit(f"model.layers.{i}.mlp.{m}") for m in MLP_PROJ))
        return {k: v for k, v in (("unquantized_attention_layers", attn), ("unquantized_mlp_layers", mlp)) if v}
    return {}


# bounds on the work a checkpoint's exclusion list asks for: entries, a regular expression's length, layers x
# entries; a group that repeats and holds a repetition ((a+)+, (a|aa)*) can backtrack exponentially
MAX_EXCLUSIONS = 100_000
MAX_PATTERN = 500
MAX_EXCLUSION_WORK = 5_000_000
NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*(?:[+*]|\{\d*,\d*\})(?:[^()\\]|\\.)*\)(?:[+*]|\{\d*,?\d*\})")
ATTENTION_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJ = ("gate_proj", "up_proj", "down_proj")


def _quant_field(d: dict, keys: tuple[str, ...], where: str, default=None, allowed=None) -> int:
    """The first of ``keys`` present in ``d``: one of ``allowed``, or (none given) a positive whole number or -1;
    ``default`` when absent (None: the field is required)."""
    for k in keys:
        if d.get(k) is not None:
            v = d[k]
            if isinstance(v, bool) or not isinstance(v, int) or (allowed is not None and v not in allowed) \
                    or (allowed is None and not (v == -1 or 0 < v <= MAX_DIM)):
                raise ConfigError(f"{where}: field '{k}' must be " + (
                    f"one of {', '.join(map(str, allowed))}" if allowed else "a positive whole number or -1")
                    + f", got {shown(v)}")
            return v
    if default is None:
        raise ConfigError(f"{where}: field '{keys[0]}' missing")
    return default


def _integer_weights(bits: int, group: int, zero_points: bool, weight_only: bool = True) -> dict:
    """The fields of ``bits``-bit integer weights with a scale per ``group`` (-1 or 0: per channel)."""
    return {"weight_dtype": f"int{bits}", "weight_quant": ("w4a16" if bits == 4 else "w8a16") if weight_only
            else "w8a8_int8", "weight_group_size": max(0, group), "weight_zero_points": zero_points}


def _quant_scheme(quant: dict, inner: dict, where: str, method: str, has_experts: bool) -> dict:
    """The weight fields of one quantization method (:func:`quantization_from_hf`; ``inner``: ModelOpt's fields)."""
    if method == "mxfp4":
        if not has_experts:
            raise ConfigError(f"{where}: mxfp4 quantizes the experts of a mixture-of-experts model; this one has none")
        return {"expert_dtype": "mxfp4", "quant_method": method}
    if method == "fp8":
        block = quant.get("weight_block_size")
        return {"weight_dtype": "fp8", "weight_quant": "fp8_block" if block else "fp8", "quant_method": method}
    if method == "awq":
        bits = _quant_field(quant, ("bits", "w_bit"), where, 4, (4,))
        group = _quant_field(quant, ("group_size", "q_group_size"), where, 128)
        return {**_integer_weights(bits, group, quant.get("zero_point", True) is not False), "quant_method": method}
    if method == "gptq":
        bits = _quant_field(quant, ("bits",), where, 4, (4, 8))
        group = _quant_field(quant, ("group_size",), where, 128)
        return {**_integer_weights(bits, group, quant.get("sym", True) is False), "quant_method": method}
    if method == "compressed-tensors":
        return {**_compressed_tensors(quant, where), "quant_method": method}
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(inner.get("quant_algo", "")).strip().upper()
        if algo == "FP8":
            return {"weight_dtype": "fp8", "weight_quant": "fp8", "quant_method": "modelopt"}
        if algo == "NVFP4":
            return {"weight_dtype": "nvfp4", "weight_quant": "nvfp4", "quant_method": "modelopt"}
        raise ConfigError(f"{where}: ModelOpt quant_algo '{algo}' is not priced (kvsim prices FP8 and NVFP4)")
    raise ConfigError(f"{where}: quant_method '{method}' is not priced by kvsim (it prices fp8, mxfp4, awq, gptq, "
                      "compressed-tensors and modelopt checkpoints); its weights would be misread as unquantized")


def _compressed_tensors(quant: dict, where: str) -> dict:
    """The weight fields of a compressed-tensors checkpoint: the scheme of its config group that targets Linear
    layers (llm-compressor writes one per scheme)."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ConfigError(f"{where}: compressed-tensors needs a non-empty 'config_groups' object")
    linear = [g for g in groups.values() if isinstance(g, dict) and "Linear" in (g.get("targets") or [])]
    if len(linear) != 1:
        raise ConfigError(f"{where}: kvsim prices a compressed-tensors checkpoint with one scheme for its Linear "
                          f"layers; {len(linear)} config groups target Linear")
    w, acts = linear[0].get("weights"), linear[0].get("input_activations")
    if not isinstance(w, dict):
        raise ConfigError(f"{where}: the Linear config group has no 'weights' object")
    bits = _quant_field(w, ("num_bits",), where, None, (4, 8))
    kind = str(w.get("type", "int")).lower()
    strategy = str(w.get("strategy", "tensor")).lower()
    act_bits = _quant_field(acts, ("num_bits",), where, None, (4, 8, 16)) if isinstance(acts, dict) else 16
    symmetric = w.get("symmetric", True) is not False
    if kind == "float" and bits == 8:
        if act_bits == 16:  # FP8 weights, bf16 activations: vLLM's FP8 Marlin
            return {"weight_dtype": "fp8", "weight_quant": "w8a16"}
        return {"weight_dtype": "fp8", "weight_quant": "fp8_block" if strategy == "block" else "fp8"}
    if kind == "float" and bits == 4 and strategy in ("tensor_group", "group"):
        return {"weight_dtype": "nvfp4", "weight_quant": "nvfp4" if act_bits == 4 else "w4a16"}
    if kind == "int" and act_bits == 16:
        group = _quant_field(w, ("group_size",), where, 0) if strategy == "group" else 0
        return _integer_weights(bits, group, not symmetric)
    if kind == "int" and bits == 8 and act_bits == 8:
        return _integer_weights(8, 0, not symmetric, weight_only=False)
    raise ConfigError(f"{where}: compressed-tensors scheme of {kind} {bits}-bit weights ({strategy}) with "
                      f"{act_bits}-bit activations is not priced (kvsim prices FP8, NVFP4, W4A16, W8A16 and W8A8 int8)")


# Hugging Face repository ids (as `vllm serve` takes them) of the presets' models: base and instruct/chat
# variants share shapes. kvsim reads no hub at run time; any other id needs its config.json.
HF_IDS = {
    **{f"meta-llama/Llama-2-{s}{v}-hf": f"llama-2-{s}" for s in ("7b", "13b", "70b") for v in ("", "-chat")},
    **{f"meta-llama/Meta-Llama-3-{s}{v}": f"llama-3-{s.lower()}" for s in ("8B", "70B") for v in ("", "-Instruct")},
    **{f"meta-llama/{p}Llama-3.1-{s}{v}": f"llama-3.1-{s.lower()}" for p in ("", "Meta-") for s in ("8B", "70B")
       for v in ("", "-Instruct")},
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b",
    **{f"codellama/CodeLlama-34b{v}-hf": "codellama-34b" for v in ("", "-Instruct", "-Python")},
    **{f"mistralai/Mistral-7B-Instruct-v0.{v}": "mistral-7b" for v in (2, 3)},
    "mistralai/Mistral-7B-v0.3": "mistral-7b", "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1",
    "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b-v0.1",
    "Qwen/Qwen2.5-7B": "qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    "Qwen/Qwen-72B": "qwen-72b", "Qwen/Qwen-72B-Chat": "qwen-72b",
    "internlm/internlm-20b": "internlm-20b", "internlm/internlm-chat-20b": "internlm-20b",
    "microsoft/phi-2": "phi-2", "facebook/opt-13b": "opt-13b",
    "google/gemma-2-9b": "gemma-2-9b", "google/gemma-2-9b-it": "gemma-2-9b",
    "google/gemma-3-12b-it": "gemma-3-12b", "google/gemma-3-12b-pt": "gemma-3-12b",
    "openai/gpt-oss-20b": "gpt-oss-20b", "openai/gpt-oss-120b": "gpt-oss-120b",
    "meta-llama/Llama-4-Scout-17B-16E": "llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama-4-scout",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3", "deepseek-ai/DeepSeek-V3-0324": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1": "deepseek-r1", "deepseek-ai/DeepSeek-R1-0528": "deepseek-r1",
    "ai21labs/AI21-Jamba-1.5-Mini": "jamba-1.5-mini",
    "Qwen/Qwen3-8B": "qwen3-8b", "Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    "Qwen/Qwen3-8B-FP8": "qwen3-8b-fp8", "Qwen/Qwen3-32B-FP8": "qwen3-32b-fp8",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b-fp8", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "qwen3-235b-a22b-fp8",
    "moonshotai/Kimi-K2-Instruct": "kimi-k2", "moonshotai/Kimi-K2-Base": "kimi-k2",
    "moonshotai/Kimi-K2-Instruct-0905": "kimi-k2", "moonshotai/Kimi-K2.5": "kimi-k2.5",
    **{f"MiniMaxAI/MiniMax-M2{v}": "minimax-m2" for v in ("", ".1", ".5")},
}
_HF_INDEX = {k.lower(): v for k, v in HF_IDS.items()}


def serve_name(given: str) -> str:
    """What `vllm serve` takes for the model a user named to kvsim (``--model``): a Hugging Face id as given, a
    preset's own id (its first listed: the base repository), a config.json's folder (what vLLM loads a local
    checkpoint from), or the config's ``_name_or_path`` when that is a hub id; a ``custom:`` model has none, so a
    placeholder a user must replace."""
    text = str(given)
    if text.lower().startswith("custom"):
        return "<your-model>"
    if text.lower().endswith(".json") or _is_path(text):
        try:
            import json

            named = json.loads(Path(text).read_text(encoding="utf-8")).get("_name_or_path")
        except (OSError, ValueError, AttributeError):
            named = None
        if isinstance(named, str) and named.count("/") == 1 and not named.startswith((".", "/")) and \
                len(named) <= MAX_NAME:
            return named
        return str(Path(text).parent if Path(text).name.lower().endswith(".json") else Path(text))
    if "/" in text:
        return text
    for hf, preset in HF_IDS.items():
        if preset == text.lower():
            return hf
    return text


def _is_path(name: str, test: str = "is_file") -> bool:
    """Whether ``name`` is a file (``test`` "is_file") or exists ("exists"); a name too long for the file system
    is neither."""
    try:
        return getattr(Path(name), test)()
    except OSError:
        return False


def get_model(name: str) -> ModelSpec:
    """A preset by name or Hugging Face id (case-insensitive; HF_IDS), a ``custom:...`` spec, or a path to a
    Hugging Face config.json."""
    if name.lower().startswith("custom"):
        return parse_custom_model(name)
    if name.lower().endswith(".json") or _is_path(name):
        return model_from_hf_config(name)
    if name.lower() in _HF_INDEX:
        return MODEL_PRESETS[_HF_INDEX[name.lower()]]
    from kvsim.hardware.checkpoints import checkpoint_from_id

    quantized = checkpoint_from_id(name, MODEL_PRESETS, _HF_INDEX)
    if quantized is not None:
        return quantized
    if "/" in name:
        if _is_path(name, "exists"):
            raise ConfigError(f"--model {name}: not a config.json file")
        raise ConfigError(f"'{name}' is not a Hugging Face id kvsim knows (its presets' ids: `kvsim list models`), and "
                          "kvsim reads no hub: pass the model's config.json path (e.g. `huggingface-cli download "
                          f"{name} config.json --local-dir cfg`, then --model cfg/config.json)")
    try:
        return MODEL_PRESETS[name.lower()]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name.lower(), MODEL_PRESETS, n=1)
        raise ConfigError(f"unknown model '{name}' (presets: {', '.join(MODEL_PRESETS)}; a Hugging Face config.json path;"
                          " or custom:layers=..,kv_heads=..,head_dim=..,params=..)"
                          + (f"; did you mean '{close[0]}'?" if close else "")) from None
