"""`kvsim memory`: one GPU's memory budget and how many sequences its KV pool holds (no trace needed)."""

from __future__ import annotations

import argparse


def cmd_memory(a: argparse.Namespace) -> int:
    import sys

    from kvsim.memory_budget import describe, memory_budget
    from kvsim.options import config_from_options, values_from_namespace

    cfg = config_from_options(values_from_namespace(a))
    b = memory_budget(cfg)
    if cfg.model.format_note:
        print(cfg.model.format_note, file=sys.stderr)
    if cfg.scheduler.max_model_len > cfg.model.max_context:
        print(
            f"warning: --max-model-len {cfg.scheduler.max_model_len:,} is beyond {cfg.model.name}'s context "
            f"({cfg.model.max_context:,} tokens)",
            file=sys.stderr,
        )
    tp = (
        (f" x{b.tp} (tensor parallel)" if b.tp > 1 else "")
        + (f" x{b.pp} (pipeline stages)" if b.pp > 1 else "")
        + (f" x{b.dp} (data-parallel ranks)" if b.dp > 1 else "")
    )
    print(f"{b.model} on {b.gpu}{tp}, KV cache {b.kv_dtype}")
    lines = describe(b)
    width = max(len(k) for k, _ in lines)
    for k, v in lines:
        print(f"  {k:<{width}}  {v}")
    if a.context:
        from kvsim.memory_budget import _size

        for n in a.context:
            label = f"{'at ' + format(n, ',') + ' tokens':<{width}}"
            # exact bytes one sequence holds (each layer its window or state), before block rounding
            print(f"  {label}  {_size(cfg.memory_model.sequence_bytes(n, cfg.tp))} per sequence per GPU")
            if b.layouts:
                fits = ", ".join(f"{name} {k:,}" for name, k in b.sequences_by_layout(n).items())
                print(f"  {'':<{width}}  fit: {fits}")
            else:
                print(f"  {'':<{width}}  {b.sequences_at(n):,} sequences fit at once")
    return 0


def register(sub) -> None:
    from kvsim.commands.args import positive_int
    from kvsim.options import add_options

    m = sub.add_parser(
        "memory",
        help="weights, KV pool and maximum concurrency of a model on a GPU",
        description="Where one GPU's memory goes (weights, activation reserve, KV pool), the KV bytes "
        "per token, blocks, and how many requests of --max-model-len tokens fit at once "
        "(vLLM's 'maximum concurrency'). No trace needed.",
    )
    add_options(
        m,
        ("model and hardware", "KV pool"),
        keys=(
            "max_model_len",
            "max_num_seqs",
            "max_num_batched_tokens",
            "speculative_config",
            "acceptance_length",
            "enable_prefix_caching",
        ),
    )
    m.add_argument(
        "--context",
        type=positive_int,
        nargs="+",
        metavar="TOKENS",
        help="also say how many sequences of these lengths fit at once (e.g. --context 4096 32768)",
    )
    m.set_defaults(func=cmd_memory)
