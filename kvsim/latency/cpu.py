"""CPU time per iteration: the serving engine's own work (scheduling, input preparation, sampling
bookkeeping, output processing), separate from GPU time.

    cpu_s = base_s + per_seq_s x scheduled sequences

Synchronous engines add it to the GPU time of every iteration; an engine that schedules one step ahead
(``overlapped``) hides it behind the GPU, so an iteration takes max(GPU, CPU) plus a sync.

Presets (per iteration, measured on server CPUs by the sources named):

- ``vllm-v0``: the synchronous V0 engine (vLLM v0.1-v0.6; ``--vllm-engine v0``'s default). 2 ms + 0.25 ms per
  sequence, plus 1.5 ms for each tensor-parallel GPU beyond the first (V0's driver sends every step's inputs to
  each worker process), fitted on LambdaLabsML/vllm-benchmark's A100 load sweep (vLLM 0.5 and 0.6.0, 10 to
  1,280 prompts at once on 1-8 GPUs; ``benchmarks/fit_v0_engine.py``: half the runs fitted, the other half held
  out: median TPOT 1.01 of measured, median |error| 7%, against 0.81 and 23% with the 2 ms + 0.1 ms this preset
  had from the sources below, whose 0.1 ms per sequence is output processing alone; 1.0-2.0 ms per GPU fit
  about as well). Sources: vLLM RFC #6854 (multi-step
  scheduling, 2024-07): "5-13 ms of GPU bubble" per decode step, ~4 ms in the traced Llama-3-8B run; RFC #6913
  (async output processor, 2024-07): `_process_model_outputs` takes 3.4 ms at batch 32 (Llama-3-70B, 4xH100),
  ~0.1 ms per sequence; the vLLM v0.6.0 blog (2024-09-05): on Llama-3-8B / 1xH100, v0.5.3 spent 29% of the
  time scheduling and preparing inputs against 38% on the GPU.
- ``vllm-v1`` (default): the V1 engine (2025-): engine core in its own process, persistent batch.
  0.5 ms + 10 us per sequence, added to the GPU time when the scheduler runs in step with the forward pass
  (releases before 0.14, ``--no-async-scheduling``) and overlapped with it under async scheduling (the default
  from vLLM 0.14: kvsim.releases.async_scheduling_default, :meth:`CpuOverhead.overlapping`). Sources: vLLM issue
  #10634 (2024-11): an asynchronous loop would bring the 5-6 ms inter-step gap at batch 256 down to
  200-300 us; the simllm step-loop study of vLLM 0.27.1 (openfabric-systems/simllm PR #204, 2026-09):
  541 us per engine step amortized over a 128-request workload, the all-decode scheduler step costing
  12.7 us per running request.
- ``vllm-v1-async``: V1 with ``--async-scheduling`` (vLLM PR #19970, 2025-06): the same CPU work,
  overlapped with the forward pass; 50 us of synchronisation remains exposed per iteration. The engine then
  schedules a step while the one before it runs, so a request that arrives during a step joins the step after
  the next (kvsim.engine.engine).
- ``none``: GPU time only (what kernel-level profilers and Vidur's defaults report).

Multi-step scheduling (vLLM V0's ``--num-scheduler-steps N``, releases 0.6-0.10; kvsim.engine.engine) schedules,
prepares inputs and processes outputs once per N decode steps, which run back to back on the GPU: a decode
step then pays 1/N of the preset's CPU time (:meth:`CpuOverhead.spread`); prefill steps pay all of it. Sources:
vLLM RFC #6854 (the GPU idles while the CPU schedules and processes outputs between steps); LambdaLabsML/
vllm-benchmark's report (2024-09): vLLM 0.6.0 with 10 scheduler steps against 1, Llama-3.1-8B, one A100,
5,000 ShareGPT prompts at once: 8,088 against 3,958 output tokens/s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvsim.errors import ConfigError


@dataclass(frozen=True)
class CpuOverhead:
    name: str
    base_s: float  # seconds per iteration
    per_seq_s: float  # seconds per scheduled sequence
    overlapped: bool = False  # runs alongside the GPU step (the iteration takes the longer of the two)
    sync_s: float = 0.0  # seconds exposed per iteration even when overlapped
    per_rank_s: float = 0.0  # seconds per iteration for each tensor-parallel GPU beyond the first (see for_ranks)

    def seconds(self, num_seqs: int) -> float:
        return self.base_s + self.per_seq_s * num_seqs

    def for_ranks(self, tp: int) -> "CpuOverhead":
        """The overhead of an engine of ``tp`` tensor-parallel GPUs: V0's driver sends every step's inputs to each
        other GPU's worker process, so each adds ``per_rank_s`` to the base."""
        if not self.per_rank_s or tp == 1:
            return self
        return replace(self, base_s=self.base_s + self.per_rank_s * (tp - 1), per_rank_s=0.0)

    def overlapping(self) -> "CpuOverhead":
        """The same CPU work run while the GPU computes the step before (async scheduling): :data:`ASYNC_SYNC_S`
        stays exposed per iteration."""
        if self.overlapped or (not self.base_s and not self.per_seq_s and not self.per_rank_s):
            return self
        return replace(self, overlapped=True, sync_s=ASYNC_SYNC_S)

    def spread(self, steps: int) -> "CpuOverhead":
        """The share of one of ``steps`` steps scheduled together (multi-step scheduling): every part / steps."""
        if steps == 1:
            return self
        return replace(
            self,
            name=f"{self.name}, 1/{steps} per decode step",
            base_s=self.base_s / steps,
            per_seq_s=self.per_seq_s / steps,
            sync_s=self.sync_s / steps,
            per_rank_s=self.per_rank_s / steps,
        )


ASYNC_SYNC_S = 50e-6  # seconds exposed per iteration when the CPU work overlaps the GPU's
_V1 = CpuOverhead("vllm-v1", 0.5e-3, 10e-6)
CPU_PRESETS: dict[str, CpuOverhead] = {
    p.name: p
    for p in [
        CpuOverhead("none", 0.0, 0.0),
        CpuOverhead("vllm-v0", 2.0e-3, 0.25e-3, per_rank_s=1.5e-3),  # fitted: benchmarks/fit_v0_engine.py
        _V1,
        replace(_V1.overlapping(), name="vllm-v1-async"),
    ]
}
DEFAULT_CPU = "vllm-v1"


def get_cpu_overhead(name: str) -> CpuOverhead:
    try:
        return CPU_PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown CPU overhead preset '{name}' (known: {', '.join(CPU_PRESETS)})") from None
