"""Transformer shapes that decide KV-cache size and per-iteration work.

Presets carry the fields of each model's public Hugging Face ``config.json`` (hidden_size,
intermediate_size, num_attention_heads, num_key_value_heads, num_hidden_layers, head_dim, vocab_size,
max_position_embeddings, torch_dtype, tie_word_embeddings) and its published parameter count.
``--model`` also takes a path to such a ``config.json`` (models.py: :func:`model_from_hf_config`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from kvsim.errors import ConfigError

DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1, "int8": 1}
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

    def __post_init__(self) -> None:
        if self.hidden_size <= 0 and self.q_heads > 0 and self.head_dim > 0:
            object.__setattr__(self, "hidden_size", self.q_heads * self.head_dim)
        if self.intermediate_size <= 0 and self.hidden_size > 0 and self.layers > 0:
            object.__setattr__(self, "intermediate_size", self._ffn_from_params())

    def _ffn_from_params(self) -> int:
        """The FFN width that makes the parameter count add up (for specs that give only ``params``)."""
        h = self.hidden_size
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        attn = h * (self.q_heads + 2 * self.kv_heads) * self.head_dim + self.q_heads * self.head_dim * h
        mlp_per_layer = (self.params - embed) / self.layers - attn - 2 * h
        return max(1, int(round(mlp_per_layer / ((3 if self.gated_mlp else 2) * h))))

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.kv_dtype or self.dtype]

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token occupies across all layers:
        2 x layers x kv_heads x head_dim x KV dtype bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes

    def with_kv_cache_dtype(self, kv_cache_dtype: str) -> "ModelSpec":
        """This model with its KV cache stored as ``kv_cache_dtype`` ('auto': as the weights)."""
        from dataclasses import replace

        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(f"--kv-cache-dtype '{kv_cache_dtype}': not one of {', '.join(KV_CACHE_DTYPES)}")
        return replace(self, kv_dtype=None if kv_cache_dtype == "auto" else kv_cache_dtype)

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def attn_flops_per_pair(self) -> int:
        """FLOPs for one (query token, key token) pair over all layers: QK^T and PV, 2 FLOPs per MAC each."""
        return 4 * self.layers * self.q_heads * self.head_dim

    def shape_params(self) -> float:
        """Parameters implied by the shapes (embeddings, attention and MLP projections, norms)."""
        h, f = self.hidden_size, self.intermediate_size
        attn = h * (self.q_heads + 2 * self.kv_heads) * self.head_dim + self.q_heads * self.head_dim * h
        mlp = (3 if self.gated_mlp else 2) * h * f
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embed + self.layers * (attn + mlp + 2 * h) + h

    def validate(self) -> "ModelSpec":
        for f in ("layers", "q_heads", "kv_heads", "head_dim", "max_context", "hidden_size", "intermediate_size",
                  "vocab_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > MAX_DIM:
                raise ConfigError(f"model '{self.name}': {f} must be a positive integer up to {MAX_DIM:,}, got {v!r}")
        if isinstance(self.params, bool) or not isinstance(self.params, (int, float)) or not math.isfinite(self.params) \
                or self.params <= 0:
            raise ConfigError(f"model '{self.name}': params must be a positive number, got {self.params!r}")
        if self.q_heads % self.kv_heads:
            raise ConfigError(f"model '{self.name}': q_heads ({self.q_heads}) must be a multiple of kv_heads ({self.kv_heads})")
        for f in ("dtype", "kv_dtype"):
            v = getattr(self, f)
            if (v is not None or f == "dtype") and v not in DTYPE_BYTES:
                raise ConfigError(f"model '{self.name}': unknown {f} '{v}' (known: {', '.join(DTYPE_BYTES)})")
        return self


MAX_DIM = 1 << 40  # any model dimension or context length beyond this is a typo, not a model


def _m(name, layers, hidden, q, kv, ffn, vocab, ctx, params, dtype="fp16", head_dim=0, gated=True, tied=False):
    return ModelSpec(name, layers, q, kv, head_dim or hidden // q, params, ctx, dtype, hidden, ffn, vocab, gated, tied)


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
        _m("phi-2", 32, 2560, 32, 32, 10240, 51200, 2048, 2.78e9, gated=False),
        _m("opt-13b", 40, 5120, 40, 40, 20480, 50272, 2048, 12.9e9, gated=False, tied=True),
    ]
}


def parse_custom_model(text: str) -> ModelSpec:
    """Parse ``custom:layers=32,kv_heads=8,head_dim=128,params=8e9[,q_heads=..,dtype=..,max_context=..,
    hidden_size=..,intermediate_size=..,vocab_size=..,gated_mlp=0|1]``."""
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
    ints = {"q_heads", "max_context", "hidden_size", "intermediate_size", "vocab_size"}
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
        )
    except ValueError as e:
        raise ConfigError(f"custom model: {e}") from None
    return spec.validate()


def model_from_hf_config(path: str) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` (fields named in the module docstring)."""
    from kvsim.files import read_json_object

    cfg = read_json_object(path, f"--model {path}")
    cfg = cfg.get("text_config", cfg) if "num_hidden_layers" not in cfg else cfg

    def need(*keys, default=None):
        for k in keys:
            if k in cfg and cfg[k] is not None:
                v = cfg[k]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 \
                        or v > MAX_DIM or int(v) != v:
                    raise ConfigError(f"{path}: field '{k}' must be a positive integer, got {v!r}")
                return int(v)
        if default is not None:
            return default
        raise ConfigError(f"{path}: field '{keys[0]}' missing (a Hugging Face config.json is expected)")

    layers = need("num_hidden_layers", "n_layer", "num_layers")
    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head")
    kv = need("num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = need("head_dim", default=hidden // heads)
    ffn = need("intermediate_size", "ffn_dim", "n_inner", default=4 * hidden)
    vocab = need("vocab_size")
    ctx = need("max_position_embeddings", "n_positions", "max_seq_len", default=4096)
    dtype = HF_DTYPES.get(str(cfg.get("torch_dtype", "float16")), "fp16")
    tied = bool(cfg.get("tie_word_embeddings", False))
    hidden_act = str(cfg.get("hidden_act", cfg.get("activation_function", "silu")))
    gated = hidden_act in ("silu", "swiglu", "geglu") or "llama" in str(cfg.get("model_type", ""))
    file = Path(path)
    name = str(cfg.get("_name_or_path") or (file.parent.name if file.stem == "config" else file.stem) or "hf-model")
    spec = ModelSpec(name, layers, heads, kv, head_dim, 0.0, ctx, dtype, hidden, ffn, vocab, gated, tied)
    spec = replace(spec, params=spec.shape_params())
    return spec.validate()


def get_model(name: str) -> ModelSpec:
    """A preset by name (case-insensitive), a ``custom:...`` spec, or a path to a Hugging Face config.json."""
    if name.lower().startswith("custom"):
        return parse_custom_model(name)
    if name.lower().endswith(".json") or Path(name).is_file():
        return model_from_hf_config(name)
    try:
        return MODEL_PRESETS[name.lower()]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name.lower(), MODEL_PRESETS, n=1)
        raise ConfigError(f"unknown model '{name}' (presets: {', '.join(MODEL_PRESETS)}; a Hugging Face config.json path;"
                          " or custom:layers=..,kv_heads=..,head_dim=..,params=..)"
                          + (f"; did you mean '{close[0]}'?" if close else "")) from None
