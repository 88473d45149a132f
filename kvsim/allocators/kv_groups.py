"""How a model's per-layer caches are laid out in pages: the KV cache groups of the hybrid allocators.

Sizes here are in *units*: the greatest common divisor of the per-layer cache sizes (one token of one
attention layer, one sequence's state of one mamba layer) on one GPU, so that every amount is exact.

Two layouts:

- ``shared`` (vLLM V1's hybrid KV cache manager, design doc "Hybrid KV Cache Manager"): layers of the
  same kind (full, sliding window W, chunked C, mamba) are cut into groups of ``group_size`` layers, where
  group_size is the smallest kind's layer count, or the largest's if that is under 1.25x the smallest
  (fewer padding layers). A kind whose count is not a multiple gets a last group with fewer real layers:
  its pages still span group_size layers (padding). Every group shares one block pool with one page size
  (group_size x block_size tokens x one layer's bytes per token). With mamba layers the attention block
  size grows to the smallest multiple of 16 tokens whose page holds a group's states, and the state page
  is padded to it.
- ``split`` (TensorRT-LLM's variable sliding window attention): one pool per kind, each with pages of its
  own size (all layers of that kind x block_size tokens, or all mamba layers' state of one sequence),
  so nothing is padded; memory is split between pools at start-up in proportion to what one sequence of
  ``max_model_len`` tokens needs in each at its peak (:func:`max_blocks_per_request`, vLLM's
  ``max_memory_usage_bytes``: a window pool holds the window plus the chunk being computed), so every
  pool holds the same number of max-length sequences.

``windows=False`` gives the naive baseline: sliding and chunked layers are treated as full attention
(what vLLM does with the hybrid manager disabled); mamba layers keep their state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvsim.errors import ConfigError
from kvsim.hardware.layer_kinds import KINDS, LayerKind

KERNEL_BLOCK_ALIGNMENT = 16  # tokens: attention block sizes stay multiples of this (vLLM's alignment for mamba hybrids)


@dataclass(frozen=True)
class KVGroup:
    """Layers that share one block table per sequence."""

    kind: str  # a layer kind's name (layer_kinds.KINDS): "full", "sliding", "chunked" or "mamba"
    layers: int  # real layers (a padded group spans more in its pages)
    window: int  # sliding: window tokens; chunked: chunk tokens; 0 otherwise
    token_units: int  # units one token's cache takes in this group (0 for mamba)
    state_units: int  # units of one sequence's recurrent state in this group (0 unless mamba)
    page_units: int  # units of one page (block) of this group
    pool: int  # index of the pool its pages come from
    # the kind's object, resolved once here (not compared, not shown)
    spec: LayerKind = field(init=False, repr=False, compare=False)
    attention: bool = field(init=False, repr=False, compare=False)  # per-token KV (else one state per sequence)
    windowed: bool = field(init=False, repr=False, compare=False)  # frees what no later token attends to

    def __post_init__(self) -> None:
        spec = KINDS[self.kind]
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "attention", spec.attention)
        object.__setattr__(self, "windowed", spec.windowed)

    def skipped_tokens(self, computed: int) -> int:
        """Leading tokens no later token attends to, once ``computed`` tokens have KV (vLLM's
        sliding-window / chunked-local managers free the blocks wholly inside them)."""
        return self.spec.first_attended(self.window, computed) if self.windowed else 0

    def computed_skipping(self, tokens: int) -> int:
        """The fewest computed tokens at which the first ``tokens`` tokens are skipped (inverse of
        :meth:`skipped_tokens`): when the block ending there is freed."""
        return self.spec.computed_skipping(self.window, tokens)

    def needed_hit_blocks(self, hit_blocks: int, block_size: int) -> int:
        """A prefix hit of ``hit_blocks`` blocks needs this group's last this-many of them cached (all of them
        for full attention; the window's for sliding (cdiv(W - 1, B), as vLLM); the current chunk's for chunked)."""
        return self.spec.needed_hit_blocks(self.window, hit_blocks, block_size)


@dataclass(frozen=True)
class KVLayout:
    groups: tuple[KVGroup, ...]
    block_size: int  # tokens per attention block
    unit_bytes: int  # bytes of one unit
    pool_blocks: tuple[int, ...]  # blocks of each pool
    pool_page_units: tuple[int, ...]  # page size of each pool
    mode: str  # "shared" or "split"
    group_size: int = 0  # layers a shared page spans

    @property
    def total_units(self) -> int:
        return sum(b * p for b, p in zip(self.pool_blocks, self.pool_page_units))


def max_blocks_per_request(
    kind: str, window: int, block_size: int, max_model_len: int, chunk: int, state_pages: int = 1
) -> int:
    """Blocks one group holds for a request of ``max_model_len`` tokens at its peak, computed in prefill
    chunks of ``chunk`` tokens (0: whole), as vLLM's ``max_memory_usage_bytes``: every token (full); the
    last W - 1 computed tokens plus the chunk, one more block because the window need not start at a block
    boundary (sliding); the chunk's tokens plus the prefill chunk (chunked); ``state_pages`` pages (mamba: one,
    or two with prefix caching, whose ``align`` mode keeps the last block-aligned state beside the running one):
    :meth:`LayerKind.max_blocks` of the kind named ``kind``."""
    return KINDS[kind].max_blocks(window, block_size, max_model_len, chunk, state_pages)


def max_concurrency(layout: KVLayout, max_model_len: int, chunk: int, state_pages: int = 1) -> float:
    """vLLM's 'maximum concurrency' of a layout: the pool's blocks over the blocks one max-length request
    needs at its peak, summed over groups (for split pools, the tightest pool)."""
    need = [0] * len(layout.pool_blocks)
    for g in layout.groups:
        need[g.pool] += max_blocks_per_request(g.kind, g.window, layout.block_size, max_model_len, chunk, state_pages)
    return min(b / n for b, n in zip(layout.pool_blocks, need) if n)


def _kinds(model, windows: bool) -> list[tuple[str, int, int]]:
    """(kind, window, layers) of each kind of layer the model has, in the registry's order (layer_kinds.KINDS)."""
    out = []
    for kind, spec in KINDS.items():
        n = model.count(kind)
        if n:
            out.append((kind, spec.window(model), n))
    if not windows:  # the naive baseline: every attention layer is a full one
        attn = sum(n for k, _, n in out if KINDS[k].attention)
        out = ([("full", 0, attn)] if attn else []) + [t for t in out if not KINDS[t[0]].attention]
    return out


def build_layout(
    model,
    tp: int,
    pool_bytes: int,
    block_size: int,
    max_model_len: int,
    mode: str = "shared",
    windows: bool = True,
    prefill_chunk: int = 0,
) -> KVLayout:
    """The groups and pools of ``model`` on one of ``tp`` GPUs in a KV pool of ``pool_bytes`` bytes."""
    if mode not in ("shared", "split"):
        raise ValueError(f"layout mode '{mode}'")
    kinds = _kinds(model, windows)
    tb = model.kv_bytes_per_token_layer(tp) if model.attention_layers else 0
    sb = model.state_bytes_per_layer(tp) if model.state_layers else 0
    unit = math.gcd(tb, sb) or 1
    tu, su = tb // unit, sb // unit
    has_attn = any(KINDS[k].attention for k, _, _ in kinds)
    B = block_size
    groups: list[KVGroup] = []
    if mode == "shared":
        counts = [n for _, _, n in kinds]
        size = min(counts)
        if max(counts) < 1.25 * size:
            size = max(counts)
        if su and has_attn:  # the attention page must hold a group's states
            B = max(B, KERNEL_BLOCK_ALIGNMENT * -(-(size * su) // (KERNEL_BLOCK_ALIGNMENT * size * tu)))
        page = size * B * tu if has_attn else size * su
        for kind, window, n in kinds:
            for start in range(0, n, size):
                real = min(size, n - start)
                attention = KINDS[kind].attention
                groups.append(
                    KVGroup(kind, real, window, real * tu if attention else 0, 0 if attention else real * su, page, 0)
                )
        pool_bytes_per = [pool_bytes]
        pages = (page,)
    else:
        need = []  # units one max-length sequence needs in each pool: the split's weights
        for i, (kind, window, n) in enumerate(kinds):
            if not KINDS[kind].attention:
                groups.append(KVGroup(kind, n, 0, 0, n * su, n * su, i))
                need.append(n * su)
            else:
                groups.append(KVGroup(kind, n, window, n * tu, 0, B * n * tu, i))
                need.append(max_blocks_per_request(kind, window, B, max_model_len, prefill_chunk) * B * n * tu)
        total = sum(need)
        pool_bytes_per = [pool_bytes * w // total for w in need]
        pages = tuple(g.page_units for g in groups)
    blocks = tuple(int(b // (p * unit)) for b, p in zip(pool_bytes_per, pages))
    if not any(blocks) or min(blocks) < 1:
        raise ConfigError(
            f"a KV pool of {pool_bytes:,} bytes holds no page of {model.name} in every group"
            f" ({', '.join(f'{p * unit:,} B' for p in pages)} per page)"
        )
    return KVLayout(tuple(groups), B, unit, blocks, pages, mode, groups[0].layers if mode == "split" else size)


def pages_at(layout: KVLayout, tokens: int, windows: bool = True) -> list[int]:
    """Pages each group holds for one sequence decoding its ``tokens``-th token (windows freed as vLLM)."""
    B = layout.block_size
    out = []
    for g in layout.groups:
        if not g.attention:
            out.append(1)
        else:
            skipped = g.skipped_tokens(tokens - 1) // B if windows and g.windowed else 0
            out.append(-(-tokens // B) - skipped)
    return out


def sequences_at(layout: KVLayout, tokens: int, windows: bool = True) -> int:
    """Sequences of ``tokens`` tokens each that fit at once (every pool must hold its share)."""
    need = [0] * len(layout.pool_blocks)
    for g, n in zip(layout.groups, pages_at(layout, tokens, windows)):
        need[g.pool] += n
    return min(b // n for b, n in zip(layout.pool_blocks, need) if n)


def single_group_layout(pool_units: int, block_size: int) -> KVLayout:
    """One full-attention group over ``pool_units`` one-token units (a plain model without a model spec)."""
    return KVLayout(
        (KVGroup("full", 1, 0, 1, 0, block_size, 0),),
        block_size,
        1,
        (pool_units // block_size,),
        (block_size,),
        "shared",
        1,
    )
