"""Iteration-time models: the per-operation model tied to measured GPU times (default), and the roofline.

``--latency per-op`` (default) uses the calibration shipped for the GPU (kvsim/latency/calibrations/);
``--latency FILE.json`` a calibration from `kvsim calibrate`; ``--latency roofline`` the uncalibrated
roofline. ``--cpu-overhead`` picks the serving engine's CPU time per iteration (cpu.py).
"""

from __future__ import annotations

from kvsim.latency.base import LatencyModel, StepShape, chunk_shape_terms, sum_affine, sum_max_of_two_affine
from kvsim.latency.cpu import CPU_PRESETS, DEFAULT_CPU, CpuOverhead, get_cpu_overhead

__all__ = ["LatencyModel", "StepShape", "chunk_shape_terms", "sum_affine", "sum_max_of_two_affine", "CPU_PRESETS",
           "DEFAULT_CPU", "CpuOverhead", "get_cpu_overhead", "build_latency", "latency_notes"]


def _calibration(cfg):
    """(calibration, notes) for a config's --latency value."""
    from kvsim.latency.calibration import load_calibration, shipped_calibration

    if cfg.latency == "per-op":
        calib, note = shipped_calibration(cfg.gpu)
        return calib, [note] if note else []
    calib = load_calibration(cfg.latency)
    notes = []
    if calib.measured_on != "gpu":
        notes.append(f"warning: --latency {cfg.latency} was measured in the {calib.measured_on} (a pipeline check): "
                     "its kernel times are not GPU times and every latency below is off by orders of magnitude")
    if calib.gpu != cfg.gpu.name:
        notes.append(f"warning: --latency {cfg.latency} was calibrated on {calib.gpu}, simulating {cfg.gpu.name}: "
                     f"its efficiencies are applied to {cfg.gpu.name}'s peaks, unvalidated")
    return calib, notes


def build_latency(cfg) -> LatencyModel:
    """The latency model a SimConfig asks for."""
    if cfg.latency == "roofline":
        from kvsim.latency.roofline import RooflineModel

        return RooflineModel(cfg.model, cfg.gpu, cfg.roofline, cfg.tp)
    from kvsim.latency.perop import PerOpModel

    calib, _ = _calibration(cfg)
    return PerOpModel(cfg.model, cfg.gpu, calib, get_cpu_overhead(cfg.cpu_overhead), cfg.tp, cfg.interconnect)


def latency_notes(cfg) -> list[str]:
    """What a user should know about the latency model chosen (derived or foreign calibrations)."""
    if cfg.latency == "roofline":
        return []
    return _calibration(cfg)[1]


def describe_latency(cfg) -> str:
    if cfg.latency == "roofline":
        return "roofline (uncalibrated)"
    src = "shipped calibration" if cfg.latency == "per-op" else cfg.latency
    return f"per-operation model ({src} for {cfg.gpu.name}), CPU overhead {cfg.cpu_overhead}" + \
        (f", {cfg.interconnect} all-reduce" if cfg.tp > 1 else "")
