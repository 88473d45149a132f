"""A day of a production service's traffic through an autoscaled fleet (issue 39's goal; docs/autoscaling.md):
ServeGen's m-large request rate over its first day (traces/servegen_m_large_day_rates.csv, 10-minute windows)
scaled by --rate-scale, the Azure 2023 conversation trace's lengths, Llama-3.1-70B on 4 x H100 per replica.

    python benchmarks/day_autoscale.py [--rate-scale 0.05] [--out kvsim-out/day-autoscale]

1. the day's requests: `kvsim trace generate --rate-profile ... --lengths-csv traces/azure_conv_lengths.csv`;
2. what one replica serves within the SLOs: `kvsim plan` on the first --plan-requests requests (a slice of the
   day; the planner's `rate=` is what an operator would measure before deploying);
3. `kvsim cluster --autoscaler sla:rate=R` on the whole day, which also runs the fixed fleet of the autoscaled
   run's peak size, and writes GPU-hours, SLO attainment, the 5-minute windows meeting the SLOs, cold-start
   misses and the plot of replicas and TTFT p99 over the day.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kvsim(*args: str) -> None:
    print("$ kvsim " + shlex.join(args), flush=True)
    subprocess.run([sys.executable, "-m", "kvsim", *args], check=True, cwd=ROOT)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate-scale", type=float, default=0.05)
    p.add_argument("--plan-requests", type=int, default=8000)
    p.add_argument("--slo", default="ttft_p99=2s,tpot_p99=100ms")
    p.add_argument("--out", default="kvsim-out/day-autoscale")
    a = p.parse_args()
    out = ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    model = ["--model", "llama-3.1-70b", "--gpu", "h100-80gb", "--tensor-parallel-size", "4"]
    day = out / "day.jsonl"
    kvsim(
        "trace",
        "generate",
        "--rate-profile",
        "traces/servegen_m_large_day_rates.csv",
        "--rate-scale",
        str(a.rate_scale),
        "--lengths-csv",
        "traces/azure_conv_lengths.csv",
        "--seed",
        "1",
        "-o",
        str(day),
    )
    lines = day.read_text().splitlines()
    (out / "slice.jsonl").write_text("\n".join(lines[: a.plan_requests]) + "\n")
    kvsim("plan", "--trace", str(out / "slice.jsonl"), *model, "--slo", a.slo, "--out", str(out / "plan"))
    import pandas as pd

    rate = float(pd.read_csv(out / "plan" / "plan.csv").max_rate_req_s.iloc[0])
    print(f"one replica serves {rate:.2f} requests/s within {a.slo}")
    t0 = time.perf_counter()
    kvsim(
        "cluster",
        "--trace",
        str(day),
        *model,
        "--replicas",
        "2",
        "--routers",
        "least-requests",
        "--autoscaler",
        f"sla:rate={rate:.2f}",
        "--slo",
        a.slo,
        "--out",
        str(out / "cluster"),
    )
    print(f"{len(lines):,} requests, autoscaled and fixed fleets: {time.perf_counter() - t0:.0f} s on this machine")


if __name__ == "__main__":
    main()
