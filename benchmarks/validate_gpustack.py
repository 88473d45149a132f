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
install's sort the KV pool would be 3.6 GiB per GPU smaller. Every run takes the allocator `kvsim run` takes
(kvsim.runner.served_allocator: vLLM's hybrid manager for gpt-oss, prefix caching on).

Held out since 2026-12-06 (`benchmarks/data/gpustack_vllm_held_out.csv`; nothing fitted to it): the vLLM blocks
of eleven more GPUStack pages at the same commit (benchmarks/data/README.md): DeepSeek-R1-0528 (block-FP8 MLA +
MoE, `-tp 8` on 8 H200s, vLLM 0.11.0), gpt-oss-120b on H100 (vLLM 0.10.2: TP1, TP2, TP4 and PP2, with and
without `--async-scheduling`) and on A100 (0.11.0), gpt-oss-20b on H100 and A100 (0.11.0; the H100 page's
section 5 names the 120b model in its server command and is left out), Qwen3-8B (H100, 1-8 clients), Qwen3-14B
and Qwen3-32B on H100 and A100 (bf16; on A100 also their FP8 and AWQ checkpoints, weight-only there), and
Qwen3-235B-A22B on 8 A100s (bf16 TP8, FP8 TP4 and TP8 with expert parallelism), all 0.11.0 unless said. Besides the random bursts they have ShareGPT runs (1,000 prompts at once, and 100 at 4 clients): kvsim
draws their lengths from the ShareGPT excerpt shipped in traces/ (vLLM's filter: prompt 4-1,024 tokens, prompt +
output at most 2,048), scaled so their totals are the run's. Also held out (2026-12-06, after the GEMM grid;
nothing fitted to it): DigitalOcean's GTC-2026 demo (github.com/DO-Solutions/gtc-2026-doks at c70febac,
dev/vllm/benchmarks/phase0/20260224-185458: `vllm bench serve --backend vllm --endpoint /v1/completions
--dataset-name sharegpt --num-prompts 300 --request-rate R`, R 0.5-3, against `api_server --model
nvidia/Llama-3.1-70B-Instruct-FP8 -tp 1` on one H200, vLLM 0.14.1, whose server.log shows async scheduling and
an FP8 KV cache from the checkpoint), `digitalocean_llama70b_fp8_h200.csv`: Poisson gaps as vLLM's client draws
them (seed 0, the last request at N / R), ShareGPT lengths as above. The chat template's tokens are not counted (the
client counts the prompt without them, and so does the replay). Also held out (2026-12-07; nothing fitted to it):
yobitel's inferencebench (github.com/yobitelcomm/bench at eb9dc5c, Apache-2.0, validation-runs/), its 12
`llm.inference` runs of bf16 models on H100s (`yobitel_vllm_h100.csv`, benchmarks/data/README.md): the 10 built-in
short prompts through /v1/chat/completions with streaming, max_tokens 128 (not ignore_eos), 4 clients for 20 s on
vLLM 0.21.0 (TP1; Llama-3.1-70B TP4) and 1, 4 or 16 clients for 90 s or Poisson at 1/s (the `sharegpt-v3` suite,
which fell back to the same prompts) for Qwen2.5-72B at TP4 on 0.22.1. Prompt lengths are estimates (the prompt,
about 14 tokens, plus the model's chat template); output lengths are the client's cl100k counts per request.
"""

from __future__ import annotations

import argparse
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "benchmarks" / "data"
FILES = {
    "gpustack_qwen3_235b_h100.csv": "not blind",
    "gpustack_vllm_held_out.csv": "held out",
    "digitalocean_llama70b_fp8_h200.csv": "held out",
    "yobitel_vllm_h100.csv": "held out",
}
# the columns the Qwen3-235B table (one page: H100, vLLM 0.11.0, random bursts) leaves out, as that page ran
DEFAULTS = {
    "gpu": "h100-80gb",
    "vllm": "0.11.0",
    "pp": 1,
    "enable_expert_parallel": False,
    "async_scheduling": False,
    "max_model_len": float("nan"),
    "dataset": "random",
    "max_concurrency": float("nan"),
    "request_rate": float("inf"),  # requests/s of a Poisson client (vllm bench serve --request-rate); inf: at once
    "token_counts": "",  # "client, other tokenizer": the client counted tokens with another model's tokenizer
    # the client's endpoint: GPUStack's `vllm bench serve --backend openai-chat` and yobitel's client send chat
    # completions (DigitalOcean's table says completions)
    "endpoint": "chat",
}


def load(path: str):
    """One data table with every column the replay reads (DEFAULTS for those its page did not vary)."""
    import pandas as pd

    t = pd.read_csv(path, dtype={"vllm": str})
    for k, v in DEFAULTS.items():
        if k not in t:
            t[k] = v
    return t


def _given(x) -> bool:
    """Whether a cell of the data table holds a value (not empty / NaN)."""
    return x == x and x != ""


def server(r) -> dict:
    """kvsim options for the server of run ``r`` (a row of a data table)."""
    from kvsim.releases import release_key

    v = {
        "model": r.model,
        "gpu": r.gpu,
        "tensor_parallel_size": int(r.tp),
        "pipeline_parallel_size": int(r.pp),
        "vllm_version": r.vllm,
        # every prompt at t = 0, or the send times the replay gives each request (a Poisson client)
        "request_rate": None if poisson(r) else "inf",
        # vLLM's images of 0.10-0.11.0 sample with FlashInfer (flashinfer installed): its peak, not the sort's
        "flashinfer_sampler": release_key(str(r.vllm)) < release_key("0.12"),
        "enable_expert_parallel": bool(r.enable_expert_parallel),
        "async_scheduling": bool(r.async_scheduling),
        "endpoint": r.endpoint,
    }
    for key in ("max_model_len", "max_num_batched_tokens", "max_concurrency"):  # where the command line set them
        if _given(getattr(r, key)):
            v[key] = int(getattr(r, key))
    return v


@lru_cache(maxsize=1)
def sharegpt_lengths():
    """(prompt, output) token arrays of the ShareGPT excerpt in traces/, filtered as `vllm bench serve` samples
    ShareGPT: prompt 4-1,024 tokens, output at least 4, both at most 2,048."""
    import pandas as pd

    d = pd.read_csv(ROOT / "traces" / "sharegpt_lengths_excerpt.csv")
    p, o = d.num_prefill_tokens.to_numpy(), d.num_decode_tokens.to_numpy()
    keep = (p >= 4) & (o >= 4) & (p <= 1024) & (p + o <= 2048)
    return p[keep], o[keep]


def lengths(r) -> list[tuple[int, int]]:
    """(prompt, output) tokens of each request of run ``r``: random and short-chat runs all the run's means;
    ShareGPT runs drawn from the excerpt, scaled to the run's totals."""
    n = int(r.num_prompts)
    if r.dataset != "sharegpt":
        return [(round(r.total_input_tokens / n), max(1, round(r.total_generated_tokens / n)))] * n
    import numpy as np

    p, o = sharegpt_lengths()
    pick = np.random.default_rng(0).choice(len(p), size=n)
    p, o = p[pick].astype(float), o[pick].astype(float)
    p *= r.total_input_tokens / p.sum()
    o *= r.total_generated_tokens / o.sum()
    return [(max(1, round(a)), max(1, round(b))) for a, b in zip(p, o)]


def poisson(r) -> bool:
    """Whether run ``r``'s client sent at a finite --request-rate (Poisson gaps), not every prompt at once."""
    return float(r.request_rate) != float("inf")


def send_times(r):
    """Each request's send time (s), as ``vllm bench serve --request-rate R --seed 0`` schedules them
    (kvsim.trace.bench_load: all at t = 0 for inf)."""
    import numpy as np

    from kvsim.trace.bench_load import BenchLoad

    load = BenchLoad(num_prompts=int(r.num_prompts), request_rate=float(r.request_rate))
    return load.send_times(np.random.default_rng(0))


def replay(r) -> dict:
    """kvsim's median and mean TTFT and TPOT (seconds) and output tokens/s for run ``r``."""
    from kvsim.commands.validate import replay_summary
    from kvsim.options import config_from_options
    from kvsim.runner import served_spec, simulate
    from kvsim.trace.request import Request

    sent = send_times(r)
    reqs = [Request(str(i), float(sent[i]), a, b, line=i + 1) for i, (a, b) in enumerate(lengths(r))]
    cfg = config_from_options(server(r))
    out = simulate(reqs, cfg, served_spec(cfg))
    return {**replay_summary(out), "preemptions": int(out.summary["preemptions"])}


def kind_of_short_chat(r) -> str:
    """The group of a short-chat run (yobitel's harness): its client counted output tokens with OpenAI's cl100k
    tokenizer, close to Llama 3's and Qwen2.5's counts, not to those of models with other tokenizers."""
    load = "1-16 clients" if closed_loop(r) else "Poisson"
    approximate = " (token counts approximate)" if "other" in str(r.token_counts) else ""
    return f"short chat, {load}{approximate}"


def case_of(r) -> str:
    """A run's dataset in a few words: input/output tokens of a random run, ShareGPT, or short chat."""
    if r.dataset == "random":
        return f"{int(r.isl)}/{int(r.osl)}"
    return "ShareGPT" if r.dataset == "sharegpt" else "short chat"


def closed_loop(r) -> bool:
    """Whether run ``r``'s client kept a fixed number of requests in flight (``--max-concurrency``)."""
    return _given(r.max_concurrency)


def label(r) -> str:
    """A run's set-up in a few words: model, GPUs, flags that differ from the page's first."""
    name = r.model.split("/")[-1]
    par = f"tp{int(r.tp)}" + (f" pp{int(r.pp)}" if int(r.pp) > 1 else "") + (" ep" if r.enable_expert_parallel else "")
    extra = " async" if r.async_scheduling else ""
    if _given(r.max_num_batched_tokens):
        extra += f" mnbt {int(r.max_num_batched_tokens)}"
    return f"{name} {par}{extra}"


def main() -> None:
    from kvsim.commands.validate import SUMMARY_METRICS, add_ratios, ratio_line, ratio_table, save_summary, save_table
    from kvsim.errors import ConfigError

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="*", default=[str(DATA / f) for f in FILES], help="data tables")
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation-gpustack"))
    a = ap.parse_args()
    rows: list[dict] = []
    refused: list[str] = []
    for path in a.data:
        for r in load(path).itertuples():
            try:
                p = replay(r)
            except ConfigError as e:  # a set-up kvsim does not model: said, not dropped
                refused.append(f"{label(r)} ({Path(path).name}, line {r.Index + 2}): {e}")
                print(f"{label(r)}: not replayed: {e}", flush=True)
                continue
            meas = {
                "ttft_p50": r.median_ttft_ms / 1e3,
                "ttft_mean": r.mean_ttft_ms / 1e3,
                "tpot_p50": r.median_tpot_ms / 1e3,
                "tpot_mean": r.mean_tpot_ms / 1e3,
                "out_tok_s": r.output_tok_s,
            }
            case = case_of(r)
            closed = closed_loop(r)
            row = {
                "data": FILES.get(Path(path).name, "held out"),
                "model_name": r.model.split("/")[-1]
                .removesuffix("-FP8")
                .removesuffix("-AWQ")
                .removesuffix("-Instruct-2507"),
                "kind": (
                    kind_of_short_chat(r)
                    if case == "short chat"
                    else "1-8 clients (ShareGPT)"
                    if closed
                    else "Poisson ShareGPT (lengths approximate)"
                    if poisson(r)
                    else "ShareGPT bursts (lengths approximate)"
                    if case == "ShareGPT"
                    else "random bursts"
                ),
                "run": label(r),
                "gpu": r.gpu,
                "vllm": r.vllm,
                "tp": r.tp,
                "case": case,
                "prompts": r.num_prompts,
                "clients": int(r.max_concurrency)
                if closed
                else f"Poisson {float(r.request_rate):g}/s"
                if poisson(r)
                else "all at once",
                "not_finished": p["not_finished"],
                "preemptions": p["preemptions"],
            }
            rows.append(add_ratios(row, meas, p))
            print(f"{row['run']} {case} x{r.num_prompts}: {ratio_line(row)}", flush=True)
    out = Path(a.out)
    t = save_table(rows, out)
    lines = [
        "# kvsim against published vLLM runs it never saw: GPUStack (Qwen3, DeepSeek-R1-0528, gpt-oss), DigitalOcean, yobitel",
        "",
        "Open-loop bursts (every prompt sent at once) and 1-8-client ShareGPT runs of `vllm bench serve`, from "
        "GPUStack's Performance Lab (Apache-2.0), replayed by kvsim with each page's server flags and its vLLM "
        'release\'s defaults. "not blind": the Qwen3-235B-A22B page (H100, vLLM 0.11.0), which pointed to three '
        "changes of 2026-12-03, each made from vLLM's code: the FlashInfer sampler of vLLM's 0.11.0 image "
        "(`--flashinfer-sampler`, taken here), restarts that find their own cached blocks, and the MoE presets' "
        'measured shapes (before them its output tokens/s was 0.26-0.95 and TPOT 0.56-0.79). "held out": the '
        "pages of DeepSeek-R1-0528 (8 H200s), gpt-oss-120b and -20b (H100: 0.10.2 and 0.11.0; A100), Qwen3-8B, "
        "-14B and -32B (H100, A100) and Qwen3-235B-A22B (8 A100s), vLLM 0.11.0 unless said, first replayed on "
        "2026-12-06 after kvsim's fits; nothing was fitted to them. The first replay of three of them "
        "(held out: TTFT 0.50, TPOT 0.63, output tokens/s 1.75; gpt-oss-20b 0.44, 0.56, 2.01) pointed to one change, "
        "made from vLLM's history, not fitted: before 0.11.1 vLLM ran gpt-oss's MXFP4 experts on Hopper with "
        "Marlin (OpenAI's Triton kernels were not a dependency until PR #27370), which kvsim now prices for "
        "`--vllm-version` 0.10-0.11.0; the gpt-oss rows are not blind to that. Each run takes the allocator "
        "`kvsim run` takes (vLLM's hybrid manager for gpt-oss; before 2026-12-07 this harness kept every gpt-oss "
        "layer's tokens, half the sequences vLLM holds: gpt-oss-120b TPOT 0.83, now 0.95). Each run sends to the "
        "endpoint its client did (GPUStack's and yobitel's: chat; DigitalOcean's: completions); since 2026-12-07 "
        "kvsim prices the chat template that vLLM 0.11.0 parsed again for every chat request (kvsim/chat_template.py, "
        "from vLLM's code, not fitted; the Jinja-template models' TTFT at 1-8 clients rose from 0.29-0.52 to "
        "0.54-0.65 of measured). The ShareGPT bursts' lengths are "
        "approximate (drawn from the ShareGPT excerpt in traces/, scaled to the run's totals: its longest outputs "
        "are shorter than vLLM's sample, so those runs end early and their tokens/s comes out high). Predicted / "
        "measured, median [p10, p90] over runs (median |error|). Command: `python benchmarks/validate_gpustack.py` "
        "(its docstring has the set-up). AIConfigurator's estimator on the runs of a fixed number of clients: "
        "aiconfigurator.md (`benchmarks/compare_aiconfigurator.py --held-out`). Also held out: DigitalOcean's "
        "GTC-2026 runs of "
        "nvidia/Llama-3.1-70B-Instruct-FP8 on one H200 (vLLM 0.14.1, Poisson ShareGPT at 0.5-3 requests/s), first "
        "replayed after the GEMM grid of 2026-12-06. Also held out (2026-12-07, nothing fitted): yobitel's "
        "inferencebench runs of bf16 models on H100 with vLLM 0.21.0 and 0.22.1 (Llama-3.1-8B/-70B, Qwen2.5-7B/"
        "-Coder-7B/-72B, Mistral-7B-v0.3, gemma-2-9b, Phi-3.5-mini; 1-16 clients or Poisson at 1/s, short chat "
        "prompts, at most 128 output tokens): its client counts tokens with OpenAI's cl100k tokenizer (near Llama "
        "3's and Qwen2.5's counts; Mistral, gemma and Phi rows are marked approximate), reports no means, and "
        "divides output tokens by the whole 20-90 s run including its warm-up requests, so its tokens/s reads low.",
        "",
    ]
    exact = t[~t.kind.str.contains("approximate")]
    groups = [("all", t), *((f"{d}", sub) for d, sub in t.groupby("data", sort=False))]
    groups += [("held out, lengths as run (no ShareGPT bursts)", exact[exact.data == "held out"])]
    groups += [(f"held out: {m}", sub) for m, sub in exact[exact.data == "held out"].groupby("model_name", sort=False)]
    groups += [(f"held out: {g}", sub) for g, sub in exact[exact.data == "held out"].groupby("gpu", sort=False)]
    groups += [(f"held out: {c}", sub) for c, sub in t[t.data == "held out"].groupby("kind", sort=False)]
    lines += ratio_table(groups, SUMMARY_METRICS)
    if refused:
        lines += ["", "Not replayed (kvsim refuses the set-up):", "", *(f"- {x}" for x in refused)]
    lines += [
        "",
        "| data | run | GPU, vLLM | case | prompts | clients | TTFT p50 s measured | ratio | TPOT p50 ms measured "
        "| ratio | out tok/s measured | ratio | kvsim preemptions |",
        "|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in t.itertuples():
        lines.append(
            f"| {r.data} | {r.run} | {r.gpu}, {r.vllm} | {r.case} | {r.prompts} | {r.clients} | "
            f"{r.ttft_p50_measured:.2f} | {r.ttft_p50_ratio:.2f} | {1e3 * r.tpot_p50_measured:.1f} | "
            f"{r.tpot_p50_ratio:.2f} | {r.out_tok_s_measured:.1f} | {r.out_tok_s_ratio:.2f} | {r.preemptions} |"
        )
    save_summary(out, lines)


if __name__ == "__main__":
    main()
