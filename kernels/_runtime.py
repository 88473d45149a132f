"""Where kernels run: natively on CUDA, or in Triton's interpreter on CPU tensors.

TRITON_INTERPRET=1 must be set before triton is imported; `kvsim kernels ...` sets it when no GPU is
present, and the tests do the same in conftest.py.
"""

from __future__ import annotations

import os


class KernelUnavailable(RuntimeError):
    """The kernels cannot run as asked (no GPU for --device cuda)."""


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def ensure_backend(device: str | None = None) -> str:
    """Pick 'cuda' when a GPU is visible (and wanted), else switch Triton to its CPU interpreter."""
    import torch

    if device in (None, "cuda") and torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise KernelUnavailable("--device cuda: no CUDA GPU is visible (torch.cuda.is_available() is False)")
    os.environ["TRITON_INTERPRET"] = "1"
    return "cpu"


def mode_label(device: str) -> str:
    return "triton-native-cuda" if device == "cuda" and not interpreting() else "triton-interpreter-cpu"
