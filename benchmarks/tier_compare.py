"""What lower cache tiers give a fleet short of GPU memory, measured.

    python benchmarks/tier_compare.py [--out reports/tiers] [--copies 4] [--replicas 16]

The Mooncake excerpt replicated to fleet scale (as benchmarks/fleet_compare.py: K copies, each a different
population, 1,572 requests with 22k-token prompts for K = 4) on 16 A100-40GB replicas of Qwen2.5-7B, whose
KV pools (about 19 GiB each) hold a few dozen of those prompts. Tiers: none; a 128 GiB CPU tier per GPU
(PCIe 4.0, the GPU preset's host bandwidth); a 2 TiB store shared by all replicas (20 GB/s into a GPU,
1 ms per load, as an RDMA-attached store such as Mooncake's); both; both with loads overlapping the prefill
layer by layer (--kv-load-layerwise). Routers: round-robin and prefix.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet_compare import tiled_mooncake  # noqa: E402


def main() -> int:
    import pandas as pd

    from kvsim.allocators.kv_tier import TierSpec
    from kvsim.fleet.cluster import ReplicaGroup, simulate_fleet
    from kvsim.options import config_from_args

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="reports/tiers")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--replicas", type=int, default=16)
    a = ap.parse_args()
    reqs = tiled_mooncake(a.copies)
    base = ["--model", "qwen2.5-7b", "--gpu", "a100-40gb", "--max-model-len", "131072"]
    store = TierSpec("store", 2048 * (1 << 30), 20e9, 1e-3, shared=True)
    setups = [
        ("GPU only", [], None),
        ("+ CPU 128 GiB", ["--kv-offloading-size", "128"], None),
        ("+ shared store 2 TiB", [], store),
        ("+ both", ["--kv-offloading-size", "128"], store),
        ("+ both, loaded layer by layer", ["--kv-offloading-size", "128", "--kv-load-layerwise"], store),
    ]
    rows = []
    for name, extra, st in setups:
        cfg = config_from_args(base + extra)
        for router in ("round-robin", "prefix"):
            t = time.perf_counter()
            f = simulate_fleet(reqs, [ReplicaGroup("a100", cfg, "paged:16+prefix", a.replicas)], router, store=st)
            s = f.summary
            cpu = sum(o.result.extra.get("tier_cpu_hit_blocks", 0) for o in f.replicas)
            row = {
                "tiers": name,
                "router": router,
                "finished": s["finished"],
                "hit_rate": s["prefix_hit_rate_tokens"],
                "ttft_p50_s": s["ttft_p50_s"],
                "ttft_p99_s": s["ttft_p99_s"],
                "throughput_tok_s": s["throughput_tok_s"],
                "cpu_hit_blocks": cpu,
                "store_loaded_blocks": s.get("tier_store_loaded_blocks", 0),
                "wall_s": time.perf_counter() - t,
            }
            rows.append(row)
            print(
                f"{name:22s} {router:12s} hit {100 * row['hit_rate']:5.1f}%  TTFT p50 {row['ttft_p50_s']:7.2f} "
                f"p99 {row['ttft_p99_s']:7.2f}  tok/s {row['throughput_tok_s']:6.0f}  ({row['wall_s']:.1f} s)",
                flush=True,
            )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    df.to_csv(out / "tiers.csv", index=False)
    lines = [
        "# Lower cache tiers on a fleet (benchmarks/tier_compare.py)",
        "",
        f"Mooncake excerpt x{a.copies} ({len(reqs)} requests), {a.replicas} x A100-40GB, Qwen2.5-7B, paged+prefix.",
        "",
        "| tiers | router | hit % | TTFT p50 s | TTFT p99 s | out tok/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['tiers']} | {r['router']} | {100 * r['hit_rate']:.1f} | {r['ttft_p50_s']:.2f} | "
            f"{r['ttft_p99_s']:.2f} | {r['throughput_tok_s']:.0f} |"
        )
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
