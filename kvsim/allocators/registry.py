"""Allocator names -> specs -> allocator objects: the one place that parses, formats and builds them.

Grammar: ``KIND[:BLOCK][+prefix]``

- ``max``, ``pow2``, ``oracle``: contiguous reservations (no block size);
- ``paged[:B][+prefix]``: paged blocks of B tokens; ``+prefix`` adds vLLM V1 automatic prefix caching;
- ``radix[:B]``: paged blocks with an SGLang radix-tree prefix cache;
- ``hybrid[:B][+prefix]``, ``static-split[:B][+prefix]``, ``naive[:B][+prefix]``: one block table per layer
  group for models that mix full, sliding-window, chunked and mamba layers (hybrid.py, kv_groups.py): vLLM
  V1's hybrid manager (one shared pool), TensorRT-LLM's pool per kind (split at start-up), and every
  attention layer treated as full (mamba states still per sequence).

A block size left out takes the run's ``--block-size`` (default 16), and ``--enable-prefix-caching``
turns ``paged`` into ``paged+prefix``; :meth:`AllocatorSpec.resolve` applies both, after which the
canonical name (``str(spec)``) identifies the allocator exactly.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from typing import Callable

from kvsim.allocators.base import KVAllocator
from kvsim.errors import ConfigError

DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True)
class AllocatorSpec:
    kind: str
    block_size: int | None = None  # tokens per block (kinds with blocks); None = the run's default
    prefix: bool = False  # vLLM V1 prefix caching (paged)

    def resolve(self, block_size: int = DEFAULT_BLOCK_SIZE, enable_prefix_caching: bool = False) -> "AllocatorSpec":
        """Fill in what the name left to the run's options."""
        k = KINDS[self.kind]
        return replace(
            self,
            block_size=(self.block_size or block_size) if k.blocks else None,
            prefix=self.prefix or (enable_prefix_caching and k.prefix_option),
        )

    def with_block_size(self, block_size: int) -> "AllocatorSpec":
        if not KINDS[self.kind].blocks:
            raise ConfigError(f"allocator '{self}' has no blocks (block size {block_size})")
        return replace(self, block_size=block_size)

    @property
    def has_blocks(self) -> bool:
        return KINDS[self.kind].blocks

    def __str__(self) -> str:
        name = self.kind
        if self.block_size is not None:
            name += f":{self.block_size}"
        if self.prefix:
            name += "+prefix"
        return name


@dataclass(frozen=True)
class ModelMemory:
    """What allocators that lay out per-layer caches need: the model, the tensor-parallel size and the
    pool's bytes on one GPU."""

    model: object  # ModelSpec
    tp: int
    pool_bytes: int
    prefill_chunk: int = 0  # tokens a prompt is computed in at most (0: whole); sizes split pools


@dataclass(frozen=True)
class AllocatorKind:
    name: str
    help: str
    build: Callable[..., KVAllocator]  # (spec, pool_tokens, max_model_len, cpu_swap_tokens, cache_eviction, memory)
    blocks: bool = False  # takes a block size
    prefix_option: bool = False  # accepts +prefix
    examples: tuple[str, ...] = ()  # names the allocator property tests run
    # layer-group kinds: (layout mode, windows free blocks) of kv_groups.build_layout; they hold mamba states
    layout: tuple[str, bool] | None = None

    @property
    def layer_groups(self) -> bool:
        return self.layout is not None


def _contiguous(cls_name: str):
    def build(spec, pool_tokens, max_model_len, cpu_swap_tokens, cache_eviction, memory):
        from kvsim.allocators import contiguous

        return getattr(contiguous, cls_name)(pool_tokens, max_model_len)

    return build


def _paged(spec, pool_tokens, max_model_len, cpu_swap_tokens, cache_eviction, memory):
    from kvsim.allocators.paged import PagedAllocator

    pool = None
    if spec.prefix:
        from kvsim.allocators.hashed_pool import HashedBlockPool

        pool = HashedBlockPool(pool_tokens // spec.block_size, cache_eviction)
    return PagedAllocator(pool_tokens, spec.block_size, cpu_swap_tokens, pool, name=str(spec))


def _radix(spec, pool_tokens, max_model_len, cpu_swap_tokens, cache_eviction, memory):
    from kvsim.allocators.paged import PagedAllocator
    from kvsim.allocators.radix_pool import RadixBlockPool

    pool = RadixBlockPool(pool_tokens // spec.block_size, cache_eviction)
    return PagedAllocator(pool_tokens, spec.block_size, cpu_swap_tokens, pool, name=str(spec))


def kind_layout(kind: str, memory: ModelMemory, block_size: int, max_model_len: int):
    """The page layout (kv_groups.KVLayout) a layer-group kind gives ``memory``'s model and pool."""
    from kvsim.allocators.kv_groups import build_layout

    mode, windows = KINDS[kind].layout
    return build_layout(
        memory.model, memory.tp, memory.pool_bytes, block_size, max_model_len, mode, windows, memory.prefill_chunk
    )


def _grouped(spec, pool_tokens, max_model_len, cpu_swap_tokens, cache_eviction, memory):
    from kvsim.allocators.hybrid import HybridAllocator
    from kvsim.allocators.kv_groups import single_group_layout

    windows = KINDS[spec.kind].layout[1]
    if memory is None:  # no model: one full-attention group over pool_tokens one-token units
        layout, units, cpu, chunk = single_group_layout(pool_tokens, spec.block_size), pool_tokens, cpu_swap_tokens, 0
    else:
        layout = kind_layout(spec.kind, memory, spec.block_size, max_model_len)
        units = memory.pool_bytes // layout.unit_bytes
        cpu = cpu_swap_tokens * memory.model.kv_bytes_per_token_gpu(memory.tp) // layout.unit_bytes
        chunk = memory.prefill_chunk
    return HybridAllocator(layout, units, windows, spec.prefix, cache_eviction, cpu, str(spec), chunk)


KINDS: dict[str, AllocatorKind] = {
    k.name: k
    for k in [
        AllocatorKind(
            "max",
            "contiguous reservation of max_model_len per request (FasterTransformer, Orca (Max))",
            _contiguous("MaxAllocator"),
            examples=("max",),
        ),
        AllocatorKind(
            "pow2",
            "contiguous reservation of the next power of two >= prompt+output (Orca (Pow2))",
            _contiguous("Pow2Allocator"),
            examples=("pow2",),
        ),
        AllocatorKind(
            "oracle",
            "contiguous reservation of exactly prompt+output (Orca (Oracle))",
            _contiguous("OracleAllocator"),
            examples=("oracle",),
        ),
        AllocatorKind(
            "paged",
            "vLLM blocks of B tokens allocated on demand; +prefix: V1 automatic prefix caching",
            _paged,
            blocks=True,
            prefix_option=True,
            examples=("paged:16", "paged:7", "paged:8+prefix"),
        ),
        AllocatorKind(
            "radix",
            "paged blocks with an SGLang radix-tree prefix cache (evicts unreferenced leaves)",
            _radix,
            blocks=True,
            examples=("radix:8",),
        ),
        AllocatorKind(
            "naive",
            "every attention layer kept as full attention (vLLM without the hybrid manager)",
            _grouped,
            blocks=True,
            prefix_option=True,
            examples=("naive:16",),
            layout=("shared", False),
        ),
        AllocatorKind(
            "static-split",
            "TensorRT-LLM style: one pool per layer kind, split at start-up by a max-length sequence's needs",
            _grouped,
            blocks=True,
            prefix_option=True,
            examples=("static-split:16",),
            layout=("split", True),
        ),
        AllocatorKind(
            "hybrid",
            "vLLM V1 hybrid KV cache manager: a table per layer group, one shared pool, windows free"
            " blocks; +prefix: per-group hit rules",
            _grouped,
            blocks=True,
            prefix_option=True,
            examples=("hybrid:16", "hybrid:8+prefix"),
            layout=("shared", True),
        ),
    ]
}


def model_problem(spec: AllocatorSpec, model) -> str | None:
    """Why this allocator cannot serve ``model`` (a ModelSpec), or None."""
    if model.state_layers and not KINDS[spec.kind].layer_groups:
        return (
            f"allocator '{spec}': {model.name} has mamba layers, whose per-sequence state only the layer-group"
            " allocators hold; use hybrid, static-split or naive"
        )
    return None


def allocator_help() -> dict[str, str]:
    """Name pattern -> one-line description, for --help and the docs."""
    out = {}
    for k in KINDS.values():
        pattern = k.name + ("[:B]" if k.blocks else "") + ("[+prefix]" if k.prefix_option else "")
        out[pattern] = k.help
    return out


def example_specs() -> list[str]:
    """Allocator names covering every registered kind (the property tests run each)."""
    return [e for k in KINDS.values() for e in k.examples]


def parse_allocator(text: str) -> AllocatorSpec:
    """``paged:16+prefix`` -> AllocatorSpec('paged', 16, True); errors name the allocator and say why."""
    raw = str(text).strip()
    name = raw.lower()
    head, plus, option = name.partition("+")
    kind, colon, arg = head.partition(":")
    k = KINDS.get(kind)
    if k is None:
        close = difflib.get_close_matches(kind, KINDS, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"unknown allocator '{raw}' (known: {', '.join(allocator_help())}){hint}")
    block = None
    if colon:
        if not k.blocks:
            raise ConfigError(f"allocator '{raw}': {kind} has no block size")
        try:
            block = int(arg)
        except ValueError:
            raise ConfigError(f"allocator '{raw}': block size '{arg}' is not an integer") from None
        if block <= 0:
            raise ConfigError(f"allocator '{raw}': block size must be > 0")
    if plus:
        if option != "prefix" or not k.prefix_option:
            raise ConfigError(
                f"allocator '{raw}': '+{option}' is not an option of {kind}"
                + (" (only +prefix)" if k.prefix_option else "")
            )
    return AllocatorSpec(kind, block, bool(plus))


def parse_allocator_list(
    text: str | list, block_size: int = DEFAULT_BLOCK_SIZE, enable_prefix_caching: bool = False
) -> list[AllocatorSpec]:
    """Comma-separated names -> resolved specs; the same allocator named twice is an error."""
    parts = text if isinstance(text, list) else str(text).split(",")
    specs = [parse_allocator(s).resolve(block_size, enable_prefix_caching) for s in parts if str(s).strip()]
    if not specs:
        raise ConfigError("no allocator given")
    seen: dict[str, str] = {}
    for raw, spec in zip([s for s in parts if str(s).strip()], specs):
        if str(spec) in seen:
            raise ConfigError(f"allocators '{seen[str(spec)]}' and '{raw.strip()}' are both {spec}: name each once")
        seen[str(spec)] = raw.strip()
    return specs


def make_allocator(
    spec: AllocatorSpec | str,
    pool_tokens: int,
    max_model_len: int,
    cpu_swap_tokens: int = 0,
    cache_eviction: str = "lru",
    memory: ModelMemory | None = None,
) -> KVAllocator:
    """Build an allocator, e.g. ``make_allocator("paged:16+prefix", pool_tokens=100_000, max_model_len=4096)``.

    ``cpu_swap_tokens``: host-memory slots for swapped-out KV (paged allocators only);
    ``cache_eviction``: which cached block a prefix cache drops first (cache_eviction.py);
    ``memory``: the model and pool bytes, which the layer-group kinds lay out (without it they see one
    full-attention group of ``pool_tokens`` slots).
    """
    if isinstance(spec, str):
        spec = parse_allocator(spec)
    spec = spec.resolve()
    kind = KINDS[spec.kind]
    if spec.has_blocks and spec.block_size > pool_tokens and not (memory is not None and kind.layer_groups):
        raise ConfigError(
            f"allocator '{spec}': a block of {spec.block_size:,} tokens is larger than the whole pool"
            f" ({pool_tokens:,} token slots)"
        )
    problem = model_problem(spec, memory.model) if memory is not None else None
    if problem:
        raise ConfigError(problem)
    return kind.build(spec, pool_tokens, max_model_len, cpu_swap_tokens, cache_eviction, memory)
