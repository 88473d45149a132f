"""kvsim against LambdaLabsML/vllm-benchmark's A100 load sweep: 10 to 1,280 ShareGPT prompts sent at once to
vLLM (files of 2024-08 and 2024-09), replayed by kvsim and compared on what every file's summary records.

    python benchmarks/validate_load_sweep.py FOLDER [--out reports/validation-load-sweep]

FOLDER holds, under the repository's `results/prompt_<N>/<G>xA100-80GB-SXM/` paths, one JSON file per run with the
run's summary fields (`median_ttft_ms`, `mean_ttft_ms`, `p99_ttft_ms`, the same for TPOT and ITL, `duration`,
`completed`, `total_output_tokens`, `date`) and its per-request `input_lens` and `output_lens`: the published
files themselves, or those fields transcribed from them (the per-request latencies are not needed). H100 files
are held out for checking and never read here.

How each run is replayed, from what the file shows: the V0 engine with its defaults (`--vllm-engine v0`: every
file predates V1; its defaults include its CPU time, `--cpu-overhead vllm-v0`), `--max-model-len` as the file is
named, 1,024 sequences and 0.95 of GPU memory (SERVED below);
multi-step scheduling where the file's median inter-token gap is over twice its median TPOT (4-10x: tokens streamed
about ten at a time: vLLM 0.6.0 with `--num-scheduler-steps 10`, the files of 2024-09-07/08), one step at a time
otherwise (2024-08 files, vLLM 0.5.x). A request with no output (the model ended at once) is replayed as a
one-token request with a TTFT of 0, as the client's statistics count it; runs where more than 5% of the requests
failed are skipped. FP8 checkpoints run on A100 as vLLM runs them there (FP8 Marlin, weight-only).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAME = re.compile(r"prompt_(?P<n>\d+)/(?P<gpus>\d+)xA100-80GB-SXM/(?P<model>.+)_tp(?P<tp>\d+)_len(?P<len>\d+)\.json$")
# The server options the runs do not record, as the repository's benchmark.py of the time passed them (its
# --max-num-seqs default 1024, --gpu-memory-utilization 0.95; another version left vLLM's 256 and 0.9). The data
# side with 1,024: from 640 to 1,280 prompts the measured TPOT doubles (69 -> 143 ms, Llama-3-8B on one A100),
# which 256 seats cannot do (replayed with 256: TPOT 0.70 -> 0.40 of measured; with 1,024: 0.94, 0.92)
SERVED = {"max_num_seqs": 1024, "gpu_memory_utilization": 0.95}
PRESETS = {  # checkpoint -> (kvsim preset, --quantization)
    "Meta-Llama-3-8B-Instruct": ("llama-3-8b", None),
    "Meta-Llama-3-70B-Instruct": ("llama-3-70b", None),
    "Mistral-7B-Instruct-v0.3": ("mistral-7b", None),
    "Meta-Llama-3.1-8B-FP8": ("llama-3.1-8b", "fp8"),
    "Meta-Llama-3.1-70B-Instruct-FP8": ("llama-3.1-70b", "fp8"),
}


def runs(folder: Path):
    """(path, fields, preset, quantization, tp, max_model_len, prompts) of every usable A100 run, sorted."""
    for path in sorted(folder.rglob("*.json")):
        m = NAME.search(path.as_posix())
        if m is None or m["model"] not in PRESETS:
            continue
        d = json.loads(path.read_text())
        if (
            not d.get("output_lens")
            or d.get("completed", 0) < 0.95 * len(d["output_lens"])
            or not d.get("median_tpot_ms")
        ):
            continue  # a failed or partly failed run
        yield path, d, *PRESETS[m["model"]], int(m["tp"]), int(m["len"]), int(m["n"])


def scheduler_steps(d: dict) -> tuple[float, int]:
    """(median ITL / median TPOT, scheduler steps) of a run: 10 where its gaps are over twice its TPOT (chunks of
    about ten tokens, vLLM 0.6.0 with 10 scheduler steps: 4-10x as the queue grows), else 1."""
    ratio = d["median_itl_ms"] / d["median_tpot_ms"] if d.get("median_itl_ms") else 1.0
    return ratio, 10 if ratio > 2 else 1


def replay(d: dict, preset: str, quant: str | None, tp: int, max_len: int, steps: int, extra: dict) -> dict:
    """kvsim's medians (TTFT, TPOT), means and p99s and output throughput for the run's requests."""
    import numpy as np

    from kvsim.metrics import percentile
    from kvsim.options import config_from_options
    from kvsim.runner import served_spec, simulate
    from kvsim.trace.request import Request

    # A request that succeeded without text (output 0: the model ended at once) was prefilled and sampled one
    # token; the client counted its TTFT as 0 in the file's statistics, and so does this replay. Failed requests
    # (at most 5%) cannot be told from them in a summary and are replayed the same way.
    reqs = [
        Request(str(i), 0.0, int(p), max(1, int(o)), line=i + 1)
        for i, (p, o) in enumerate(zip(d["input_lens"], d["output_lens"]))
    ]
    silent = {str(i) for i, o in enumerate(d["output_lens"]) if o < 1}
    values = {
        "model": preset,
        "gpu": "a100-80gb",
        "tensor_parallel_size": tp,
        "max_model_len": max_len,
        "vllm_engine": "v0",
        "num_scheduler_steps": steps,
        "request_rate": "inf",
    }
    if quant:
        values["quantization"] = quant
    cfg = config_from_options({**values, **extra})
    out = simulate(reqs, cfg, served_spec(cfg))
    df = out.requests
    done = df[df.status == "finished"]
    ttft = np.where(done.id.isin(silent), 0.0, done.ttft_s.to_numpy())
    tpot = done.tpot_s.dropna().to_numpy()
    return {
        "requests": len(reqs),
        "not_finished": int(len(df) - len(done)),
        "ttft_p50": percentile(ttft, 50),
        "ttft_mean": float(np.mean(ttft)),
        "ttft_p99": percentile(ttft, 99),
        "tpot_p50": percentile(tpot, 50),
        "tpot_mean": float(np.mean(tpot)),
        "tpot_p99": percentile(tpot, 99),
        "out_tok_s": out.summary["throughput_tok_s"],
    }


def main() -> None:
    from kvsim.commands.validate import add_ratios, save_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation-load-sweep"))
    ap.add_argument("--only", help="a regular expression the file's path must match")
    ap.add_argument(
        "--max-num-seqs",
        type=int,
        default=SERVED["max_num_seqs"],
        help=f"replay with this many sequences at most [default: {SERVED['max_num_seqs']}]",
    )
    ap.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=SERVED["gpu_memory_utilization"],
        help=f"replay with this share of GPU memory [default: {SERVED['gpu_memory_utilization']}]",
    )
    a = ap.parse_args()
    extra = {k: getattr(a, k) for k in SERVED}
    folder = Path(a.folder)
    rows = []
    for path, d, preset, quant, tp, max_len, n in runs(folder):
        rel = path.relative_to(folder).as_posix()
        if a.only and not re.search(a.only, rel):
            continue
        ratio, steps = scheduler_steps(d)
        p = replay(d, preset, quant, tp, max_len, steps, extra)
        meas = {
            "ttft_p50": d["median_ttft_ms"] / 1e3,
            "ttft_mean": d["mean_ttft_ms"] / 1e3,
            "ttft_p99": d["p99_ttft_ms"] / 1e3,
            "tpot_p50": d["median_tpot_ms"] / 1e3,
            "tpot_mean": d["mean_tpot_ms"] / 1e3,
            "tpot_p99": d["p99_tpot_ms"] / 1e3,
            "out_tok_s": d["total_output_tokens"] / d["duration"],
        }
        row = {
            "file": rel,
            "date": str(d.get("date", ""))[:8],
            "preset": preset + (f" {quant}" if quant else ""),
            "tp": tp,
            "prompts": n,
            "requests": p["requests"],
            "not_finished": p["not_finished"],
            "itl_over_tpot": ratio,
            "scheduler_steps": steps,
        }
        rows.append(add_ratios(row, meas, p))
        print(
            f"{rel}: steps {steps}, TTFT p50 {row['ttft_p50_ratio']:.2f}, TPOT p50 {row['tpot_p50_ratio']:.2f}, "
            f"tok/s {row['out_tok_s_ratio']:.2f}",
            flush=True,
        )
    if not rows:
        raise SystemExit(f"{folder}: no usable A100 run of a model with a preset")
    out = Path(a.out)
    write_summary(save_table(rows, out), out / "summary.md")
    print(f"wrote {out}/validate.csv and summary.md")


def _med(s) -> str:
    return f"{s.median():.2f} [{s.quantile(0.1):.2f}, {s.quantile(0.9):.2f}]"


def write_summary(t, path: Path) -> None:
    """Median [p10, p90] of each ratio by group of runs, then every run."""
    from kvsim.commands.validate import ratio_table

    metrics = ["ttft_p50", "ttft_mean", "tpot_p50", "tpot_mean", "tpot_p99", "out_tok_s"]
    lines = [
        "# kvsim against LambdaLabsML/vllm-benchmark's A100 load sweep",
        "",
        "10 to 1,280 ShareGPT prompts sent at once to vLLM on 1-8 A100-80GB (files of 2024-08 and 2024-09), "
        "replayed by kvsim on the V0 engine with its defaults and CPU time, with 10 scheduler steps where the file "
        "streamed tokens about ten at a time. Predicted / measured, median [p10, p90] over runs. Command: "
        "`python benchmarks/validate_load_sweep.py FOLDER` (see its docstring for the set-up).",
        "",
    ]
    groups = [
        ("all", t),
        *((f"{steps} scheduler step{'s' if steps > 1 else ''}", sub) for steps, sub in t.groupby("scheduler_steps")),
    ]
    groups += [(preset, sub) for preset, sub in t.groupby("preset")]
    groups += [
        (f"{lo}-{hi} prompts", t[(t.prompts >= lo) & (t.prompts <= hi)])
        for lo, hi in ((10, 40), (80, 320), (640, 1280))
    ]
    lines += ratio_table(groups, metrics, _med)
    lines += [
        "",
        "| file | steps | TTFT p50 ms measured | ratio | TPOT p50 ms measured | ratio | TPOT p99 ratio | "
        "out tok/s ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in t.itertuples():
        lines.append(
            f"| {r.file} | {r.scheduler_steps} | {1e3 * r.ttft_p50_measured:.0f} | {r.ttft_p50_ratio:.2f} | "
            f"{1e3 * r.tpot_p50_measured:.1f} | {r.tpot_p50_ratio:.2f} | {r.tpot_p99_ratio:.2f} | "
            f"{r.out_tok_s_ratio:.2f} |"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
