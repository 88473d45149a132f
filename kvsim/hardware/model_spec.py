"""The model spec: a decoder-only transformer's shapes, as far as KV-cache size and per-iteration work care,
and its byte and shape arithmetic (weights, KV per token, recurrent state, parameters, parallel splits).

Today's models are not one kind of layer. Each layer has a token mixer (``layer_types``), whose kind
(kvsim/hardware/layer_kinds.py: ``full``, ``sliding``, ``chunked``, ``mamba``) says what it attends to and
holds, and an FFN that is dense or a mixture of experts (``moe_layers``). kv_groups.py turns this into the
per-layer cache groups allocators work with.

Where specs come from: presets.py (presets and their Hugging Face ids), hf_config.py (a config.json),
quant_config.py (its quantization_config), checkpoints.py (quantized checkpoints), models.py (``--model``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from kvsim.errors import ConfigError
from kvsim.hardware.layer_kinds import KINDS
from kvsim.validation import is_finite, shown

DTYPE_BYTES = {
    "fp32": 4,
    "float32": 4,
    "fp16": 2,
    "float16": 2,
    "bf16": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
}
DTYPE_BYTES["mxfp4"] = 0.53125  # 4-bit values + one 8-bit scale per 32 (gpt-oss experts): 4.25 bits
DTYPE_BYTES["nvfp4"] = 0.5625  # 4-bit values + one FP8 scale per 16 (NVIDIA ModelOpt / compressed-tensors NVFP4)
DTYPE_BYTES["int4"] = 0.5  # 4-bit integers; their group scales (and zero points) per ModelSpec.weight_group_size
# GEMM schemes of quantized weights (latency.calibration.GEMM_QUANT): fp8 and fp8_block on FP8 tensor cores, nvfp4
# on FP4 ones, w4a16 / w8a16 weight-only (Marlin: 4- or 8-bit weights, bf16 compute), w8a8_int8 on int8 tensor cores
WEIGHT_QUANT = ("fp8", "fp8_block", "nvfp4", "w4a16", "w8a16", "w8a8_int8")
FP8_BLOCK = 128  # weight_block_size of the block-FP8 checkpoints (DeepSeek-V3, Qwen3-FP8, MiniMax-M2): [128, 128]
KV_CACHE_DTYPES = ("auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2")  # vLLM's --kv-cache-dtype (auto: the model's)


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
    # how vLLM's chat endpoint renders a conversation: "jinja" (the checkpoint's Hugging Face chat template) or
    # "harmony" (gpt-oss: OpenAI's Harmony renderer, no template; kvsim/chat_template.py)
    chat_renderer: str = "jinja"
    # the attention's QK norm spans every head (MiniMax-M2's qk_norm_type "per_layer"): with tensor parallelism vLLM
    # sums each token's q and k variances over the ranks, one more all-reduce (2 fp32 values a token) per layer
    qk_norm_all_heads: bool = False
    # parameters of the multimodal encoders (a vision tower) counted in ``params``: vLLM loads them unless served
    # with --language-model-only
    encoder_params: float = 0.0

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
        return sum(1 for t in self.mixers if KINDS[t].attention)

    @property
    def state_layers(self) -> int:
        """Layers that keep one recurrent state per sequence instead of per-token KV (mamba, Gated DeltaNet)."""
        return sum(1 for t in self.mixers if not KINDS[t].attention)

    def count(self, mixer: str) -> int:
        return sum(1 for t in self.mixers if t == mixer)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_weight_dtype(self) -> str:
        """The dtype the routed experts' weights are held in: their own, else the checkpoint's, else the model's."""
        return self.expert_dtype or self.weight_dtype or self.dtype

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
        return KINDS[mixer].window(self)

    def tokens_held(self, mixer: str, context: int) -> int:
        """Tokens a layer of this kind must hold to compute the last token of a ``context``-token
        sequence: all of them (full), the last ``sliding_window`` (sliding), those of the token's own
        chunk (chunked), none (mamba)."""
        return KINDS[mixer].tokens_held(self, context)

    def sequence_bytes(self, context: int, tp: int = 1) -> int:
        """Exact bytes one sequence of ``context`` tokens needs on one GPU (no block rounding): per
        attention layer the tokens it holds (:meth:`tokens_held`) x per-layer bytes, plus each mamba
        layer's state."""
        held = sum(n * KINDS[t].sequence_bytes(self, context, tp) for t, n in Counter(self.mixers).items())
        return held + self.draft_layers * self.tokens_held("full", context) * self.kv_bytes_per_token_layer(tp)

    def tp_problem(self, tp: int) -> str | None:
        """Why ``tp`` ranks cannot split this model's KV, or None (MLA's latent is held whole by every rank)."""
        if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
            return "must be a positive integer"
        if not self.is_mla and self.attention_layers and self.kv_heads % tp and tp % self.kv_heads:
            return (
                f"must divide the model's kv_heads ({self.kv_heads}) or be a multiple of it (each rank then holds "
                "a replica of one KV head, as vLLM does)"
            )
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
            return (
                "pipeline parallelism is modelled for models whose layers all keep full attention; "
                f"{self.name} has {', '.join(sorted(set(self.mixers) - {'full'}))} layers"
            )
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
        per_layer = [
            (attn if KINDS[m].attention else mamba) + self._ffn_of(moe, f) + 2 * h
            for m, moe, f in zip(self.mixers, self.moe_mask, self.ffn_mask)
        ]
        embed = self.embedding_params
        scale = max(0.0, self.params - embed - h) / sum(per_layer)  # presets' counts need not match the shapes
        first = self.layers - n
        return replace(
            self,
            layers=n,
            params=self.vocab_size * h + scale * sum(per_layer[-n:]),
            layer_types=self.layer_types[-n:],
            moe_layers=self.moe_layers[-n:],
            ffn_layers=self.ffn_layers[-n:],
            unquantized_attention_layers=tuple(i - first for i in self.unquantized_attention_layers if i >= first),
            unquantized_mlp_layers=tuple(i - first for i in self.unquantized_mlp_layers if i >= first),
        )

    def check_tp(self, tp: int) -> None:
        problem = self.tp_problem(tp)
        if problem:
            raise ConfigError(f"--tensor-parallel-size {tp!r}: {problem}")

    def language_model_only(self) -> "ModelSpec":
        """This model as vLLM's ``--language-model-only`` serves it: without its encoders' weights."""
        if not self.encoder_params:
            return self
        return replace(self, params=self.params - self.encoder_params, encoder_params=0.0)

    def with_kv_cache_dtype(self, kv_cache_dtype: str, follow_checkpoint: bool = True) -> "ModelSpec":
        """This model with its KV cache stored as ``kv_cache_dtype`` ('auto': as the checkpoint declares when
        ``follow_checkpoint`` (vLLM 0.14 on: kvsim.releases.follows_checkpoint_kv_dtype), else as the weights'
        model dtype, as vLLM resolves it)."""
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(f"--kv-cache-dtype '{kv_cache_dtype}': not one of {', '.join(KV_CACHE_DTYPES)}")
        if kv_cache_dtype != "auto":
            return replace(self, kv_dtype=kv_cache_dtype)
        if follow_checkpoint or not self.checkpoint_kv_dtype:
            return replace(self, kv_dtype=self.checkpoint_kv_dtype)
        from kvsim.releases import CHECKPOINT_KV_DTYPE_FROM

        first = ".".join(CHECKPOINT_KV_DTYPE_FROM.split(".")[:2])
        note = (
            f"note: the checkpoint declares an {self.checkpoint_kv_dtype.upper()} KV cache, which vLLM before "
            f"{first} does not follow under --kv-cache-dtype auto: KV priced in {self.dtype} (--kv-cache-dtype "
            f"{self.checkpoint_kv_dtype} asks for the checkpoint's)"
        )
        return replace(self.with_note(note), kv_dtype=None)

    def with_note(self, note: str) -> "ModelSpec":
        """This model with ``note`` added to what kvsim tells the user about its weights (``format_note``)."""
        return replace(self, format_note=f"{self.format_note}\n{note}" if self.format_note else note)

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
        total = (
            (self.params - experts - embed) * self.weight_dtype_bytes
            + embed * self.dtype_bytes
            + (experts * self.expert_dtype_bytes if experts else 0.0)
        ) + self.draft_weight_bytes
        if self.weight_dtype:
            mixers, moe = self.mixers, self.moe_mask
            attn = (
                self.attention_layers
                if self.attention_unquantized
                else sum(1 for i in self.unquantized_attention_layers if KINDS[mixers[i]].attention)
            )
            mlp = sum(1 for i in self.unquantized_mlp_layers if not moe[i])
            total += (attn * self.attention_params() + mlp * self.ffn_params(False)) * (
                self.dtype_bytes - self.weight_dtype_bytes
            )
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
        return (
            (self.weight_bytes + self.zero_point_extra_bytes(gpu) - experts) / tp
            + experts / (tp * dp)
            + self.rope_cache_bytes
            + self.expert_padding_bytes(gpu, tp * dp)
        )

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
        if (
            gpu is None
            or gpu.arch != "hopper"
            or not self.weight_zero_points
            or dtype not in ("int4", "int8")
            or not self.weight_group_size
        ):
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

    def block_problem(self, tp: int, dp: int = 1, expert_parallel: bool = False) -> str | None:
        """Why vLLM refuses to load this checkpoint's block-FP8 weights split over ``tp`` GPUs (the routed experts,
        without expert parallelism, over ``dp`` x ``tp``), or None. vLLM's Fp8MoEMethod and
        validate_fp8_block_shape require every split width of a 128 x 128 block-scaled weight (a GEMM's output
        share, and its input share when the split is over the input) to be a whole number of blocks:
        Qwen3-235B-A22B-FP8's experts of 1,536 split 8 ways (192) fail to load ("The output_size of gate's and
        up's weight = 192 is not divisible by weight quantization block_n = 128"). MLA projections are not
        checked (their tensor-parallel splits are whole heads of 128 or more)."""
        if self.weight_quant != "fp8_block":
            return None
        widths: list[tuple[str, int, int]] = []  # (what, full width, GPUs it is split over)
        moe = self.moe_mask
        if self.is_moe and self.expert_weight_dtype == "fp8" and not expert_parallel:
            widths.append(("routed experts' width (moe_intermediate_size)", self.moe_intermediate_size, tp * dp))
        if self.shared_experts:
            widths.append(("shared experts' width", self.shared_experts * self.moe_intermediate_size, tp))
        if any(f and not m for f, m in zip(self.ffn_mask, moe)):
            widths.append(("dense MLP width (intermediate_size)", self.intermediate_size, tp))
        if not self.is_mla and not self.attention_unquantized and not self.layer_types:
            widths.append(("query projection width (heads x head_dim)", self.q_heads * self.head_dim, tp))
            kv_split = min(tp, self.kv_heads)
            widths.append(("key/value projection width (KV heads x head_dim)", self.kv_heads * self.head_dim, kv_split))
        for what, width, ways in widths:
            if ways > 1 and (width % ways or (width // ways) % FP8_BLOCK):
                return (
                    f"{self.name}'s {what} {width:,} split over {ways} GPUs is {width / ways:g} per GPU, not a whole "
                    f"number of its {FP8_BLOCK}-wide FP8 weight blocks: vLLM refuses to load it"
                )
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
        kept = [
            f"{len(t)} {what}"
            for t, what in (
                (self.unquantized_attention_layers, "layers' attention"),
                (self.unquantized_mlp_layers, "layers' MLP"),
            )
            if t
        ]
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
            return (
                h * (2 * self.gdn_key_width + 2 * di + 2 * self.gdn_value_heads)
                + self.mamba_conv_channels * self.mamba_d_conv
                + di * h
            )
        return 2 * h * di + di * h + self.mamba_conv_channels * self.mamba_d_conv + 4 * di * ds

    def ffn_params(self, moe: bool) -> float:
        width = 3 if self.gated_mlp else 2
        h = self.hidden_size
        if moe:
            return (
                self.num_experts + self.shared_experts
            ) * width * h * self.moe_intermediate_size + h * self.num_experts
        return width * h * self.intermediate_size

    def shape_params(self) -> float:
        """Parameters implied by the shapes (embeddings, mixers, FFNs or experts, norms)."""
        h = self.hidden_size
        embed = self.embedding_params
        attn, mamba = self.attention_params(), self.mamba_params()
        total = embed + h
        for mixer, moe, has_ffn in zip(self.mixers, self.moe_mask, self.ffn_mask):
            total += (attn if KINDS[mixer].attention else mamba) + self._ffn_of(moe, has_ffn) + 2 * h
        return total

    def validate(self) -> "ModelSpec":
        for f in (
            "layers",
            "q_heads",
            "kv_heads",
            "head_dim",
            "max_context",
            "hidden_size",
            "intermediate_size",
            "vocab_size",
        ):
            v = getattr(self, f)
            top = MAX_LAYERS if f == "layers" else MAX_DIM
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > top:
                raise ConfigError(f"model '{self.name}': {f} must be a positive integer up to {top:,}, got {shown(v)}")
        if (
            isinstance(self.params, bool)
            or not isinstance(self.params, (int, float))
            or not is_finite(self.params)
            or self.params <= 0
        ):
            raise ConfigError(f"model '{self.name}': params must be a positive number, got {self.params!r}")
        if self.q_heads % self.kv_heads:
            raise ConfigError(
                f"model '{self.name}': q_heads ({self.q_heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        for f in ("dtype", "kv_dtype", "weight_dtype", "expert_dtype"):
            v = getattr(self, f)
            if (v is not None or f == "dtype") and v not in DTYPE_BYTES:
                raise ConfigError(f"model '{self.name}': unknown {f} '{v}' (known: {', '.join(DTYPE_BYTES)})")
        g = self.weight_group_size
        if isinstance(g, bool) or not isinstance(g, int) or g < 0 or g > MAX_DIM:
            raise ConfigError(f"model '{self.name}': weight_group_size must be a whole number >= 0, got {shown(g)}")
        if self.weight_quant is not None and self.weight_quant not in WEIGHT_QUANT:
            raise ConfigError(
                f"model '{self.name}': unknown weight_quant '{self.weight_quant}' (known: {', '.join(WEIGHT_QUANT)})"
            )
        self._validate_structure()
        return self

    def _validate_structure(self) -> None:
        where = f"model '{self.name}'"
        if self.layer_types:
            if len(self.layer_types) != self.layers:
                raise ConfigError(f"{where}: {len(self.layer_types)} layer types for {self.layers} layers")
            unknown = sorted(set(self.layer_types) - set(KINDS))
            if unknown:
                raise ConfigError(f"{where}: unknown layer type(s) {', '.join(unknown)} (known: {', '.join(KINDS)})")
        for f in ("moe_layers", "ffn_layers"):
            v = getattr(self, f)
            if v and len(v) != self.layers:
                raise ConfigError(f"{where}: {len(v)} {f} entries for {self.layers} layers")
        for mixer, kind in KINDS.items():
            if kind.required_fields and self.count(mixer):
                for f in kind.required_fields:
                    v = getattr(self, f)
                    if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > MAX_DIM:
                        raise ConfigError(f"{where}: {mixer} layers need a positive integer {f}, got {v!r}")
        if self.is_moe:
            if not 0 < self.experts_per_token <= self.num_experts or self.moe_intermediate_size <= 0:
                raise ConfigError(
                    f"{where}: a mixture of experts needs 0 < experts_per_token <= num_experts and a"
                    f" positive moe_intermediate_size (got {self.experts_per_token}, {self.num_experts},"
                    f" {self.moe_intermediate_size})"
                )
            if self.moe_layers and len(self.moe_layers) != self.layers:
                raise ConfigError(f"{where}: {len(self.moe_layers)} MoE layer flags for {self.layers} layers")


# GPUs whose MXFP4 experts vLLM runs on FlashInfer's TRT-LLM kernels by default (SM100 class); others: Marlin
MXFP4_TRTLLM_GPUS = ("b200", "gb200", "b300", "gb300")
MAX_DIM = 1 << 40  # any model dimension or context length beyond this is a typo, not a model
MAX_NAME = 120  # characters of a model name taken from a config
MAX_LAYERS = 100_000  # kvsim keeps per-layer structure (mixers, MoE flags): a bound on the work a config asks for


def first_attended(mixer: str, window: int, position):
    """The first key position a query at ``position`` (0-based) attends to in a layer of kind ``mixer``
    (layer_kinds.py: :meth:`LayerKind.first_attended`). Works on numpy arrays of positions too."""
    return KINDS[mixer].first_attended(window, position)
