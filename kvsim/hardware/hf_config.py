"""A ModelSpec from a Hugging Face ``config.json`` (``--model path/to/config.json``): its shapes (hidden_size,
intermediate_size, num_attention_heads, num_key_value_heads, num_hidden_layers, head_dim, vocab_size,
max_position_embeddings, torch_dtype, tie_word_embeddings), the per-layer structure of each family's conventions
(layer types, windows, chunks, recurrent layers, MLA, experts), rotary width and the checkpoint's quantization
(quant_config.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kvsim.errors import ConfigError
from kvsim.hardware.model_spec import MAX_DIM, MAX_LAYERS, MAX_NAME, ModelSpec
from kvsim.hardware.quant_config import quantization_from_hf
from kvsim.validation import is_finite, shown

HF_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8"}


def model_from_hf_config(path: str) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` (fields named in the module docstring)."""
    from kvsim.files import read_json_object

    return model_from_config_dict(read_json_object(path, f"--model {path}"), path)


def model_from_config_dict(cfg: dict, path: str) -> ModelSpec:
    """A ModelSpec from the object of a Hugging Face ``config.json`` (``path``: its file, or what to call it in
    errors; its folder names the model)."""
    if "num_hidden_layers" not in cfg and "text_config" in cfg:
        text = cfg["text_config"]
        if not isinstance(text, dict):
            raise ConfigError(
                f"{path}: field 'text_config' must be an object (the language model's config), got "
                f"{type(text).__name__}"
            )
        # a multimodal checkpoint keeps its dtype and quantization beside the language model's config
        cfg = {**{k: cfg[k] for k in OUTER_FIELDS if k in cfg}, **text}
    for f, what in UNMODELLED_SHAPE_FIELDS.items():
        if cfg.get(f) is not None:
            raise ConfigError(f"{path}: field '{f}': {what}. Not modelled; describe the model with custom:")
    # fields a family's published configs leave to transformers' defaults
    cfg = {**HF_FAMILY_DEFAULTS.get(str(cfg.get("model_type", "")), {}), **cfg}

    def need(*keys, default=None):
        for k in keys:
            if k in cfg and cfg[k] is not None:
                v = cfg[k]
                if (
                    isinstance(v, bool)
                    or not isinstance(v, (int, float))
                    or not is_finite(v)
                    or v <= 0
                    or v > MAX_DIM
                    or int(v) != v
                ):
                    raise ConfigError(
                        f"{path}: field '{k}' must be a positive integer up to {MAX_DIM:,}, got {shown(v)}"
                    )
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
    gated = (
        model_type not in NON_GATED_MLP
        if model_type
        else hidden_act in ("silu", "swiglu", "geglu", "gelu_pytorch_tanh")
    )
    file = Path(path)
    name = str(cfg.get("_name_or_path") or (file.parent.name if file.stem == "config" else file.stem) or "hf-model")
    if len(name) > MAX_NAME:  # it titles tables and plots
        name = name[: MAX_NAME - 3] + "..."
    more = _structure_from_hf(cfg, path, layers, hidden, need, blocks)
    if more.get("kv_lora_rank"):
        head_dim = need("qk_nope_head_dim") + more["qk_rope_head_dim"]
        kv = heads
    if more.get("num_experts") and "moe_intermediate_size" not in more:
        more["moe_intermediate_size"] = ffn
    more["rotary_dim"] = _rotary_dim_from_hf(cfg, path, model_type, head_dim)
    if model_type == "gpt_oss":  # vLLM renders its chat with Harmony (kvsim/chat_template.py)
        more["chat_renderer"] = "harmony"
    if model_type == "minimax_m2":  # vLLM's MiniMax-M2 normalizes q and k over all heads (MiniMaxText01RMSNormTP)
        more["qk_norm_all_heads"] = True
    spec = ModelSpec(name, layers, heads, kv, head_dim, 0.0, ctx, dtype, hidden, ffn, vocab, gated, tied, **more)
    spec = replace(spec, params=spec.shape_params(), from_config=True)
    return spec.validate()


NO_ROPE = {"opt", "gpt2", "bloom", "mpt", "gpt_bigcode", "jamba", "mamba", "mamba2", "falcon_mamba"}
# a multimodal config's top-level fields that describe its language model too
OUTER_FIELDS = ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings")
# transformers' defaults for fields that a family's published config.json files omit (Gemma 3's omit its
# vocabulary, context, tying and local/global pattern: transformers' Gemma3TextConfig defaults, which vLLM reads)
HF_FAMILY_DEFAULTS = {
    "gemma3_text": {
        "vocab_size": 262_208,
        "max_position_embeddings": 131_072,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
        "hidden_activation": "gelu_pytorch_tanh",
    },
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
            raise ConfigError(
                f"{path}: field 'rotary_dim' must be a whole number from 1 to the head size "
                f"({head_dim}), got {shown(d)}"
            )
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


NON_GATED_MLP = {
    "opt",
    "gpt2",
    "gpt_neox",
    "gptj",
    "phi",
    "falcon",
    "bloom",
    "gpt_bigcode",
    "starcoder2",
    "mpt",
    "nemotron_h",
}  # Nemotron-H: squared-ReLU MLPs and experts
HF_LAYER_TYPES = {
    "full_attention": "full",
    "attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
    "mamba": "mamba",
    "linear_attention": "mamba",
}
# config.json fields whose shapes kvsim does not model: refused rather than priced as ordinary layers (the
# numbers would be wrong, not approximate)
UNMODELLED_SHAPE_FIELDS = {
    "block_configs": "Nemotron-NAS (DeciLM) per-layer blocks: attention removed or grouped per layer, FFN widths "
    "per layer; kvsim would price every layer with the same KV heads and FFN",
    "moe_latent_size": "latent MoE (experts working in a narrower latent space, Nemotron-3 Super); kvsim would "
    "price the experts at the full hidden width",
}
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
        raise ConfigError(
            f"{path}: field 'hybrid_override_pattern' must be a string of M (mamba), * (attention), "
            f"- (MLP) and E (MoE) blocks, got {shown(pattern)}"
        )
    blocks = cfg.get("num_hidden_layers")
    if blocks is not None and blocks != len(pattern):
        raise ConfigError(
            f"{path}: field 'hybrid_override_pattern' has {len(pattern)} blocks, num_hidden_layers says {shown(blocks)}"
        )
    mixers: list[str] = []
    ffn: list[bool] = []
    moe: list[bool] = []
    for i, b in enumerate(pattern):
        if b in "M*":
            mixers.append("mamba" if b == "M" else "full")
            ffn.append(False)
            moe.append(False)
        elif not mixers or ffn[-1]:
            raise ConfigError(
                f"{path}: field 'hybrid_override_pattern': block {i} ('{b}') follows no mixer block "
                "without an FFN; kvsim pairs each MLP or MoE block with the mixer before it"
            )
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
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or not is_finite(v)
            or v < 0
            or v > MAX_DIM
            or int(v) != v
        ):
            raise ConfigError(f"{path}: field '{key}' must be a whole number from 0 to {MAX_DIM:,}, got {shown(v)}")
        return int(v)

    model_type = str(cfg.get("model_type", ""))
    for f, what in UNMODELLED_LAYER_FIELDS.items():
        if (
            f == "attn_type_list"
            and isinstance(cfg.get(f), list)
            and all(t == 1 and not isinstance(t, bool) for t in cfg[f])
        ):
            continue  # every layer ordinary softmax attention (1; 0 is lightning attention): MiniMax-M2's
        if cfg.get(f) is not None:
            raise ConfigError(
                f"{path}: field '{f}': {what} are not modelled; kvsim would price every layer as "
                "attention (describe the model with a config whose layer_types kvsim knows, or custom:)"
            )
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
            raise ConfigError(
                f"{path}: field '{key}' must list one of {', '.join(HF_LAYER_TYPES)} per layer"
                f" ({layers}); got {len(types)} entries" + (f", unknown '{bad[0]}'" if bad else "")
            )
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
        more.update(
            mamba_d_inner=nv * dv,
            mamba_d_state=dk,
            mamba_d_conv=need("linear_conv_kernel_dim", default=4),
            mamba_conv_channels=2 * nk * dk + nv * dv,
            gdn_key_width=nk * dk,
        )
    elif "mamba" in mixers and "mamba_num_heads" in cfg:  # Nemotron-H's Mamba-2: heads x head dims inner channels
        d_state, d_inner, groups = (
            need("ssm_state_size"),
            need("mamba_num_heads") * need("mamba_head_dim"),
            count("n_groups"),
        )
        more.update(
            mamba_d_inner=d_inner,
            mamba_d_state=d_state,
            mamba_d_conv=need("conv_kernel", default=4),
            mamba_conv_channels=d_inner + 2 * groups * d_state,
        )
    elif "mamba" in mixers:
        d_state, d_conv = need("mamba_d_state"), need("mamba_d_conv")
        d_inner = need("mamba_expand") * hidden
        groups = count("mamba_n_groups")  # Mamba-2: B and C are convolved too
        more.update(
            mamba_d_inner=d_inner,
            mamba_d_state=d_state,
            mamba_d_conv=d_conv,
            mamba_conv_channels=d_inner + 2 * groups * d_state,
        )
    if "mamba" in mixers:
        more.update(_state_dtype(cfg, path))
    if cfg.get("kv_lora_rank"):
        more.update(
            kv_lora_rank=need("kv_lora_rank"),
            qk_rope_head_dim=need("qk_rope_head_dim"),
            v_head_dim=need("v_head_dim"),
            q_lora_rank=count("q_lora_rank"),
        )
    experts = cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts")
    if experts:
        more.update(
            num_experts=need("n_routed_experts", "num_local_experts", "num_experts"),
            experts_per_token=need("num_experts_per_tok", "experts_per_token", "moe_topk"),
        )
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
