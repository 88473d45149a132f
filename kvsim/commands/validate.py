"""`kvsim validate`: replay measured benchmark runs (`vllm bench serve --save-result` files) under the same load
and say how far kvsim's latencies and throughput are from what the client measured."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

METRICS = ("ttft", "tpot", "e2e")
# what replay_summary gives a replayed run (and the validation benchmarks compare, predicted / measured)
SUMMARY_METRICS = ("ttft_p50", "ttft_mean", "tpot_p50", "tpot_mean", "out_tok_s")


def replay_summary(out) -> dict:
    """A replayed run's summary as benchmark clients report theirs: requests not finished, median, mean and p99
    TTFT and TPOT of the finished ones (seconds) and output tokens/s (``out``: a runner.simulate or fleet
    result)."""
    import numpy as np

    from kvsim.metrics import percentile

    df = out.requests
    done = df[df.status == "finished"]
    ttft, tpot = done.ttft_s.to_numpy(), done.tpot_s.dropna().to_numpy()
    return {
        "not_finished": int(len(df) - len(done)),
        "ttft_p50": percentile(ttft, 50),
        "ttft_mean": float(np.mean(ttft)),
        "ttft_p99": percentile(ttft, 99),
        "tpot_p50": percentile(tpot, 50),
        "tpot_mean": float(np.mean(tpot)),
        "tpot_p99": percentile(tpot, 99),
        "out_tok_s": out.summary["throughput_tok_s"],
    }


def add_ratios(row: dict, measured: dict, predicted: dict) -> dict:
    """``row`` with ``<metric>_measured``, ``_predicted`` and ``_ratio`` (predicted / measured; NaN where nothing
    positive was measured) for each metric of ``measured``."""
    for k, v in measured.items():
        row[f"{k}_measured"], row[f"{k}_predicted"] = v, predicted[k]
        row[f"{k}_ratio"] = predicted[k] / v if v > 0 else float("nan")
    return row


def ratio_line(row: dict) -> str:
    """A replayed run's ratios as one progress line's tail: 'TTFT 1.02, TPOT 0.95, tok/s 1.00'."""
    return f"TTFT {row['ttft_p50_ratio']:.2f}, TPOT {row['tpot_p50_ratio']:.2f}, tok/s {row['out_tok_s_ratio']:.2f}"


def compare_run(run, cfg) -> tuple[dict, object]:
    """(one summary row, per-request frame) of kvsim replaying ``run`` with ``cfg`` (its load set from the file)."""
    import numpy as np
    import pandas as pd

    from kvsim.metrics import percentile
    from kvsim.runner import served_spec, simulate

    spec = served_spec(cfg)
    out = simulate(run.requests, cfg, spec)
    pred = out.requests.set_index("id").loc[[r.id for r in run.requests]]
    outputs = np.array([r.output_tokens for r in run.requests], dtype=float)
    m_ttft, m_e2e = np.array(run.ttft_s), np.array(run.e2e_s)
    timed = np.isfinite(m_ttft)  # requests that streamed no text are replayed but not compared
    with np.errstate(invalid="ignore", divide="ignore"):
        m_tpot = np.where(outputs > 1, (m_e2e - m_ttft) / (outputs - 1), np.nan)
    req = pd.DataFrame(
        {
            "file": Path(run.path).name,
            "id": [r.id for r in run.requests],
            "prompt_tokens": [r.prompt_tokens for r in run.requests],
            "output_tokens": outputs.astype(int),
            "status": pred["status"].to_numpy(),
            "ttft_measured_s": m_ttft,
            "ttft_predicted_s": np.where(timed, pred["ttft_s"], np.nan),
            "tpot_measured_s": m_tpot,
            "tpot_predicted_s": np.where(timed, pred["tpot_s"], np.nan),
            "e2e_measured_s": m_e2e,
            "e2e_predicted_s": np.where(timed, pred["e2e_s"], np.nan),
        }
    )
    row = {
        "file": Path(run.path).name,
        "model_id": run.model_id,
        "requests": len(run.requests),
        "skipped": run.skipped,
        "without_text": run.silent,
        "not_finished": int((req.status != "finished").sum()),
        "request_rate": run.request_rate,
        "max_concurrency": run.max_concurrency,
        "compared": "requests",
    }
    for m in METRICS:
        meas, prd = req[f"{m}_measured_s"].to_numpy(), req[f"{m}_predicted_s"].to_numpy()
        for q, name in ((50, "p50"), (90, "p90")):
            a, b = percentile(prd, q), percentile(meas, q)
            row[f"{m}_{name}_predicted_s"], row[f"{m}_{name}_measured_s"] = a, b
            row[f"{m}_{name}_ratio"] = a / b if b > 0 else float("nan")
        ok = np.isfinite(meas) & np.isfinite(prd) & (meas > 0)
        row[f"{m}_mape"] = float(np.mean(np.abs(prd[ok] / meas[ok] - 1))) if ok.any() else float("nan")
    if run.duration_s:
        row["output_tok_s_measured"] = run.output_tokens / run.duration_s
        row["output_tok_s_predicted"] = out.summary["throughput_tok_s"]
        row["output_tok_s_ratio"] = row["output_tok_s_predicted"] / row["output_tok_s_measured"]
    return row, req


def compare_summary(run, values: dict) -> tuple[dict, object]:
    """(one summary row, per-request frame) of kvsim replaying a summary-only result (``run``: a MeasuredSummary)
    as the random workload of its numbers, with the user's options ``values``. The row has each figure the file
    has, measured, predicted and predicted / measured (columns named as :func:`compare_run`'s:
    ``ttft_p50_measured_s``, ..., ``output_tok_s_ratio``); the frame kvsim's requests (nothing measured per
    request: NaN)."""
    import numpy as np
    import pandas as pd

    from kvsim.metrics import percentile
    from kvsim.options import config_from_options, normalize
    from kvsim.runner import served_spec, simulate
    from kvsim.trace.bench_load import from_options

    load = normalize({**values, **run.load_values(values)})
    bench = from_options(load)
    assert bench is not None  # (the load has its dataset options)
    cfg = config_from_options({k: v for k, v in load.items() if k != "request_rate"})  # the workload is timed
    out = simulate(bench.requests(), cfg, served_spec(cfg))
    done = out.requests[out.requests.status == "finished"]
    predicted = {"output_tok_s": out.summary["throughput_tok_s"]}
    for m, col in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s")):
        predicted[f"{m}_mean"] = float(done[col].mean())
        predicted[f"{m}_p50"], predicted[f"{m}_p99"] = percentile(done[col], 50), percentile(done[col], 99)
    for q in (50, 99):
        predicted[f"itl_p{q}"] = out.summary.get(f"itl_p{q}_s", float("nan"))
    row = {
        "file": Path(run.path).name,
        "model_id": run.model_id,
        "requests": run.completed,
        "skipped": run.failed,
        "without_text": 0,
        "not_finished": int(len(out.requests) - len(done)),
        "request_rate": run.request_rate,
        "max_concurrency": run.max_concurrency,
        "compared": "summary",
        "replayed_as": bench.describe(),
    }
    for name, measured in run.measured.items():
        unit = "" if name == "output_tok_s" else "_s"
        row[f"{name}_measured{unit}"], row[f"{name}_predicted{unit}"] = measured, predicted[name]
        row[f"{name}_ratio"] = predicted[name] / measured if measured > 0 else float("nan")
    df = out.requests
    nan = np.full(len(df), np.nan)
    req = pd.DataFrame(
        {
            "file": row["file"],
            "id": df["id"].to_numpy(),
            "prompt_tokens": df["prompt_tokens"].to_numpy(),
            "output_tokens": df["output_tokens"].to_numpy(),
            "status": df["status"].to_numpy(),
            **{
                f"{m}_{kind}_s": nan if kind == "measured" else df[f"{m}_s"].to_numpy()
                for m in METRICS
                for kind in ("measured", "predicted")
            },
        }
    )
    return row, req


def save_table(rows: list[dict], out: Path):
    """``rows`` (one per result file) as a frame, written to ``out``/validate.csv (the folder made if needed)."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    table.to_csv(out / "validate.csv", index=False)
    return table


def save_summary(out: Path, lines: list[str]) -> None:
    """``lines`` as ``out``/summary.md beside the validate.csv :func:`save_table` wrote, and say so."""
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}/validate.csv and summary.md")


def ratio_cell(ratio) -> str:
    """One table cell of predicted / measured ratios (a pandas Series; missing values left out): median [p10, p90]
    (median |error| in percent), or '-' without any."""
    import numpy as np

    ratio = ratio.dropna()
    if not len(ratio):
        return "-"
    return (
        f"{ratio.median():.2f} [{ratio.quantile(0.1):.2f}, {ratio.quantile(0.9):.2f}] "
        f"({100 * np.median(abs(ratio - 1)):.0f}%)"
    )


def ratio_table(groups, metrics, cell=ratio_cell) -> list[str]:
    """Markdown lines of a table of predicted / measured ratios by group of runs: a header, then per (name,
    frame) of ``groups`` with rows its run count and ``cell`` of each metric's ``<metric>_ratio`` column
    (empty groups left out)."""
    lines = ["| runs | n | " + " | ".join(metrics) + " |", "|---|---:|" + "---:|" * len(metrics)]
    lines += [
        f"| {name} | {len(sub)} | " + " | ".join(cell(sub[f"{m}_ratio"]) for m in metrics) + " |"
        for name, sub in groups
        if len(sub)
    ]
    return lines


V1_DEFAULT_FROM = "20250318"  # vLLM 0.8.0: the V1 engine became the default
ASYNC_DEFAULT_FROM = "20260120"  # vLLM 0.14.0: async scheduling became the default (kvsim.releases)


def server_implied(run, values: dict) -> dict:
    """Engine options the result file shows its server ran with, where the user gave none: a run dated before
    vLLM 0.8 ran the V0 engine on a release older than any whose kernels are measured (0.7 stands for it: the
    oldest tables are used), one dated before vLLM 0.14 scheduled in step with the GPU (V1 without async
    scheduling), and one whose tokens arrived four or more at a time multi-step scheduling."""
    implied: dict[str, object] = {}
    engine = values.get("vllm_engine")
    dated = run.date[:8] if run.date[:8].isdigit() else None
    old = dated is not None and dated < V1_DEFAULT_FROM
    if engine is None and old:
        engine = implied["vllm_engine"] = "v0"
    if (
        engine in (None, "v1")
        and dated is not None
        and dated < ASYNC_DEFAULT_FROM
        and "vllm_version" not in values
        and "async_scheduling" not in values
        and values.get("cpu_overhead") != "vllm-v1-async"
    ):
        implied["async_scheduling"] = False
    if old and "vllm_version" not in values and values.get("latency", "per-op") == "per-op":
        implied["vllm_version"] = "0.7"  # a release before 0.8: the oldest measured kernels (said at the start)
    if engine == "v0" and "num_scheduler_steps" not in values and run.tokens_per_chunk >= 4:
        implied["num_scheduler_steps"] = round(run.tokens_per_chunk)
    return implied


def cmd_validate(a: argparse.Namespace) -> int:
    import pandas as pd

    from kvsim.commands.args import DEFAULT_OUT, result_marker, results_dir
    from kvsim.errors import ConfigError
    from kvsim.files import prepare_results_dir, results_folder
    from kvsim.latency import latency_notes
    from kvsim.options import config_from_options, values_from_namespace
    from kvsim.trace.bench_result import MeasuredSummary
    from kvsim.trace.result_file import read_results

    runs = [run for f in a.results for run in read_results(f)]  # every file checked before anything runs
    values = values_from_namespace(a)
    if "model" not in values:
        ids = sorted({r.model_id for r in runs if r.model_id})
        raise ConfigError(
            "say which model served the run: --model PRESET or a config.json"
            + (f" (the results name {', '.join(ids)})" if ids else "")
        )
    out, out_note = results_dir(a, Path(DEFAULT_OUT) / "validate")  # never over another configuration's results
    out = prepare_results_dir(
        out,
        "--out",
        [*a.results, values.get("model"), values.get("latency")],
        ["validate.csv", "requests.csv", "summary.md"] + ([] if a.no_plots else ["predicted_vs_measured.png"]),
    )
    rows: list[dict] = []
    frames: list = []
    for run in runs:
        implied = server_implied(run, values)
        cfg = config_from_options(
            {
                **values,
                **implied,
                "max_concurrency": run.max_concurrency,
                # a file with send times keeps them; else arrivals drawn at its rate
                **({} if run.timed else {"request_rate": run.request_rate}),
            }
        )
        if implied:
            dated = implied.keys() & {"vllm_engine", "vllm_version"}
            why = (
                (["dated before vLLM 0.8 made V1 the default engine"] if dated else [])
                + (
                    ["dated before vLLM 0.14 made async scheduling the default"]
                    if "async_scheduling" in implied
                    else []
                )
                + (
                    [f"tokens streamed {run.tokens_per_chunk:.1f} at a time: multi-step scheduling"]
                    if "num_scheduler_steps" in implied
                    else []
                )
            )
            flags = " ".join(
                f"--{k.replace('_', '-')} {v}"
                if not isinstance(v, bool)
                else f"--{'' if v else 'no-'}{k.replace('_', '-')}"
                for k, v in implied.items()
            )
            print(
                f"{run.path}: replayed {flags} as the file shows the server ran ({'; '.join(why)}); give the "
                "options to replay otherwise",
                file=sys.stderr,
            )
        if not rows:
            for note in latency_notes(cfg):
                print(note, file=sys.stderr)
        if isinstance(run, MeasuredSummary):
            row, req = compare_summary(run, {**values, **implied})
            print(
                f"{run.path}: a summary only (no per-request fields): replayed its load as {row['replayed_as']} "
                f"and compared its {len(run.measured)} figures",
                file=sys.stderr,
            )
            if row["not_finished"]:
                print(f"{run.path}: {row['not_finished']} requests did not finish in kvsim", file=sys.stderr)
            rows.append(row)
            frames.append(req)
            continue
        if run.timed:
            print(
                f"{run.path}: its requests arrive when the benchmark scheduled them (its send times)", file=sys.stderr
            )
        if run.skipped:
            print(f"{run.path}: skipped {run.skipped} failed request(s)", file=sys.stderr)
        if run.warmups:
            print(
                f"{run.path}: left out {run.warmups} warm-up request(s) (the client's warm-up phase)", file=sys.stderr
            )
        if run.silent:
            print(
                f"{run.path}: {run.silent} request(s) succeeded without streaming text (replayed as one token: "
                "their prompts were computed; not compared, the client timed nothing)",
                file=sys.stderr,
            )
        if run.tokens_per_chunk >= 1.5 and "num_scheduler_steps" not in values and "num_scheduler_steps" not in implied:
            print(
                f"{run.path}: its tokens reached the client {run.tokens_per_chunk:.1f} at a time (vLLM V0's "
                f"multi-step scheduling streams once per window): replay it with --vllm-engine v0 "
                f"--num-scheduler-steps {round(run.tokens_per_chunk)} if the server ran so",
                file=sys.stderr,
            )
        row, req = compare_run(run, cfg)
        if row["not_finished"]:  # still in the tables, with its status; the medians leave it out
            print(
                f"{run.path}: {row['not_finished']} of {row['requests']} requests did not finish in kvsim "
                "(rejected or unfinished: see the status column of requests.csv)",
                file=sys.stderr,
            )
        rows.append(row)
        frames.append(req)
    with results_folder(out, "--out", result_marker(a)) as stage:
        table = save_table(rows, stage)
        requests = pd.concat(frames, ignore_index=True)
        requests.to_csv(stage / "requests.csv", index=False)
        written = ["validate.csv", "requests.csv", "summary.md"]
        per_request = [r for r in rows if r["compared"] == "requests"]
        summaries = [r for r in rows if r["compared"] == "summary"]
        lines = [f"# kvsim validate: {a.model} on {a.gpu or 'the default GPU'}", ""]
        if per_request:
            lines += [
                "predicted / measured (medians, p90) and mean absolute percentage error per request",
                "",
                "| file | requests | load | TTFT p50 | TTFT p90 | TPOT p50 | TPOT p90 | E2E p50 | E2E p90 | "
                "out tok/s | MAPE TTFT | MAPE TPOT | MAPE E2E |",
                "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {r['file']} | {r['requests']} | {_load_text(r)} | "
                + " | ".join(_cell(r, f"{m}_{q}_ratio") for m in METRICS for q in ("p50", "p90"))
                + f" | {_cell(r, 'output_tok_s_ratio')} | "
                + " | ".join(f"{100 * r[f'{m}_mape']:.0f}%" for m in METRICS)
                + " |"
                for r in per_request
            ]
        if summaries:
            lines += [""] if per_request else []
            lines += [
                "Summary-only files (no per-request fields), each replayed as the random workload of its numbers: "
                "predicted / measured of every figure the file has",
                "",
                "| file | requests | load | " + " | ".join(label for _, label in SUMMARY_COLUMNS) + " |",
                "|---|---:|---|" + "---:|" * len(SUMMARY_COLUMNS),
            ]
            lines += [
                f"| {r['file']} | {r['requests']} | {_load_text(r)} | "
                + " | ".join(_cell(r, f"{k}_ratio") for k, _ in SUMMARY_COLUMNS)
                + " |"
                for r in summaries
            ]
            lines += ["", "Replayed as:", ""] + [f"- {r['file']}: {r['replayed_as']}" for r in summaries]
        print(
            f"{'file':36s} {'reqs':>5s} {'TTFT p50':>9s} {'TPOT p50':>9s} {'E2E p50':>8s} {'tok/s':>6s}  "
            "(predicted / measured)"
        )
        for r in rows:
            print(
                f"{r['file'][:36]:36s} {r['requests']:5d} {_cell(r, 'ttft_p50_ratio'):>9s} "
                f"{_cell(r, 'tpot_p50_ratio'):>9s} {_cell(r, 'e2e_p50_ratio'):>8s} {_cell(r, 'output_tok_s_ratio'):>6s}"
            )
        if len(rows) > 1:
            for m in METRICS:
                if f"{m}_p50_ratio" in table:
                    print(f"median over files of {m.upper()} p50 ratio: {table[f'{m}_p50_ratio'].median():.2f}")
        (stage / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        if not a.no_plots and requests.ttft_measured_s.notna().any():  # (summaries measure no request)
            _plot(requests, stage / "predicted_vs_measured.png")
            written.append("predicted_vs_measured.png")
    if out_note:
        print(out_note, file=sys.stderr)
    print(f"wrote {', '.join(written)} to {out}/")
    return 0


# a summary-only file's figures in summary.md: (kvsim's name, column label)
SUMMARY_COLUMNS = (
    ("ttft_mean", "TTFT mean"),
    ("ttft_p50", "TTFT p50"),
    ("ttft_p99", "TTFT p99"),
    ("tpot_mean", "TPOT mean"),
    ("tpot_p50", "TPOT p50"),
    ("tpot_p99", "TPOT p99"),
    ("itl_p50", "ITL p50"),
    ("itl_p99", "ITL p99"),
    ("e2e_p50", "E2E p50"),
    ("output_tok_s", "out tok/s"),
)


def _cell(row: dict, key: str) -> str:
    """A ratio of ``row`` to two decimals, '-' where the file had no such figure."""
    import math

    v = row.get(key)
    return "-" if v is None or not math.isfinite(v) else f"{v:.2f}"


def _load_text(r: dict) -> str:
    """A result row's load: 'all at once, 2 clients', '2.5 req/s'."""
    return ("all at once" if r["request_rate"] == float("inf") else f"{r['request_rate']:g} req/s") + (
        f", {r['max_concurrency']} clients" if r["max_concurrency"] else ""
    )


def _plot(req, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, m in zip(axes, METRICS):
        x, y = req[f"{m}_measured_s"], req[f"{m}_predicted_s"]
        ax.scatter(x, y, s=8, alpha=0.6)
        hi = max(float(x.max()), float(y.max())) if len(x) else 1.0
        ax.plot([0, hi], [0, hi], color="grey", lw=1)
        ax.set_xlabel(f"measured {m.upper()} (s)")
        ax.set_ylabel(f"kvsim {m.upper()} (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def register(sub) -> None:
    from kvsim.options import add_options

    v = sub.add_parser(
        "validate",
        help="replay measured benchmark runs (vllm bench serve result files) and "
        "compare kvsim's latencies with the measured ones",
        description="Replays the requests of `vllm bench serve --save-result --save-detailed` files (input and "
        "output lengths, under the recorded request rate and --max-concurrency) on the configured "
        "model and GPU, and reports predicted / measured TTFT, TPOT, E2E (median, p90, "
        "per-request MAPE) and output throughput. A file with the summary only (--save-result alone) is "
        "replayed as the random workload of its numbers (its requests, mean lengths, clients, rate, "
        "burstiness; --random-range-ratio where its lengths varied) and compared figure by figure (mean, "
        "median and p99 TTFT, TPOT, ITL, E2E; output tokens/s); so are GenAI-Perf's and AIPerf's summary files "
        "(profile_export_genai_perf.json, profile_export_aiperf.json), as --bench genai-perf / aiperf.",
    )
    v.add_argument(
        "results",
        nargs="+",
        help="result JSON files (per-request fields: input_lens, output_lens, ttfts, itls; or a summary with "
        "completed, total_input_tokens, total_output_tokens; GenAI-Perf's and AIPerf's exports), or folders of them",
    )
    add_options(
        v,
        ("model and hardware", "KV pool", "scheduler", "latency"),
        keys=("bench", "random_range_ratio", "random_range_ratio_mode", "random_seed"),
    )
    v.add_argument("--out", help="output folder [default: kvsim-out/validate]")
    v.add_argument("--no-plots", action="store_true", help="skip the scatter plot")
    v.set_defaults(func=cmd_validate)
