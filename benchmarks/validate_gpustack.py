"""kvsim against GPUStack's published vLLM 0.11.0 runs of Qwen3-235B-A22B-Instruct-2507 (bf16 at TP8, FP8 at TP4)
on H100-SXM: open-loop bursts that send every prompt at once, replayed by kvsim and compared on their summaries.

    python benchmarks/validate_gpustack.py [--data benchmarks/data/gpustack_qwen3_235b_h100.csv]
        [--out reports/validation-gpustack]

Data: GPUStack "Performance Lab" (github.com/gpustack/gpustack, docs/performance-lab/qwen3-235b-a22b/h100.md at
47277d7, Apache-2.0): the `vllm bench serve` summaries of its random-dataset runs (the ShareGPT runs need the
dataset's prompts; the page's "128 input" blocks look like ShareGPT runs under another label). Nothing in kvsim
was fitted to them. Server: `vllm serve MODEL -tp 8` (bf16) and `vllm serve MODEL-FP8 -tp 4
--max-num-batched-tokens 16384`, vLLM 0.11.0's defaults otherwise (prefix caching on, 1,024 sequences, 8,192
batched tokens). Client: `vllm bench serve --backend openai-chat --dataset-name random --random-input-len I
--random-output-len O --num-prompts N --seed 42`, every request at t = 0 (`--request-rate inf`, no
`--max-concurrency`), without `--ignore-eos`: the model stopped some outputs early (the 32,000-token prompts got
82 of 100 tokens on average), so each replayed request generates the run's mean output length. What the page
does not say is replayed as vLLM 0.11 sets it; GPUStack may deploy with other flags (its max model length is not
given: 40,960 here, the base model's), except the sampler: FlashInfer's, as vLLM 0.11.0 runs it wherever flashinfer
is installed (its Docker image; `--flashinfer-sampler`). The page does not say how vLLM was installed; with a pip
install's sort the KV pool would be 3.6 GiB per GPU smaller.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

METRICS = ("ttft_p50", "ttft_mean", "tpot_p50", "tpot_mean", "out_tok_s")


def server(r) -> dict:
    """kvsim options for the server of run ``r`` (a row of the data table)."""
    v = {
        "model": r.model,
        "gpu": "h100-80gb",
        "tensor_parallel_size": int(r.tp),
        "vllm_version": "0.11.0",
        "max_model_len": 40960,
        "request_rate": "inf",
        "flashinfer_sampler": True,  # vLLM 0.11.0's image (flashinfer installed: its sampler's, not the sort's)
    }
    if r.max_num_batched_tokens == r.max_num_batched_tokens:  # not NaN: given on the command line
        v["max_num_batched_tokens"] = int(r.max_num_batched_tokens)
    return v


def replay(r) -> dict:
    """kvsim's median and mean TTFT and TPOT (seconds) and output tokens/s for run ``r``."""
    from kvsim.commands.validate import replay_summary
    from kvsim.options import config_from_options
    from kvsim.runner import resolve_allocator, simulate
    from kvsim.trace.request import Request

    n = int(r.num_prompts)
    prompt = round(r.total_input_tokens / n)
    out_len = max(1, round(r.total_generated_tokens / n))
    reqs = [Request(str(i), 0.0, prompt, out_len, line=i + 1) for i in range(n)]
    cfg = config_from_options(server(r))
    out = simulate(reqs, cfg, resolve_allocator("paged+prefix", cfg, named=False))
    return {**replay_summary(out), "preemptions": int(out.summary["preemptions"])}


def main() -> None:
    import pandas as pd

    from kvsim.commands.validate import add_ratios, ratio_table, save_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT / "benchmarks" / "data" / "gpustack_qwen3_235b_h100.csv"))
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation-gpustack"))
    a = ap.parse_args()
    runs = pd.read_csv(a.data)
    rows = []
    for r in runs.itertuples():
        p = replay(r)
        meas = {
            "ttft_p50": r.median_ttft_ms / 1e3,
            "ttft_mean": r.mean_ttft_ms / 1e3,
            "tpot_p50": r.median_tpot_ms / 1e3,
            "tpot_mean": r.mean_tpot_ms / 1e3,
            "out_tok_s": r.output_tok_s,
        }
        row = {
            "weights": r.weights,
            "tp": r.tp,
            "isl": r.isl,
            "osl": r.osl,
            "prompts": r.num_prompts,
            "not_finished": p["not_finished"],
            "preemptions": p["preemptions"],
        }
        rows.append(add_ratios(row, meas, p))
        print(
            f"{r.weights} tp{r.tp} {r.isl}/{r.osl}: TTFT {row['ttft_p50_ratio']:.2f}, TPOT {row['tpot_p50_ratio']:.2f}, "
            f"tok/s {row['out_tok_s_ratio']:.2f}",
            flush=True,
        )
    out = Path(a.out)
    t = save_table(rows, out)
    lines = [
        "# kvsim against GPUStack's vLLM 0.11 runs of Qwen3-235B-A22B on H100",
        "",
        "Six open-loop bursts (every prompt sent at once) of `vllm bench serve`'s random dataset, from GPUStack's "
        "Performance Lab (Apache-2.0), replayed by kvsim with the page's server flags and vLLM 0.11's defaults; "
        "nothing was fitted to them. They are not blind for three changes of 2026-12-03 they pointed to, each "
        "made from vLLM's code: the FlashInfer sampler of vLLM's 0.11.0 image (`--flashinfer-sampler`, taken "
        "here: the page does not say how vLLM was installed; with a pip install's sort, a KV pool 3.6 GiB per "
        "GPU smaller, TPOT is 0.48-0.74 and tokens/s 0.73-0.94), restarts that find their own cached blocks, "
        "and the MoE presets' measured shapes; before them output tokens/s was 0.26-0.95 and TPOT 0.56-0.79. "
        "Predicted / measured, median [p10, p90] over runs (median |error|). Command: `python "
        "benchmarks/validate_gpustack.py` (its docstring has the set-up).",
        "",
    ]
    groups = [("all", t), *((f"{w}", sub) for w, sub in t.groupby("weights"))]
    lines += ratio_table(groups, METRICS)
    lines += [
        "",
        "| weights | TP | in/out | prompts | TTFT p50 s measured | ratio | TPOT p50 ms measured | ratio | "
        "out tok/s measured | ratio | kvsim preemptions |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in t.itertuples():
        lines.append(
            f"| {r.weights} | {r.tp} | {r.isl}/{r.osl} | {r.prompts} | {r.ttft_p50_measured:.1f} | "
            f"{r.ttft_p50_ratio:.2f} | {1e3 * r.tpot_p50_measured:.1f} | {r.tpot_p50_ratio:.2f} | "
            f"{r.out_tok_s_measured:.1f} | {r.out_tok_s_ratio:.2f} | {r.preemptions} |"
        )
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}/validate.csv and summary.md")


if __name__ == "__main__":
    main()
