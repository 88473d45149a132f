"""GPU datasheet numbers used for pool sizing and the roofline latency model."""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.errors import ConfigError

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int  # as nvidia-smi reports the total
    hbm_bandwidth: float  # bytes/s, datasheet peak
    bf16_flops: float  # FLOP/s, dense tensor-core peak
    pcie_bandwidth: float  # bytes/s, host<->device per direction, nominal


GPU_PRESETS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        GpuSpec("a100-40gb", 40960 * MiB, 1.555e12, 312e12, 32e9),
        GpuSpec("a100-80gb", 81920 * MiB, 2.039e12, 312e12, 32e9),
        GpuSpec("h100-80gb", 81559 * MiB, 3.35e12, 989e12, 64e9),
        GpuSpec("h200-141gb", 143771 * MiB, 4.8e12, 989e12, 64e9),
        GpuSpec("l40s", 46068 * MiB, 864e9, 362e12, 32e9),
        GpuSpec("rtx-4090", 24564 * MiB, 1.008e12, 165e12, 32e9),
    ]
}


def get_gpu(name: str) -> GpuSpec:
    try:
        return GPU_PRESETS[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown GPU '{name}' (presets: {', '.join(GPU_PRESETS)})") from None
