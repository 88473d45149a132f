"""Simulation speed: simulated output tokens and requests per wall-clock second, and peak memory.

Each case runs in a fresh process so that its peak RSS is its own. Usage:
    python benchmarks/sim_speed.py [--sizes 10000,100000] [--allocators paged:16,max] [--rate 7]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time


def one_case(n: int, allocator: str, rate: float, q) -> None:
    from kvsim.options import config_from_args
    from kvsim.config import plan_pool
    from kvsim.runner import simulate
    from kvsim.trace.generate import ArrivalSpec, LengthSpec, generate

    reqs = generate(n, ArrivalSpec("poisson", rate), LengthSpec(), seed=0)
    cfg = config_from_args([])
    pool = plan_pool(cfg.model, cfg.gpu, cfg.memory)
    t0 = time.perf_counter()
    out = simulate(reqs, cfg, allocator, pool)
    wall = time.perf_counter() - t0
    s = out.summary
    q.put(
        {
            "requests": n,
            "allocator": allocator,
            "wall_s": wall,
            "sim_loop_s": out.result.wall_s,
            "out_tokens": int(out.requests.generated_tokens.sum()),
            "finished": s["finished"],
            "iterations": s["sim_steps"],
            "events": s["sim_events"],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--allocators", default="paged:16,max")
    ap.add_argument("--rate", type=float, default=7.0, help="requests/s of the synthetic chat trace")
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    print(
        f"{'requests':>9} {'allocator':>10} {'wall s':>8} {'loop s':>8} {'sim tok/s':>12} {'sim req/s':>10} "
        f"{'iterations':>11} {'events':>8} {'peak MiB':>9}"
    )
    for n in map(int, a.sizes.split(",")):
        for alloc in a.allocators.split(","):
            q = ctx.Queue()
            p = ctx.Process(target=one_case, args=(n, alloc, a.rate, q))
            p.start()
            r = q.get()
            p.join()
            print(
                f"{r['requests']:>9} {alloc:>10} {r['wall_s']:8.2f} {r['sim_loop_s']:8.2f} "
                f"{r['out_tokens'] / r['wall_s']:12,.0f} {r['requests'] / r['wall_s']:10,.0f} "
                f"{r['iterations']:11,d} {r['events']:8,d} {r['peak_rss_mib']:9.0f}"
            )


if __name__ == "__main__":
    main()
