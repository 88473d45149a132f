"""kvsim against published vLLM benchmark results: every A100 result file of LambdaLabsML/vllm-benchmark
(`results/prompt_10/<N>xA100-80GB-SXM/<Model>_tp<T>_len<L>.json`, 10 prompts sent at once) whose model has a kvsim
preset, replayed with `kvsim validate`'s comparison under the load each file records.

    python benchmarks/validate_published.py FOLDER [--out reports/validation-published]

FOLDER holds the repository's `results/` tree (or any part of it); files of other GPUs are left out (the H100
ones are held out for checking, never read here), as are FP8 checkpoints and models without a preset. Writes
validate.csv (one row per file) and summary.md (a row per file, then the median and range of each ratio).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvsim.commands.validate import METRICS, compare_run, save_summary, save_table, server_implied  # noqa: E402
from kvsim.errors import ConfigError  # noqa: E402
from kvsim.hardware import get_model  # noqa: E402
from kvsim.options import config_from_options  # noqa: E402
from kvsim.trace.bench_result import read_bench_result  # noqa: E402

NAME = re.compile(r"(?P<gpus>\d+)x(?P<gpu>A100-80GB)-SXM/(?P<model>.+)_tp(?P<tp>\d+)_len(?P<len>\d+)\.json$")


def runs(folder: Path):
    """(file, preset, tp, len) of every usable A100 file under ``folder``, in a stable order."""
    for path in sorted(folder.rglob("*.json")):
        m = NAME.search(path.as_posix())
        if m is None or "FP8" in m["model"]:
            continue
        run = read_bench_result(str(path))
        try:
            preset = get_model(run.model_id).name
        except ConfigError:
            continue
        yield path, run, preset, int(m["tp"]), int(m["len"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation-published"))
    ap.add_argument(
        "--num-scheduler-steps",
        type=int,
        default=None,
        help="replay every file with this many scheduler steps [default: as each file's streaming shows]",
    )
    a = ap.parse_args()
    rows = []
    for path, run, preset, tp, length in runs(Path(a.folder)):
        # The server as the file shows it (kvsim validate's rule: dated before vLLM 0.8, the V0 engine with its
        # defaults; tokens streamed ~10 at a time, 10 scheduler steps), --max-model-len as the file is named
        values = {"model": preset, "gpu": "a100-80gb", "tensor_parallel_size": tp, "max_model_len": length}
        if a.num_scheduler_steps:
            values["num_scheduler_steps"] = a.num_scheduler_steps
        values.update(server_implied(run, values))
        steps = values.get("num_scheduler_steps", 1)
        cfg = config_from_options({**values, "max_concurrency": run.max_concurrency, "request_rate": run.request_rate})
        row, _ = compare_run(run, cfg)
        rows.append(
            {
                **row,
                "file": path.relative_to(a.folder).as_posix(),
                "preset": preset,
                "tp": tp,
                "len": length,
                "date": run.date[:8],
                "tokens_per_chunk": run.tokens_per_chunk,
                "num_scheduler_steps": steps,
            }
        )
        print(
            f"{rows[-1]['file']}: TTFT {row['ttft_p50_ratio']:.2f}, TPOT {row['tpot_p50_ratio']:.2f}, "
            f"E2E {row['e2e_p50_ratio']:.2f}"
        )
    if not rows:
        raise SystemExit(f"{a.folder}: no A100 result files of models with a kvsim preset")
    out = Path(a.out)
    table = save_table(rows, out)
    lines = [
        "# kvsim against published vLLM benchmark results (LambdaLabsML/vllm-benchmark, A100)",
        "",
        "Each file: 10 prompts sent at once to vLLM (files dated "
        + f"{table.date.min()}-{table.date.max()}), replayed by kvsim under the same load with the shipped A100 "
        "calibration; predicted / measured of the median per request. Command: "
        "`python benchmarks/validate_published.py FOLDER` on the repository's results/ tree.",
        "",
        "| file | preset | TP | tokens per chunk | scheduler steps | TTFT ms measured | TTFT ratio | TPOT ms "
        "measured | TPOT ratio | E2E ratio | out tok/s ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['file']} | {r['preset']} | {r['tp']} | {r['tokens_per_chunk']:.1f} | "
            f"{r['num_scheduler_steps']} | {1000 * r['ttft_p50_measured_s']:.0f} | "
            f"{r['ttft_p50_ratio']:.2f} | {1000 * r['tpot_p50_measured_s']:.1f} | {r['tpot_p50_ratio']:.2f} | "
            f"{r['e2e_p50_ratio']:.2f} | {r.get('output_tok_s_ratio', float('nan')):.2f} |"
        )
    lines += [
        "",
        f"Over {len(rows)} files, predicted / measured (median [min, max]): "
        + "; ".join(
            f"{m.upper()} {table[f'{m}_p50_ratio'].median():.2f} [{table[f'{m}_p50_ratio'].min():.2f}, "
            f"{table[f'{m}_p50_ratio'].max():.2f}]"
            for m in METRICS
        )
        + "; output tokens/s "
        f"{table.output_tok_s_ratio.median():.2f} [{table.output_tok_s_ratio.min():.2f}, "
        f"{table.output_tok_s_ratio.max():.2f}].",
        "",
        "These files were made by vLLM 0.6.0 with `--num-scheduler-steps 10`: the repository's report "
        '(benchmark_v0.md, "vLLM v0.5.4 v.s. v0.6.0") names that setting, although its scripts name the v0.5.4 '
        "image, and every request's first token reached the client alone and the rest about ten at a time (the "
        "tokens per chunk above). Each file is replayed as kvsim validate replays it: the server the file shows "
        "(dated before vLLM 0.8: the V0 engine with its defaults; tokens ~10 per chunk: 10 scheduler steps), "
        "--max-model-len as the file is named, and the requests that streamed no text prefilled with the others but "
        "not compared; `--num-scheduler-steps 1` replays them one step at a time. The TTFT gap left (7-8B models: "
        "the first token 40-50 ms after kvsim's prefill ends) is reported, not tuned away.",
    ]
    save_summary(out, lines)


if __name__ == "__main__":
    main()
