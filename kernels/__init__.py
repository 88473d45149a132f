"""Triton paged-attention and block-copy kernels, with plain torch references.

Installed as ``kvsim_kernels`` (the source folder is ``kernels/``; the name ``kernels`` belongs to a
PyPI package used by Hugging Face libraries). Nothing here imports kvsim.

KV cache layout (K and V alike): ``[num_blocks, block_size, num_kv_heads, head_dim]``. Import the
kernels through :func:`load` (it selects the CUDA backend or Triton's CPU interpreter first):

    from kvsim_kernels import load
    K = load()            # or load("cpu")
    K.paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale)
"""

from __future__ import annotations

from types import SimpleNamespace

from ._runtime import KernelUnavailable

__all__ = ["load", "KernelUnavailable"]


def load(device: str | None = None) -> SimpleNamespace:
    """Kernels and references as one namespace; ``device`` None picks CUDA if present."""
    from ._runtime import ensure_backend, mode_label

    dev = ensure_backend(device)
    from . import reference
    from .cache_ops import copy_blocks, write_kv
    from .paged_attention import choose_num_splits, paged_decode_attention, paged_prefill_attention

    return SimpleNamespace(
        device=dev,
        mode=mode_label(dev),
        paged_decode_attention=paged_decode_attention,
        paged_prefill_attention=paged_prefill_attention,
        write_kv=write_kv,
        copy_blocks=copy_blocks,
        choose_num_splits=choose_num_splits,
        paged_decode_attention_ref=reference.paged_decode_attention_ref,
        paged_prefill_attention_ref=reference.paged_prefill_attention_ref,
        write_kv_ref=reference.write_kv_ref,
        copy_blocks_ref=reference.copy_blocks_ref,
    )
