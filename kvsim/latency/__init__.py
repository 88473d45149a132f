"""Iteration-time models: the per-operation model tied to measured GPU times (default), and the roofline.

``--latency per-op`` (default) uses the calibration shipped for the GPU (kvsim/latency/calibrations/);
``--latency FILE.json`` a calibration from `kvsim calibrate`; ``--latency roofline`` the uncalibrated
roofline. ``--cpu-overhead`` picks the serving engine's CPU time per iteration (cpu.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kvsim.errors import ConfigError
from kvsim.latency.base import LatencyModel, StepShape, chunk_shape_terms, sum_affine, sum_max_of_two_affine
from kvsim.latency.cpu import CPU_PRESETS, DEFAULT_CPU, CpuOverhead, get_cpu_overhead
from kvsim.releases import release_key

__all__ = [
    "LatencyModel",
    "StepShape",
    "chunk_shape_terms",
    "sum_affine",
    "sum_max_of_two_affine",
    "CPU_PRESETS",
    "DEFAULT_CPU",
    "CpuOverhead",
    "get_cpu_overhead",
    "build_latency",
    "latency_notes",
    "describe_latency",
    "LATENCY_MODELS",
    "LatencyKind",
]


def _calibration(cfg):
    """(calibration, notes) for a config's --latency value."""
    from kvsim.latency.calibration import load_calibration, shipped_calibration

    if cfg.latency == "per-op":
        from kvsim.latency.perop import expert_quant

        experts = expert_quant(cfg.model) if cfg.model.is_moe else None
        calib, note = shipped_calibration(cfg.gpu, cfg.vllm_version, experts)
        return calib, [note] if note else []
    calib = load_calibration(cfg.latency)
    notes = []
    if calib.measured_on != "gpu":
        notes.append(
            f"warning: --latency {cfg.latency} was measured in the {calib.measured_on} (a pipeline check): "
            "its kernel times are not GPU times and every latency below is off by orders of magnitude"
        )
    if calib.gpu != cfg.gpu.name:
        notes.append(
            f"warning: --latency {cfg.latency} was calibrated on {calib.gpu}, simulating {cfg.gpu.name}: "
            f"its efficiencies are applied to {cfg.gpu.name}'s peaks, unvalidated"
        )
    return calib, notes


@dataclass(frozen=True)
class LatencyKind:
    """A named latency model (a ``--latency`` value): how a SimConfig builds it, what to tell the user about
    it, and how reports name it. A value that names none is a calibration file for the per-operation model."""

    name: str
    build: Callable[[object], LatencyModel]
    notes: Callable[[object], list[str]]
    describe: Callable[[object], str]


def _moe_backend(cfg, calib) -> str:
    """The MoE kernels that price the experts: ``--moe-backend``, or with ``auto`` the release's default where it
    differs from the newest release's and ``calib`` measured it (releases.default_moe_backend), else ``auto``
    (the calibration's own fit)."""
    if cfg.moe_backend != "auto" or not cfg.model.is_moe or cfg.latency != "per-op":
        return cfg.moe_backend
    from kvsim.latency.perop import expert_quant
    from kvsim.releases import default_moe_backend

    quant = expert_quant(cfg.model)
    backend = default_moe_backend(cfg.gpu.arch, quant, cfg.vllm_version)
    measured = calib.moe_backends.get(quant or "bf16", {})
    return backend if backend is not None and backend in measured else "auto"


def _per_op(cfg) -> LatencyModel:
    from kvsim.latency.perop import PerOpModel

    from kvsim.latency.cuda_graphs import parse_capture_sizes
    from kvsim.releases import fuses_topk

    calib, _ = _calibration(cfg)
    fused_topk = fuses_topk(cfg.vllm_version)
    backend = _moe_backend(cfg, calib)
    if backend != "auto":  # (a model without MoE layers was refused with the configuration)
        from kvsim.latency.calibration import with_moe_backend
        from kvsim.latency.perop import expert_quant

        calib = with_moe_backend(calib, backend, expert_quant(cfg.model))
    s = cfg.scheduler
    drafts = cfg.speculative.num_speculative_tokens if cfg.speculative is not None else 0
    graphs = parse_capture_sizes(
        cfg.cudagraph_capture_sizes, s.max_num_seqs, s.max_num_batched_tokens, cfg.gpu, cfg.vllm_version, drafts
    )
    cpu = get_cpu_overhead(cfg.cpu_overhead)
    if cfg.runs_async:  # scheduled while the GPU runs the step before
        cpu = cpu.overlapping()
    target = PerOpModel(
        cfg.model,
        cfg.gpu,
        calib,
        cpu,
        cfg.tp,
        cfg.interconnect,
        cfg.enable_expert_parallel,
        cfg.pp,
        cfg.dp,
        graphs,
        s.num_scheduler_steps,
        cfg.moe_routing,
        v1_kernels=cfg.vllm_engine != "v0",
        fused_topk=fused_topk,
    )
    spec = cfg.speculative
    if spec is None:
        return target
    from kvsim.latency.speculative import SpeculativeModel

    draft = spec.draft_model(cfg.model)
    if draft is not None:  # its passes run inside the step: no CPU of their own, captured in graphs as the target
        draft = PerOpModel(
            draft,
            cfg.gpu,
            calib,
            get_cpu_overhead("none"),
            cfg.tp,
            cfg.interconnect,
            cfg.enable_expert_parallel,
            1,
            cfg.dp,
            graphs,
            routing=cfg.moe_routing,
            v1_kernels=True,  # drafters run on V1 only
            fused_topk=fused_topk,
        )
    return SpeculativeModel(target, draft, spec.num_speculative_tokens, spec.tau)


def _describe_per_op(cfg) -> str:
    src = cfg.latency if cfg.latency != "per-op" else "shipped calibration"
    calib = _calibration(cfg)[0]
    backend = _moe_backend(cfg, calib)
    if cfg.vllm_version:
        aic = calib.fit.get("aic", {})
        used = aic.get("release") or aic.get("versions", {}).get("generation_attention_perf")
        src += (
            f", no per-release kernel tables (asked: vLLM {cfg.vllm_version})"
            if not used
            else f", kernels of vLLM {used}"
            + ("" if release_key(used) == release_key(cfg.vllm_version) else f" (asked: {cfg.vllm_version})")
        )
    overlap = (
        ", overlapped: async scheduling" if cfg.runs_async and cfg.cpu_overhead not in ("none", "vllm-v1-async") else ""
    )
    return (
        f"per-operation model ({src} for {cfg.gpu.name}), CPU overhead {cfg.cpu_overhead}{overlap}"
        + (f", {cfg.interconnect} all-reduce" if cfg.tp > 1 else "")
        + (
            f", expert parallel over {cfg.tp * cfg.dp} GPUs"
            if cfg.enable_expert_parallel and cfg.model.is_moe and cfg.tp * cfg.dp > 1
            else ""
        )
        + (
            f", {backend} MoE kernels" + (f" (vLLM {cfg.vllm_version}'s default)" if cfg.moe_backend == "auto" else "")
            if backend != "auto"
            else ""
        )
        + (f", {cfg.moe_routing} MoE routing" if cfg.model.is_moe else "")
        + (f", {cfg.pp} pipeline stages" if cfg.pp > 1 else "")
        + (
            f", one of {cfg.dp} data-parallel ranks"
            + ("" if cfg.enable_expert_parallel else f" (experts split over {cfg.dp * cfg.tp} GPUs)")
            if cfg.dp > 1 and cfg.model.is_moe
            else ""
        )
        + (f", {cfg.speculative.describe()}" if cfg.speculative is not None else "")
    )


def _roofline(cfg) -> LatencyModel:
    from kvsim.latency.roofline import RooflineModel

    if cfg.pp > 1:
        raise ConfigError("--latency roofline does not price pipeline stages; use the per-operation model")
    if cfg.dp > 1 and cfg.model.is_moe:
        raise ConfigError("--latency roofline does not price data-parallel MoE ranks; use the per-operation model")
    return RooflineModel(cfg.model, cfg.gpu, cfg.roofline, cfg.tp)


def _per_op_notes(cfg) -> list[str]:
    """The per-operation model's notes: where its calibration comes from, naming the MoE rows that price the
    experts (with a MoE backend picked, :func:`_moe_backend`, that backend's rows, not the default fit's), and
    what prices a quantized checkpoint's GEMMs where no table times vLLM's own kernels (:func:`_weight_only_note`)."""
    calib, notes = _calibration(cfg)
    backend = _moe_backend(cfg, calib)
    if cfg.latency == "per-op" and backend != "auto":
        from kvsim.latency.calibration import shipped_calibration
        from kvsim.latency.perop import expert_quant

        note = shipped_calibration(cfg.gpu, cfg.vllm_version, expert_quant(cfg.model), backend)[1]
        notes = [note] if note else []
    weight_only = _weight_only_note(cfg, calib)
    shape = _moe_shape_note(cfg, calib) if backend == "auto" else ""  # a backend's own fit has no shape ratios
    return notes + [n for n in (weight_only, shape, _eager_note(cfg)) if n]


def _eager_note(cfg) -> str:
    """What kvsim leaves out of a step without CUDA graphs (``--enforce-eager``, ``--cudagraph-capture-sizes
    none``): vLLM then launches every kernel from Python, which kvsim does not price."""
    from kvsim.latency.cuda_graphs import is_eager

    if cfg.latency != "per-op" or not is_eager(cfg.cudagraph_capture_sizes):
        return ""
    return (
        "warning: without CUDA graphs (--enforce-eager) vLLM launches every kernel of a step from Python; kvsim "
        "prices the kernels' GPU time and a graph-launched step's CPU overhead, so a step whose kernels run "
        "shorter than their launches (a small model, a fast GPU, few sequences) is priced fast: one linear "
        "module launched eagerly takes 55-60 us of CPU on AIConfigurator's H100 host (vLLM 0.24), several "
        "times its GPU time at decode sizes"
    )


def _moe_shape_note(cfg, calib) -> str:
    """Where the measured times of the model's expert shape come from when not from the release that prices the
    run: another release's tables (the kernel's efficiency on the shape, carried over), or none (the fitted MoE
    model alone, with its error on the shapes the tables time); empty when the release's own tables time it."""
    if cfg.latency != "per-op" or not cfg.model.is_moe:
        return ""
    from kvsim.latency.calibration import calibration_source, moe_shape_origin
    from kvsim.latency.perop import expert_quant, layer_classes
    from kvsim.releases import priced_release

    quant = expert_quant(cfg.model)
    dtype = quant or "bf16"
    if (quant is not None and quant not in calib.moe_quant) or not calib.moe_shapes.get(dtype):
        return ""  # no measured MoE kernels of its kind on this GPU (the calibration's own note says what prices it)
    chip = calibration_source(cfg.gpu)[0]
    release = priced_release(chip, cfg.vllm_version)
    keys = sorted({e.shape for _, _, e in layer_classes(cfg.model, cfg.tp, cfg.enable_expert_parallel, cfg.dp) if e})
    m = cfg.model
    where = f"{m.name}'s routed experts ({dtype}, {m.num_experts} of width {m.moe_intermediate_size}, top {m.experts_per_token})"
    for key in keys:
        origin = moe_shape_origin(chip, release, dtype, key)
        split, ep = key.split(",")[-2:]
        layout = f"split over {split} GPU(s)" + (f", spread over {ep}" if ep != "1" else "")
        if origin is None:
            return (
                f"warning: {where}, {layout}: no kernel table on {chip} times this shape; the fitted MoE model "
                "alone prices it (on the shapes the tables time it misses by 12% at the median, 50% at p90)"
            )
        if origin not in ("", release):
            return (
                f"{where}, {layout}: vLLM {release}'s tables on {chip} do not time this shape; its measured "
                f"efficiency is vLLM {origin}'s (the same kernel; carried over, 6% median error where checked)"
            )
    return ""


def _weight_only_note(cfg, calib) -> str:
    """How the dense GEMMs of weights vLLM runs through its weight-only (Marlin / Machete) or int8 kernels are
    priced, none of which a table times: TensorRT-LLM's measured kernels of the kind, or, where none was
    measured on the architecture, the bf16 fit's efficiencies (empty for other weights)."""
    from kvsim.latency.perop import quant_gemm_scheme, served_scheme

    quant = cfg.model.weight_quant
    kind = {"w4a16": "4-bit weight-only", "w8a16": "8-bit weight-only", "w8a8_int8": "int8"}
    served = served_scheme(cfg.gpu, quant) if quant else None
    if served not in kind:
        return ""
    head = f"{quant} weights on {cfg.gpu.name}: vLLM's"
    if quant_gemm_scheme(calib, cfg.gpu, quant) is not None:
        donor = calib.fit.get("weight_only", {}).get("borrowed_from")
        where = f" ({donor}'s fit, same architecture)" if donor else ""
        return (
            f"{head} {kind[served]} GEMMs, priced from TensorRT-LLM's measured kernels of the kind{where}, not "
            "vLLM's own (no table times them)"
        )
    if served == "w8a8_int8":  # int8 tensor cores at the bf16 fit's efficiencies: said in docs/latency.md only
        return ""
    return (
        f"{head} weight-only GEMMs, priced at the bf16 GEMM fit's efficiencies reading the weights' bytes (no "
        "weight-only kernel measured on this architecture)"
    )


PER_OP = LatencyKind("per-op", _per_op, _per_op_notes, _describe_per_op)
#: --latency values -> models (anything else: a calibration JSON for the per-operation model)
LATENCY_MODELS: dict[str, LatencyKind] = {
    k.name: k
    for k in (
        PER_OP,
        LatencyKind("roofline", _roofline, lambda cfg: [], lambda cfg: "roofline (uncalibrated)"),
    )
}


def _kind(cfg) -> LatencyKind:
    return LATENCY_MODELS.get(cfg.latency, PER_OP)


def build_latency(cfg) -> LatencyModel:
    """The latency model a SimConfig asks for."""
    return _kind(cfg).build(cfg)


def latency_notes(cfg) -> list[str]:
    """What a user should know about the latency model chosen (derived or foreign calibrations)."""
    notes = _kind(cfg).notes(cfg)
    if cfg.model.format_note:
        notes.insert(0, cfg.model.format_note)
    if cfg.vllm_version is not None and cfg.latency != "per-op":  # the release still decides the KV layout
        notes.insert(
            0,
            f"--vllm-version {cfg.vllm_version}: the release decides the KV cache layout; the times come "
            f"from --latency {cfg.latency}, not from that release's kernel tables",
        )
    return notes


def describe_latency(cfg) -> str:
    return _kind(cfg).describe(cfg)
