"""Simulation speed where it hurts: an overloaded server (~250 running sequences, a queue that only grows).

The workload Vidur was compared on: Azure LLM-inference conversation lengths (traces/azure_conv_lengths.csv,
sampled with replacement), Poisson arrivals at 6.5 req/s, a 34B GQA Llama (codellama-34b: 48 layers,
hidden 8192, 64 query / 8 KV heads) at tensor parallelism 2 on A100-80GB, --max-num-batched-tokens 4096,
--max-num-seqs 256, paged:16. Each size runs as the whole command a user types,
`kvsim run ... --no-plots`, in a fresh process; the trace is generated beforehand (not timed).

    python benchmarks/overload.py [--sizes 4096,100000,1000000] [--repeat 1] [--extra "--latency roofline"]

Reports wall seconds of the whole process, simulated iterations, iterations per wall second, events and
peak RSS. `benchmarks/sim_speed.py` measures the headroom case (a server that keeps up).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_ARGS = [
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
    "--no-plots",
]


def make_trace(n: int, folder: Path) -> Path:
    path = folder / f"overload-{n}.jsonl"
    if not path.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kvsim",
                "trace",
                "generate",
                "-o",
                str(path),
                "-n",
                str(n),
                "--rate",
                "6.5",
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
    return path


def run_once(trace: Path, out: Path, extra: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "kvsim", "run", "--trace", str(trace), "--out", str(out), *RUN_ARGS, *extra],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"kvsim run failed:\n{proc.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    import csv

    with open(out / "runs.csv", newline="") as fh:
        row = next(csv.DictReader(fh))
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "peak_rss_mib": after.ru_maxrss / 1024,
        "iterations": int(row["sim_steps"]),
        "events": int(row["sim_events"]),
        "finished": int(row["finished"]),
        "unfinished": int(row["unfinished"]),
        "mean_batch": float(row["mean_batch"]),
        "sim_loop_s": float(row["wall_s"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096,100000,1000000")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--extra", default="", help="more `kvsim run` arguments")
    ap.add_argument("--traces", default=os.path.join(tempfile.gettempdir(), "kvsim-overload"))
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    folder = Path(a.traces)
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    print(
        f"{'requests':>9} {'wall s':>8} {'loop s':>8} {'iterations':>11} {'iter/s':>9} {'events':>9} {'batch':>6} "
        f"{'peak MiB':>9}"
    )
    for n in map(int, a.sizes.split(",")):
        trace = make_trace(n, folder)
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory() as out:
                r = run_once(trace, Path(out), a.extra.split())
            r["requests"] = n
            results.append(r)
            print(
                f"{n:>9} {r['wall_s']:8.2f} {r['sim_loop_s']:8.2f} {r['iterations']:>11,} "
                f"{r['iterations'] / r['wall_s']:>9,.0f} {r['events']:>9,} {r['mean_batch']:6.1f} {r['peak_rss_mib']:9.0f}",
                flush=True,
            )
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
