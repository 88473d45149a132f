"""`kvsim list`: the presets and names a command line accepts (models, GPUs, allocators, routers)."""

from __future__ import annotations

import argparse

WHAT = ("models", "gpus", "allocators", "routers")


def _models() -> list[str]:
    from collections import Counter

    from kvsim.hardware import MODEL_PRESETS

    rows = [("model", "params", "layers", "KV per layer", "KV/token", "context", "layers by kind")]
    for name, m in MODEL_PRESETS.items():
        kinds = Counter(m.mixers)
        mix = (
            ", ".join(f"{n} {k}" for k, n in kinds.items())
            + (f"; MoE {m.num_experts}e top-{m.experts_per_token}" if m.is_moe else "")
            + ("; MLA" if m.is_mla else "")
        )
        per_layer = (
            f"latent {m.kv_lora_rank}+{m.qk_rope_head_dim}" if m.is_mla else f"{m.kv_heads} heads x {m.head_dim}"
        )
        rows.append(
            (
                name,
                f"{m.params / 1e9:.1f} B",
                str(m.layers),
                per_layer,
                f"{m.kv_bytes_per_token / 1024:g} KiB",
                f"{m.max_context:,}",
                mix,
            )
        )
    from kvsim.hardware.models import HF_IDS

    ids: dict[str, list[str]] = {}
    for hf, preset in HF_IDS.items():
        ids.setdefault(preset, []).append(hf)
    return (
        _table(rows)
        + ["", "Hugging Face ids --model also takes (as `vllm serve` does; no hub is read):"]
        + [f"  {preset}: {', '.join(hfs)}" for preset, hfs in ids.items()]
        + ["", "Or pass any model's Hugging Face config.json path to --model."]
    )


def _gpus() -> list[str]:
    from kvsim.hardware import GPU_PRESETS
    from kvsim.hardware.gpus import PRESET_SOURCES
    from kvsim.latency.calibration import calibration_source

    rows = [
        (
            "gpu",
            "memory",
            "memory from",
            "mem TB/s",
            "bf16 TFLOP/s",
            "peaks",
            "host link GB/s",
            "kernels of",
            "NVLink GPUs",
            "arch",
            "kernels",
        )
    ]
    for name, g in GPU_PRESETS.items():
        memory_from, peaks = PRESET_SOURCES.get(name, ("?", "?"))
        chip, note = calibration_source(g)
        rows.append(
            (
                name,
                f"{g.memory_bytes / (1 << 30):.1f} GiB",
                memory_from,
                f"{g.hbm_bandwidth / 1e12:.2f}",
                f"{g.bf16_flops / 1e12:.0f}",
                peaks,
                f"{g.pcie_bandwidth / 1e9:.0f}",
                chip,
                str(g.nvlink_gpus) if g.nvlink else "-",
                g.arch,
                "measured" if chip == name else "borrowed" if note.startswith("warning") else "derived",
            )
        )
    return _table(rows) + [
        "",
        "memory from: measured = the total CUDA (ROCm) reports, from a vLLM start-up log or a PyTorch message of this "
        "GPU; sibling = a measured GPU's with the same memory; derived = nvidia-smi's total less a measured sibling's "
        "driver reservation; nvidia-smi = nvidia-smi's total (0.3-0.7 GiB high)",
        "peaks (bandwidth, dense bf16, host link): datasheet = the vendor's datasheet or whitepaper; derived = worked "
        "from SMs, clocks and bus width where no datasheet gives it",
        'kernels: measured = a calibration fitted on this GPU\'s own timings; derived = the efficiencies of the "kernels of" GPU, '
        "same architecture, at this one's peaks; borrowed = another architecture's efficiencies, unvalidated "
        "(a warning says so)",
        "Sources: docs/gpus.md. A GPU of your own: --gpu custom:memory_gb=..,bandwidth_gbs=..,bf16_tflops=..[,arch=..]"
        " or --gpu gpu.yaml.",
    ]


def _allocators() -> list[str]:
    from kvsim.allocators import allocator_help

    return [f"{k:14s} {v}" for k, v in allocator_help().items()]


def _routers() -> list[str]:
    from kvsim.fleet.routers import ROUTERS

    return [f"{k:15s} {r.help}" for k, r in ROUTERS.items()]


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def cmd_list(a: argparse.Namespace) -> int:
    from kvsim.errors import ConfigError

    for w in a.what:
        if w not in WHAT:
            raise ConfigError(f"kvsim list: unknown {w!r}; choose from {', '.join(WHAT)}")
    show = {"models": _models, "gpus": _gpus, "allocators": _allocators, "routers": _routers}
    for i, what in enumerate(a.what or WHAT):
        if len(a.what or WHAT) > 1:
            print(("\n" if i else "") + what.upper())
        print("\n".join(show[what]()))
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "list",
        help="model and GPU presets, allocators and routers by name",
        description="What --model, --gpu, --allocators and --routers accept.",
    )
    p.add_argument("what", nargs="*", metavar="WHAT", help=f"any of {', '.join(WHAT)} [default: all]")
    p.set_defaults(func=cmd_list)
