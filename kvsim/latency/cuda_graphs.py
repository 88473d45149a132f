"""CUDA-graph capture sizes: the token counts vLLM captures graphs for at start-up, whose padding every
step of at most the largest pays (``--cudagraph-capture-sizes``).

vLLM V1 rounds a step's scheduled tokens up to the next captured size (``GPUModelRunner`` pads the input
batch; a pure-decode step replays a full graph, a mixed one piecewise graphs with attention outside them)
and runs larger steps eagerly. The default list (``VllmConfig._set_cudagraph_sizes``, vLLM 0.11.1 and later,
PR #26016): ``[1, 2, 4]``, every 8 up to 255, every 16 from 256, up to ``min(2 x max_num_seqs, 512)`` capped
at ``max_num_batched_tokens`` (from 0.28 up to 1,024 on B200 and B300: :func:`vllm_capture_sizes`). (0.10: every 8 up to the same maximum; up to 0.9: every 8 up to 512.) The
padding tokens go through the dense layers and all-reduces; attention skips them.
"""

from __future__ import annotations

from kvsim.errors import ConfigError


BUDGET_CAPTURED_FROM = "0.27.0"  # (oldest release read) the budget captured if it is the limit; x (1 + drafts)
BLACKWELL_1024_FROM = "0.28.0"  # data-center Blackwell (B200, B300: compute capability 10.x) up to 1,024 tokens


def vllm_capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    gpu=None,
    vllm_version: str | None = None,
    draft_tokens: int = 0,
) -> tuple[int, ...]:
    """vLLM's default capture sizes (tokens) for an engine with these limits on ``gpu`` (a GpuSpec) with release
    ``vllm_version`` (``VllmConfig._set_cudagraph_sizes``): up to ``min(2 x max_num_seqs, 512)`` tokens, capped
    at the token budget; from 0.27 (the oldest release read for this) the maximum counts each sequence's
    verified draft tokens (``2 x max_num_seqs x (1 + drafts)``) and the budget itself is captured when it is the
    limit; from 0.28 data-center Blackwell GPUs capture up to 1,024 tokens."""
    from kvsim.releases import at_least

    newer = at_least(vllm_version, BUDGET_CAPTURED_FROM)
    ceiling = 512
    if gpu is not None and at_least(vllm_version, BLACKWELL_1024_FROM) and is_datacenter_blackwell(gpu):
        ceiling = 1024
    top = min(2 * max_num_seqs * (1 + draft_tokens if newer else 1), ceiling, max_num_batched_tokens)
    sizes = sizes_up_to(top)
    if newer and top == max_num_batched_tokens and top not in sizes:
        sizes += (top,)
    return sizes


def is_datacenter_blackwell(gpu) -> bool:
    """B200, GB200, B300, GB300 (compute capability 10.x; the RTX Blackwell cards, 12.x, have no NVLink)."""
    return gpu.arch == "blackwell" and gpu.nvlink_gpus > 1


def sizes_up_to(top: int) -> tuple[int, ...]:
    """vLLM's capture sizes up to ``top`` tokens (its ``max_cudagraph_capture_size``): 1, 2, 4, every 8 below
    256, every 16 from 256."""
    sizes = [s for s in (1, 2, 4) if s <= top]
    sizes += range(8, min(top + 1, 256), 8)
    sizes += range(256, top + 1, 16)
    return tuple(sizes)


def parse_capture_sizes(
    value: str,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    gpu=None,
    vllm_version: str | None = None,
    draft_tokens: int = 0,
) -> tuple[int, ...]:
    """``vllm`` (its default list, :func:`vllm_capture_sizes`), ``none`` (eager: no padding) or a comma-separated
    list of token counts (those above the token budget dropped: no step reaches them, and vLLM caps its sizes
    there too)."""
    v = value.strip().lower()
    if v == "vllm":
        return vllm_capture_sizes(max_num_seqs, max_num_batched_tokens, gpu, vllm_version, draft_tokens)
    problem = capture_sizes_rule(value)
    if problem:
        raise ConfigError(f"--cudagraph-capture-sizes: {problem}")
    return tuple(s for s in _listed(v) if s <= max_num_batched_tokens)


EAGER = ("none", "eager", "")  # --cudagraph-capture-sizes values that capture no graph


def is_eager(value: str) -> bool:
    """Whether a ``--cudagraph-capture-sizes`` value captures no graph (vLLM's ``--enforce-eager``)."""
    return value.strip().lower() in EAGER


def _listed(v: str) -> tuple[int, ...]:
    """The sizes of a comma-separated list, ascending, each once (none for ``none`` / ``eager``)."""
    return () if v in EAGER else tuple(sorted({int(x) for x in v.split(",") if x.strip()}))


def capture_sizes_rule(value) -> str | None:
    """What is wrong with a ``--cudagraph-capture-sizes`` value, or None (the options table's check)."""
    v = str(value).strip().lower()
    if v == "vllm":
        return None
    try:
        sizes = _listed(v)
    except ValueError:
        return f"'{value}' is not vllm, none or a list of token counts such as 1,2,4,8,16"
    if v not in EAGER and (not sizes or sizes[0] < 1):
        return f"sizes must be positive token counts, got '{value}'"
    return None
