"""kvsim against NVIDIA AIConfigurator's own estimator on the same measured serving runs (InferenceMAX's 300
vLLM runs of gpt-oss-120b on H100, H200 and B200; with --held-out, the closed-loop runs of the held-out GPUStack
and yobitel pages whose models AIConfigurator knows; benchmarks/data/README.md).

    python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0   # no torch, about 1 minute
    /tmp/aic/bin/python benchmarks/compare_aiconfigurator.py [--held-out]   # ~25 s on 2 cores
    python benchmarks/compare_aiconfigurator.py [--held-out] --table-only  # the table again, from the saved estimates

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

--held-out: the runs of benchmarks/validate_gpustack.py's tables that kept a fixed number of clients (GPUStack's
1-8-client ShareGPT runs of Qwen3-8B, gpt-oss-120b and DeepSeek-R1-0528; yobitel's short-chat runs of
Llama-3.1-8B/70B), each as its clients -> ``batch_size`` and its mean prompt and output tokens -> ``isl`` /
``osl`` (the ShareGPT runs' lengths vary; the estimator takes one of each), bf16 KV, AIConfigurator's default
(maintained) vLLM tables of the GPU. Models it has no configuration of (Qwen2.5, Mistral, gemma-2, Phi-3.5)
are listed as such. kvsim's side is reports/validation-gpustack/validate.csv; writes aiconfigurator.csv and
aiconfigurator.md there.
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


def aic_estimate(
    model: str, system: str, version: str | None, isl: int, osl: int, batch: int, tp: int, kv: str
) -> dict:
    """AIConfigurator's estimate of one configuration (seconds; ``version`` None: its default vLLM tables of
    ``system``), or the reason it gave none."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from aiconfigurator.cli.api import cli_estimate

    try:
        r = cli_estimate(
            model,
            system,
            mode="agg",
            backend_name="vllm",
            backend_version=version,
            isl=isl,
            osl=osl,
            batch_size=batch,
            tp_size=tp,
            pp_size=1,
            attention_dp_size=1,
            moe_tp_size=tp,
            moe_ep_size=1,
            kvcache_quant_mode=kv,
            free_gpu_memory_fraction=0.9,
        )
        return {
            "aic_ttft_s": r.ttft / 1e3,
            "aic_tpot_s": r.tpot / 1e3,
            "aic_out_tok_s": r.tokens_per_second,
            "aic_vllm": r.backend_version,
            "status": "ok",
        }
    except Exception as e:  # noqa: BLE001 (the estimator's own refusal, recorded per run)
        return {
            "aic_ttft_s": "",
            "aic_tpot_s": "",
            "aic_out_tok_s": "",
            "aic_vllm": version or "",
            # the message without the local path of the table it looked in
            "status": f"error: {type(e).__name__}: {str(e).split(' at /')[0]}"[:300].replace("\n", " "),
        }


def estimate(run: dict) -> dict:
    """AIConfigurator's estimate of one InferenceMAX run (its set-up columns, SETUP)."""
    gpu = run["gpu"]
    kv = "fp8" if gpu == "b200" else "bfloat16"
    args = (int(run["isl"]), int(run["osl"]), int(run["conc"]), int(run["tp"]), kv)
    return {**run, **aic_estimate("openai/gpt-oss-120b", SYSTEMS[gpu], AIC_VERSION, *args)}


def save_estimates(path: Path, rows: list[dict], cols: list[str], tables: str, t0: float) -> None:
    """Write the estimates with a first line naming AIConfigurator's version and the vLLM tables priced."""
    from importlib.metadata import version

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        f.write(
            f"# aiconfigurator {version('aiconfigurator')}, vLLM tables {tables}, benchmarks/compare_aiconfigurator.py\n"
        )
        w = csv.DictWriter(f, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"{len(rows)} configurations estimated in {time.time() - t0:.0f} s ({ok} ok); wrote {path}", file=sys.stderr)


def run_estimates(path: Path, workers: int) -> None:
    with open(DATA, newline="") as f:
        runs = [{k: r[k] for k in SETUP} for r in csv.DictReader(f)]  # the set-up only
    t0 = time.time()
    with ProcessPoolExecutor(workers) as ex:
        rows = list(ex.map(estimate, runs, chunksize=4))
    save_estimates(path, rows, [*SETUP, "aic_ttft_s", "aic_tpot_s", "aic_out_tok_s", "status"], AIC_VERSION, t0)


# --held-out: the Hugging Face ids of the held-out runs -> the configuration AIConfigurator 0.12 has of the same
# architecture and weights (its Llama-3.1 files are the base models'; DeepSeek-R1-0528 is DeepSeek-R1's)
AIC_MODELS = {
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
    "openai/gpt-oss-20b": "openai/gpt-oss-20b",
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
}
HELD_OUT = ROOT / "reports" / "validation-gpustack"
HELD_OUT_KEYS = ("run", "gpu", "vllm", "case", "prompts", "clients")  # a run of validate_gpustack.py's table


def held_out_runs() -> list[dict]:
    """The closed-loop runs of validate_gpustack.py's data tables, each as its table key and what the estimator
    is given (mean prompt and output tokens)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    import validate_gpustack as v

    runs = []
    for name, kind in v.FILES.items():
        for r in v.load(str(v.DATA / name)).itertuples():
            if kind != "held out" or not v.closed_loop(r):
                continue
            n = int(r.num_prompts)
            runs.append(
                {
                    "run": v.label(r),
                    "gpu": r.gpu,
                    "vllm": r.vllm,
                    "case": v.case_of(r),
                    "prompts": n,
                    "clients": int(r.max_concurrency),
                    "model": r.model,
                    "isl": round(r.total_input_tokens / n),
                    "osl": max(1, round(r.total_generated_tokens / n)),
                    "tp": int(r.tp),
                }
            )
    return runs


def estimate_held_out(run: dict) -> dict:
    """AIConfigurator's estimate of one held-out run, or why there is none."""
    model, system = AIC_MODELS.get(run["model"]), GPU_PRESETS[run["gpu"]].aic_system
    if model is None or not system:
        why = "no configuration of this model" if model is None else "no system of this GPU"
        return {**run, "aic_ttft_s": "", "aic_tpot_s": "", "aic_out_tok_s": "", "aic_vllm": "", "status": why}
    args = (int(run["isl"]), int(run["osl"]), int(run["clients"]), int(run["tp"]), "bfloat16")
    return {**run, **aic_estimate(model, system, None, *args)}


def run_held_out_estimates(path: Path, workers: int) -> None:
    runs = held_out_runs()
    t0 = time.time()
    with ProcessPoolExecutor(workers) as ex:
        rows = list(ex.map(estimate_held_out, runs))
    cols = [*HELD_OUT_KEYS, "model", "isl", "osl", "tp", "aic_vllm", "aic_ttft_s", "aic_tpot_s", "aic_out_tok_s"]
    save_estimates(path, rows, [*cols, "status"], "each GPU's default (aic_vllm)", t0)


def write_table(estimates: Path, kvsim_csv: Path, out: Path) -> str:
    import pandas as pd

    from kvsim.commands.validate import ratio_table

    aic = pd.read_csv(estimates, comment="#", dtype={"vllm": str})
    kv = pd.read_csv(kvsim_csv, dtype={"vllm": str}).rename(columns={"concurrency": "conc"})
    both = _with_aic_ratios(kv.merge(aic, on=list(SETUP), how="left", validate="one_to_one"))
    missing = int((both["status"] != "ok").sum())
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


def _with_aic_ratios(both):
    """``both`` with AIConfigurator's predicted / measured columns (``aic_<metric>_ratio``)."""
    for metric, est in (("ttft_p50", "aic_ttft_s"), ("tpot_p50", "aic_tpot_s"), ("out_tok_s", "aic_out_tok_s")):
        both[f"aic_{metric}_ratio"] = both[est] / both[f"{metric}_measured"]
    return both


def write_held_out_table(estimates: Path, kvsim_csv: Path, out: Path) -> str:
    import pandas as pd

    from kvsim.commands.validate import ratio_table

    keys = list(HELD_OUT_KEYS)
    aic = pd.read_csv(estimates, comment="#", dtype={"vllm": str, "clients": str})
    kv = pd.read_csv(kvsim_csv, dtype={"vllm": str, "clients": str})
    both = _with_aic_ratios(kv.merge(aic, on=keys, how="inner", validate="one_to_one"))
    priced = both[both["status"] == "ok"]
    unpriced = both[both["status"] != "ok"]
    groups = [("AIConfigurator priced it", priced)]
    groups += [(f"{name}", sub) for name, sub in priced.groupby("model_name", sort=False)]
    groups += [("AIConfigurator has no estimate (kvsim only)", unpriced)]
    lines = [
        "# kvsim and AIConfigurator's own estimator on the held-out closed-loop runs",
        "",
        f"The {len(both)} runs of `benchmarks/validate_gpustack.py`'s held-out tables that kept a fixed number of "
        "clients: GPUStack's ShareGPT runs at 1-8 clients (vLLM 0.10.2-0.11.0) and yobitel's short-chat runs at "
        "1-16 clients (vLLM 0.21-0.22), all on H100, H200 or A100. kvsim: validate.csv; AIConfigurator "
        "(`aic_` columns): its `cli estimate --estimate-mode agg` per run, given the clients and the run's mean "
        "prompt and output tokens (`benchmarks/compare_aiconfigurator.py --held-out`; aiconfigurator.csv). Neither "
        "tool was fitted to these runs. Predicted / measured of the client's median TTFT and TPOT and of the "
        "output tokens/s, median [p10, p90] over runs (median |error|).",
        "",
    ]
    lines += ratio_table(groups, ["ttft_p50", "aic_ttft_p50", "tpot_p50", "aic_tpot_p50", "out_tok_s", "aic_out_tok_s"])
    if len(unpriced):
        lines += ["", "Runs AIConfigurator gave no estimate for:", ""]
        lines += [f"- {r.run} ({r.gpu}, {r.case}, {r.clients} clients): {r.status}" for r in unpriced.itertuples()]
    lines += [
        "",
        "| run | GPU, vLLM (AIConfigurator's tables) | case | clients | TTFT p50 measured ms | kvsim | AIC "
        "| TPOT p50 measured ms | kvsim | AIC |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in priced.itertuples():
        lines.append(
            f"| {r.run} | {r.gpu}, {r.vllm} ({r.aic_vllm}) | {r.case} | {r.clients} | {1e3 * r.ttft_p50_measured:.1f} "
            f"| {r.ttft_p50_ratio:.2f} | {r.aic_ttft_p50_ratio:.2f} | {1e3 * r.tpot_p50_measured:.1f} "
            f"| {r.tpot_p50_ratio:.2f} | {r.aic_tpot_p50_ratio:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    out.write_text(text, encoding="utf-8")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-only", action="store_true", help="rebuild the table from the saved estimates")
    ap.add_argument("--held-out", action="store_true", help="the held-out closed-loop runs (validate_gpustack.py)")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    out = HELD_OUT if a.held_out else OUT
    estimates = out / "aiconfigurator.csv"
    if not a.table_only:
        (run_held_out_estimates if a.held_out else run_estimates)(estimates, a.workers)
    elif not estimates.exists():
        sys.exit(f"{estimates}: no saved estimates; run without --table-only under AIConfigurator's Python first")
    write = write_held_out_table if a.held_out else write_table
    print(write(estimates, out / "validate.csv", out / "aiconfigurator.md"))


if __name__ == "__main__":
    main()
