"""kvsim against NVIDIA AIConfigurator's own estimator on the same measured serving runs (InferenceMAX's 300
vLLM runs of gpt-oss-120b on H100, H200 and B200; benchmarks/data/README.md).

    python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0   # no torch, about 1 minute
    /tmp/aic/bin/python benchmarks/compare_aiconfigurator.py          # ~25 s on 2 cores
    python benchmarks/compare_aiconfigurator.py --table-only          # the table again, from the saved estimates

Each configuration is priced with AIConfigurator's single-configuration estimate (`aiconfigurator cli estimate
--estimate-mode agg`, called as ``aiconfigurator.cli.api.cli_estimate``), from the run's set-up alone (GPU,
tensor parallelism, input/output tokens, clients); the measured columns are read only to score both tools.
Mapping, and what AIConfigurator leaves at its defaults:

- clients -> ``batch_size`` (its aggregated mode takes the number of requests in flight; it has no
  closed-loop input); experts sharded over the TP GPUs without expert parallelism (vLLM's default);
  FP8 KV on B200 (the runs' ``--kv-cache-dtype fp8``), bf16 on Hopper; ``--gpu-memory-utilization 0.9``;
- its vLLM tables of 0.24.0, the only vLLM version it prices on these GPUs (the runs: 0.11.2 and 0.13.0);
- its own defaults: MXFP4 experts as w4a16 (its tables time OpenAI's Triton MXFP4 kernel on Hopper and
  FlashInfer's MXFP4 x bf16 on B200; the servers ran Marlin and MXFP4 x MXFP8), power-law routing (alpha 1.2),
  one prefill of the whole prompt per mixed step, its TTFT's per-layer dispatch time and queueing factor.

kvsim's side is reports/validation-inferencemax/validate.csv (`python benchmarks/validate_inferencemax.py`).
Writes reports/validation-inferencemax/aiconfigurator.csv (the estimates) and aiconfigurator.md (both tools,
predicted / measured, median [p10, p90] (median |error|), over all runs, kvsim's held-out half, and per GPU).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "inferencemax_gpt_oss_120b.csv"
OUT = ROOT / "reports" / "validation-inferencemax"
sys.path.insert(0, str(ROOT))  # kvsim itself need not be installed where AIConfigurator is
from kvsim.hardware.gpus import GPU_PRESETS  # noqa: E402

# the runs' GPUs (as benchmarks/validate_inferencemax.py names their presets) -> AIConfigurator systems
SYSTEMS = {
    hw: GPU_PRESETS[g].aic_system for hw, g in {"h100": "h100-80gb", "h200": "h200-141gb", "b200": "b200"}.items()
}
SETUP = ("gpu", "vllm", "isl", "osl", "tp", "conc")  # all the estimator is given
AIC_VERSION = "0.24.0"


def estimate(run: dict) -> dict:
    """AIConfigurator's estimate of one configuration (seconds), or the reason it gave none."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from aiconfigurator.cli.api import cli_estimate

    gpu, tp = run["gpu"], int(run["tp"])
    out = dict(run)
    try:
        r = cli_estimate(
            "openai/gpt-oss-120b",
            SYSTEMS[gpu],
            mode="agg",
            backend_name="vllm",
            backend_version=AIC_VERSION,
            isl=int(run["isl"]),
            osl=int(run["osl"]),
            batch_size=int(run["conc"]),
            tp_size=tp,
            pp_size=1,
            attention_dp_size=1,
            moe_tp_size=tp,
            moe_ep_size=1,
            kvcache_quant_mode="fp8" if gpu == "b200" else "bfloat16",
            free_gpu_memory_fraction=0.9,
        )
        out.update(aic_ttft_s=r.ttft / 1e3, aic_tpot_s=r.tpot / 1e3, aic_out_tok_s=r.tokens_per_second, status="ok")
    except Exception as e:  # noqa: BLE001 (the estimator's own refusal, recorded per run)
        out.update(
            aic_ttft_s="",
            aic_tpot_s="",
            aic_out_tok_s="",
            status=f"error: {type(e).__name__}: {e}"[:300].replace("\n", " "),
        )
    return out


def run_estimates(path: Path, workers: int) -> None:
    with open(DATA, newline="") as f:
        runs = [{k: r[k] for k in SETUP} for r in csv.DictReader(f)]  # the set-up only
    t0 = time.time()
    with ProcessPoolExecutor(workers) as ex:
        rows = list(ex.map(estimate, runs, chunksize=4))
    from importlib.metadata import version

    cols = [*SETUP, "aic_ttft_s", "aic_tpot_s", "aic_out_tok_s", "status"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        f.write(
            f"# aiconfigurator {version('aiconfigurator')}, vLLM tables {AIC_VERSION}, "
            "benchmarks/compare_aiconfigurator.py\n"
        )
        w = csv.DictWriter(f, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"{len(rows)} configurations estimated in {time.time() - t0:.0f} s ({ok} ok); wrote {path}", file=sys.stderr)


def write_table(estimates: Path, kvsim_csv: Path, out: Path) -> str:
    import pandas as pd

    from kvsim.commands.validate import ratio_table

    aic = pd.read_csv(estimates, comment="#", dtype={"vllm": str})
    kv = pd.read_csv(kvsim_csv, dtype={"vllm": str}).rename(columns={"concurrency": "conc"})
    both = kv.merge(aic, on=list(SETUP), how="left", validate="one_to_one")
    missing = int((both["status"] != "ok").sum())
    for metric, est, measured in (
        ("ttft_p50", "aic_ttft_s", "ttft_p50_measured"),
        ("tpot_p50", "aic_tpot_s", "tpot_p50_measured"),
        ("out_tok_s", "aic_out_tok_s", "out_tok_s_measured"),
    ):
        both[f"aic_{metric}_ratio"] = both[est] / both[measured]
    groups = [("all", both), ("kvsim's held-out half", both[both["half"] == "held out"])]
    groups += [(f"{g.upper()}", sub) for g, sub in both.groupby("gpu")]
    lines = [
        "# kvsim and AIConfigurator's own estimator on the same measured runs",
        "",
        f"InferenceMAX's {len(both)} vLLM serving runs of gpt-oss-120b (H100, H200, B200; vLLM 0.11.2 and 0.13.0; "
        "1-8 GPUs; 4-128 closed-loop clients; 1k/1k, 1k/8k, 8k/1k tokens). kvsim: "
        "`benchmarks/validate_inferencemax.py` (validate.csv); AIConfigurator (`aic_` columns): its `cli estimate "
        "--estimate-mode agg` per configuration (`benchmarks/compare_aiconfigurator.py`, whose docstring has the "
        "mapping; aiconfigurator.csv). Predicted / measured of the client's median TTFT and TPOT and of the "
        "output tokens/s, median [p10, p90] over runs (median |error|)."
        + (f" {missing} runs AIConfigurator gave no estimate for are left out of its columns." if missing else ""),
        "",
    ]
    lines += ratio_table(groups, ["ttft_p50", "aic_ttft_p50", "tpot_p50", "aic_tpot_p50", "out_tok_s", "aic_out_tok_s"])
    text = "\n".join(lines) + "\n"
    out.write_text(text, encoding="utf-8")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-only", action="store_true", help="rebuild the table from the saved estimates")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    estimates = OUT / "aiconfigurator.csv"
    if not a.table_only:
        run_estimates(estimates, a.workers)
    print(write_table(estimates, OUT / "validate.csv", OUT / "aiconfigurator.md"))


if __name__ == "__main__":
    main()
