"""`kvsim kernels replay`: run a recorded simulation's batches through the kernels.

Takes an evenly spaced sample of recorded iterations and runs each through the Triton kernel with the
recorded block tables and context lengths (decode kernel for all-decode iterations, the prefill kernel
for iterations with prompt chunks), checks the output against the torch reference, and times it.

On a GPU: a one-layer KV pool with the run's block count and layout (the fragmentation the kernels
really see), every sequence of each sampled iteration, timed with triton.testing.do_bench. On CPU the
Triton interpreter is slow: only the first ``check_seqs`` sequences of each iteration, in a pool of just
the blocks they use (renumbered), checked in the interpreter; the time is the torch reference's on that
subset: a pipeline check, not a GPU number, and labelled so in the CSV.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from kvsim.replay.measure import check_reference_memory, kv_bytes_read, make_pool, time_it, torch_dtype
from kvsim.errors import ConfigError
from kvsim.replay.record import read_record


@dataclass
class ReplayOptions:
    device: str | None = None
    sample: int | None = None  # iterations replayed; None: 20 on a GPU, 4 on CPU
    check_seqs: int = 4  # CPU: sequences per iteration replayed in the interpreter
    max_pool_gib: float | None = None  # None: 8 on a GPU, 1 on CPU
    seed: int = 0


def replay(path: str, opts: ReplayOptions) -> "list[dict]":
    from kvsim.output.progress import Progress
    from kvsim.replay.measure import load_kernels as load

    K = load(opts.device)  # first: without PyTorch or Triton, one line that says how to install them
    import torch

    gpu = K.device == "cuda"
    header, groups = read_record(path)
    all_groups = list(groups)
    if not all_groups:
        return []
    m = header["model"]
    dtype = torch_dtype(m["dtype"])
    B = header["block_size"]
    n = min(opts.sample or (20 if gpu else 4), len(all_groups))
    picks = sorted({round(i * (len(all_groups) - 1) / max(n - 1, 1)) for i in range(n)})
    chosen = {}
    for gi in picks:
        grp = all_groups[gi]
        it = grp["steps"] // 2  # a decode run's middle iteration
        seqs = [(ctx + it, new, grp["tables"][str(sid)]) for sid, ctx, new in grp["seqs"]]
        chosen[gi] = seqs if gpu else seqs[: opts.check_seqs]
    cap = opts.max_pool_gib or (8.0 if gpu else 1.0)
    elem = torch.tensor([], dtype=dtype).element_size()
    for gi, seqs in chosen.items():  # the queries of one replayed iteration
        q_gib = sum(new for _, new, _ in seqs) * m["q_heads"] * m["head_dim"] * elem / (1 << 30)
        if q_gib > cap:
            raise ConfigError(
                f"{path}: iteration group {gi + 1} needs {q_gib:.1f} GiB of queries (> --max-pool-gib "
                f"{cap:g}); raise the limit or record a smaller run"
            )
        for ctx, new, _ in seqs:
            check_reference_memory(ctx, new, m["q_heads"], m["head_dim"], cap, f"{path}: iteration group {gi + 1}")
    if gpu:
        remap, num_blocks = None, header["num_blocks"]
    else:
        used = sorted({b for seqs in chosen.values() for c, _, t in seqs for b in t[: -(-c // B)]})
        remap, num_blocks = {b: i for i, b in enumerate(used)}, max(1, len(used))
    pool = make_pool(num_blocks, B, m["kv_heads"], m["head_dim"], dtype, K.device, cap, opts.seed)
    g = torch.Generator().manual_seed(opts.seed)
    rows = []
    with Progress(len(picks), "replay", log_when_piped=True) as bar:
        for gi in picks:
            rows.append(_replay_group(K, pool, all_groups[gi], gi, chosen[gi], remap, num_blocks, m, dtype, g, path))
            bar.advance()
    return rows


def _replay_group(K, pool, grp, gi, seqs, remap, num_blocks, m, dtype, g, path) -> dict:
    import torch

    kc, vc = pool
    B = kc.shape[1]
    hq, hkv, dim = m["q_heads"], m["kv_heads"], m["head_dim"]
    scale = dim**-0.5
    ctxs = [c for c, _, _ in seqs]
    news = [q for _, q, _ in seqs]
    width = max(-(-c // B) for c in ctxs)
    bt = torch.full((len(seqs), width), num_blocks + 7, dtype=torch.int32)  # padding: out of range
    for i, (c, _, table) in enumerate(seqs):
        pages = table[: -(-c // B)]
        bt[i, : len(pages)] = torch.tensor([remap[b] for b in pages] if remap else pages, dtype=torch.int32)
    bt = bt.to(K.device)
    lens = torch.tensor(ctxs, dtype=torch.int32, device=K.device)
    decode = all(q == 1 for q in news)
    if decode:
        q = torch.randn(len(seqs), hq, dim, generator=g).to(dtype).to(K.device)
        args = (q, kc, vc, bt, lens, scale)
        run = functools.partial(K.paged_decode_attention, *args)
        ref_fn = functools.partial(K.paged_decode_attention_ref, *args)
    else:
        starts = torch.tensor([0] + list(torch.tensor(news).cumsum(0).tolist()), dtype=torch.int32, device=K.device)
        q = torch.randn(int(starts[-1]), hq, dim, generator=g).to(dtype).to(K.device)
        args = (q, kc, vc, bt, lens, starts, scale)
        run = functools.partial(K.paged_prefill_attention, *args)
        ref_fn = functools.partial(K.paged_prefill_attention_ref, *args)
    out, ref = run(), ref_fn()
    tol = {torch.float32: 2e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    diff = (out.float() - ref.float()).abs()
    err = float(diff.max()) if diff.numel() else 0.0
    ok = bool(torch.allclose(out.float(), ref.float(), atol=tol, rtol=tol)) and not bool(torch.isnan(out).any())
    if K.device == "cuda":
        t, impl = time_it(run, "cuda"), K.mode
    else:
        t, impl = time_it(ref_fn, "cpu", reps=3), "torch-reference-cpu (pipeline check, not a GPU number)"
    elem = torch.tensor([], dtype=dtype).element_size()
    return {
        "source": f"replay:{path}",
        "device": K.device,
        "impl": impl,
        "kind": "decode" if decode else "mixed",
        "dtype": m["dtype"],
        "block_size": B,
        "q_heads": hq,
        "kv_heads": hkv,
        "head_dim": dim,
        "num_seqs": len(seqs),
        "seqs_in_iteration": len(grp["seqs"]),
        "new_tokens": sum(news),
        "total_context": sum(ctxs),
        "max_context": max(ctxs),
        "kv_bytes": kv_bytes_read(ctxs, hkv, dim, elem),
        "time_s": t,
        "group": gi,
        "sim_t": grp["t"],
        "sim_step_s": grp["dt"] / grp["steps"],
        "max_abs_err": err,
        "ok": ok,
        "check": K.mode,
    }
