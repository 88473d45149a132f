"""ModelSpec's weight fields from a Hugging Face config.json's ``quantization_config`` (fp8, mxfp4, awq, gptq,
compressed-tensors, modelopt): weight dtype and GEMM scheme, group scales, the modules left unquantized, and
the KV cache dtype the checkpoint declares."""

from __future__ import annotations

import re

from kvsim.errors import ConfigError
from kvsim.hardware.model_spec import MAX_DIM
from kvsim.validation import shown


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
    return {
        **_quant_scheme(quant, inner, where, method, has_experts),
        **_exclusions(inner, where, layers),
        **_checkpoint_kv_cache(quant, inner, where, method),
    }


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
            raise ConfigError(
                f"{where}: kv_cache_quant_algo {shown(algo)} is not priced (kvsim prices FP8 KV "
                "caches); a copy of the config without the field models a cache in the model's dtype"
            )
        return {"checkpoint_kv_dtype": "fp8", "kv_dtype": "fp8"}
    scheme = quant.get("kv_cache_scheme") if method == "compressed-tensors" else None
    if scheme is None:
        return {}
    if not isinstance(scheme, dict):
        raise ConfigError(f"{where}: field 'kv_cache_scheme' must be an object, got {type(scheme).__name__}")
    bits, kind = scheme.get("num_bits"), str(scheme.get("type", "")).lower()
    if bits != 8 or kind != "float":
        raise ConfigError(
            f"{where}: kv_cache_scheme of {shown(kind)} {shown(bits)}-bit values is not priced (kvsim "
            "prices FP8 KV caches)"
        )
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
            raise ConfigError(
                f"{where}: field '{key}' lists {len(names):,} modules; kvsim matches at most {MAX_EXCLUSIONS:,}"
            )
        pats = []
        for n in names:
            if n.startswith("re:") and (len(n) > MAX_PATTERN or NESTED_QUANTIFIER.search(n)):
                raise ConfigError(
                    f"{where}: field '{key}': {n[:60]!r} is a regular expression kvsim will not run "
                    f"(longer than {MAX_PATTERN} characters, or a repeated group that itself repeats, "
                    "which can take exponential time)"
                )
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
            raise ConfigError(
                f"{where}: field '{key}': {len(pats):,} modules over {layers:,} layers is more matching "
                "than kvsim does for a config"
            )

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
            if (
                isinstance(v, bool)
                or not isinstance(v, int)
                or (allowed is not None and v not in allowed)
                or (allowed is None and not (v == -1 or 0 < v <= MAX_DIM))
            ):
                raise ConfigError(
                    f"{where}: field '{k}' must be "
                    + (f"one of {', '.join(map(str, allowed))}" if allowed else "a positive whole number or -1")
                    + f", got {shown(v)}"
                )
            return v
    if default is None:
        raise ConfigError(f"{where}: field '{keys[0]}' missing")
    return default


def _integer_weights(bits: int, group: int, zero_points: bool, weight_only: bool = True) -> dict:
    """The fields of ``bits``-bit integer weights with a scale per ``group`` (-1 or 0: per channel)."""
    return {
        "weight_dtype": f"int{bits}",
        "weight_quant": ("w4a16" if bits == 4 else "w8a16") if weight_only else "w8a8_int8",
        "weight_group_size": max(0, group),
        "weight_zero_points": zero_points,
    }


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
    raise ConfigError(
        f"{where}: quant_method '{method}' is not priced by kvsim (it prices fp8, mxfp4, awq, gptq, "
        "compressed-tensors and modelopt checkpoints); its weights would be misread as unquantized"
    )


def _compressed_tensors(quant: dict, where: str) -> dict:
    """The weight fields of a compressed-tensors checkpoint: the scheme of its config group that targets Linear
    layers (llm-compressor writes one per scheme)."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ConfigError(f"{where}: compressed-tensors needs a non-empty 'config_groups' object")
    linear = [g for g in groups.values() if isinstance(g, dict) and "Linear" in (g.get("targets") or [])]
    if len(linear) != 1:
        raise ConfigError(
            f"{where}: kvsim prices a compressed-tensors checkpoint with one scheme for its Linear "
            f"layers; {len(linear)} config groups target Linear"
        )
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
    raise ConfigError(
        f"{where}: compressed-tensors scheme of {kind} {bits}-bit weights ({strategy}) with "
        f"{act_bits}-bit activations is not priced (kvsim prices FP8, NVFP4, W4A16, W8A16 and W8A8 int8)"
    )
