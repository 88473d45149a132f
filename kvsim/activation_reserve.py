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
  logs: 0.54-0.55 at TP2, 1.84 at TP4), on PCIe cards about 0.05. From vLLM 0.18 one GPU keeps 0.25 GiB, and
  from 0.19 a tensor-parallel group on NVLink one set of buffers (NON_TORCH_FROM, NVLINK_GROUP_FROM).

The sampler run's peak follows the release's sampler (read from vLLM's wheels 0.10-0.34; :func:`sampler_bytes`):
up to 0.16 PyTorch's sort of the full logits (the bf16 logits, their fp32 copy, sorted values and int64 indices,
the sort's index and spare key/value buffers: 38 bytes per entry, as fitted; 50 below 128 rows, where PyTorch
sorts another way), except where FlashInfer's sampler runs (--flashinfer-sampler; up to 0.11.0 wherever flashinfer
is installed, as in vLLM's Docker image): 14 bytes per entry (a Mistral-Small-3.2 log of the v0.11.0 image peaked
at 2.12 GiB over 1,024 rows, at most 16.9 bytes); from 0.17 a Triton top-k/top-p kernel that works in place (PR #33538) and from 0.21
FlashInfer's sampling kernels (PR #40376): 14 bytes per entry (logits, fp32 copy, softmax, output), plus the
Triton kernel's buffer of one row per SM; vLLM's V2 model runner (the default for Qwen3 dense models from 0.22,
Llama and Mistral from 0.23, dense models without recurrent or MoE layers from 0.25, every model from 0.29)
skips top-k/top-p in its dummy run until 0.33: 6 bytes per entry, 2 where it also skips the fp32 copy (0.26,
0.28-0.32). None of these was measured here: one log agrees (Qwen3-8B on an A100-40GB, vLLM 0.19.1, peaked at
0.78 GiB, its forward pass's, where 38.9 bytes per entry would keep 1.41 GiB); one disagrees (Qwen2.5-7B on an
L40S, 0.22, keeps about 0.9 GiB more than either peak; its --max-num-seqs is not in the log).

From 0.27 vLLM sizes the KV cache by what the instance consumed since start-up (mem_get_info) plus the profile's
transient peak, so the model runner's persistent buffers count too: on the V2 runner its sampler's penalty state
and structured-output bitmask, ``max_num_seqs`` x (vocabulary x 4.25 + 17,960) bytes (:func:`runner_buffer_bytes`). Four public logs of 0.28-0.31 (docs/
memory.md) still keep 0.4-2 GiB more than kvsim: a larger transient peak than the forward pass and sampler explain
(Llama-3.1-8B on an A100, 0.31: 1.44 GiB logged with the graphs' estimate, 0.90 kvsim), and with AWQ/GPTQ (Marlin
repacking) 0.9-1.7 GiB more consumed than the checkpoint's weights; neither is modelled.

The CUDA graphs' memory, which vLLM subtracts from the KV cache from 0.20 on, is kvsim/cudagraph_memory.py's.
"""

from __future__ import annotations

from typing import NamedTuple

from kvsim.releases import at_least

GiB = 1 << 30
SAMPLER_BYTES_PER_LOGIT = 38.9  # bytes per (sequence, vocabulary entry) at the sampler's peak
NON_TORCH_BYTES = 0.13 * GiB  # one GPU: CUDA and cuBLAS workspaces outside PyTorch's allocator
NVLINK_RANK_BYTES = 0.6 * GiB  # each further tensor-parallel rank on NVLink (NCCL and custom all-reduce buffers)
PCIE_RANK_BYTES = 0.05 * GiB


SORT_FEW_ROWS_BYTES = 50.0  # the sort below 128 rows (PyTorch's full-sort path: two more index buffers)
IN_PLACE_BYTES = 14.0  # Triton / FlashInfer top-k/top-p: logits, fp32 copy, softmax, output
V2_BYTES = 6.0  # V2 runner's dummy run without top-k/top-p: logits and their fp32 copy
V2_NO_COPY_BYTES = 2.0  # ... and without the copy
# FlashInfer's top-k/top-p (--flashinfer-sampler; VLLM_USE_FLASHINFER_SAMPLER=1): logits, fp32 copy, masked logits,
# probabilities (IN_PLACE_BYTES). vLLM takes it by default from 0.21 (PR #40376); before 0.11.1 (PR #26859 made it
# opt-in) wherever flashinfer imports, as in the official Docker image (flashinfer issue #1180: 0.9.1's image logs
# "Using FlashInfer"), but a plain `pip install vllm` of those releases has none and sorts, as the public start-up
# logs kvsim is checked on do (gpt-oss-120b on one H100, 0.10.1, failing to start): the default there.
FLASHINFER_DEFAULT_FROM = "0.21.0"


def v2_runner_default(model, release: str | None) -> bool:
    """Whether vLLM ``release`` runs ``model`` on its V2 model runner by default (PR #39337 and after): Qwen3 dense
    models from 0.22, Llama and Mistral from 0.23, dense models without recurrent or MoE layers from 0.25, every
    model from 0.29."""
    if not at_least(release, "0.22.0"):
        return False
    if at_least(release, "0.29.0"):
        return True
    dense = not model.is_moe and not model.is_hybrid
    name = model.name.lower()
    if at_least(release, "0.25.0"):
        return dense
    if at_least(release, "0.23.0") and dense and ("llama" in name or "mistral" in name):
        return True
    return dense and name.startswith("qwen3")


def sampler_bytes(model, rows: int, release: str | None, flashinfer: bool | None = None) -> float:
    """Bytes per (row, vocabulary entry) at the peak of vLLM ``release``'s dummy sampler run over ``rows`` rows
    (None: the sort of 0.10-0.11, whose logs the reserve was fitted on; module docstring); ``flashinfer``: it
    samples with FlashInfer (None: as the release does by default)."""
    if at_least(release, "0.33.0"):
        return IN_PLACE_BYTES
    if v2_runner_default(model, release):
        no_copy = at_least(release, "0.28.0") or (at_least(release, "0.26.0") and not at_least(release, "0.27.0"))
        return V2_NO_COPY_BYTES if no_copy else V2_BYTES
    if flashinfer:
        return IN_PLACE_BYTES
    sort = SAMPLER_BYTES_PER_LOGIT if rows >= 128 else SORT_FEW_ROWS_BYTES
    if not at_least(release, "0.17.0") or (rows < 8 and not at_least(release, "0.21.0")):
        return sort  # (the Triton kernel takes 8 rows or more)
    return IN_PLACE_BYTES


def sampler_peak_bytes(
    model, max_num_seqs: int, release: str | None = None, sms: int = 0, flashinfer: bool | None = None
) -> float:
    """Peak bytes of vLLM ``release``'s dummy sampler run over ``max_num_seqs`` rows of the whole vocabulary on a
    GPU of ``sms`` SMs (the Triton top-k/top-p kernel's buffer holds one row per SM, up to the rows; from 0.21 a
    second warm-up call takes that path after FlashInfer's). ``flashinfer``: as :func:`sampler_bytes`."""
    per = sampler_bytes(model, max_num_seqs, release, flashinfer)
    triton = at_least(release, "0.17.0") and (not flashinfer or at_least(release, FLASHINFER_DEFAULT_FROM))
    buffer = 0.0
    if per == IN_PLACE_BYTES and triton and not at_least(release, "0.33.0"):
        buffer = 4.0 * min(max_num_seqs, sms) * model.vocab_size
    return per * max_num_seqs * model.vocab_size + buffer


def forward_peak_bytes(model, tp: int, tokens: int) -> float:
    """Peak activation bytes of a forward pass of ``tokens`` tokens on one of ``tp`` ranks."""
    width = model.intermediate_size
    if model.is_moe and all(model.moe_mask):  # every FFN routes: each token's copies through the experts' width
        width = model.experts_per_token * model.moe_intermediate_size
    return tokens * (3 * width / tp + 4 * model.hidden_size) * model.dtype_bytes


# vLLM 0.18 on: 0.25 GiB on one GPU (llm-d-planner's accuracy report, Qwen3-14B on an H100: 0.13 on 0.15-0.17, 0.25
# on 0.18); 0.19 on, a tensor-parallel group on NVLink keeps one set of buffers of 1.82 GiB more and little per
# further peer (the same report, Llama-3.1-8B and Qwen2.5-7B on H100s, vLLM 0.19.0: 2.06-2.07 GiB at TP2, 2.13 at
# TP4, against 0.54-0.55 at TP2 on the image of January 2026)
NON_TORCH_FROM = ("0.18.0", 0.25 * GiB)
NVLINK_GROUP_FROM = ("0.19.0", 1.82 * GiB, 0.03 * GiB)  # (release, once per group, per further peer)


def non_torch_bytes(gpu, tp: int, release: str | None = None) -> float:
    """Bytes outside PyTorch's allocator on one of ``tp`` ranks under vLLM ``release`` (None: as 0.10-0.17): the
    buffers of each NVLink peer within the GPU's NVLink domain (``gpu.nvlink_gpus``: 8 in an HGX node; ranks beyond
    it are reached over the network, priced as PCIe peers: an assumption, no log); from 0.19 one set for the
    NVLink group, growing little with its size."""
    base = NON_TORCH_FROM[1] if at_least(release, NON_TORCH_FROM[0]) else NON_TORCH_BYTES
    if not gpu.nvlink:
        return base + (tp - 1) * PCIE_RANK_BYTES
    peers = min(tp, gpu.nvlink_gpus) - 1
    network = (tp - 1 - peers) * PCIE_RANK_BYTES
    if peers and at_least(release, NVLINK_GROUP_FROM[0]):
        return base + NVLINK_GROUP_FROM[1] + (peers - 1) * NVLINK_GROUP_FROM[2] + network
    return base + peers * NVLINK_RANK_BYTES + network


# vLLM 0.27 on (PR of mem_utils' memory_profiling, read in the 0.26.0 and 0.27.0 wheels) sizes the KV cache by
# what the instance consumed since start-up as mem_get_info sees it, not by the weights and the profile's peak
# increase alone: buffers a model runner allocated before the profile now come out of the KV cache too.
CONSUMED_FROM = "0.27.0"
PENALTY_BYTES_PER_LOGIT = 4 + 4 / 32  # V2 sampler: int32 output counts, a prompt bitmask (1 bit per entry in int32)
# the V2 runner's other GPU buffers per sequence (read in the 0.27-0.34 sdists): a structured-output bitmask of 1 bit
# per vocabulary entry (in int32), and int32 tables of allowed-token ids (1,024), logit-bias ids and values (1,024
# each), stop ids (128), bad-word ids (1,024) and offsets (129), logprob token ids (128), the logits index and the
# request state and input offsets (32 bytes); 13 bytes per batched token of input buffers are left out (0.1 MiB at 8,192)
BITMASK_BYTES_PER_LOGIT = 4 / 32
V2_TABLE_BYTES_PER_SEQ = 4 * (1024 + 2 * 1024 + 128 + 1024 + 129 + 128 + 1) + 32


def runner_buffer_bytes(model, max_num_seqs: int, release: str | None = None) -> float:
    """Bytes of the model runner's persistent buffers that vLLM ``release``'s KV-cache sizing counts: from 0.27, on
    the V2 model runner, its sampler's penalty state, allocated whatever the requests ask: output token counts
    (``max_num_seqs`` x vocabulary int32, vLLM's own comment: "can be very large, taking up GBs") and the prompt
    bitmask (``PenaltiesState``, read in the 0.27-0.34 wheels; 0.59 GiB at 1,024 sequences of Qwen3's 151,936
    entries), the structured-output bitmask and its tables of allowed, biased, stop and bad-word token ids
    (:data:`V2_TABLE_BYTES_PER_SEQ`: 36 MiB more at 1,024 sequences of Qwen3's vocabulary). The V1 runner's
    buffers (its input-embeddings buffer, batched tokens x hidden in bf16, and block table: tens of MiB) are not
    counted; before 0.27 neither was (they came out of the memory gpu_memory_utilization leaves)."""
    if not at_least(release, CONSUMED_FROM) or not v2_runner_default(model, release):
        return 0.0
    per_logit = PENALTY_BYTES_PER_LOGIT + BITMASK_BYTES_PER_LOGIT
    return max_num_seqs * (per_logit * model.vocab_size + V2_TABLE_BYTES_PER_SEQ)


class ReserveParts(NamedTuple):
    """Bytes vLLM's start-up profile keeps from one GPU's KV cache, by part."""

    sampler: float  # the dummy sampler run's peak
    forward: float  # the dummy forward pass's peak
    non_torch: float  # outside PyTorch's allocator (NCCL, custom all-reduce, cuBLAS workspaces)
    buffers: float  # the model runner's persistent buffers (from 0.27: runner_buffer_bytes)
    graphs: float = 0.0  # the CUDA graphs' estimate (vLLM 0.20+; kvsim/cudagraph_memory.py)

    @property
    def total(self) -> float:
        """The larger of the two peaks (they do not overlap), plus everything held beside them."""
        return max(self.sampler, self.forward) + self.non_torch + self.buffers + self.graphs


def vllm_reserve_parts(
    model,
    gpu,
    tp: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    release: str | None = None,
    flashinfer: bool | None = None,
) -> ReserveParts:
    """The parts of vLLM ``release``'s start-up profile on one GPU but its CUDA graphs (module docstring;
    ``flashinfer``: its sampler is FlashInfer's, None: as the release does)."""
    return ReserveParts(
        sampler_peak_bytes(model, min(max_num_seqs, max_num_batched_tokens), release, gpu.sms, flashinfer),
        forward_peak_bytes(model, tp, max_num_batched_tokens),
        non_torch_bytes(gpu, tp, release),
        runner_buffer_bytes(model, max_num_seqs, release),
    )


def vllm_reserve_bytes(
    model, gpu, tp: int, max_num_seqs: int, max_num_batched_tokens: int, release: str | None = None
) -> float:
    """Bytes vLLM's start-up profile keeps from the KV cache on one GPU, without CUDA graphs: the larger of the
    sampler's and the forward pass's peaks, plus non-torch memory and (from 0.27) the runner's persistent
    buffers."""
    return vllm_reserve_parts(model, gpu, tp, max_num_seqs, max_num_batched_tokens, release).total
