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
    fits: dict[int, dict[str, int]] = {}
    if a.context:
        from kvsim.memory_budget import _size

        for n in a.context:
            label = f"{'at ' + format(n, ',') + ' tokens':<{width}}"
            # exact bytes one sequence holds (each layer its window or state), before block rounding
            print(f"  {label}  {_size(cfg.memory_model.sequence_bytes(n, cfg.tp))} per sequence per GPU")
            if b.layouts:
                fits[n] = dict(b.sequences_by_layout(n))
                print(f"  {'':<{width}}  fit: {', '.join(f'{name} {k:,}' for name, k in fits[n].items())}")
            else:
                fits[n] = {"": b.sequences_at(n)}
                print(f"  {'':<{width}}  {b.sequences_at(n):,} sequences fit at once")
    if a.out:
        _write_budget(a, b, lines, fits)
    problem = cfg.start_problem()
    if problem:
        print(f"warning: {problem}", file=sys.stderr)
    return 0


def _write_budget(a: argparse.Namespace, b, lines: list[tuple[str, str]], fits: dict[int, dict[str, int]]) -> None:
    """memory.csv (one row: the budget in bytes and tokens), memory_lines.csv (the lines printed above) and,
    with --context, fits.csv in ``a.out``."""
    import sys
    from pathlib import Path

    import pandas as pd

    from kvsim.commands.args import result_marker
    from kvsim.files import prepare_results_dir, results_folder

    out = prepare_results_dir(Path(a.out), "--out")
    row = {
        "model": b.model,
        "gpu": b.gpu,
        "tp": b.tp,
        "pp": b.pp,
        "dp": b.dp,
        "gpu_bytes": b.gpu_bytes,
        "usable_bytes": b.usable_bytes,
        "weight_bytes": b.weight_bytes,
        "reserve_bytes": b.reserve_bytes,
        "pool_bytes": b.pool_bytes,
        "kv_bytes_per_token_model": b.kv_bytes_per_token_model,
        "kv_bytes_per_token_gpu": b.kv_bytes_per_token_gpu,
        "pool_tokens": b.pool_tokens,
        "block_size": b.block_size,
        "num_blocks": b.num_blocks,
        "max_model_len": b.max_model_len,
        "max_concurrency": b.max_concurrency,
        "weight_dtype": b.weight_dtype,
        "kv_dtype": b.kv_dtype,
    }
    with results_folder(out, "--out", result_marker(a)) as stage:
        pd.DataFrame([row]).to_csv(stage / "memory.csv", index=False)
        pd.DataFrame(lines, columns=["item", "value"]).to_csv(stage / "memory_lines.csv", index=False)
        if fits:
            rows = [{"context_tokens": n, "layout": k, "sequences": v} for n, by in fits.items() for k, v in by.items()]
            pd.DataFrame(rows).to_csv(stage / "fits.csv", index=False)
    print(f"wrote memory.csv, memory_lines.csv{', fits.csv' if fits else ''} to {out}/", file=sys.stderr)


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
            "cudagraph_capture_sizes",
        ),
    )
    m.add_argument(
        "--context",
        type=positive_int,
        nargs="+",
        metavar="TOKENS",
        help="also say how many sequences of these lengths fit at once (e.g. --context 4096 32768)",
    )
    m.add_argument(
        "--out",
        metavar="DIR",
        help="also write the budget to this folder: memory.csv (bytes and tokens), memory_lines.csv (the lines "
        "printed) and, with --context, fits.csv",
    )
    m.set_defaults(func=cmd_memory)
