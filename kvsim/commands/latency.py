"""`kvsim latency` (predicted iteration time by part) and `kvsim calibrate` (fit a calibration)."""

from __future__ import annotations

import argparse
import sys

from kvsim.commands.args import non_negative_int, positive_int
from kvsim.errors import ConfigError, TraceError


def cmd_calibrate(a: argparse.Namespace) -> int:
    from kvsim.files import check_output_file
    from kvsim.latency.calibration import save_calibration
    from kvsim.calibrate.fits import fit_calibration, read_measurements

    if not a.measurements and not a.aic:
        raise ConfigError("give measurement files, an AIConfigurator folder (--aic DIR), or both")
    check_output_file(a.output, "-o", a.measurements + ([a.aic] if a.aic and a.aic != "installed" else []))
    measured = read_measurements(a.measurements)
    if a.aic:
        from kvsim.hardware import get_gpu
        from kvsim.calibrate.aic import fit_aic, read_aic
        from kvsim.latency.calibration import shipped_calibration

        # GEMMs from the tables unless dense-layer profiles (mlp.csv) were given
        kinds = ("decode", "prefill", "all_reduce", "moe", "mla_decode", "mla_prefill") + (
            () if "mlp" in measured else ("gemm",)
        )
        data = read_aic(a.aic, a.system, a.vllm_version, kinds=kinds, gpu=get_gpu(a.gpu) if a.gpu else None)
        for note in data.notes:
            print(f"note: {note}", file=sys.stderr)
        base = (
            fit_calibration(a.measurements, data.gpu.name, data=measured)
            if a.measurements
            else shipped_calibration(data.gpu)[0]
        )
        c = fit_aic(data, base).calibration(base)
        if "moe_perf" in data.files:  # each kernel family (--moe-backend) from this GPU's table, none borrowed
            from dataclasses import replace

            from kvsim.calibrate.aic import fit_moe_families

            families, _ = fit_moe_families(data.files["moe_perf"], data.gpu)
            c = replace(
                c,
                moe_backends=families,
                sources={**c.sources, "moe_backends": "fitted per kernel family on " + data.files["moe_perf"]},
            )
    else:
        c = fit_calibration(a.measurements, a.gpu, data=measured)
    save_calibration(c, a.output)
    print(f"calibration for {c.gpu} (measured on: {c.measured_on})")
    for group in (
        "gemm",
        "elementwise",
        "decode_attention",
        "prefill_attention",
        "all_reduce",
        "moe",
        "moe_backends",
        "mla_decode",
    ):
        print(f"  {group:18s} {c.sources.get(group, 'from the shipped calibration / physics defaults')}")
    stats = c.fit.get("dense_in_sample", {}).get("layer", {})
    if stats:
        print(
            "  whole dense layer, predicted/measured (median [p10, p90]) by tokens: "
            + "; ".join(f"{k}: {v['median']:.3f} [{v['p10']:.2f}, {v['p90']:.2f}]" for k, v in stats.items())
        )
    if c.measured_on != "gpu":
        print("  note: measured in the CPU interpreter: a pipeline check, not GPU times")
    from kvsim.hardware.gpus import GPU_PRESETS

    if c.gpu in GPU_PRESETS:
        from kvsim.output.table import printable, shell_line

        use = shell_line(["kvsim", "compare", "--latency", a.output, "--gpu", c.gpu])
        print(f"wrote {printable(a.output)}; use it with: {use} ...")
    else:
        print(
            f"wrote {a.output}; {c.gpu} is not a kvsim GPU preset (`kvsim list gpus`), so no run can use it yet: "
            "its peaks came from the system's yaml"
        )
    return 0


# Largest shapes priced: beyond these no iteration of a real engine exists, and float arithmetic on them
# overflows (sequences per iteration; tokens of context or of one iteration).
SHAPE_LIMITS = {"batch": 1 << 24, "context": 1 << 40, "new_tokens": 1 << 40}
MAX_PREFILL_BATCH = 1 << 20  # sequences with more than one new token are priced one by one


def check_shape(batch: int, new_tokens: int) -> str | None:
    if new_tokens > 1 and batch > MAX_PREFILL_BATCH:
        return (
            f"batch {batch:,} with {new_tokens:,} new tokens each: at most {MAX_PREFILL_BATCH:,} sequences "
            f"prefill in one iteration"
        )
    return None


def shape_rows(path: str) -> list[tuple[int, int, int]]:
    """(batch, context, new_tokens) rows of a shapes CSV, checked: errors name file, line and field."""
    import csv

    try:
        fh = open(path, newline="", encoding="utf-8-sig")  # a spreadsheet's byte-order mark is no column name
    except OSError as e:
        raise TraceError(path, 0, None, f"cannot open: {e.strerror}") from None
    rows = []
    with fh:
        try:
            reader = csv.DictReader(fh)
            missing = {"batch", "context", "new_tokens"} - set(reader.fieldnames or [])
            if missing:
                raise TraceError(
                    path, 1, None, f"missing column(s) {', '.join(sorted(missing))} (need batch,context,new_tokens)"
                )
            for line, r in enumerate(reader, start=2):
                vals = []
                for f, lo in (("batch", 1), ("context", 0), ("new_tokens", 1)):
                    try:
                        v = float(r[f])
                        if not v.is_integer():
                            raise ValueError
                        v = int(v)
                    except (TypeError, ValueError, OverflowError):
                        raise TraceError(path, line, f, f"must be an integer, got {r[f]!r}") from None
                    if v < lo or v > SHAPE_LIMITS[f]:
                        raise TraceError(path, line, f, f"must be in [{lo}, {SHAPE_LIMITS[f]:,}], got {v}")
                    vals.append(v)
                problem = check_shape(vals[0], vals[2])
                if problem:
                    raise TraceError(path, line, "batch", problem)
                rows.append(tuple(vals))
        except (UnicodeDecodeError, csv.Error) as e:
            raise TraceError(path, 0, None, f"not a readable CSV ({e})") from None
    if not rows:
        raise TraceError(path, 0, None, "no shapes in file")
    return rows


def cmd_latency(a: argparse.Namespace) -> int:
    from kvsim.commands.simulate import build_config
    from kvsim.latency import StepShape, build_latency, describe_latency, latency_notes
    from kvsim.latency.base import BREAKDOWN_COLUMNS

    cfg = build_config(a)
    if a.shapes:
        if not a.out:
            raise ConfigError("--shapes needs --out FILE.csv")
        from kvsim.files import check_output_file

        check_output_file(a.out, "--out", [a.shapes, a.model, a.latency])
        rows = shape_rows(a.shapes)
    elif a.batch is None or a.context is None:
        raise ConfigError("give --batch B --context C [--new-tokens N], or --shapes FILE.csv --out FILE.csv")
    else:
        for f, v in (("batch", a.batch), ("context", a.context), ("new_tokens", a.new_tokens)):
            if v > SHAPE_LIMITS[f]:
                raise ConfigError(f"--{f.replace('_', '-')} {v}: at most {SHAPE_LIMITS[f]:,}")
        problem = check_shape(a.batch, a.new_tokens)
        if problem:
            raise ConfigError(f"--batch: {problem}")
    model = build_latency(cfg)
    for note in latency_notes(cfg):
        print(note, file=sys.stderr)
    if not a.shapes and a.out:
        from kvsim.files import check_output_file

        check_output_file(a.out, "--out", [a.model, a.latency])
    if a.shapes or a.out:
        import csv

        from kvsim.files import atomic_path

        shapes = rows if a.shapes else [(a.batch, a.context, a.new_tokens)]
        with atomic_path(a.out) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["batch", "context", "new_tokens", *BREAKDOWN_COLUMNS])
            for b, c, n in shapes:
                bd = model.breakdown(StepShape.of([(n, c)] * b))
                w.writerow([b, c, n, *(repr(bd[k]) for k in BREAKDOWN_COLUMNS)])
        if a.shapes:
            print(f"wrote {len(rows)} rows to {a.out} ({describe_latency(cfg)})")
            return 0
    bd = model.breakdown(StepShape.of([(a.new_tokens, a.context)] * a.batch))
    kind = "decode" if a.new_tokens == 1 else "prefill"
    print(f"{cfg.model.name} on {cfg.gpu.name}, tensor parallel {cfg.tp}: {describe_latency(cfg)}")
    if cfg.pp > 1:
        print(
            f"(pipeline stages: one iteration is a rotation of {cfg.pp} micro-batches of these sequences; its time is"
            " how long each sequence waits for its next token)"
        )
    if cfg.speculative is not None:
        sp = cfg.speculative
        print(
            f"(speculative decoding: an iteration is 1/{sp.tau:g} of a verify step of {sp.num_speculative_tokens + 1}"
            f" tokens per decoding sequence and {sp.num_speculative_tokens} draft passes; its time is the step's "
            f"/ {sp.tau:g}, each sequence's time per token)"
        )
    print(f"one {kind} iteration: {a.batch} sequence(s) x {a.new_tokens} new token(s) after {a.context} cached")
    if a.out:
        print(f"(also written to {a.out})", file=sys.stderr)
    total = bd["total_s"]
    for k in BREAKDOWN_COLUMNS:
        share = f"{100 * bd[k] / total:5.1f}%" if total > 0 else ""
        print(f"  {k[:-2].replace('_', ' '):14s} {1000 * bd[k]:10.3f} ms  {share}")
    return 0


def register(sub) -> None:
    from kvsim.options import add_options

    lat = sub.add_parser(
        "latency",
        help="predicted iteration time of a model / GPU / tensor parallelism, by part",
        description="Predict the time of one iteration (per-operation model unless --latency "
        "says otherwise), split into dense, attention, communication and CPU.",
    )
    add_options(lat, ("model and hardware", "latency"))
    g = lat.add_argument_group("iteration shape")
    g.add_argument("--batch", type=positive_int, help="sequences in the iteration")
    g.add_argument("--context", type=non_negative_int, help="cached tokens of each sequence")
    g.add_argument(
        "--new-tokens",
        type=positive_int,
        default=1,
        help="tokens each sequence computes (1 = a decode step) [default: 1]",
    )
    g.add_argument("--shapes", help="CSV with columns batch,context,new_tokens (one iteration per row)")
    g.add_argument(
        "--out",
        help="CSV of the shape's columns (batch, context, new_tokens) + total_s, dense_s, attention_s, "
        "communication_s, cpu_s, ... (seconds, whole model on one GPU): a row per line of --shapes (needed "
        "with it), or the one iteration of --batch/--context",
    )
    lat.set_defaults(func=cmd_latency)
    cal = sub.add_parser("calibrate", help="fit a latency calibration from measured GPU profiles")
    cal.add_argument(
        "measurements",
        nargs="*",
        help="Vidur-format mlp.csv / attention.csv / all_reduce.csv / "
        "send_recv.csv, and `kvsim kernels bench` / `replay` CSVs",
    )
    cal.add_argument(
        "--aic",
        metavar="DIR",
        nargs="?",
        const="installed",
        help="NVIDIA AIConfigurator performance tables (its systems/data layout: "
        "<system>/attention/vllm/<version>/..., comm/..., gemm/...; without DIR: those of the installed "
        "pip package aiconfigurator-core): decode and prefill attention, all-reduce, MoE and, without "
        "mlp.csv files, GEMMs are fitted from them",
    )
    cal.add_argument("--system", help="with --aic: the system folder, e.g. h100_sxm [default: the only one]")
    cal.add_argument("--vllm-version", help="with --aic: the vLLM version's tables [default: the newest of each]")
    cal.add_argument(
        "--gpu",
        help="GPU preset the measurements are from [default: named in the Vidur paths, or the AIConfigurator system's]",
    )
    cal.add_argument("-o", "--output", required=True, help="calibration JSON to write")
    cal.set_defaults(func=cmd_calibrate)
