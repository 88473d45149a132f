"""Where one GPU's memory goes before any request arrives, and how many sequences its KV pool holds.

The numbers behind `kvsim memory`: GPU memory x utilization = weights / tp + activation reserve + KV
pool (the pool sizing of kvsim/config.py), KV bytes per token (2 x layers x kv_heads x head_dim x KV
dtype bytes, split over tensor-parallel ranks), blocks, and vLLM's "maximum concurrency": the pool's
blocks over the blocks one request of ``max_model_len`` tokens needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvsim.activation_reserve import ReserveParts
from kvsim.config import GiB, SimConfig, reserve_bytes, reserve_parts, served_layout, state_pages
from kvsim.hardware.layer_kinds import KINDS as LAYER_KINDS
from kvsim.releases import kv_size_from_concurrency


@dataclass(frozen=True)
class MemoryBudget:
    model: str
    gpu: str
    tp: int
    gpu_bytes: int  # one GPU's memory
    usable_bytes: float  # x gpu_memory_utilization
    weight_bytes: float  # per GPU
    reserve_bytes: float  # activations, CUDA graphs, workspace (per GPU)
    pool_bytes: int  # KV pool per GPU
    pool_source: str  # how the pool size was decided
    kv_bytes_per_token_model: int  # the whole model (all ranks)
    kv_bytes_per_token_gpu: int  # one rank's share
    kv_formula: str
    block_size: int  # tokens
    max_model_len: int  # tokens
    params: float
    weight_dtype: str
    kv_dtype: str
    layer_mix: str = ""  # models whose layers differ: what each kind is
    state_bytes_per_seq: int = 0  # recurrent state of one sequence on one GPU
    layouts: tuple = ()  # (allocator, KVLayout, windows) for models whose layers differ
    prefill_chunk: int = 0  # tokens per prefill chunk (0: whole prompts)
    kv_heads: int = 0  # the model's KV heads
    pp: int = 1  # pipeline stages
    stage_layers: int = 0  # layers of the largest stage (pp > 1)
    model_layers: int = 0
    dp: int = 1  # data-parallel ranks (each its own KV pool and sequences)
    expert_bytes: float = 0.0  # of weight_bytes: the routed experts' share on this GPU (dp > 1)
    quant_detail: str = ""  # ModelSpec.quant_detail ('' unless quantized)
    expert_dtype: str = ""  # the routed experts' own dtype ('' : as the other weights)
    expert_padding_bytes: float = 0.0  # of weight_bytes: MXFP4 experts' padding in vLLM's kernel layout
    draft_bytes: float = 0.0  # of weight_bytes: the speculative drafter's own weights on this GPU
    reserve_how: str = ""  # how the activation reserve was sized ('' : --activation-reserve-gb)
    dtype: str = ""  # the model's own dtype (a quantized model's embedding and LM head)
    vllm_layout: str = "hybrid"  # the layout vLLM serves the layers in (config.served_layout: paged, hybrid or naive)
    vllm_version: str | None = None  # --vllm-version, when given
    recurrent: str = "mamba"  # what its recurrent layers are (recurrent_kind)
    # recurrent-state pages a request holds per group at its peak: 2 with prefix caching (vLLM's align mode)
    state_pages: int = 1

    @property
    def pool_tokens(self) -> int:
        return self.pool_bytes // self.kv_bytes_per_token_gpu

    @property
    def num_blocks(self) -> int:
        return self.pool_tokens // self.block_size

    @property
    def blocks_per_request(self) -> int:
        """Blocks a request of max_model_len tokens needs."""
        return -(-self.max_model_len // self.block_size)

    @property
    def max_concurrency(self) -> float:
        """vLLM's 'Maximum concurrency for max_model_len tokens per request' (a ratio, as vLLM prints it)."""
        return self.num_blocks / self.blocks_per_request

    @property
    def full_length_sequences(self) -> int:
        """Requests of max_model_len tokens that fit at once, whole."""
        return math.floor(self.max_concurrency)

    def sequences_at(self, tokens: int) -> int:
        """Requests of ``tokens`` tokens each that fit at once in paged blocks."""
        return self.num_blocks // -(-tokens // self.block_size)

    def concurrency_by_layout(self) -> dict[str, float]:
        """vLLM's maximum concurrency under each layer-group layout (peak blocks of a max-length request)."""
        from kvsim.allocators.kv_groups import max_concurrency

        return {
            name: max_concurrency(lay, self.max_model_len, self.prefill_chunk, self.state_pages)
            for name, lay, _ in self.layouts
        }

    def vllm_kv_size_tokens(self, conc: dict[str, float]) -> int:
        """What vLLM's log calls "GPU KV cache size" for a model whose layers differ, in the layout and by the
        formula of the release (kvsim.releases): concurrency x max_model_len, or, up to 0.19, the pool's blocks
        // KV cache groups x block size (without the hybrid manager: one group of every layer)."""
        if kv_size_from_concurrency(self.vllm_version):
            return int(conc[self.vllm_layout] * self.max_model_len)
        if self.vllm_layout != "hybrid":
            return self.num_blocks * self.block_size
        lay = next(lay for name, lay, _ in self.layouts if name == "hybrid")
        return lay.pool_blocks[0] // len(lay.groups) * lay.block_size

    def sequences_by_layout(self, tokens: int) -> dict[str, int]:
        """Models whose layers differ: sequences of ``tokens`` tokens that fit at once under each layer-group
        allocator (naive, static-split, hybrid)."""
        from kvsim.allocators.kv_groups import sequences_at

        return {name: sequences_at(lay, tokens, windows) for name, lay, windows in self.layouts}


def memory_budget(cfg: SimConfig) -> MemoryBudget:
    m, gpu, tp = cfg.model, cfg.gpu, cfg.tp
    stage = cfg.memory_model  # what one GPU holds (the largest pipeline stage)
    pool = cfg.pool_plan()
    kv_dtype = m.kv_dtype or m.dtype
    layers = f"({m.layers} + {m.draft_layers} draft)" if m.draft_layers else f"{m.layers}"
    formula = f"2 x {layers} layers x {m.kv_heads} KV heads x {m.head_dim} dims x {m.kv_dtype_bytes} B"
    mix, layouts = "", ()
    if m.is_mla:
        layers = f"({m.attention_layers} + {m.draft_layers} draft)" if m.draft_layers else f"{m.attention_layers}"
        formula = (
            f"{layers} layers x ({m.kv_lora_rank} latent + {m.qk_rope_head_dim} rope) x {m.kv_dtype_bytes} B (MLA)"
        )
    elif m.attention_layers != m.layers:
        formula = (
            f"2 x {m.attention_layers} KV layers x {m.kv_heads} KV heads x {m.head_dim} dims x {m.kv_dtype_bytes} B"
        )
    if m.is_hybrid:
        from kvsim.allocators.registry import KINDS, ModelMemory, kind_layout

        mix = layer_mix(m)
        memory = ModelMemory(m, tp, pool.pool_bytes, cfg.scheduler.prefill_chunk)
        layouts = tuple(
            (k.name, kind_layout(k.name, memory, cfg.block_size, cfg.scheduler.max_model_len), k.layout[1])
            for k in KINDS.values()
            if k.layer_groups
        )
    parts = reserve_parts(stage, gpu, cfg.memory, tp, cfg.scheduler)
    return MemoryBudget(
        model=m.name,
        gpu=gpu.name,
        tp=tp,
        gpu_bytes=gpu.memory_bytes,
        usable_bytes=gpu.memory_bytes * cfg.memory.gpu_memory_utilization,
        weight_bytes=stage.gpu_weight_bytes(tp, cfg.dp, gpu),
        reserve_bytes=reserve_bytes(stage, gpu, cfg.memory, tp, parts=parts),
        pool_bytes=pool.pool_bytes,
        pool_source=pool.source,
        kv_bytes_per_token_model=m.kv_bytes_per_token,
        kv_bytes_per_token_gpu=pool.kv_bytes_per_token,
        kv_formula=formula,
        block_size=cfg.block_size,
        max_model_len=cfg.scheduler.max_model_len,
        params=m.params,
        weight_dtype=m.weight_dtype or m.dtype,
        quant_detail=m.quant_detail,
        expert_dtype=m.expert_dtype or "",
        expert_padding_bytes=stage.expert_padding_bytes(gpu, tp * cfg.dp),
        dtype=m.dtype,
        draft_bytes=m.draft_weight_bytes / tp,
        reserve_how=_reserve_how(parts),
        kv_dtype=kv_dtype,
        layer_mix=mix,
        state_bytes_per_seq=m.state_layers * m.state_bytes_per_layer(tp),
        layouts=layouts,
        prefill_chunk=cfg.scheduler.prefill_chunk,
        pp=cfg.pp,
        stage_layers=stage.layers,
        model_layers=m.layers,
        kv_heads=m.kv_heads,
        dp=cfg.dp,
        expert_bytes=stage.expert_weight_bytes() / (tp * cfg.dp) if cfg.dp > 1 else 0.0,
        vllm_layout=served_layout(cfg),
        vllm_version=cfg.vllm_version,
        recurrent=recurrent_kind(m),
        state_pages=state_pages(cfg),
    )


def _reserve_how(parts: ReserveParts | None) -> str:
    """What the vLLM-profile reserve is made of (config.reserve_parts; '' for a fixed one)."""
    if parts is None:
        return ""
    peak = f"sampler {_size(parts.sampler)}" if parts.sampler >= parts.forward else f"forward {_size(parts.forward)}"
    return (
        f"{peak} peak + non-torch {_size(parts.non_torch)}"
        + (f" + runner buffers {_size(parts.buffers)}" if parts.buffers else "")
        + (f" + CUDA graphs {_size(parts.graphs)}" if parts.graphs else "")
    )


def recurrent_kind(m) -> str:
    """What the model's recurrent layers are, as people call them."""
    return LAYER_KINDS["mamba"].label(m)


def layer_mix(m) -> str:
    """'21 sliding (4,096) + 21 full': the model's layers by kind."""
    parts = []
    for name, kind in LAYER_KINDS.items():
        n = m.count(name)
        if n:
            w = kind.window(m)
            parts.append(f"{n} {kind.label(m)}" + (f" ({w:,})" if w else ""))
    return " + ".join(parts)


def _size(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (KiB, MiB, GiB)."""
    for unit, scale in (("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def describe(b: MemoryBudget) -> list[tuple[str, str]]:
    """(label, value) lines, the same in the terminal and in tests."""
    tp = f", / {b.tp}" if b.tp > 1 else ""
    if b.pp > 1:
        tp = f", a stage of {b.stage_layers} of {b.model_layers} layers" + tp
    if b.expert_bytes:
        tp += (
            f"; of it {_size(b.expert_bytes)} routed experts, spread over all {b.dp} x {b.tp} GPUs, the rest "
            f"held by each data-parallel rank"
        )
    is_set = b.pool_source.startswith("--")  # --kv-pool-gb / --num-blocks rather than derived
    lines = [
        ("GPU memory", f"{_size(b.gpu_bytes)} per GPU"),
        ("usable (x utilization)", f"{_size(b.usable_bytes)}"),
        ("weights", f"{_size(b.weight_bytes)} per GPU ({b.params / 1e9:.2f} B params, {b.weight_dtype}{tp})"),
        *([("", f"as {b.quant_detail}"), ("", f"embedding and LM head in {b.dtype}")] if b.quant_detail else []),
        *([("", f"routed experts in {b.expert_dtype}")] if b.expert_dtype else []),
        *(
            [("", f"{_size(b.expert_padding_bytes)} of them padding (vLLM's MXFP4 layout)")]
            if b.expert_padding_bytes
            else []
        ),
        *([("", f"of it {_size(b.draft_bytes)} the speculative drafter's")] if b.draft_bytes else []),
        (
            "activation reserve",
            f"{_size(b.reserve_bytes)}"
            + (" (vLLM's start-up profile)" if b.reserve_how else " (--activation-reserve-gb)"),
        ),
        *([("", f"= {b.reserve_how}")] if b.reserve_how else []),
        (
            "KV pool",
            f"{_size(b.pool_bytes)} per GPU"
            + (f" (set: {b.pool_source})" if is_set else "")
            + (f", each of {b.dp} data-parallel ranks caching only its own sequences" if b.dp > 1 else ""),
        ),
        ("KV per token", f"{_size(b.kv_bytes_per_token_model)} for the whole model ({b.kv_dtype})"),
        ("", f"= {b.kv_formula}"),
    ]
    if b.tp > 1 or b.pp > 1:
        split = (
            []
            if b.tp == 1
            else [
                "the MLA latent is not split"
                if b.kv_formula.endswith("(MLA)")
                else f"KV heads split over {b.tp}"
                if b.tp <= b.kv_heads
                else f"one KV head per GPU, each replicated on {b.tp // b.kv_heads}"
            ]
        )
        split += [f"{b.stage_layers} of {b.model_layers} layers per pipeline stage"] if b.pp > 1 else []
        lines.append(("KV per token per GPU", f"{_size(b.kv_bytes_per_token_gpu)} ({'; '.join(split)})"))
    if b.layer_mix:
        lines.insert(next(i for i, (k, _) in enumerate(lines) if k == "KV pool") + 1, ("layers", b.layer_mix))
        lines.append(("", "(every attention layer keeping every token)"))
    if b.state_bytes_per_seq:
        lines.append(("recurrent state", f"{_size(b.state_bytes_per_seq)} per sequence per GPU ({b.recurrent} layers)"))
    lines += [
        ("token slots", f"{b.pool_tokens:,} per GPU"),
        ("blocks", f"{b.num_blocks:,} of {b.block_size} tokens"),
        ("max model len", f"{b.max_model_len:,} tokens = {b.blocks_per_request:,} blocks"),
        ("maximum concurrency", f"{b.max_concurrency:,.2f}x for {b.max_model_len:,}-token requests (as vLLM)"),
    ]
    if b.layouts:
        conc = b.concurrency_by_layout()
        lines[-1] = ("maximum concurrency", ", ".join(f"{n} {c:,.1f}x" for n, c in conc.items()))
        lines.append(
            (
                "",
                "(as vLLM: a max-length request at its peak"
                + (
                    f"; with prefix caching two state pages per {b.recurrent} group, vLLM's align mode)"
                    if b.state_pages == 2
                    else ")"
                ),
            )
        )
        lines.append(
            (
                "vLLM's KV cache size",
                f"{b.vllm_kv_size_tokens(conc):,} tokens ("
                + (
                    "hybrid"
                    if b.vllm_layout == "hybrid"
                    else f"naive: vLLM {b.vllm_version} serves this model without its hybrid manager"
                )
                + ", as its log says)",
            )
        )
        fits = b.sequences_by_layout(b.max_model_len)
        lines.append(("max-length sequences", "fit: " + ", ".join(f"{n} {k:,}" for n, k in fits.items())))
        lines.append(("", "(decoding, windows freed)"))
    return lines
