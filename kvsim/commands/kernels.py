"""`kvsim kernels replay | bench`: run, check and time the Triton kernels."""

from __future__ import annotations

import argparse
import reprlib

from kvsim.commands.args import DEFAULT_OUT, any_int, int_list, positive, positive_int


def _write_rows(rows: list[dict], out: str) -> None:
    import pandas as pd

    from kvsim.files import atomic_path

    with atomic_path(out) as tmp:
        pd.DataFrame(rows).to_csv(tmp, index=False)


def cmd_replay(a: argparse.Namespace) -> int:
    from kvsim.files import check_output_file
    from kvsim.replay.replay import ReplayOptions, replay

    check_output_file(a.output, "-o", [a.record])
    rows = replay(a.record, ReplayOptions(a.device, a.sample, a.check_seqs, a.max_pool_gib, a.seed))
    if not rows:
        print(f"{a.record}: no iterations recorded")
        return 1
    _write_rows(rows, a.output)
    bad = [r for r in rows if not r["ok"]]
    print(
        f"replayed {len(rows)} iterations of {a.record} on {rows[0]['device']} ({rows[0]['check']});"
        f" {len(rows) - len(bad)} match the reference; timing: {rows[0]['impl']}"
    )
    print(f"{'group':>6} {'kind':>7} {'seqs':>5} {'tokens':>7} {'context':>8} {'time ms':>9} {'max err':>9} ok")
    for r in rows:
        print(
            f"{r['group']:>6} {r['kind']:>7} {r['num_seqs']:>5} {r['new_tokens']:>7} {r['total_context']:>8}"
            f" {1000 * r['time_s']:9.3f} {r['max_abs_err']:9.2e} {'yes' if r['ok'] else 'NO'}"
        )
    print(f"wrote {a.output}")
    return 0 if not bad else 1


MAX_PAIR_TOKENS = 1 << 24  # --prefill: tokens of a chunk or of its cached context (16M: beyond any model's context)


def _prefill_pairs(text: str | None) -> list[tuple[int, int]]:
    """``512:0,512:2048`` -> [(512, 0), (512, 2048)]"""
    out = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        chunk, _, cached = part.partition(":")
        try:  # ASCII digits only (int() also reads other scripts'), and short enough for a float
            c, k = (int(chunk), int(cached or 0)) if part.isascii() and len(part) <= 24 else (-1, -1)
        except ValueError:
            c = k = -1
        if not (1 <= c <= MAX_PAIR_TOKENS and 0 <= k <= MAX_PAIR_TOKENS):
            raise argparse.ArgumentTypeError(
                f"expected CHUNK:CACHED pairs of integers (1 <= CHUNK, 0 <= CACHED, "
                f"each at most {MAX_PAIR_TOKENS:,}), got {reprlib.repr(part)}"
            )
        out.append((c, k))
    return out


def cmd_bench(a: argparse.Namespace) -> int:
    from kvsim.files import check_output_file
    from kvsim.hardware import get_gpu
    from kvsim.replay.bench import BenchOptions, bench

    check_output_file(a.output, "-o")
    peak = get_gpu(a.gpu).hbm_bandwidth if a.gpu else None
    opts = BenchOptions(
        a.batch,
        a.context,
        a.block_size,
        a.dtype,
        a.q_heads,
        a.kv_heads,
        a.head_dim,
        peak,
        a.device,
        a.max_pool_gib,
        a.seed,
        a.prefill,
    )
    rows = bench(opts)
    _write_rows(rows, a.output)
    r0 = rows[0]
    known = r0["peak_bw"] == r0["peak_bw"]  # NaN: no GPU preset to compare with (a CPU run without --gpu)
    print(
        f"attention kernels on {r0['device']}, timing: {r0['impl']}; "
        + (
            f"peak bandwidth {r0['peak_bw'] / 1e12:.2f} TB/s"
            if known
            else "no peak bandwidth to compare with (give --gpu)"
        )
    )
    print(
        f"{'block':>5} {'batch':>5} {'context':>7} {'time ms':>9} {'GB/s':>8} {'% peak':>7} {'sdpa ms':>9} {'vs sdpa':>8}"
    )

    def cell(v: float, width: int, digits: int) -> str:
        return f"{v:{width}.{digits}f}" if v == v else f"{'-':>{width}}"

    for r in rows:
        if r["kind"] != "decode":
            continue
        print(
            f"{r['block_size']:>5} {r['num_seqs']:>5} {r['max_context']:>7} {1000 * r['time_s']:9.3f}"
            f" {r['achieved_bw'] / 1e9:8.1f} {cell(100 * r['frac_of_peak'], 7, 1)} {cell(1000 * r['sdpa_time_s'], 9, 3)}"
            f" {cell(r['ratio_vs_sdpa'], 8, 2)}"
        )
    print(f"wrote {a.output}")
    return 0


def _device_pool_seed_output(p: argparse.ArgumentParser, pool: str, gpu_gib: str, name: str) -> None:
    """The arguments replay and bench share: device, pool size guard, seed, output CSV."""
    p.add_argument("--device", choices=["cuda", "cpu"], help="[default: cuda if a GPU is visible, else cpu]")
    p.add_argument(
        "--max-pool-gib",
        type=positive,
        default=None,
        help=f"refuse {pool} larger than this, GiB [default: {gpu_gib} on a GPU, 1 on CPU]",
    )
    p.add_argument("--seed", type=any_int, default=0, help="random seed of the K/V/Q values [default: 0]")
    p.add_argument(
        "-o",
        "--output",
        default=f"{DEFAULT_OUT}/kernels/{name}.csv",
        help=f"CSV to write [default: {DEFAULT_OUT}/kernels/{name}.csv]",
    )


def register(sub) -> None:
    k = sub.add_parser("kernels", help="run, check and time the Triton kernels (needs PyTorch and Triton)")
    ksub = k.add_subparsers(dest="kernels_command", required=True, metavar="{replay,bench}")
    rp = ksub.add_parser("replay", help="replay a recorded run's batches (see --record-batches) on the kernels")
    rp.add_argument("record", help="a record from `kvsim run --record-batches FILE`")
    rp.add_argument(
        "--sample",
        type=positive_int,
        default=None,
        help="iterations to replay, evenly spaced [default: 20 on a GPU, 4 on CPU]",
    )
    rp.add_argument(
        "--check-seqs",
        type=positive_int,
        default=4,
        help="cpu: sequences per iteration checked in the interpreter [default: 4]",
    )
    _device_pool_seed_output(rp, "a one-layer KV pool", "8", "replay")
    rp.set_defaults(func=cmd_replay)
    bn = ksub.add_parser("bench", help="attention kernels over batch x context x block size")
    bn.add_argument("--batch", type=int_list(), default=None, help="sequences [default: 1,8,64 on a GPU; 1,4 on CPU]")
    bn.add_argument(
        "--context", type=int_list(), default=None, help="context tokens [default: 512,4096 on a GPU; 64,256 on CPU]"
    )
    bn.add_argument(
        "--prefill",
        type=_prefill_pairs,
        default=[],
        help="prefill rows too: CHUNK:CACHED pairs, e.g. 512:0,512:2048,2048:0",
    )
    bn.add_argument("--block-size", type=int_list(), default=[16], help="tokens per KV block [default: 16]")
    bn.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"], help="[default: bf16]")
    bn.add_argument("--q-heads", type=positive_int, default=32, help="query heads [default: 32]")
    bn.add_argument("--kv-heads", type=positive_int, default=8, help="KV heads [default: 8]")
    bn.add_argument("--head-dim", type=positive_int, default=128, help="head dimension [default: 128]")
    bn.add_argument(
        "--gpu",
        help="GPU preset whose peak bandwidth results are compared to [default: the GPU it runs "
        "on, when it is a preset; on CPU, none]",
    )
    _device_pool_seed_output(bn, "a KV pool", "40", "bench")
    bn.set_defaults(func=cmd_bench)
