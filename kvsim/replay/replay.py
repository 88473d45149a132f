"""`kvsim kernels replay`: run a recorded simulation's batches through the kernels.

Builds a one-layer KV pool with the run's block count and layout, takes an evenly spaced sample of
recorded iterations, runs each through the Triton kernel with the recorded block tables and context
lengths (decode kernel for all-decode iterations, the prefill kernel for iterations with prompt chunks),
checks the output against the torch reference, and times it. On a GPU the kernel is timed with
triton.testing.do_bench; on CPU the Triton interpreter only checks correctness (on up to
``check_seqs`` sequences per iteration) and the timing is of the torch reference: a pipeline check,
not a GPU number, and labelled so in the CSV.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from kvsim.replay.measure import kv_bytes_read, make_pool, time_it, torch_dtype
from kvsim.replay.record import read_record


@dataclass
class ReplayOptions:
    device: str | None = None
    sample: int = 20
    check_seqs: int = 4  # CPU: sequences per iteration checked in the interpreter
    max_pool_gib: float = 8.0
    seed: int = 0


def replay(path: str, opts: ReplayOptions) -> "list[dict]":
    import torch

    from kvsim.replay.measure import load_kernels as load

    K = load(opts.device)
    header, groups = read_record(path)
    all_groups = list(groups)
    if not all_groups:
        return []
    m = header["model"]
    dtype = torch_dtype(m["dtype"])
    B = header["block_size"]
    hq, hkv, dim = m["q_heads"], m["kv_heads"], m["head_dim"]
    elem = torch.tensor([], dtype=dtype).element_size()
    kc, vc = make_pool(header["num_blocks"], B, hkv, dim, dtype, K.device, opts.max_pool_gib, opts.seed)
    n = min(opts.sample, len(all_groups))
    picks = sorted({round(i * (len(all_groups) - 1) / max(n - 1, 1)) for i in range(n)})
    g = torch.Generator().manual_seed(opts.seed)
    rows = []
    scale = dim ** -0.5
    for gi in picks:
        grp = all_groups[gi]
        it = grp["steps"] // 2  # a decode run's middle iteration
        seqs = [(ctx + it, new, grp["tables"][str(sid)]) for sid, ctx, new in grp["seqs"]]
        ctxs = [c for c, _, _ in seqs]
        news = [q for _, q, _ in seqs]
        width = max(-(-c // B) for c in ctxs)
        bt = torch.full((len(seqs), width), header["num_blocks"] + 7, dtype=torch.int32)  # padding: out of range
        for i, (c, _, table) in enumerate(seqs):
            pages = -(-c // B)
            bt[i, :pages] = torch.tensor(table[:pages], dtype=torch.int32)
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
        err, ok = _check(K, decode, q, kc, vc, bt, lens, news, scale, run, ref_fn, opts.check_seqs, dtype)
        if K.device == "cuda":
            t, impl = time_it(run, "cuda"), K.mode
        else:
            t, impl = time_it(ref_fn, "cpu", reps=3), "torch-reference-cpu (pipeline check, not a GPU number)"
        rows.append({"source": f"replay:{path}", "device": K.device, "impl": impl,
                     "kind": "decode" if decode else "mixed", "dtype": m["dtype"], "block_size": B,
                     "q_heads": hq, "kv_heads": hkv, "head_dim": dim, "num_seqs": len(seqs),
                     "new_tokens": sum(news), "total_context": sum(ctxs), "max_context": max(ctxs),
                     "kv_bytes": kv_bytes_read(ctxs, hkv, dim, elem), "time_s": t,
                     "group": gi, "sim_t": grp["t"], "sim_step_s": grp["dt"] / grp["steps"],
                     "max_abs_err": err, "ok": ok, "check": K.mode})
    return rows


def _check(K, decode, q, kc, vc, bt, lens, news, scale, run, ref_fn, check_seqs, dtype):
    """Max |kernel - reference| and whether it is within tolerance. On CPU the interpreter checks a subset."""
    import torch

    tol = {torch.float32: 2e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    if K.device == "cuda":
        out, ref = run(), ref_fn()
    else:
        keep = list(range(min(check_seqs, len(news))))
        if decode:
            sub = (q[keep], kc, vc, bt[keep], lens[keep])
            out = K.paged_decode_attention(*sub, scale)
            ref = K.paged_decode_attention_ref(*sub, scale)
        else:
            cum = [0]
            for i in keep:
                cum.append(cum[-1] + news[i])
            starts = torch.tensor(cum, dtype=torch.int32)
            qs = q[: cum[-1]]
            out = K.paged_prefill_attention(qs, kc, vc, bt[keep], lens[keep], starts, scale)
            ref = K.paged_prefill_attention_ref(qs, kc, vc, bt[keep], lens[keep], starts, scale)
    diff = (out.float() - ref.float()).abs()
    err = float(diff.max()) if diff.numel() else 0.0
    ok = bool(torch.allclose(out.float(), ref.float(), atol=tol, rtol=tol)) and not bool(torch.isnan(out).any())
    return err, ok
