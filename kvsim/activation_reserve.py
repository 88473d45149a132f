"""The GPU memory vLLM keeps from the KV cache besides the weights, as its start-up profile finds it
(``--activation-reserve vllm``).

vLLM V1 sizes the KV cache as total memory x gpu_memory_utilization - weights - the peak PyTorch memory of a
profile run - non-torch memory (NCCL and custom all-reduce buffers, cuBLAS workspaces). The profile run is a
forward pass of max_num_batched_tokens dummy tokens, then a sampler run over max_num_seqs rows of full-vocabulary
logits (top-k / top-p on, so the logits are sorted); the peak is the larger of the two. Fitted on public vLLM
0.10-0.11 start-up logs that print the profile's parts (DEBUG "torch peak memory increase" / INFO "Actual
usage is ... for peak activation"; docs/memory.md lists them):

- the sampler run holds SAMPLER_BYTES_PER_LOGIT bytes per (row, vocabulary entry): fp32 logits, their scaled
  copy, probabilities, sorted values and int64 indices, cumulative sums. Five H100 logs (Llama-3.1-8B,
  Llama-3.3-70B FP8 at TP2, Qwen3-0.6B, Qwen3-32B at TP1 and TP2, gpt-oss) give 38.4-39.6 bytes, median 38.9;
  held out, five others on H200, L40S, A100, a 24 GB card and a B200 (Qwen3-Next-80B, Qwen3-235B FP8, Qwen3-8B
  FP8, Qwen2.5-Omni-7B, Gemma-3-4B) come out at 0.97-1.01 of their logged peaks. Every rank samples from
  the whole vocabulary (tensor-parallel logits are gathered), so the run does not shrink with TP.
- the forward pass holds, per token, its MLP's gate-up output and activation (3 x intermediate / TP) and a few
  hidden-state copies (4 x hidden), in the model's dtype (a MoE layer: its routed copies' expert width): one
  log (LLaVA-1.6-Mistral-7B at 16,384 tokens) measures 1.97 GiB against 1.81 predicted.
- non-torch memory: 0.13 GiB on one GPU; each further tensor-parallel rank on NVLink adds about 0.6 GiB (H100
  logs: 0.54-0.55 at TP2, 1.84 at TP4), on PCIe cards about 0.05.

Not counted: the CUDA graphs' memory, which vLLM subtracts from the KV cache only from 0.20 on (0.2-0.7 GiB
logged for 7-8B models, more for MoE models), and anything a build with the FlashInfer sampler saves (one log
of a modified build, Llama-3.2-1B at 256 sequences, peaked at 0.45 GiB where this predicts 1.19).
"""

from __future__ import annotations

GiB = 1 << 30
SAMPLER_BYTES_PER_LOGIT = 38.9  # bytes per (sequence, vocabulary entry) at the sampler's peak
NON_TORCH_BYTES = 0.13 * GiB  # one GPU: CUDA and cuBLAS workspaces outside PyTorch's allocator
NVLINK_RANK_BYTES = 0.6 * GiB  # each further tensor-parallel rank on NVLink (NCCL and custom all-reduce buffers)
PCIE_RANK_BYTES = 0.05 * GiB


def sampler_peak_bytes(model, max_num_seqs: int) -> float:
    """Peak bytes of vLLM's dummy sampler run over ``max_num_seqs`` rows of the whole vocabulary."""
    return SAMPLER_BYTES_PER_LOGIT * max_num_seqs * model.vocab_size


def forward_peak_bytes(model, tp: int, tokens: int) -> float:
    """Peak activation bytes of a forward pass of ``tokens`` tokens on one of ``tp`` ranks."""
    width = model.intermediate_size
    if model.is_moe and all(model.moe_mask):  # every FFN routes: each token's copies through the experts' width
        width = model.experts_per_token * model.moe_intermediate_size
    return tokens * (3 * width / tp + 4 * model.hidden_size) * model.dtype_bytes


def non_torch_bytes(gpu, tp: int) -> float:
    """Bytes outside PyTorch's allocator on one of ``tp`` ranks: the buffers of each NVLink peer within the GPU's
    NVLink domain (``gpu.nvlink_gpus``: 8 in an HGX node; ranks beyond it are reached over the network, priced as
    PCIe peers: an assumption, no log)."""
    if not gpu.nvlink:
        return NON_TORCH_BYTES + (tp - 1) * PCIE_RANK_BYTES
    peers = min(tp, gpu.nvlink_gpus) - 1
    return NON_TORCH_BYTES + peers * NVLINK_RANK_BYTES + (tp - 1 - peers) * PCIE_RANK_BYTES


def vllm_reserve_parts(model, gpu, tp: int, max_num_seqs: int, max_num_batched_tokens: int) -> tuple[float, ...]:
    """(sampler peak, forward peak, non-torch) bytes of vLLM's start-up profile on one GPU (module docstring)."""
    return (
        sampler_peak_bytes(model, max_num_seqs),
        forward_peak_bytes(model, tp, max_num_batched_tokens),
        non_torch_bytes(gpu, tp),
    )


def vllm_reserve_bytes(model, gpu, tp: int, max_num_seqs: int, max_num_batched_tokens: int) -> float:
    """Bytes vLLM's start-up profile keeps from the KV cache on one GPU: the larger of the sampler's and the
    forward pass's peaks, plus non-torch memory."""
    sampler, forward, non_torch = vllm_reserve_parts(model, gpu, tp, max_num_seqs, max_num_batched_tokens)
    return max(sampler, forward) + non_torch
