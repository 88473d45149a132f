"""kvsim against SemiAnalysis InferenceMAX's vLLM runs of gpt-oss-120b (MXFP4) on H100, H200 and B200: 300 serving
configurations of vLLM V1 (0.11.2 and 0.13.0 images), closed loop at 4 to 128 concurrent clients, 1-8 GPUs of
tensor parallelism, 1k/1k, 1k/8k and 8k/1k tokens in/out, replayed by kvsim and compared on their summaries.

    python benchmarks/validate_inferencemax.py [--data benchmarks/data/inferencemax_gpt_oss_120b.csv]
        [--out reports/validation-inferencemax] [--kernels served|auto]

Data: InferenceMAX (github.com/SemiAnalysisAI/InferenceMAX, Apache-2.0), its nightly `agg_bmk.json` aggregates
of December 2025 / January 2026 as mirrored in github.com/gminneci/mantile; benchmarks/data/README.md says what
the compact table holds. Every other configuration (the "fit" half) fitted two constants of V1's API server, its
per-prompt-token time and delivery delay (benchmarks/fit_v1_frontend.py); the other half is held out, and the
summary reports both halves apart. Nothing else in kvsim was fitted to these runs.

How each run is replayed, from InferenceMAX's scripts (its benchmarks/gptoss_fp4_{h100,h200,b200}.sh): its client
(`benchmark_serving.py --dataset-name random --random-range-ratio 0.8 --num-prompts 10 x concurrency
--max-concurrency C --request-rate inf --ignore-eos`) sends 10 x C requests whose prompt and output lengths are
uniform in [0.8 L, L] (kvsim draws them with a fixed seed); its server runs `--async-scheduling`,
`--no-enable-prefix-caching`, 8,192 batched tokens, CUDA graphs up to 2,048 tokens, `--max-num-seqs C`
(512 on B200), 0.9 of GPU memory, `--max-model-len` 2,068 (1k/1k) or ISL + OSL + 200 (10,240 on H100), FP8 KV
on B200. Kernels (`--kernels served`, the default): the MoE kernels the server's environment picked, Marlin on
Hopper (`VLLM_MXFP4_USE_MARLIN=1`: `--moe-backend marlin`) and FlashInfer's MXFP4 x MXFP8 on B200
(`VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`: `--moe-backend flashinfer-trtllm-mxfp8`); `--kernels auto` prices them
as kvsim does when not told. Hopper runs use the kernel tables of the image's release (the oldest measured,
0.14, stands for 0.11/0.13); B200 runs the newest tables, the only ones that timed the kernel its server ran.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPUS = {"h100": "h100-80gb", "h200": "h200-141gb", "b200": "b200"}
SERVED_KERNELS = {"h100": "marlin", "h200": "marlin", "b200": "flashinfer-trtllm-mxfp8"}
CAPTURE = ",".join(map(str, [1, 2, 4, *range(8, 256, 8), *range(256, 2049, 16)]))  # --max-cudagraph-capture-size 2048


def lengths(isl: int, osl: int, n: int, seed: int = 0):
    """The client's random lengths: prompt and output uniform in [0.8 L, L] (range ratio 0.8)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(int(isl * 0.8), isl + 1, n), rng.integers(int(osl * 0.8), osl + 1, n)


def server(r, kernels: str, routing: str | None = None) -> dict:
    """kvsim options for the server of run ``r`` (a row of the data table); ``routing``: --moe-routing (None:
    kvsim's default)."""
    hw, isl, osl = r.gpu, int(r.isl), int(r.osl)
    max_len = 2068 if (isl, osl) == (1024, 1024) else 10240 if hw == "h100" else isl + osl + 200
    v = {
        "model": "gpt-oss-120b",
        "gpu": GPUS[hw],
        "tensor_parallel_size": int(r.tp),
        "max_model_len": max_len,
        "max_num_seqs": 512 if hw == "b200" else int(r.conc),
        "max_num_batched_tokens": 8192,
        "gpu_memory_utilization": 0.9,
        "enable_prefix_caching": False,
        "async_scheduling": True,
        "cudagraph_capture_sizes": CAPTURE,
        "max_concurrency": int(r.conc),
        "request_rate": "inf",
    }
    if hw == "b200":
        v["kv_cache_dtype"] = "fp8"
    if kernels == "served":
        v["moe_backend"] = SERVED_KERNELS[hw]
    if hw != "b200" or kernels != "served":
        v["vllm_version"] = str(r.vllm)
    if routing is not None:
        v["moe_routing"] = routing
    return v


def replay(r, kernels: str, routing: str | None = None) -> dict:
    """kvsim's median and mean TTFT and TPOT (seconds) and output tokens/s for run ``r``."""
    from kvsim.commands.validate import replay_summary
    from kvsim.options import config_from_options
    from kvsim.runner import served_spec, simulate
    from kvsim.trace.request import Request

    n = 10 * int(r.conc)
    ins, outs = lengths(int(r.isl), int(r.osl), n)
    reqs = [Request(str(i), 0.0, int(p), int(o), line=i + 1) for i, (p, o) in enumerate(zip(ins, outs))]
    cfg = config_from_options(server(r, kernels, routing))
    return replay_summary(simulate(reqs, cfg, served_spec(cfg)))


def main() -> None:
    import pandas as pd

    from kvsim.commands.validate import add_ratios, ratio_line, save_table
    from kvsim.latency.routing import ROUTINGS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT / "benchmarks" / "data" / "inferencemax_gpt_oss_120b.csv"))
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation-inferencemax"))
    ap.add_argument(
        "--kernels",
        choices=("served", "auto"),
        default="served",
        help="MoE kernels: those the server's environment picked, or kvsim's default fit [served]",
    )
    ap.add_argument(
        "--moe-routing", choices=tuple(ROUTINGS), help="kvsim's --moe-routing for every replay [kvsim's default]"
    )
    ap.add_argument("--only", help="a pandas query the runs must match (e.g. \"gpu == 'h200'\")")
    a = ap.parse_args()
    runs = pd.read_csv(a.data, dtype={"vllm": str})
    if a.only:
        runs = runs.query(a.only)
    rows = []
    for r in runs.itertuples():
        p = replay(r, a.kernels, a.moe_routing)
        meas = {
            "ttft_p50": r.median_ttft_s,
            "ttft_mean": r.mean_ttft_s,
            "tpot_p50": r.median_tpot_s,
            "tpot_mean": r.mean_tpot_s,
            "out_tok_s": r.output_tok_s,
        }
        row = {
            "gpu": r.gpu,
            "vllm": r.vllm,
            "isl": r.isl,
            "osl": r.osl,
            "tp": r.tp,
            "concurrency": r.conc,
            "half": "fit" if r.Index % 2 == 0 else "held out",
            "not_finished": p["not_finished"],
        }
        rows.append(add_ratios(row, meas, p))
        print(f"{r.gpu} {r.vllm} {r.isl}/{r.osl} tp{r.tp} c{r.conc}: {ratio_line(row)}", flush=True)
    out = Path(a.out)
    write_summary(save_table(rows, out), out / "summary.md", a.kernels)
    print(f"wrote {out}/validate.csv and summary.md")


def write_summary(t, path: Path, kernels: str) -> None:
    """Median [p10, p90] (median |error|) of each ratio by group of runs, then every run."""
    from kvsim.commands.validate import SUMMARY_METRICS, ratio_table

    lines = [
        "# kvsim against InferenceMAX's vLLM runs of gpt-oss-120b (H100, H200, B200)",
        "",
        "300 closed-loop serving runs of vLLM V1 (0.11.2 and 0.13.0 images, async scheduling) from SemiAnalysis "
        "InferenceMAX (Apache-2.0), replayed by kvsim with the server's settings and "
        + (
            "the MoE kernels its environment picked (Marlin on Hopper, FlashInfer MXFP4 x MXFP8 on B200)"
            if kernels == "served"
            else "kvsim's default MoE fit (`--moe-backend auto`)"
        )
        + ". Every other configuration (the fit half) fitted V1's API server per-prompt-token time and delivery "
        "delay (`benchmarks/fit_v1_frontend.py`), which move TTFT and E2E only, and chose `--moe-routing`'s "
        "default (power-law-1.2: TPOT 1.03 on the fit half, power-law-1.01 1.06, uniform 1.15); nothing else was "
        "fitted to these "
        "runs. Predicted / measured, median [p10, p90] over runs (median |error|). Command: "
        f"`python benchmarks/validate_inferencemax.py --kernels {kernels}` (its docstring has the set-up). Run "
        "to run, the 161 configurations InferenceMAX ran twice differ by 1.5% in median TTFT and 0.4% in median "
        "TPOT (median |second / first - 1|).",
        "",
    ]
    groups = [("all", t), *((f"{half} half", sub) for half, sub in t.groupby("half"))]
    groups += [(f"{key} {v}", sub) for key in ("gpu", "vllm", "tp") for v, sub in t.groupby(key)]
    groups += [(f"{i}/{o} tokens", sub) for (i, o), sub in t.groupby(["isl", "osl"])]
    groups += [
        (f"{lo}-{hi} clients", t[(t.concurrency >= lo) & (t.concurrency <= hi)])
        for lo, hi in ((4, 8), (16, 32), (64, 128))
    ]
    lines += ratio_table(groups, SUMMARY_METRICS)
    lines += [
        "",
        "| gpu | vLLM | in/out | TP | clients | TTFT p50 ms measured | ratio | TPOT p50 ms measured | ratio | "
        "out tok/s ratio |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in t.itertuples():
        lines.append(
            f"| {r.gpu} | {r.vllm} | {r.isl}/{r.osl} | {r.tp} | {r.concurrency} | "
            f"{1e3 * r.ttft_p50_measured:.0f} | {r.ttft_p50_ratio:.2f} | {1e3 * r.tpot_p50_measured:.2f} | "
            f"{r.tpot_p50_ratio:.2f} | {r.out_tok_s_ratio:.2f} |"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
