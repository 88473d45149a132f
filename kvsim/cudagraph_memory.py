"""The GPU memory vLLM sets aside for its CUDA graphs before sizing the KV cache (vLLM 0.20 and later).

From 0.20 (PR #38284; on by default, ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``) vLLM's start-up profile
captures the two largest graphs of each mode, PIECEWISE and FULL, and subtracts

    estimate = max over modes (first capture) + sum over modes (second capture x (graphs of the mode - 1))

from the KV cache (``GPUModelRunner.profile_cudagraph_memory``). Before 0.20 the graphs were captured after the KV
cache was sized, out of the memory gpu_memory_utilization leaves, so the KV cache did not pay for them.

What kvsim predicts, since the DEBUG lines with the two samples are nowhere public, from the logged totals
("Estimated CUDA graph memory: X GiB total") of public start-up logs (docs/memory.md lists them):

- each graph after the first costs ``PER_LAYER_GRAPH`` per decoder layer (its kernel nodes and their small
  workspaces: the logs scale with layers, not width). Five single-GPU logs of dense and hybrid models at the
  default grids (Qwen3-8B, Qwen2.5-7B, Qwen3.5-4B at two grids, Qwen3.5-9B) give 0.16-0.27 MiB, median 0.23;
- tensor parallelism adds its all-reduce nodes: ``TP_FACTOR`` (Qwen2.5-72B at TP4 on L40S: 0.40 MiB per
  layer-graph; Qwen3-Next-80B at TP2 on H200, vLLM 0.10.2: 0.38, its actual pool);
- the first capture holds the activations of the largest captured batch (the forward pass's peak at that many
  tokens, kvsim.activation_reserve) besides its own nodes, and with NVFP4 experts the MoE kernels' workspace,
  ``NVFP4_MOE_FIRST`` (Qwen3.6-35B-A3B-NVFP4: 0.36-0.47 GiB where one graph per mode was captured).

Against the same logs (too few to hold any out; docs/memory.md): within 1-15 % for the dense models but one
(Qwen3-8B, 42 % high); NVFP4 MoE models come out low (GLM-5.2 at TP4 by 30 %, Qwen3.6-35B-A3B at 18 graphs by
59 %): their expert kernels' per-graph cost is not modelled. On an 80 GB GPU the estimate is 1-5 % of the KV
cache, so these errors move the KV cache by well under 2 %; on a 24 GB card they matter more.

The graphs: vLLM's default mode, FULL_AND_PIECEWISE, captures a PIECEWISE graph per capture size and a FULL graph
per size up to max_num_seqs (51 and 35 at the default sizes up to 512 and 256 sequences).
"""

from __future__ import annotations

MiB = 1 << 20
GiB = 1 << 30
PER_LAYER_GRAPH = 0.23 * MiB  # per decoder layer, per graph after the first
TP_FACTOR = 1.75  # tensor-parallel ranks: the all-reduces in every graph
NVFP4_MOE_FIRST = 0.35 * GiB  # a model with NVFP4 experts: the first capture's MoE workspace


def graph_counts(capture_sizes: tuple[int, ...], max_num_seqs: int) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs vLLM's default FULL_AND_PIECEWISE mode captures for these sizes (tokens)."""
    return len(capture_sizes), sum(1 for s in capture_sizes if s <= max_num_seqs)


def cudagraph_estimate_bytes(model, tp: int, capture_sizes: tuple[int, ...], max_num_seqs: int) -> float:
    """Bytes vLLM 0.20+ subtracts from one GPU's KV cache for the CUDA graphs of ``model`` on one of ``tp`` ranks
    (module docstring); 0 without capture sizes (eager)."""
    if not capture_sizes:
        return 0.0
    from kvsim.activation_reserve import forward_peak_bytes

    pw, full = graph_counts(capture_sizes, max_num_seqs)
    per_graph = PER_LAYER_GRAPH * model.layers * (TP_FACTOR if tp > 1 else 1.0)
    nvfp4 = model.is_moe and model.expert_weight_dtype == "nvfp4"
    first = forward_peak_bytes(model, tp, max(capture_sizes)) + (NVFP4_MOE_FIRST if nvfp4 else 0.0)
    return first + per_graph * (pw + full - 1)
