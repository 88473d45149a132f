"""Fit the ``rdma`` KV link of disaggregated serving (kvsim.fleet.disagg.LINKS) on measured vLLM KV transfers.

    python benchmarks/fit_kv_link.py

The data: the Mooncake team's vLLM P/D measurements (kvcache-ai/Mooncake,
docs/source/performance/vllm/vllm-v1-pd-performance.md, Apache-2.0): Qwen3-8B, one prefill and one decode
instance at TP8 on two nodes of 8 H800s, vLLM 0.11.2.dev358 with the MooncakeConnector over 8 ConnectX-7 RoCE
NICs (their "theoretical maximum of about 200 GB/s for the 8x RoCE connections": 25 GB/s a NIC), one request at a
time; for each prompt length the KV size and the transfer time the connector measured. Their "MB"/"GB" are
binary (32,768 tokens x 147,456 bytes = 4.50 GiB), and so are their GB/s.

A transfer over ``lanes`` GPU pairs takes ``latency + bytes / (lanes x bandwidth)`` (KVLink.seconds). Every other
row fits the two constants (least squares on the time), the rest is held out; then all rows fit the preset. The
bandwidth is reported as a share of the NIC's line rate, which carries it to kvsim's 400 Gb/s NIC (50 GB/s).
"""

from __future__ import annotations

import numpy as np

KIB = 1024
# (prompt tokens, KV size in MiB, measured transfer ms)
MOONCAKE = [
    (128, 20, 0.54),
    (256, 38, 0.61),
    (512, 74, 0.92),
    (1024, 146, 1.50),
    (2048, 290, 2.51),
    (4096, 578, 4.75),
    (8192, 1.13 * KIB, 8.84),
    (16384, 2.25 * KIB, 16.43),
    (32768, 4.50 * KIB, 31.65),
]
LANES = 8  # TP8 to TP8: one NIC per GPU
LINE_RATE = 25e9  # bytes/s each way through one of their NICs (200 Gb/s)


def fit(rows) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s per lane) by least squares on the times."""
    b = np.array([r[1] * KIB * KIB for r in rows])
    t = np.array([r[2] * 1e-3 for r in rows])
    (lat, per_byte), *_ = np.linalg.lstsq(np.vstack([np.ones_like(b), b]).T, t, rcond=None)
    return float(lat), float(1.0 / (per_byte * LANES))


def predict(rows, lat: float, bw: float) -> np.ndarray:
    return np.array([lat + r[1] * KIB * KIB / (LANES * bw) for r in rows]) * 1e3


def main() -> None:
    for name, fitting, held in (
        ("even rows fit", MOONCAKE[0::2], MOONCAKE[1::2]),
        ("odd rows fit", MOONCAKE[1::2], MOONCAKE[0::2]),
    ):
        lat, bw = fit(fitting)
        ratios = predict(held, lat, bw) / np.array([r[2] for r in held])
        print(
            f"{name}: latency {lat * 1e3:.2f} ms, {bw / 1e9:.1f} GB/s a lane ({bw / LINE_RATE:.0%} of line rate); "
            "held out, predicted / measured: " + ", ".join(f"{r[0]}: {x:.2f}" for r, x in zip(held, ratios))
        )
    lat, bw = fit(MOONCAKE)
    print(f"all rows: latency {lat * 1e3:.2f} ms, {bw / 1e9:.1f} GB/s a lane = {bw / LINE_RATE:.3f} of line rate")
    for r, p in zip(MOONCAKE, predict(MOONCAKE, lat, bw)):
        print(f"  {r[0]:>6} tokens  {r[1]:>7.0f} MiB  measured {r[2]:6.2f} ms  fit {p:6.2f} ms  ({p / r[2]:.2f})")


if __name__ == "__main__":
    main()
