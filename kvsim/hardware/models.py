"""Transformer shapes that decide KV-cache size and per-step work.

Numbers come from each model's public Hugging Face ``config.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.errors import ConfigError

DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, as far as KV memory and roofline latency care."""

    name: str
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    params: float  # parameter count (weights), not bytes
    max_context: int  # tokens
    dtype: str = "fp16"  # dtype of weights and KV cache

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token occupies across all layers: 2 x layers x kv_heads x head_dim x dtype bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def attn_flops_per_pair(self) -> int:
        """FLOPs for one (query token, key token) pair over all layers: QK^T and PV, 2 FLOPs per MAC each."""
        return 4 * self.layers * self.q_heads * self.head_dim

    def validate(self) -> "ModelSpec":
        for f in ("layers", "q_heads", "kv_heads", "head_dim", "max_context"):
            if getattr(self, f) <= 0:
                raise ConfigError(f"model '{self.name}': {f} must be > 0")
        if self.params <= 0:
            raise ConfigError(f"model '{self.name}': params must be > 0")
        if self.q_heads % self.kv_heads:
            raise ConfigError(f"model '{self.name}': q_heads ({self.q_heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError(f"model '{self.name}': unknown dtype '{self.dtype}' (known: {', '.join(DTYPE_BYTES)})")
        return self


MODEL_PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec("llama-2-7b", layers=32, q_heads=32, kv_heads=32, head_dim=128, params=6.74e9, max_context=4096),
        ModelSpec("llama-2-13b", layers=40, q_heads=40, kv_heads=40, head_dim=128, params=13.0e9, max_context=4096),
        ModelSpec("llama-2-70b", layers=80, q_heads=64, kv_heads=8, head_dim=128, params=69.0e9, max_context=4096),
        ModelSpec("llama-3-8b", layers=32, q_heads=32, kv_heads=8, head_dim=128, params=8.03e9, max_context=8192, dtype="bf16"),
        ModelSpec("llama-3-70b", layers=80, q_heads=64, kv_heads=8, head_dim=128, params=70.6e9, max_context=8192, dtype="bf16"),
        ModelSpec("mistral-7b", layers=32, q_heads=32, kv_heads=8, head_dim=128, params=7.24e9, max_context=32768, dtype="bf16"),
        ModelSpec("qwen2.5-7b", layers=28, q_heads=28, kv_heads=4, head_dim=128, params=7.62e9, max_context=32768, dtype="bf16"),
        ModelSpec("opt-13b", layers=40, q_heads=40, kv_heads=40, head_dim=128, params=12.9e9, max_context=2048),
    ]
}


def parse_custom_model(text: str) -> ModelSpec:
    """Parse ``custom:layers=32,kv_heads=8,head_dim=128,params=8e9[,q_heads=32,dtype=bf16,max_context=8192]``."""
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
    known = set(required) | {"q_heads", "dtype", "max_context", "name"}
    unknown = set(fields) - known
    if unknown:
        raise ConfigError(f"custom model: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        kv = int(fields["kv_heads"])
        spec = ModelSpec(
            name=fields.get("name", "custom"),
            layers=int(fields["layers"]),
            q_heads=int(fields.get("q_heads", kv)),
            kv_heads=kv,
            head_dim=int(fields["head_dim"]),
            params=float(fields["params"]),
            max_context=int(fields.get("max_context", 4096)),
            dtype=fields.get("dtype", "fp16"),
        )
    except ValueError as e:
        raise ConfigError(f"custom model: {e}") from None
    return spec.validate()


def get_model(name: str) -> ModelSpec:
    """A preset by name (case-insensitive), or a ``custom:...`` spec."""
    if name.lower().startswith("custom"):
        return parse_custom_model(name)
    try:
        return MODEL_PRESETS[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown model '{name}' (presets: {', '.join(MODEL_PRESETS)}; or custom:layers=..,kv_heads=..,head_dim=..,params=..)") from None
