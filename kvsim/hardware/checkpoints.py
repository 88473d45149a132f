"""Quantized checkpoints of the presets' models, as they are served: by vLLM's ``--quantization`` name and by the
checkpoints' own Hugging Face ids.

A preset is one model; its public checkpoints hold the same shapes in other weight formats (NVIDIA ModelOpt's
FP8 and NVFP4, Red Hat's compressed-tensors FP8 and W4A16, AWQ, GPTQ, Qwen's block-scaled FP8, gpt-oss's MXFP4
experts). kvsim reads no hub, so each format is described here once (:data:`SCHEMES`), as the published
checkpoints of that method hold their weights, and:

- ``--quantization M`` on a preset that is not M-quantized prices the preset's model as M's checkpoints hold it
  (``llama-3.1-70b -q modelopt_fp4`` is nvidia's Llama-3.1-70B NVFP4) and says so; vLLM itself loads M only from
  an M checkpoint, which is what a user serving with that flag has. A config.json the user gave is the truth:
  another method than its own is refused, as vLLM refuses it.
- a checkpoint's Hugging Face id (``nvidia/Llama-3.3-70B-Instruct-FP4``, ``RedHatAI/...-FP8-dynamic``,
  ``hugging-quants/...-AWQ-INT4``, ``Qwen/Qwen3-32B-AWQ``) resolves to its base model's preset in the format its
  publisher's naming says (:func:`checkpoint_from_id`): the base name must be a preset's id, the suffix one of
  :data:`SUFFIXES`, and the publisher decides the method where the suffix alone does not (an ``-FP8`` of nvidia is
  ModelOpt's, of Qwen block-scaled FP8, of RedHatAI compressed-tensors).

Sources of the formats: each method's quantization_config in the checkpoints' config.json / hf_quant_config.json
(docs/memory.md lists the checkpoints checked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from kvsim.errors import ConfigError


@dataclass(frozen=True)
class Scheme:
    """How one quantization method's published checkpoints hold a model's weights."""

    method: str  # the checkpoint's quant_method (the family vLLM's --quantization names must match)
    label: str  # short format name, appended to the preset's name (llama-3.1-70b-nvfp4)
    what: str  # one line for notes and tables
    dense: dict = field(default_factory=dict)  # ModelSpec fields for a model's weights
    experts_only: bool = False  # a MoE model: only its routed experts take the format (mxfp4, W4A16 experts)
    moe: dict | None = None  # ModelSpec fields for a MoE model, when they differ from ``dense``


_FP8 = {"weight_dtype": "fp8", "weight_quant": "fp8"}
_NVFP4 = {"weight_dtype": "nvfp4", "weight_quant": "nvfp4"}
_AWQ = {"weight_dtype": "int4", "weight_quant": "w4a16", "weight_group_size": 128, "weight_zero_points": True}
_GPTQ = {"weight_dtype": "int4", "weight_quant": "w4a16", "weight_group_size": 128, "weight_zero_points": False}

# vLLM's --quantization name -> the format its checkpoints hold (fp8: quantized on loading when the checkpoint is
# not FP8 already: per-tensor scales, the embedding and LM head in bf16)
SCHEMES: dict[str, Scheme] = {
    "fp8": Scheme("fp8", "fp8", "FP8 weights, per-tensor scales", _FP8),
    "fbgemm_fp8": Scheme(
        "fbgemm_fp8", "fp8", "FP8 weights, per-channel scales, dynamic per-token activations (fbgemm)", _FP8
    ),
    # NVIDIA's exports leave the KV cache to the server (kv_cache_quant_algo null in Llama-3.1-405B-Instruct-FP8's
    # and DeepSeek-R1-NVFP4's hf_quant_config.json: --kv-cache-dtype fp8 asks for one); their MoE exports keep
    # attention in bf16 (DeepSeek-R1-NVFP4's exclude_modules names every layer's self_attn)
    "modelopt": Scheme("modelopt", "fp8", "NVIDIA ModelOpt FP8 weights, per-tensor scales", _FP8),
    "modelopt_fp4": Scheme(
        "modelopt",
        "nvfp4",
        "NVIDIA ModelOpt NVFP4 weights (4 bits, an FP8 scale per 16; MoE models: attention in bf16)",
        _NVFP4,
        moe={**_NVFP4, "attention_unquantized": True},
    ),
    "compressed-tensors": Scheme(
        "compressed-tensors",
        "fp8-dynamic",
        "compressed-tensors FP8 weights (per-channel) "
        "with dynamic per-token FP8 activations, as llm-compressor's FP8_DYNAMIC",
        _FP8,
    ),
    "awq": Scheme("awq", "awq", "AWQ 4-bit weights, a scale and zero point per 128", _AWQ),
    "gptq": Scheme("gptq", "gptq", "GPTQ 4-bit symmetric weights, a scale per 128", _GPTQ),
    "mxfp4": Scheme(
        "mxfp4",
        "mxfp4",
        "MXFP4 routed experts (4 bits, an 8-bit scale per 32), the rest in bf16",
        {"expert_dtype": "mxfp4"},
        experts_only=True,
    ),
}
SCHEMES["awq_marlin"] = SCHEMES["awq"]  # vLLM picks the Marlin kernels on its own; these name the same checkpoints
SCHEMES["gptq_marlin"] = SCHEMES["gptq"]
QUANTIZATION_FLAGS = tuple(SCHEMES)

QUANT_FIELDS = dict(
    weight_dtype=None,
    weight_quant=None,
    expert_dtype=None,
    quant_method=None,
    weight_group_size=0,
    weight_zero_points=False,
    attention_unquantized=False,
    unquantized_attention_layers=(),
    unquantized_mlp_layers=(),
    checkpoint_kv_dtype=None,
    kv_dtype=None,
)


def unquantized(spec):
    """``spec`` with every weight-format field as the model's bf16 weights have them."""
    return replace(spec, **QUANT_FIELDS)


def apply_scheme(base, flag: str, name: str | None = None):
    """``base`` (a preset's model, any format) with its weights as ``flag``'s checkpoints hold them."""
    s = SCHEMES[flag]
    plain = unquantized(base)
    if s.experts_only and not plain.is_moe:
        raise ConfigError(
            f"--quantization {flag}: {s.what}; {base.name} has no experts (a dense model has no {flag} checkpoint)"
        )
    fields = dict(s.moe if (s.moe is not None and plain.is_moe) else s.dense)
    if s.method != "fp8" or flag != "fp8":
        fields["quant_method"] = s.method
    if "checkpoint_kv_dtype" in fields:
        fields["kv_dtype"] = fields["checkpoint_kv_dtype"]
    return replace(plain, name=name or f"{_base_name(base.name)}-{s.label}", **fields)


def format_label(spec) -> str:
    """A short name of ``spec``'s weight format (fp8, fp8-block, nvfp4, awq, int4, int8-w8a8, mxfp4, ...)."""
    if spec.weight_quant == "fp8_block":
        return "fp8-block"
    if spec.weight_dtype in ("int4", "int8"):
        method = spec.quant_method if spec.quant_method in ("awq", "gptq") else spec.weight_dtype
        return method + ("-w8a8" if spec.weight_quant == "w8a8_int8" else "")
    if spec.weight_dtype:
        return spec.weight_dtype
    return f"{spec.expert_dtype}-experts" if spec.expert_dtype else "bf16"


def _base_name(name: str) -> str:
    """A preset name without a format suffix this module added (qwen3-32b-fp8 -> qwen3-32b)."""
    labels = sorted({s.label for s in SCHEMES.values()}, key=len, reverse=True)
    for label in labels:
        if name.endswith(f"-{label}"):
            return name[: -len(label) - 1]
    return name


def quantize(spec, flag: str | None, from_config: bool = False):
    """``spec`` as vLLM's ``--quantization flag`` serves it (module docstring); the note to print (or '')."""
    if flag is None:
        return spec, ""
    s = SCHEMES.get(flag)
    if s is None:
        raise ConfigError(f"--quantization '{flag}': not one kvsim prices ({', '.join(SCHEMES)})")
    own = spec.quant_method or ("fp8" if spec.weight_quant in ("fp8", "fp8_block") else None)
    quantized = spec.weight_quant is not None or spec.expert_dtype is not None
    if own == s.method or (flag == "fp8" and spec.weight_quant in ("fp8", "fp8_block")):
        return spec, ""
    if flag == "fp8" and not quantized:  # quantized on loading, as vLLM does with a bf16 checkpoint
        return replace(spec, weight_dtype="fp8", weight_quant="fp8"), ""
    if flag == "fp8":
        raise ConfigError(
            f"--quantization fp8: {spec.name} is already quantized ({own or spec.weight_quant or spec.expert_dtype}); "
            "vLLM quantizes only bf16/fp16 checkpoints to FP8 on loading"
        )
    if from_config:
        have = f"its config's quantization is {own}" if own else "it is not quantized"
        raise ConfigError(
            f"--quantization {flag}: {spec.name} is not a {s.method} checkpoint ({have}); vLLM loads "
            "these methods only from checkpoints quantized that way"
        )
    out = apply_scheme(spec, flag)
    return out, (
        f"note: --quantization {flag}: {spec.name} priced as its {s.method} checkpoint ({s.what}); a "
        "checkpoint's own config.json or Hugging Face id (`kvsim list models`) says its exact format"
    )


# --- checkpoints by Hugging Face id ---------------------------------------------------------------------------
# repository-name suffixes (case-insensitive, at the end of the name) -> the --quantization scheme they name;
# publishers that differ on a suffix are in PUBLISHER_FP8 / PUBLISHER_FP4
SUFFIXES: tuple[tuple[str, str], ...] = (
    (r"-fp8-dynamic", "compressed-tensors"),
    (r"-fp8-block", "fp8_block"),
    (r"-(?:fp8|fp8-kv)", "fp8"),
    (r"-(?:nvfp4|fp4)", "fp4"),
    (r"-awq(?:-int4)?", "awq"),
    (r"-gptq-int4", "gptq"),
    (r"-gptq-int8", "gptq8"),
    (r"-quantized\.w4a16", "w4a16"),
    (r"-quantized\.w8a8", "w8a8"),
    (r"-quantized\.w8a16", "w8a16"),
    (r"-int4", "int4-experts"),
)
# what an "-FP8" checkpoint is, by publisher: NVIDIA ModelOpt (per-tensor, FP8 KV cache), Red Hat / Neural Magic
# compressed-tensors (per-tensor static), Z.ai's GLM compressed-tensors (per-channel weights, dynamic per-token
# activations, the routers and LM head in bf16: zai-org/GLM-4.5-Air-FP8's quantization_config as public code
# copies it), Qwen and DeepSeek block-scaled FP8; others: per-tensor FP8
PUBLISHER_FP8 = {
    "nvidia": "modelopt",
    "redhatai": "ct-fp8",
    "neuralmagic": "ct-fp8",
    "zai-org": "ct-fp8",
    "qwen": "fp8_block",
}


def _variant(key: str, publisher: str) -> tuple[str, dict]:
    """(--quantization scheme, extra ModelSpec fields) of a suffix kind from :data:`SUFFIXES`."""
    if key == "fp8":
        kind = PUBLISHER_FP8.get(publisher, "fp8")
        if kind == "fp8_block":
            return "fp8", {"weight_quant": "fp8_block"}
        if kind == "ct-fp8":
            return "compressed-tensors", {}
        return kind, {}
    if key == "fp8_block":
        return "fp8", {"weight_quant": "fp8_block"}
    if key == "fp4":
        if publisher in ("redhatai", "neuralmagic"):
            return "compressed-tensors", {**_NVFP4}
        return "modelopt_fp4", {}
    if key == "gptq8":
        return "gptq", {"weight_dtype": "int8", "weight_quant": "w8a16"}
    if key == "w4a16":  # llm-compressor's W4A16: symmetric 4-bit, a scale per 128
        return "compressed-tensors", {**_GPTQ}
    if key == "w8a8":
        return "compressed-tensors", {
            "weight_dtype": "int8",
            "weight_quant": "w8a8_int8",
            "weight_group_size": 0,
            "weight_zero_points": False,
        }
    if key == "w8a16":
        return "compressed-tensors", {
            "weight_dtype": "int8",
            "weight_quant": "w8a16",
            "weight_group_size": 0,
            "weight_zero_points": False,
        }
    return key, {}


# checkpoints whose hf_quant_config.json declares an FP8 KV cache (ModelOpt ``kv_cache_quant_algo`` "FP8"), which
# vLLM 0.14 on stores the cache in under --kv-cache-dtype auto (kvsim.releases.follows_checkpoint_kv_dtype);
# lowercase ids without a -vN re-release suffix. NVIDIA's exports differ (Llama-3.1-405B-Instruct-FP8 and
# DeepSeek-R1's NVFP4 declare none: exports of ModelOpt 0.15-0.27 mostly leave the cache to the server, 0.33's
# declare FP8), so only checkpoints whose files, tests or start-up logs were seen are listed.
FP8_KV_CHECKPOINTS: frozenset[str] = frozenset(
    {
        # vLLM 0.14.1's start-up log serving it (DigitalOcean's GTC-2026 demo): "Using fp8 data type to store kv cache"
        "nvidia/llama-3.1-70b-instruct-fp8",
        # hf_quant_config.json, as TensorRT-LLM's accuracy tests assert it (no KV option given: FP8 read back)
        "nvidia/llama-3.3-70b-instruct-fp4",
        "nvidia/llama-4-scout-17b-16e-instruct-fp4",
        # hf_quant_config.json (ModelOpt 0.33), quoted in vLLM issue #34752 and copied in AIConfigurator's
        # model_configs
        "nvidia/qwen3-30b-a3b-nvfp4",
        "nvidia/qwen3-32b-nvfp4",
        "nvidia/qwen3-235b-a22b-nvfp4",
        # hf_quant_config.json as AIConfigurator's model_configs copy it (kv_cache_quant_algo FP8)
        "nvidia/minimax-m2.5-nvfp4",
        "nvidia/deepseek-v3.1-nvfp4",
    }
)


def checkpoint_from_id(name: str, presets: dict, ids: dict[str, str]):
    """The model of a quantized checkpoint's Hugging Face id (module docstring), or None when the id does not name
    a preset's model in a known format. ``presets``: name -> ModelSpec; ``ids``: lowercase id -> preset name."""
    if name.count("/") != 1:
        return None
    publisher, repo = name.lower().split("/")
    by_repo = {k.split("/")[1]: v for k, v in ids.items()}
    by_repo.update({k[len("meta-") :]: v for k, v in list(by_repo.items()) if k.startswith("meta-")})
    repo = re.sub(r"-v\d+$", "", repo)  # a publisher's re-release of the same checkpoint (-FP4-v2)
    for pattern, key in SUFFIXES:
        m = re.fullmatch(rf"(.+?){pattern}", repo)
        if not m:
            continue
        base = by_repo.get(m.group(1))
        if base is None:
            continue
        spec = presets[base]
        if key == "int4-experts":
            if not spec.is_moe:
                continue
            out = apply_scheme(unquantized(spec), "mxfp4")  # experts only, as 4-bit integers (W4A16, groups of 32)
            return replace(
                out, name=f"{base}-int4", quant_method="compressed-tensors", expert_dtype="int4", weight_group_size=32
            )
        if publisher == "meta-llama" and key == "fp8":
            raise ConfigError(
                f"'{name}': Meta's own FP8 checkpoints (fbgemm_fp8) leave their attention and some layers out of "
                "FP8 by an exclusion list only their config.json holds, which kvsim does not guess from the id: "
                f"pass that file (`huggingface-cli download {name} config.json --local-dir cfg`, then --model "
                "cfg/config.json)"
            )
        flag, extra = _variant(key, publisher)
        if SCHEMES[flag].experts_only and not spec.is_moe:
            continue
        out = apply_scheme(spec, flag)
        if extra:
            out = replace(out, **extra)
        if f"{publisher}/{repo}" in FP8_KV_CHECKPOINTS:
            out = replace(out, checkpoint_kv_dtype="fp8", kv_dtype="fp8")
        return replace(out, name=f"{base}-{format_label(out)}")
    return None
