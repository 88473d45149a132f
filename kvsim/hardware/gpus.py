"""GPU datasheet numbers used for pool sizing and the latency models."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from kvsim.errors import ConfigError
from kvsim.releases import at_least

# A node as HGX/DGX systems build them: 8 GPUs on NVLink, one 400 Gb/s ConnectX-7 NIC per GPU (GPUDirect RDMA)
GPUS_PER_NODE = 8
NIC_BYTES_S = 50e9  # bytes/s each way through one GPU's NIC

# architectures whose data-centre parts link their GPUs by NVLink (the others here are PCIe cards); AMD's CDNA 3
# (MI300X, MI325X) joins its 8 GPUs by Infinity Fabric links, which play NVLink's part here
NVLINK_ARCHS = ("ampere-a100", "hopper", "blackwell", "cdna3")
# every architecture a GPU may name (a custom GPU's arch= takes these): a calibration carries over within one
ARCHS = ("ampere-a100", "ampere-ga102", "ada", "hopper", "blackwell", "cdna3")

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
    # the die (ga100, ga102, ad102, ad104, gh100, gb100, gb202, ...): within an architecture a GPU borrows the
    # calibration of a measured GPU of its own die first (RTX 5090 -> RTX PRO 6000, both GB202); "" where unknown
    chip: str = ""
    # NVIDIA AIConfigurator's name for this GPU's system (its tables' folder, `kvsim calibrate --aic --system`):
    # h100_sxm, gb200, rtx_pro_6000_server, ...; "" where AIConfigurator measured none
    aic_system: str = ""
    # NVLink bandwidth per GPU, each way, bytes/s (0: not stated). A GPU priced by another GPU's measured
    # collectives over a slower NVLink (H800, A800: the export parts) takes their bandwidth-bound part that much
    # slower (kvsim/latency/calibration.py: on_slower_nvlink)
    nvlink_bytes_s: float = 0.0

    @property
    def nvlink(self) -> bool:
        """Whether tensor-parallel peers talk over NVLink (else PCIe)."""
        return self.arch in NVLINK_ARCHS and self.nvlink_gpus > 1

    @property
    def fp8_tensor_cores(self) -> bool:
        """Whether FP8 GEMMs run on tensor cores at twice the bf16 rate (Ada, Hopper, Blackwell), not as
        weight-only kernels that compute in bf16 (Ampere)."""
        return self.arch in ("ada", "hopper", "blackwell", "cdna3")

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
        # NVLink per GPU each way: A100 (NVLink 3) 300 GB/s, H100 / H200 (NVLink 4) 450, Blackwell (NVLink 5) 900
        GpuSpec(
            "a100-40gb", 40438 * MiB, 1.555e12, 312e12, 32e9, 108, "ampere-a100", chip="ga100", nvlink_bytes_s=300e9
        ),
        GpuSpec(
            "a100-80gb",
            81152 * MiB,
            2.039e12,
            312e12,
            32e9,
            108,
            "ampere-a100",
            chip="ga100",
            aic_system="a100_sxm",
            nvlink_bytes_s=300e9,
        ),
        GpuSpec(
            "h100-80gb",
            81080 * MiB,
            3.35e12,
            989e12,
            64e9,
            132,
            "hopper",
            chip="gh100",
            aic_system="h100_sxm",
            nvlink_bytes_s=450e9,
        ),
        GpuSpec(
            "h200-141gb",
            143165 * MiB,
            4.8e12,
            989e12,
            64e9,
            132,
            "hopper",
            chip="gh100",
            aic_system="h200_sxm",
            nvlink_bytes_s=450e9,
        ),
        # B200 (HGX): nvidia-smi reports 183,359 MiB, CUDA 182,641; a 7,680-bit bus at 3,996 MHz gives 7.67 TB/s (pytorch/ao
        # PR #4002); dense bf16 2.25 PFLOP/s; hosts on PCIe Gen5
        GpuSpec(
            "b200",
            182641 * MiB,
            7.67e12,
            2.25e15,
            64e9,
            148,
            "blackwell",
            chip="gb100",
            aic_system="b200_sxm",
            nvlink_bytes_s=900e9,
        ),
        # Grace-Blackwell racks (NVL72: one NVLink domain of 72 GPUs) and HGX B300. Memory as CUDA reports it: vLLM's
        # "Free memory on device (181.84/184.31 GiB)" on GB200 and "(267.08/267.69 GiB)" on B300 (287,428,771,840
        # bytes in a trainer's log), PyTorch's "total capacity of 276.50 GiB" on GB300 (nvidia-smi: 189,471,
        # 275,040 and 284,208 MiB). SMs as CUDA counts them (152, 148, 152; NVIDIA's 160 is the full die).
        # HBM 7.7 / 7.7 / 8 TB/s and dense bf16 2.5 / 2.25 / 2.5 PFLOP/s (NVIDIA's GB200 NVL72, HGX B300 and
        # Blackwell Ultra figures). Host link: NVLink-C2C's 900 GB/s both ways per Grace CPU, shared by its two
        # GPUs (GB300 measured 211 GB/s host to GPU, NVIDIA/Megatron-LM#6491); B300 on a PCIe Gen5 host.
        GpuSpec(
            "gb200",
            188733 * MiB,
            7.7e12,
            2.5e15,
            225e9,
            152,
            "blackwell",
            nvlink_gpus=72,
            chip="gb100",
            aic_system="gb200",
            nvlink_bytes_s=900e9,
        ),
        GpuSpec(
            "b300", 274113 * MiB, 7.7e12, 2.25e15, 64e9, 148, "blackwell", aic_system="b300_sxm", nvlink_bytes_s=900e9
        ),
        GpuSpec(
            "gb300",
            283136 * MiB,
            8.0e12,
            2.5e15,
            225e9,
            152,
            "blackwell",
            nvlink_gpus=72,
            aic_system="gb300",
            nvlink_bytes_s=900e9,
        ),
        # RTX PRO 6000 Blackwell Server Edition (GB202, PCIe Gen5 x16, no NVLink): PyTorch's total_memory=97250MB
        # with multi_processor_count=188 (nvidia-smi: 97,887 MiB); 1,597 GB/s of GDDR7 (the Server Edition's
        # datasheet; the Workstation's is 1,792); dense bf16 467.8 TFLOP/s (NVIDIA's Workstation 503.8 at 2,617
        # MHz, at the Server Edition's 2,430 MHz boost, as AIConfigurator scales it)
        GpuSpec(
            "rtx-pro-6000",
            97250 * MiB,
            1.597e12,
            467.8e12,
            64e9,
            188,
            "blackwell",
            nvlink_gpus=1,
            chip="gb202",
            aic_system="rtx_pro_6000_server",
        ),
        GpuSpec("a40", 46068 * MiB, 696e9, 149.7e12, 32e9, 84, "ampere-ga102", chip="ga102", aic_system="a40"),
        GpuSpec("l40s", 45486 * MiB, 864e9, 362e12, 32e9, 142, "ada", chip="ad102", aic_system="l40s"),
        GpuSpec("rtx-4090", 24564 * MiB, 1.008e12, 165e12, 32e9, 128, "ada", chip="ad102"),
        # --- GPUs people rent and own (docs/gpus.md has every number's source). Memory as CUDA reports it: a
        # PyTorch message of that GPU where one was found (H100 NVL 93.10 GiB, RTX 5090 31.36, MI300X 191.98 under
        # ROCm), the measured preset of the same memory otherwise (L40 = L40S, H100 PCIe = H100 SXM, A100 PCIe =
        # A100 SXM: same nvidia-smi totals), else nvidia-smi's total less the reservation a measured sibling shows
        # (L4, A10G: 22.05 GiB, what OOM messages of 24 GB data-centre GDDR6 cards print against nvidia-smi's 23,034
        # and 23,028 MiB; H20 97,871 - 479 MiB as on H100; RTX 3090 24,576 - 346 MiB as on RTX 4090, whose PyTorch
        # total is 23.65 GiB; MI325X 256 GiB - 0.02 as on MI300X). Peaks: dense bf16 with FP32 accumulation (the
        # rate PyTorch's GEMMs run at: half the FP16-accumulate figure on GeForce and A10G), memory bandwidth and
        # host link from the datasheets. PCIe cards are single (nvlink_gpus=1) even where a bridge pairs two.
        GpuSpec("l4", 22579 * MiB, 300e9, 121e12, 32e9, 58, "ada", nvlink_gpus=1, chip="ad104"),
        # AWS's A10G (g5): NVIDIA publishes no datasheet; 80 SMs x 1,710 MHz x 512 FLOP/clock (FP32 accumulate,
        # as on GeForce GA102) = 70 TFLOP/s, the figure AWS and Baseten give; 24 GB GDDR6 at 600 GB/s
        GpuSpec("a10g", 22579 * MiB, 600e9, 70e12, 32e9, 80, "ampere-ga102", nvlink_gpus=1, chip="ga102"),
        GpuSpec("l40", 45486 * MiB, 864e9, 181.05e12, 32e9, 142, "ada", nvlink_gpus=1, chip="ad102"),
        GpuSpec("h20", 97392 * MiB, 4.0e12, 148e12, 64e9, 78, "hopper", chip="gh100", nvlink_bytes_s=450e9),  # HGX: 8
        # the export parts of H100 SXM and A100 SXM 80GB: the same dies, memory and peaks, NVLink cut to 400 GB/s
        # both ways (200 each way; H100's 900, A100's 600), 8 per HGX board
        GpuSpec("h800", 81080 * MiB, 3.35e12, 989e12, 64e9, 132, "hopper", chip="gh100", nvlink_bytes_s=200e9),
        GpuSpec(
            "a800-80gb", 81152 * MiB, 2.039e12, 312e12, 32e9, 108, "ampere-a100", chip="ga100", nvlink_bytes_s=200e9
        ),
        GpuSpec("h100-pcie", 81080 * MiB, 2.0e12, 756e12, 64e9, 114, "hopper", nvlink_gpus=1, chip="gh100"),
        GpuSpec("h100-nvl", 95334 * MiB, 3.9e12, 835e12, 64e9, 132, "hopper", nvlink_gpus=1, chip="gh100"),
        GpuSpec("rtx-5090", 32113 * MiB, 1.792e12, 209.5e12, 64e9, 170, "blackwell", nvlink_gpus=1, chip="gb202"),
        GpuSpec("rtx-3090", 24230 * MiB, 936e9, 71e12, 32e9, 82, "ampere-ga102", nvlink_gpus=1, chip="ga102"),
        GpuSpec("a100-40gb-pcie", 40438 * MiB, 1.555e12, 312e12, 32e9, 108, "ampere-a100", nvlink_gpus=1, chip="ga100"),
        GpuSpec("a100-80gb-pcie", 81152 * MiB, 1.935e12, 312e12, 32e9, 108, "ampere-a100", nvlink_gpus=1, chip="ga100"),
        # AMD Instinct (CDNA 3, 8 GPUs on Infinity Fabric): AMD's datasheet peaks (dense bf16 1,307.4 TFLOP/s, 304
        # CUs counted as SMs). No AMD kernel was measured: latency borrows H100's efficiencies, with a warning.
        GpuSpec("mi300x", 196588 * MiB, 5.3e12, 1307.4e12, 64e9, 304, "cdna3"),
        GpuSpec("mi325x", 262124 * MiB, 6.0e12, 1307.4e12, 64e9, 304, "cdna3"),
    ]
}

# Where each preset's numbers come from, as `kvsim list gpus` shows them (memory, peaks). Memory: "measured" =
# CUDA's total as a vLLM start-up log or a PyTorch message of that GPU prints it; "sibling" = a measured GPU with
# the same memory and nvidia-smi total; "derived" = nvidia-smi's total less a measured sibling's reservation;
# "nvidia-smi" = nvidia-smi's total, the reservation not taken off. Peaks: "datasheet" = the vendor's datasheet
# or whitepaper; "derived" = worked from SMs, clocks and bus width where no datasheet gives the number.
PRESET_SOURCES: dict[str, tuple[str, str]] = {
    "a100-40gb": ("measured", "datasheet"),
    "a100-80gb": ("measured", "datasheet"),
    "h100-80gb": ("measured", "datasheet"),
    "h200-141gb": ("measured", "datasheet"),
    "b200": ("measured", "derived"),
    "gb200": ("measured", "datasheet"),
    "b300": ("measured", "datasheet"),
    "gb300": ("measured", "datasheet"),
    "rtx-pro-6000": ("measured", "derived"),
    "a40": ("nvidia-smi", "datasheet"),
    "l40s": ("measured", "datasheet"),
    "rtx-4090": ("nvidia-smi", "datasheet"),
    "l4": ("derived", "datasheet"),
    "a10g": ("derived", "derived"),
    "l40": ("sibling", "datasheet"),
    "h20": ("derived", "datasheet"),
    "h800": ("sibling", "datasheet"),
    "a800-80gb": ("sibling", "datasheet"),
    "h100-pcie": ("sibling", "datasheet"),
    "h100-nvl": ("measured", "datasheet"),
    "rtx-5090": ("measured", "datasheet"),
    "rtx-3090": ("derived", "datasheet"),
    "a100-40gb-pcie": ("sibling", "datasheet"),
    "a100-80gb-pcie": ("sibling", "datasheet"),
    "mi300x": ("measured", "datasheet"),
    "mi325x": ("derived", "datasheet"),
}


LARGEST_TIER_FROM = "0.28.0"  # vLLM release whose defaults first give GPUs of 160 GiB or more 16,384 tokens


def vllm_serve_defaults(gpu: GpuSpec, release: str | None = None) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) `vllm serve` (V1) of ``release`` picks when not told: 1,024 and 8,192
    on GPUs with at least 70 GiB that are not A100s (H100, H200), from vLLM 0.28 1,024 and 16,384 on GPUs with at
    least 160 GiB (B200, B300, GB200, MI300X; EngineArgs' largest tier, read in the 0.28.0 wheel: absent in 0.27.1),
    else 256 and 2,048 (EngineArgs' batch defaults). ``release`` None: as releases before 0.28."""
    if gpu.memory_bytes >= 160 * GiB and at_least(release, LARGEST_TIER_FROM):
        return 1024, 16384
    if gpu.memory_bytes >= 70 * GiB and not gpu.name.startswith("a100"):
        return 1024, 8192
    return 256, 2048


# names nvidia-smi, rocm-smi and people print, after the normalisation of _key(), that name no preset directly
ALIASES = {
    "h100": "h100-80gb",
    "h100-sxm": "h100-80gb",
    "h100-sxm5": "h100-80gb",
    "h100-sxm5-80gb": "h100-80gb",
    "h100-80gb-hbm3": "h100-80gb",
    "h100-pcie-80gb": "h100-pcie",
    "h100-nvl-94gb": "h100-nvl",
    "h200-sxm": "h200-141gb",
    "h200-141gb-hbm3e": "h200-141gb",
    "a100-sxm4-80gb": "a100-80gb",
    "a100-sxm4-40gb": "a100-40gb",
    "a100-sxm-80gb": "a100-80gb",
    "a100-sxm-40gb": "a100-40gb",
    "a100-pcie-40gb": "a100-40gb-pcie",
    "a100-pcie-80gb": "a100-80gb-pcie",
    "a100-80gb-pcie": "a100-80gb-pcie",
    "a100-40gb-pcie": "a100-40gb-pcie",
    "b200-sxm": "b200",
    "h800-sxm": "h800",
    "h800-sxm5": "h800",
    "h800-80gb": "h800",
    "h800-80gb-hbm3": "h800",
    "a800": "a800-80gb",
    "a800-sxm4-80gb": "a800-80gb",
    "a800-sxm-80gb": "a800-80gb",
    # the PCIe export cards are the PCIe cards they were cut from (a PCIe card is priced without NVLink)
    "h800-pcie": "h100-pcie",
    "h800-pcie-80gb": "h100-pcie",
    "h800-80gb-pcie": "h100-pcie",
    "h100-80gb-pcie": "h100-pcie",
    "a800-80gb-pcie": "a100-80gb-pcie",
    "a800-pcie-80gb": "a100-80gb-pcie",
    "b300-sxm6-ac": "b300",
    "b300-sxm6": "b300",
    "rtx-pro-6000-blackwell-server-edition": "rtx-pro-6000",
    "rtx-pro-6000-server": "rtx-pro-6000",
    "rtx-pro-6000-blackwell-server": "rtx-pro-6000",
}
# names of a different product than the preset they start with: refused, saying what differs
_NOT_THE_PRESET = {
    "rtx-pro-6000-blackwell-workstation-edition": "the Workstation Edition (1,792 GB/s, 600 W) is not the Server "
    "Edition preset rtx-pro-6000 (1,597 GB/s)",
    "rtx-pro-6000-blackwell-max-q-workstation-edition": "the Max-Q Workstation Edition (1,792 GB/s, 300 W) is not the"
    " Server Edition preset rtx-pro-6000 (1,597 GB/s)",
    "h200-nvl": "the H200 NVL (a 600 W PCIe card) is not the SXM preset h200-141gb",
}
_CUSTOM_HINT = (
    "or describe it: --gpu custom:memory_gb=..,bandwidth_gbs=..,bf16_tflops=..[,arch=..] or a YAML file "
    "of those keys (docs/gpus.md)"
)


def _key(name: str) -> str:
    """A GPU name as the presets spell it: lower case, words joined by dashes, a leading NVIDIA/AMD, GeForce and
    Instinct dropped ("NVIDIA GeForce RTX 4090" -> rtx-4090, "AMD Instinct MI300X" -> mi300x)."""
    words = re.split(r"[\s_]+", name.strip().lower())
    key = "-".join(w for w in words if w)
    for prefix in ("nvidia-", "nvidia", "amd-", "geforce-", "instinct-", "tesla-"):
        key = key.removeprefix(prefix)
    return re.sub(r"-{2,}", "-", key).strip("-")


def get_gpu(name: str) -> GpuSpec:
    """A preset by name, case-insensitive; a leading "NVIDIA" (or "AMD", "GeForce", "Instinct") and spaces are
    ignored, so nvidia-smi's names work ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX
    5090"); "H100" is h100-80gb; a name that starts exactly one preset's name up to a dash stands for it ("A100"
    names four presets and is refused). ``custom:key=value,...`` or a ``.yaml``/``.yml``/``.json`` file describes
    a GPU of one's own (:func:`custom_gpu`)."""
    if not isinstance(name, str):
        raise ConfigError(f"--gpu must be a name, got {name!r:.60}")
    text = name.strip()
    if text.lower().startswith("custom:") or text.lower() == "custom":
        return parse_custom_gpu(text)
    if text.lower().endswith((".yaml", ".yml", ".json")) or ("/" in text and _is_file(text)):
        return gpu_from_file(text)
    key = _key(text)
    if key in GPU_PRESETS:
        return GPU_PRESETS[key]
    if key in ALIASES:
        return GPU_PRESETS[ALIASES[key]]
    if key in _NOT_THE_PRESET:
        raise ConfigError(f"GPU '{name}': {_NOT_THE_PRESET[key]}; {_CUSTOM_HINT}")
    starts = [g for g in GPU_PRESETS if key and g.startswith(key + "-")]  # "A100": two presets; "l4" is not l40s
    if len(starts) == 1:
        return GPU_PRESETS[starts[0]]
    if starts:
        raise ConfigError(f"GPU '{name}' is ambiguous: say which of {', '.join(starts)}")
    # a name with more words than a preset's ("mi300x-vf", "h20-96gb"): the longest preset it starts with
    longer = sorted((g for g in GPU_PRESETS if key.startswith(g + "-")), key=len, reverse=True)
    if longer:
        return GPU_PRESETS[longer[0]]
    close = difflib.get_close_matches(key, [*GPU_PRESETS, *ALIASES], n=6, cutoff=0.5)
    close = list(dict.fromkeys(ALIASES.get(c, c) for c in close))[:3]
    raise ConfigError(
        f"unknown GPU '{name}' (presets: {', '.join(GPU_PRESETS)})"
        + (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "")
        + f"; {_CUSTOM_HINT}"
    )


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


# A GPU of one's own: key -> (meaning, lowest, highest, whole number); numbers outside are refused as typos
CUSTOM_KEYS: dict[str, tuple[str, float, float, bool]] = {
    "memory_gb": (
        "memory as CUDA reports it, in GiB (PyTorch's total_memory / 2**30, vLLM's total_gpu_memory)",
        0.5,
        4096.0,
        False,
    ),
    "bandwidth_gbs": ("memory bandwidth, GB/s (datasheet peak)", 1.0, 100_000.0, False),
    "bf16_tflops": ("dense bf16 tensor peak, TFLOP/s (no sparsity; FP32 accumulate)", 0.1, 100_000.0, False),
    "pcie_gbs": ("host link, GB/s per direction (PCIe 4.0 x16: 32, 5.0 x16: 64)", 0.1, 10_000.0, False),
    "sms": ("streaming multiprocessors (CUs on AMD)", 1, 10_000, True),
    "nvlink_gpus": ("GPUs one NVLink domain joins (1: a PCIe card)", 1, 4096, True),
    "nvlink_gbs": (
        "NVLink bandwidth per GPU, GB/s each way (H100: 450; the chip's measured GPU's if not given)",
        1.0,
        100_000.0,
        False,
    ),
}
CUSTOM_TEXT_KEYS = ("arch", "name", "chip")
_REQUIRED = ("memory_gb", "bandwidth_gbs", "bf16_tflops")
_CUSTOM_ALIASES = {"memory_gib": "memory_gb"}  # GiB either way, as vLLM prints it


def parse_custom_gpu(text: str) -> GpuSpec:
    """``custom:memory_gb=..,bandwidth_gbs=..,bf16_tflops=..[,sms=..,arch=..,pcie_gbs=..,nvlink_gpus=..,name=..]``:
    a GPU of one's own (units in the key names)."""
    body = text.split(":", 1)[1] if ":" in text else ""
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        if "=" not in part:
            raise ConfigError(
                f"custom GPU: '{part}' is not key=value (custom:memory_gb=..,bandwidth_gbs=..,bf16_tflops=..)"
            )
        k, v = part.split("=", 1)
        k = k.strip().lower()
        if k in values or _CUSTOM_ALIASES.get(k, k) in values:
            raise ConfigError(f"custom GPU: {k} given twice")
        values[k] = v.strip()
    return custom_gpu(values, "custom GPU")


def gpu_from_file(path: str) -> GpuSpec:
    """A GPU of one's own from a YAML (or JSON: YAML reads it) mapping of :data:`CUSTOM_KEYS`, arch and name."""
    import yaml

    label = f"--gpu {path}"
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{label}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"{label}: not a text file (a YAML mapping of memory_gb, bandwidth_gbs, bf16_tflops)"
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{label}: not valid YAML: {str(e).splitlines()[0]}") from None
    except (RecursionError, ValueError) as e:
        raise ConfigError(f"{label}: not readable YAML ({e})") from None
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{label}: expected a mapping of memory_gb, bandwidth_gbs, bf16_tflops[, sms, arch, "
            "pcie_gbs, nvlink_gpus, name]"
        )
    if not all(isinstance(k, str) for k in doc):
        raise ConfigError(f"{label}: keys must be names such as memory_gb")
    return custom_gpu({k.lower(): v for k, v in doc.items()}, label)


def custom_gpu(values: dict, label: str = "custom GPU") -> GpuSpec:
    """A GpuSpec from ``values`` (strings or numbers keyed as :data:`CUSTOM_KEYS`, ``arch``, ``name``), each
    checked: a bad one is refused naming its key."""
    from kvsim.validation import is_finite, shown

    values = {_CUSTOM_ALIASES.get(k, k): v for k, v in values.items()}
    unknown = sorted(set(values) - set(CUSTOM_KEYS) - set(CUSTOM_TEXT_KEYS))
    if unknown:
        raise ConfigError(
            f"{label}: unknown key(s) {', '.join(unknown)} (keys: {', '.join([*CUSTOM_KEYS, *CUSTOM_TEXT_KEYS])})"
        )
    missing = [k for k in _REQUIRED if k not in values]
    if missing:
        raise ConfigError(
            f"{label}: missing {', '.join(missing)} (need {', '.join(_REQUIRED)}; e.g. "
            "custom:memory_gb=79.18,bandwidth_gbs=3350,bf16_tflops=989,arch=hopper)"
        )
    nums: dict[str, float] = {}
    for k, (meaning, lo, hi, whole) in CUSTOM_KEYS.items():
        if k not in values:
            continue
        v = values[k]
        if isinstance(v, str):
            try:
                v = int(v) if whole and v.strip().lstrip("+").isdigit() else float(v)
            except ValueError:
                raise ConfigError(f"{label}: {k} must be a number, got {v!r:.40} ({k}: {meaning})") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_finite(v):
            raise ConfigError(
                f"{label}: {k} must be a finite number, got "
                f"{shown(v) if isinstance(v, int) else repr(v)[:40]} ({k}: {meaning})"
            )
        if whole and v != int(v):
            raise ConfigError(f"{label}: {k} must be a whole number, got {v:g} ({k}: {meaning})")
        if not lo <= v <= hi:
            raise ConfigError(f"{label}: {k} must be from {lo:g} to {hi:g}, got {v:g} ({k}: {meaning})")
        nums[k] = v
    texts = {}
    for k in CUSTOM_TEXT_KEYS:
        if k in values:
            v = values[k]
            if not isinstance(v, str) or not v.strip():
                raise ConfigError(f"{label}: {k} must be a word, got {v!r:.40}")
            texts[k] = v.strip()
    arch = texts.get("arch", "").lower()
    if arch and arch not in ARCHS:
        close = difflib.get_close_matches(arch, ARCHS, n=1)
        raise ConfigError(
            f"{label}: arch '{arch}' is not one of {', '.join(ARCHS)}"
            + (f"; did you mean '{close[0]}'?" if close else "")
        )
    gpu_name = texts.get("name", "custom")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", gpu_name):
        raise ConfigError(f"{label}: name must be letters, digits, '.', '_' or '-' (up to 64), got {gpu_name!r:.70}")
    if gpu_name.lower() in GPU_PRESETS:
        raise ConfigError(
            f"{label}: name '{gpu_name}' is a preset's (whose measured kernels would price it); "
            "pick another name, or use --gpu "
            f"{gpu_name.lower()}"
        )
    memory = int(round(nums["memory_gb"] * GiB))
    return GpuSpec(
        gpu_name,
        memory,
        nums["bandwidth_gbs"] * 1e9,
        nums["bf16_tflops"] * 1e12,
        nums.get("pcie_gbs", 32.0) * 1e9,
        int(nums.get("sms", 108)),
        arch,
        nvlink_gpus=int(nums.get("nvlink_gpus", 1)),
        chip=texts.get("chip", "").lower(),
        nvlink_bytes_s=nums.get("nvlink_gbs", 0.0) * 1e9,
    )
