"""Fleet simulation speed: R replicas of the overload benchmark's engine behind a router, on one clock.

The workload of `benchmarks/overload.py` (Azure conversation lengths, codellama-34b at TP2 on A100-80GB,
--max-num-batched-tokens 4096, --max-num-seqs 256, paged:16) at 6.5 req/s per replica, so every replica
is overloaded as the single-engine benchmark's is. Each size runs as the command a user types,
`kvsim cluster ... --replicas R --routers least-requests`, in a fresh process; the trace is generated
beforehand (not timed).

    python benchmarks/fleet_speed.py [--replicas 32] [--sizes 100000,1000000]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "--model",
    "codellama-34b",
    "--gpu",
    "a100-80gb",
    "--tensor-parallel-size",
    "2",
    "--max-num-batched-tokens",
    "4096",
    "--max-num-seqs",
    "256",
    "--allocator",
    "paged:16",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=32)
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--router", default="least-requests")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in a.sizes.split(",")):
            trace = Path(tmp) / f"fleet-{n}.jsonl"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kvsim",
                    "trace",
                    "generate",
                    "-o",
                    str(trace),
                    "-n",
                    str(n),
                    "--rate",
                    str(6.5 * a.replicas),
                    "--seed",
                    "0",
                    "--lengths-csv",
                    str(ROOT / "traces" / "azure_conv_lengths.csv"),
                    "--max-total",
                    "16384",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kvsim",
                    "cluster",
                    "--trace",
                    str(trace),
                    "--out",
                    str(Path(tmp) / f"out-{n}"),
                    "--replicas",
                    str(a.replicas),
                    "--routers",
                    a.router,
                    *ARGS,
                ],
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                raise SystemExit(p.stderr)
            rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            print(
                f"{n:>9,} requests, {a.replicas} replicas, {a.router}: {wall:.1f} s wall, peak RSS {rss:.0f} MiB "
                f"(cpu {resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before.ru_utime:.1f} s)"
            )
            print(next(ln for ln in p.stdout.splitlines() if ln.strip().startswith(a.router)))


if __name__ == "__main__":
    main()
