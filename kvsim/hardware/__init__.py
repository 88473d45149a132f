"""Model and GPU descriptions, with presets taken from public configs and datasheets."""

from kvsim.hardware.gpus import GPU_PRESETS, GpuSpec, get_gpu
from kvsim.hardware.models import MODEL_PRESETS, ModelSpec, get_model

__all__ = ["GPU_PRESETS", "GpuSpec", "get_gpu", "MODEL_PRESETS", "ModelSpec", "get_model"]
