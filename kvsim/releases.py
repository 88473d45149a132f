"""What the vLLM release a user serves with (``--vllm-version``) changes: the kernels that time a run, and
the KV layout vLLM picks by default for models with chunked local attention.

**Kernels.**
The shipped calibrations are fitted on kernel tables measured with several vLLM releases (NVIDIA
AIConfigurator's: vLLM 0.14-0.24 on A100, H100 and B200). ``<chip>.json`` holds the newest release's fit;
``vllm/<chip>-<release>.json`` the earlier ones, each fitted on that release's tables over the newest
calibration (whose values stay where a release has no table of its own). ``vllm-releases.json`` maps each
chip's releases to their calibration file; a release the data covers by reusing another's tables (the
data's own reuse notes) maps to that release's fit.

A release asked for that was not measured runs the kernels of the newest measured release before it
(kernels change when a release changes them; between measurements they are assumed not to).

**The hybrid KV cache manager and chunked attention.** vLLM turned its hybrid manager off by default for
models with chunked local attention (Llama 4) in PR #21761 (merged 2025-07-28: a 2 ms per-step latency
regression from building the chunked groups' attention metadata three times), so every attention layer
kept every token, until PR #29627 (merged 2025-12-16) cached that metadata and turned it back on
(``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` now defaults to 1). Releases 0.10 to 0.12 ran
those models without it (the edges, 0.10.0 released days before the first PR and 0.13.0 days after the
second, are the least certain). kvsim's default allocator for a fleet follows (:func:`hybrid_manager_on`).
Sliding-window and mamba models are not affected.

**The "GPU KV cache size" line** of vLLM's start-up log: up to 0.19 it is the pool's blocks divided by
the number of KV cache groups times the smallest block size (vLLM issue #40691, on 0.19.0: for hybrid
models it does not match the logged concurrency); later releases print concurrency x max_model_len
(PRs #38364 / #40694, 2026; :func:`kv_size_from_concurrency`). The first release with the new line is
assumed to be 0.20.

**Async scheduling** (the engine schedules step N+1 while step N runs on the GPU, vLLM PR #19970) became the
default in vLLM 0.14.0 (PR #27614; release notes, January 2026: "Async scheduling is now enabled by default",
except pipeline parallelism and drafters other than EAGLE/MTP). Pipeline parallelism runs with it from 0.15
(PR #32359, merged 2026-01, after 0.14 was cut; vLLM advisory GHSA-v97p-wpxp-px84 describes 0.16-0.20 running
async scheduling with pipeline stages unless told ``--no-async-scheduling``). :func:`async_scheduling_default`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SHIPPED = Path(__file__).parent / "latency" / "calibrations"
RELEASES_DIR = SHIPPED / "vllm"  # calibrations of earlier vLLM releases
RELEASES_INDEX = "vllm-releases.json"  # in SHIPPED: {"releases": {chip: {release: file relative to SHIPPED}}}
# major.minor[.patch[.post]] and a tag: 0.19, 0.10.1.1, 0.19.1rc1, 0.6.1.post1, 0.11.0+cu128
_RELEASE = re.compile(r"v?\d+\.\d+(?:\.\d+){0,2}(?:[.+-]?[A-Za-z][A-Za-z0-9.+-]*)?")


def at_least(vllm_version: str | None, first: str) -> bool:
    """Whether release ``vllm_version`` is ``first`` or later (False when no release is given)."""
    return vllm_version is not None and release_key(vllm_version) >= release_key(first)


def current_or_at_least(vllm_version: str | None, first: str) -> bool:
    """Whether release ``vllm_version`` is ``first`` or later, no release given meaning a current one."""
    return vllm_version is None or at_least(vllm_version, first)


def release_key(v: str) -> tuple[int, ...]:
    """A release name's leading dotted numbers, padded to three: 0.19 = 0.19.0 = v0.19; 0.1.dev5 = 0.1."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", v.strip())
    nums = tuple(int(x) for x in m.group(1).split(".")) if m else ()
    return nums + (0,) * (3 - len(nums))


def vllm_version_rule(value) -> str | None:
    """What is wrong with a ``--vllm-version`` value, or None (the options table's check)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _RELEASE.fullmatch(value.strip()):
        return f"expected a vLLM release such as 0.19, 0.19.1 or v0.10.1.1, got {value!r}"
    return None


@lru_cache(maxsize=1)
def vllm_releases() -> dict[str, dict[str, str]]:
    """{chip: {vLLM release: calibration file relative to the shipped folder}}: the releases whose kernel
    tables the shipped calibrations were fitted on."""
    from kvsim.files import read_json_object

    path = SHIPPED / RELEASES_INDEX
    return read_json_object(path, str(path)).get("releases", {}) if path.exists() else {}


def release_calibration(chip: str, vllm_version: str | None) -> tuple[Path | None, str]:
    """(calibration file, note) for the kernels of vLLM ``vllm_version`` on ``chip``: the newest release
    measured at or before it; the oldest measured, with a warning, when it is older than all; None (the
    chip's one calibration) when not asked, or when nothing per release was measured on the chip (the note
    then says so)."""
    if vllm_version is None:
        return None, ""
    known = vllm_releases().get(chip)
    if not known:
        return None, (
            f"warning: --vllm-version {vllm_version}: no per-release kernel tables for {chip}; its one "
            "calibration is used"
        )
    order = sorted(known, key=release_key)
    asked = release_key(vllm_version)
    at_or_before = [r for r in order if release_key(r) <= asked]
    if at_or_before:
        rel = at_or_before[-1]
        note = (
            ""
            if release_key(rel) == asked
            else f"--vllm-version {vllm_version}: kernels of vLLM {rel} on {chip}, the newest release measured before it"
        )
    else:
        rel = order[0]
        note = (
            f"warning: --vllm-version {vllm_version}: no kernel tables of a release that old for {chip}; "
            f"vLLM {rel}'s, the oldest measured, are used"
        )
    return SHIPPED / known[rel], note


def chosen_release(chip: str, vllm_version: str | None) -> str | None:
    """The measured release whose kernels price ``vllm_version`` on ``chip`` (:func:`release_calibration`), or
    None when none is asked or nothing per release was measured on the chip."""
    known = vllm_releases().get(chip)
    if vllm_version is None or not known:
        return None
    order = sorted(known, key=release_key)
    before = [r for r in order if release_key(r) <= release_key(vllm_version)]
    return before[-1] if before else order[0]


def newest_release(chip: str) -> str | None:
    """The newest release measured on ``chip`` (None: nothing per release was measured there)."""
    known = vllm_releases().get(chip)
    return max(known, key=release_key) if known else None


def priced_release(chip: str, vllm_version: str | None) -> str | None:
    """The measured release whose kernels price a run of ``vllm_version`` on ``chip``: :func:`chosen_release`, or
    with no release asked the newest (None: nothing per release was measured there)."""
    return chosen_release(chip, vllm_version) or newest_release(chip)


@dataclass(frozen=True)
class KernelMismatch:
    """A measured release's table that times another kernel than the one vLLM's default path runs for an op (so
    the release must not price that op with it)."""

    chip: str
    release: str  # the measured release whose table is the wrong kernel
    group: tuple[str, str]  # calibration attribute and key it fills
    op: str  # what it prices, for notes
    why: str  # what the table times instead, completing "<release>'s table ..."


# Known cases, from the tables' kernel_source column: B200's vLLM 0.19 MoE table times MXFP4 experts with
# vllm_mxfp4_moe, whereas gpt-oss's MXFP4 experts run on FlashInfer's TRT-LLM MXFP4 kernels on Blackwell (vLLM's
# default there since 0.10.2; 0.24's table times them: vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16); priced
# with 0.19's rows, gpt-oss-120b's TPOT on B200 came out 2x and its TTFT 12.8x a vLLM 0.15 run's.
KERNEL_MISMATCHES: tuple[KernelMismatch, ...] = (
    KernelMismatch(
        "b200",
        "0.19.0",
        ("moe_quant", "mxfp4"),
        "MXFP4 MoE",
        "times vllm_mxfp4_moe, not the FlashInfer TRT-LLM MXFP4 kernels vLLM runs gpt-oss's experts with on Blackwell",
    ),
    KernelMismatch("b200", "0.19.0", ("moe_backends", "mxfp4"), "MXFP4 MoE by --moe-backend", "as above"),
)
# INT4 (W4A16) experts: the tables of 0.18-0.22 labelled vllm_marlin_int4_moe were collected through vLLM's
# fused_experts with an int4_w4a16 quant config on uint8-packed weights, which runs the Triton / moe_wna16
# kernels, not Marlin (its 0.14 collector repacked with gptq_marlin_moe_repack and called fused_marlin_moe; the
# label says Marlin);
# compressed-tensors W4A16 checkpoints (Kimi-K2/K2.5) are served by CompressedTensorsWNA16MarlinMoEMethod
# (fused_marlin_moe), which the 0.14 (vllm_marlin_moe) and 0.24 (..._marlinexperts) tables time. Kimi-K2.5's
# MoE layer at tp 8 comes out 2.3-3.5x slower in those tables than in 0.14's and 0.24's on H100, H200 and B200
# alike (AIConfigurator's collector/vllm/collect_moe.py before its 0.24 upgrade, d5bad971c).
_TRITON_INT4 = (
    "times vLLM's Triton W4A16 MoE kernels (vllm_marlin_int4_moe rows), not the Marlin MoE kernels it serves INT4"
    " experts with"
)
KERNEL_MISMATCHES += tuple(
    KernelMismatch(chip, release, (group, "int4"), op, _TRITON_INT4)
    for chip, release in (
        ("h100-80gb", "0.19.0"),
        ("h200-141gb", "0.18.0"),
        ("h200-141gb", "0.19.0"),
        ("b200", "0.19.0"),
        ("b300", "0.19.0"),
        ("gb200", "0.19.0"),
        ("gb300", "0.19.0"),
        ("rtx-pro-6000", "0.19.0"),
        ("l40s", "0.22.0"),
    )
    for group, op in (("moe_quant", "INT4 MoE"), ("moe_backends", "INT4 MoE by --moe-backend"))
)
# FP8 experts on Blackwell: every table before 0.24 times them with Triton's fused MoE (vllm_fused_moe, collected
# through fused_experts), which vLLM does not run there unless told: up to 0.14 its get_fp8_moe_backend took
# DeepGEMM, then CUTLASS's block-scaled grouped GEMM, for block FP8 on SM100; from 0.15 its FP8 MoE oracle (PR
# #32414, January 2026) tries FlashInfer's TRT-LLM and CUTLASS kernels first there (Hopper keeps Triton for block
# FP8 under tensor parallelism, as its tables time). 0.24's tables time FlashInfer's TRT-LLM kernels, the only one
# of those measured. --moe-backend triton keeps the release's own Triton rows.
_TRITON_FP8_BLACKWELL = (
    "times Triton's fused MoE (vllm_fused_moe rows), which vLLM does not run FP8 experts with on Blackwell"
)
KERNEL_MISMATCHES += tuple(
    KernelMismatch(chip, release, ("moe_quant", "fp8"), "FP8 MoE", _TRITON_FP8_BLACKWELL)
    for chip, release in (
        ("b200", "0.19.0"),
        ("b200", "0.22.0"),
        ("b300", "0.19.0"),
        ("gb200", "0.14.0"),
        ("gb200", "0.19.0"),
        ("gb200", "0.22.0"),
        ("gb300", "0.14.0"),
        ("gb300", "0.19.0"),
    )
)


def kernel_mismatches(chip: str, release: str | None) -> list[KernelMismatch]:
    """The ops whose ``release`` table on ``chip`` times another kernel than vLLM runs (:data:`KERNEL_MISMATCHES`)."""
    if release is None:
        return []
    return [m for m in KERNEL_MISMATCHES if m.chip == chip and release_key(m.release) == release_key(release)]


# vLLM on Hopper runs MXFP4 experts (gpt-oss) with OpenAI's Triton kernels (matmul_ogs) when the triton_kernels
# package is importable, else with Marlin (mxfp4.py's get_mxfp4_backend). triton_kernels became a dependency of
# vLLM in PR #27370 (merged 2025-10-22, first released in 0.11.1: "users have to install triton_kernels manually",
# vLLM issue #26582 on 0.11.0), so 0.10.x and 0.11.0 served gpt-oss on Hopper through Marlin unless told otherwise.
MXFP4_TRITON_ON_HOPPER_FROM = "0.11.1"


# vLLM PR #26717 (opened 2025-10-13, after 0.11.0 was cut): the MoE router's top-k selection became one kernel that
# reads the bf16 logits and renormalizes inside; before it, a cast of the logits to fp32, topk_softmax, and a sum and
# a division to renormalize (its GPU trace: 10.4 -> 4.0 us per layer).
FUSED_TOPK_FROM = "0.11.1"


def fuses_topk(vllm_version: str | None) -> bool:
    """Whether vLLM ``vllm_version`` selects a MoE token's experts in one kernel (PR #26717; no release given: a
    current one)."""
    return current_or_at_least(vllm_version, FUSED_TOPK_FROM)


def default_moe_backend(arch: str, expert_quant: str | None, vllm_version: str | None) -> str | None:
    """The MoE kernels vLLM ``vllm_version`` runs by default where kvsim's newest-release pricing would be wrong, or
    None (the calibration's own, as fitted): Marlin for MXFP4 experts on Hopper before 0.11.1."""
    hopper_mxfp4 = expert_quant == "mxfp4" and arch == "hopper"
    if hopper_mxfp4 and vllm_version is not None and not at_least(vllm_version, MXFP4_TRITON_ON_HOPPER_FROM):
        return "marlin"
    return None


# vLLM PR #38284: default --gpu-memory-utilization 0.90 -> 0.92 and the CUDA-graph memory estimate subtracted, both
# announced for 0.21 but already in the 0.20.0 wheel (its envs.py defaults VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
# to "1", its cache.py gpu_memory_utilization to 0.92; 0.19.1 has "0" and 0.9)
UTILIZATION_092_FROM = "0.20.0"


def default_gpu_memory_utilization(vllm_version: str | None, default: float) -> float:
    """vLLM's default --gpu-memory-utilization for ``vllm_version``: 0.92 from 0.20 (PR #38284, which also made its
    start-up profile subtract an estimate of the CUDA graphs' memory: :func:`subtracts_cudagraph_estimate`), else
    ``default`` (0.90; also when no release is given: the start-up logs kvsim's pool sizing was checked against
    are of 0.10-0.11)."""
    if at_least(vllm_version, UTILIZATION_092_FROM):
        return 0.92
    return default


def subtracts_cudagraph_estimate(vllm_version: str | None) -> bool:
    """Whether vLLM ``vllm_version``'s start-up profile subtracts its CUDA graphs' estimated memory from the KV
    cache (from 0.20, PR #38284: kvsim/cudagraph_memory.py); not when no release is given (the start-up logs the
    pool sizing was checked against are of 0.10-0.11)."""
    return at_least(vllm_version, UTILIZATION_092_FROM)


# [first, last) releases that ran models with chunked local attention without the hybrid KV cache manager
CHUNKED_WITHOUT_HYBRID_MANAGER = ("0.10.0", "0.13.0")


def hybrid_manager_on(model, vllm_version: str | None) -> bool:
    """Whether vLLM ``vllm_version`` (None: a current release) serves ``model`` with its hybrid KV cache manager
    by default, each kind of layer keeping only what it attends to; off, every attention layer keeps every
    token (kvsim's ``naive`` layout). Only models whose layers differ have a choice."""
    if not model.is_hybrid or vllm_version is None:
        return model.is_hybrid
    lo, hi = (release_key(v) for v in CHUNKED_WITHOUT_HYBRID_MANAGER)
    chunked = "chunked" in model.layer_types
    return not (chunked and lo <= release_key(vllm_version) < hi)


KV_SIZE_FROM_CONCURRENCY = "0.20.0"  # the first release whose "GPU KV cache size" is concurrency x max_model_len


def kv_size_from_concurrency(vllm_version: str | None) -> bool:
    """Whether vLLM ``vllm_version`` (None: a current release) logs its KV cache size as maximum concurrency x
    max_model_len (else: blocks // KV cache groups x the smallest block size)."""
    return current_or_at_least(vllm_version, KV_SIZE_FROM_CONCURRENCY)


CHECKPOINT_KV_DTYPE_FROM = "0.14.0"  # the first release whose KV cache follows the checkpoint's (PR #30785)


def follows_checkpoint_kv_dtype(vllm_version: str | None) -> bool:
    """Whether vLLM ``vllm_version`` (None: a current release) stores the KV cache in the format a checkpoint
    declares (ModelOpt ``kv_cache_quant_algo``, compressed-tensors ``kv_cache_scheme``) when ``--kv-cache-dtype``
    is ``auto``: from 0.14 (PR #29980, merged 2025-12-10 and reverted, landed again as PR #30785 after 0.13.0 was
    cut: 0.13.0's source still resolves auto to the model's dtype, 0.14.0's to the checkpoint's); earlier
    releases loaded the checkpoint's KV scales but kept the cache in the model's dtype unless told
    ``--kv-cache-dtype fp8``."""
    return current_or_at_least(vllm_version, CHECKPOINT_KV_DTYPE_FROM)


MARLIN_WHEN_NAMED_FROM = "0.24.0"  # the first release that runs AWQ / GPTQ through Marlin when the flag names them


def legacy_int4_kernels(vllm_version: str | None, quantization: str | None) -> bool:
    """Whether vLLM ``vllm_version`` runs an AWQ or GPTQ checkpoint through its plain AWQ / GPTQ (ExLlama)
    kernels: up to 0.23 when ``--quantization`` names ``awq`` or ``gptq`` (``awq_marlin.py`` /
    ``gptq_marlin.py``: "you specified quantization=awq explicitly, so forcing awq"); without the flag, with
    ``awq_marlin`` / ``gptq_marlin``, and from 0.24 (``auto_awq.py`` / ``auto_gptq.py`` take all four names) Marlin
    runs them."""
    return quantization in ("awq", "gptq") and not current_or_at_least(vllm_version, MARLIN_WHEN_NAMED_FROM)


STREAM_INTERVAL_FROM = "0.11.1"  # the first release with --stream-interval (PR #27869; 0.11.0 streams every token)


def has_stream_interval(vllm_version: str | None) -> bool:
    """Does the release take ``--stream-interval`` (send a request's tokens in chunks of N after the first)?"""
    return current_or_at_least(vllm_version, STREAM_INTERVAL_FROM)


ASYNC_SCHEDULING_FROM = "0.14.0"  # the first release that schedules one step ahead by default (PR #27614)
ASYNC_WITH_PIPELINE_FROM = "0.15.0"  # ... and with pipeline stages (PR #32359)
ASYNC_DRAFTERS = ("eagle", "eagle3", "mtp")  # drafters async scheduling runs with (PR #31998; others turn it off)


def async_scheduling_default(vllm_version: str | None, pipeline_stages: int = 1, drafter: str | None = None) -> bool:
    """Whether a V1 engine of vLLM ``vllm_version`` (None: a current release) schedules one step ahead when not
    told (``--async-scheduling``), with these pipeline stages and this speculative drafter (None: none)."""
    v = release_key(vllm_version) if vllm_version is not None else None
    if v is not None and v < release_key(ASYNC_SCHEDULING_FROM):
        return False
    if pipeline_stages > 1 and v is not None and v < release_key(ASYNC_WITH_PIPELINE_FROM):
        return False
    return drafter is None or drafter in ASYNC_DRAFTERS
