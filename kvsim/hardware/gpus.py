"""GPU datasheet numbers used for pool sizing and the latency models."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from kvsim.errors import ConfigError

# A node as HGX/DGX systems build them: 8 GPUs on NVLink, one 400 Gb/s ConnectX-7 NIC per GPU (GPUDirect RDMA)
GPUS_PER_NODE = 8
NIC_BYTES_S = 50e9  # bytes/s each way through one GPU's NIC

# architectures whose data-centre parts link their GPUs by NVLink (the others here are PCIe cards)
NVLINK_ARCHS = ("ampere-a100", "hopper", "blackwell")

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class GpuSpec:
    name: str
    # the total CUDA reports (cudaMemGetInfo), which vLLM multiplies by --gpu-memory-utilization: 0.5-0.7 GiB
    # less than nvidia-smi's total (the driver's reservation)
    memory_bytes: int
    hbm_bandwidth: float  # bytes/s, datasheet peak
    bf16_flops: float  # FLOP/s, dense tensor-core peak (fp16/bf16)
    pcie_bandwidth: float  # bytes/s, host<->device per direction, nominal
    sms: int = 108  # streaming multiprocessors (work-distribution granularity of kernels)
    arch: str = ""  # architecture family: calibrations carry over within one
    # GPUs one NVLink switch domain joins: an HGX/DGX node's 8, a GB200/GB300 NVL72 rack's 72; collectives
    # among more cross the network (one NIC per GPU). 1: a PCIe card of an NVLink architecture (RTX PRO 6000)
    nvlink_gpus: int = GPUS_PER_NODE

    @property
    def nvlink(self) -> bool:
        """Whether tensor-parallel peers talk over NVLink (else PCIe)."""
        return self.arch in NVLINK_ARCHS and self.nvlink_gpus > 1

    @property
    def fp8_tensor_cores(self) -> bool:
        """Whether FP8 GEMMs run on tensor cores at twice the bf16 rate (Ada, Hopper, Blackwell), not as
        weight-only kernels that compute in bf16 (Ampere)."""
        return self.arch in ("ada", "hopper", "blackwell")

    def tensor_core_speedup(self, operands: str) -> float:
        """Dense tensor-core peak of GEMMs on ``operands`` ("bf16", "fp8", "fp4", "int8") over bf16's: FP8 twice
        on Ada, Hopper and Blackwell, FP4 four times on Blackwell, int8 twice on every preset (Ampere on); 1 where
        the GPU lacks them (vLLM then runs weight-only kernels that multiply in bf16)."""
        if operands == "fp8":
            return 2.0 if self.fp8_tensor_cores else 1.0
        if operands == "fp4":
            return 4.0 if self.arch == "blackwell" else 1.0
        return 2.0 if operands == "int8" else 1.0


GPU_PRESETS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        # memory: "total_gpu_memory" / "GPU memory" of vLLM start-up logs (docs/memory.md): A100-40GB 39.49 GiB,
        # A100-80GB 79.25, H100 79.18 (logs of other drivers 79.11-79.19), H200 139.81, B200 178.36, L40S 44.42;
        # A40 and RTX 4090: nvidia-smi's totals (no log found)
        GpuSpec("a100-40gb", 40438 * MiB, 1.555e12, 312e12, 32e9, 108, "ampere-a100"),
        GpuSpec("a100-80gb", 81152 * MiB, 2.039e12, 312e12, 32e9, 108, "ampere-a100"),
        GpuSpec("h100-80gb", 81080 * MiB, 3.35e12, 989e12, 64e9, 132, "hopper"),
        GpuSpec("h200-141gb", 143165 * MiB, 4.8e12, 989e12, 64e9, 132, "hopper"),
        # B200 (HGX): nvidia-smi reports 183,359 MiB, CUDA 182,641; a 7,680-bit bus at 3,996 MHz gives 7.67 TB/s (pytorch/ao
        # PR #4002); dense bf16 2.25 PFLOP/s; hosts on PCIe Gen5
        GpuSpec("b200", 182641 * MiB, 7.67e12, 2.25e15, 64e9, 148, "blackwell"),
        # Grace-Blackwell racks (NVL72: one NVLink domain of 72 GPUs) and HGX B300. Memory as CUDA reports it: vLLM's
        # "Free memory on device (181.84/184.31 GiB)" on GB200 and "(267.08/267.69 GiB)" on B300 (287,428,771,840
        # bytes in a trainer's log), PyTorch's "total capacity of 276.50 GiB" on GB300 (nvidia-smi: 189,471,
        # 275,040 and 284,208 MiB). SMs as CUDA counts them (152, 148, 152; NVIDIA's 160 is the full die).
        # HBM 7.7 / 7.7 / 8 TB/s and dense bf16 2.5 / 2.25 / 2.5 PFLOP/s (NVIDIA's GB200 NVL72, HGX B300 and
        # Blackwell Ultra figures). Host link: NVLink-C2C's 900 GB/s both ways per Grace CPU, shared by its two
        # GPUs (GB300 measured 211 GB/s host to GPU, NVIDIA/Megatron-LM#6491); B300 on a PCIe Gen5 host.
        GpuSpec("gb200", 188733 * MiB, 7.7e12, 2.5e15, 225e9, 152, "blackwell", nvlink_gpus=72),
        GpuSpec("b300", 274113 * MiB, 7.7e12, 2.25e15, 64e9, 148, "blackwell"),
        GpuSpec("gb300", 283136 * MiB, 8.0e12, 2.5e15, 225e9, 152, "blackwell", nvlink_gpus=72),
        # RTX PRO 6000 Blackwell Server Edition (GB202, PCIe Gen5 x16, no NVLink): PyTorch's total_memory=97250MB
        # with multi_processor_count=188 (nvidia-smi: 97,887 MiB); 1,597 GB/s of GDDR7 (the Server Edition's
        # datasheet; the Workstation's is 1,792); dense bf16 467.8 TFLOP/s (NVIDIA's Workstation 503.8 at 2,617
        # MHz, at the Server Edition's 2,430 MHz boost, as AIConfigurator scales it)
        GpuSpec("rtx-pro-6000", 97250 * MiB, 1.597e12, 467.8e12, 64e9, 188, "blackwell", nvlink_gpus=1),
        GpuSpec("a40", 46068 * MiB, 696e9, 149.7e12, 32e9, 84, "ampere-ga102"),
        GpuSpec("l40s", 45486 * MiB, 864e9, 362e12, 32e9, 142, "ada"),
        GpuSpec("rtx-4090", 24564 * MiB, 1.008e12, 165e12, 32e9, 128, "ada"),
    ]
}


def vllm_serve_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) `vllm serve` (V1) picks when not told: 1,024 and 8,192 on GPUs with
    at least 70 GiB that are not A100s (H100, H200, B200), else 256 and 2,048 (EngineArgs' batch defaults)."""
    if gpu.memory_bytes >= 70 * GiB and not gpu.name.startswith("a100"):
        return 1024, 8192
    return 256, 2048


def get_gpu(name: str) -> GpuSpec:
    """A preset by name, case-insensitive; a leading "NVIDIA" and spaces are ignored, and a name that starts
    exactly one preset's name up to a dash stands for it ("H100" is h100-80gb; "A100" names two presets and is
    refused; "L40" is not l40s)."""
    key = name.strip().lower()
    key = "-".join(key.removeprefix("nvidia").split())
    if key in GPU_PRESETS:
        return GPU_PRESETS[key]
    starts = [g for g in GPU_PRESETS if key and g.startswith(key + "-")]  # "l40" is not l40s
    if len(starts) == 1:
        return GPU_PRESETS[starts[0]]
    if starts:
        raise ConfigError(f"GPU '{name}' is ambiguous: say which of {', '.join(starts)}")
    close = difflib.get_close_matches(key, GPU_PRESETS, n=1)
    raise ConfigError(f"unknown GPU '{name}' (presets: {', '.join(GPU_PRESETS)})"
                      + (f"; did you mean '{close[0]}'?" if close else ""))
