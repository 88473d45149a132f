"""Transformer shapes that decide KV-cache size and per-iteration work.

Presets carry the fields of each model's public Hugging Face ``config.json`` (hidden_size,
intermediate_size, num_attention_heads, num_key_value_heads, num_hidden_layers, head_dim, vocab_size,
max_position_embeddings, torch_dtype, tie_word_embeddings) and its published parameter count.
``--model`` also takes a path to such a ``config.json`` (hf_config.py: :func:`model_from_hf_config`).

Today's models are not one kind of layer. Each layer has a token mixer (``layer_types``):

- ``full``: attention over the whole context (K and V per KV head, or one MLA latent per token);
- ``sliding``: attention over the last ``sliding_window`` tokens (the token itself included);
- ``chunked``: attention within the token's ``attention_chunk`` (Llama 4's local layers);
- ``mamba``: a recurrent layer holding a fixed-size state per sequence (conv + SSM state).

and an FFN that is dense or a mixture of experts (``moe_layers``). kv_groups.py turns this into the
per-layer cache kinds allocators work with.

The ideas live in modules of their own: the spec and its byte/shape arithmetic (model_spec.py), the kinds of
layer (layer_kinds.py), presets and their Hugging Face ids (presets.py), config.json import (hf_config.py),
quantization_config parsing (quant_config.py), quantized checkpoints (checkpoints.py). This module resolves
``--model`` (:func:`get_model`) and re-exports their names.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from kvsim.errors import ConfigError

# vLLM's --quantization names kvsim takes (checkpoints.py: the format each names)
from kvsim.hardware.checkpoints import QUANTIZATION_FLAGS
from kvsim.hardware.hf_config import HF_DTYPES, HF_LAYER_TYPES, model_from_hf_config
from kvsim.hardware.layer_kinds import KINDS
from kvsim.hardware.model_spec import (
    DTYPE_BYTES,
    KV_CACHE_DTYPES,
    MAX_DIM,
    MAX_LAYERS,
    MAX_NAME,
    MXFP4_TRTLLM_GPUS,
    WEIGHT_QUANT,
    ModelSpec,
    first_attended,
)
from kvsim.hardware.presets import _HF_INDEX, HF_IDS, MODEL_PRESETS
from kvsim.hardware.quant_config import quantization_from_hf

__all__ = [
    "DTYPE_BYTES",
    "HF_DTYPES",
    "HF_IDS",
    "HF_LAYER_TYPES",
    "KINDS",
    "KV_CACHE_DTYPES",
    "MAX_DIM",
    "MAX_LAYERS",
    "MAX_NAME",
    "MODEL_PRESETS",
    "MXFP4_TRTLLM_GPUS",
    "ModelSpec",
    "QUANTIZATION_FLAGS",
    "WEIGHT_QUANT",
    "first_attended",
    "get_model",
    "model_from_hf_config",
    "parse_custom_model",
    "quantization_from_hf",
    "serve_name",
]


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
    ints = {
        "q_heads",
        "max_context",
        "hidden_size",
        "intermediate_size",
        "vocab_size",
        "sliding_window",
        "attention_chunk",
        "full_every",
        "kv_lora_rank",
        "qk_rope_head_dim",
    }
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
        if (
            isinstance(named, str)
            and named.count("/") == 1
            and not named.startswith((".", "/"))
            and len(named) <= MAX_NAME
        ):
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
        raise ConfigError(
            f"'{name}' is not a Hugging Face id kvsim knows (its presets' ids: `kvsim list models`), and "
            "kvsim reads no hub: pass the model's config.json path (e.g. `huggingface-cli download "
            f"{name} config.json --local-dir cfg`, then --model cfg/config.json)"
        )
    try:
        return MODEL_PRESETS[name.lower()]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name.lower(), MODEL_PRESETS, n=1)
        raise ConfigError(
            f"unknown model '{name}' (presets: {', '.join(MODEL_PRESETS)}; a Hugging Face config.json path;"
            " or custom:layers=..,kv_heads=..,head_dim=..,params=..)"
            + (f"; did you mean '{close[0]}'?" if close else "")
        ) from None
