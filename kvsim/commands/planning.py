"""`kvsim plan`, `kvsim sweep` and `kvsim report`: capacity planning over many simulations."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvsim.commands.args import DEFAULT_OUT, fraction_open, int_list, non_negative_int, positive, positive_int
from kvsim.option_table import text_option_columns


def cmd_plan(a: argparse.Namespace) -> int:
    from kvsim.commands.simulate import build_config
    from kvsim.errors import ConfigError
    from kvsim.planning.slo import parse_slos

    slos = parse_slos(a.slo)
    cfg = build_config(a)  # validate the shared options once
    if (a.autoscaler or a.fail_at) and a.fleet_max_gpus:
        raise ConfigError(
            "--autoscaler/--fail-at with --fleet-max-gpus: give one (an autoscaled plan sizes a fleet "
            "over time from one replica's capacity; the fleet plan searches fixed layouts)"
        )
    if a.fail_at and not a.autoscaler:
        raise ConfigError(
            "kvsim plan --fail-at: with --autoscaler (failures of the autoscaled fleet); "
            "`kvsim cluster --fail-at` runs a fixed fleet's"
        )
    if a.fleet_max_gpus:  # the load is given (a rate, or clients); the search sizes the fleet
        from kvsim.planning.fleet_plan import MAX_FLEET_GPUS

        if a.fleet_max_gpus > MAX_FLEET_GPUS:
            raise ConfigError(f"--fleet-max-gpus {a.fleet_max_gpus:,}: at most {MAX_FLEET_GPUS:,} GPUs per GPU type")
        if cfg.request_rate is not None and a.target_rate:
            raise ConfigError("--target-rate rescales the trace's own times and --request-rate replaces them: give one")
        return cmd_fleet_plan(a, cfg, slos)
    if cfg.max_concurrency is not None or cfg.request_rate is not None:
        raise ConfigError(
            "kvsim plan searches the highest arrival rate the SLOs allow, re-timing the trace itself; "
            "--max-concurrency and --request-rate set the load instead (size a fleet for them with "
            "--fleet-max-gpus, compare clients with `kvsim sweep` over max_concurrency, or "
            "`kvsim run --max-concurrency N`)"
        )
    from kvsim.commands.args import result_marker, results_dir
    from kvsim.files import prepare_results_dir, results_folder

    out, out_note = results_dir(a, Path(DEFAULT_OUT) / f"plan-{Path(a.trace).stem}")
    out = prepare_results_dir(
        out,
        "--out",
        [a.trace, *(getattr(a, k, None) for k in ("kernel_bench", "model", "latency"))],
        ["plan.csv", "plan_points.csv"]
        + ([] if a.no_report else ["report.html", "report.md"])
        + (["autoscale.csv", "autoscale_timeline.csv", "replicas_over_time.png"] if a.autoscaler else []),
    )
    with results_folder(out, "--out", result_marker(a)) as stage:
        _plan(a, cfg, slos, stage)
    print(
        f"wrote {out}/plan.csv, plan_points.csv"
        + ("" if a.no_report else ", report.html, report.md")
        + (
            ", autoscale.csv, autoscale_timeline.csv, replicas_over_time.png"
            if (out / "autoscale.csv").exists()
            else ""
        )
    )
    if out_note:
        print(out_note, file=sys.stderr)
    return 0


def _plan(a: argparse.Namespace, cfg, slos, out: Path) -> None:
    """cmd_plan's search, its tables and report written to ``out`` (files.results_folder's staging folder)."""
    import pandas as pd

    from kvsim.allocators import parse_allocator_list
    from kvsim.files import atomic_path
    from kvsim.options import DEFAULT_GPU, values_from_namespace
    from kvsim.planning.parallel import run_jobs
    from kvsim.planning.plan import add_costs, make_jobs, on_whole_trace, parse_gpus, run_job, window_trace
    from kvsim.planning.sweep import validate_points
    from kvsim.report.builder import build_report

    base = {"trace": a.trace, **values_from_namespace(a)}
    window = window_trace(a.trace, a.plan_requests, out, bool(base.get("skip_invalid")))
    if window:
        base["trace"] = window[0]
        print(window[2], file=sys.stderr)
    gpus = parse_gpus(a.gpus) if a.gpus is not None else [(a.gpu or DEFAULT_GPU, None)]
    from kvsim.runner import prefix_caching, served_allocator

    allocators = parse_allocator_list(
        a.allocators or served_allocator(cfg), cfg.block_size, prefix_caching(cfg, a.allocators is not None)
    )
    jobs = make_jobs(base, gpus, allocators, slos, a.study, a.tol, a.max_steps, a.kernel_bench)
    validate_points([j.point for j in jobs])
    results = run_jobs(run_job, jobs, a.workers, a.backend, a.address, label="plan")
    rows = [r for r, _ in results]
    points = [p for _, pts in results for p in pts]
    if window and not a.autoscaler:  # (an autoscaled plan runs the whole trace itself, from the window's rates)
        on_whole_trace(rows, points, jobs, a.trace, window[1], a.workers, a.backend, a.address)
    add_costs(rows, a.target_rate)
    cap = pd.DataFrame(rows)
    pts = pd.DataFrame(points)
    for name, df in (("plan.csv", cap), ("plan_points.csv", pts)):
        with atomic_path(out / name) as tmp:
            df.to_csv(tmp, index=False)
    priced = ", ".join(f"{g} (${c:g}/GPU-h)" if c is not None else f"{g} (no price: --gpus GPU:$/h)" for g, c in gpus)
    print_plan(
        cap, slos, a.target_rate, heading=f"{cfg.model.name}" + (f" tp{cfg.tp}" if cfg.tp > 1 else "") + f" on {priced}"
    )
    if a.autoscaler:
        from kvsim.commands.plan_autoscale import autoscaled_plan

        autoscaled_plan(a, rows, slos, out)
    if not a.no_report:
        from kvsim.output.table import printable, shell_line

        notes = [
            f"trace {printable(a.trace)}, model {printable(cfg.model.name)}; capacity = highest rate (scaling the trace's inter-arrival"
            f" times) meeting every SLO with a stable queue, bisection to {100 * a.tol:g}% (at most {a.max_steps} "
            "simulations)"
        ]
        if window:
            notes.append(window[2])
        if a.target_rate:
            notes.append(f"replicas and cost for a target of {a.target_rate:g} req/s")
        notes.append("command: " + shell_line(["kvsim", *sys.argv[1:]]))
        build_report(out, cap, pts, slos, f"Capacity plan: {Path(a.trace).name}", notes)


def load_text(cfg, target_rate: float | None) -> str:
    """How the fleet plan's trace is sent, for titles: a rate, all at once, or the trace's own times; clients."""
    if cfg.request_rate == float("inf"):
        text = "once"
    elif cfg.request_rate is not None:
        text = f"{cfg.request_rate:g} req/s (Poisson)"
    elif target_rate:
        text = f"{target_rate:g} req/s"
    else:
        text = "the trace's own rate"
    return text + (f", {cfg.max_concurrency} clients" if cfg.max_concurrency is not None else "")


def cmd_fleet_plan(a: argparse.Namespace, cfg, slos) -> int:
    """The fleet search (planning/fleet_plan.py): every layout simulated, the cheapest meeting the SLOs,
    the Pareto front of throughput per GPU vs TTFT p99, and the vLLM command lines of the choice."""
    from kvsim.commands.args import result_marker, results_dir
    from kvsim.files import prepare_results_dir, results_folder
    from kvsim.fleet.disagg import parse_link
    from kvsim.fleet.routers import parse_routers

    from kvsim.errors import ConfigError

    if cfg.scheduler.num_scheduler_steps > 1:
        raise ConfigError(
            "--num-scheduler-steps with --fleet-max-gpus: the fleet plan tries disaggregated layouts, "
            "for which multi-step scheduling is not modelled; plan one replica (without "
            "--fleet-max-gpus) or drop --num-scheduler-steps"
        )
    routers = parse_routers(a.fleet_routers, "--fleet-routers")
    parse_link(a.kv_link)
    out, out_note = results_dir(a, Path(DEFAULT_OUT) / f"fleet-plan-{Path(a.trace).stem}")
    out = prepare_results_dir(
        out,
        "--out",
        [a.trace, getattr(a, "model", None), getattr(a, "latency", None)],
        ["fleet_plan.csv", "summary.md", "vllm_serve.sh"],
    )
    with results_folder(out, "--out", result_marker(a)) as stage:
        _fleet_plan(a, cfg, slos, routers, stage)
    serve = ", vllm_serve.sh" if (out / "vllm_serve.sh").exists() else ""
    print(f"wrote {out}/fleet_plan.csv, summary.md{serve}")
    if out_note:
        print(out_note, file=sys.stderr)
    return 0


def _fleet_plan(a: argparse.Namespace, cfg, slos, routers, out: Path) -> None:
    """cmd_fleet_plan's search, its table and summary written to ``out`` (files.results_folder's staging folder)."""
    import pandas as pd

    from kvsim.files import write_text_atomically
    from kvsim.options import DEFAULT_GPU, values_from_namespace
    from kvsim.output.table import Column, markdown_table, print_rows
    from kvsim.output.writer import write_table
    from kvsim.planning.fleet_plan import (
        cheapest,
        pareto,
        plan_fleet,
        plan_window,
        verify_on_whole_trace,
        vllm_commands,
    )
    from kvsim.planning.plan import parse_gpus

    gpus = parse_gpus(a.gpus) if a.gpus is not None else [(a.gpu or DEFAULT_GPU, None)]
    from kvsim.runner import served_spec

    allocator = str(served_spec(cfg))
    values = values_from_namespace(a)
    values.pop("gpu", None)
    notes: list[str] = []
    from kvsim.trace import load_trace

    skip_invalid = bool(values.get("skip_invalid"))
    loaded = load_trace(a.trace, skip_invalid=skip_invalid)  # a bad line fails here, or is skipped and counted
    for note in loaded.notes():
        print(note, file=sys.stderr)
    skipped = [f"{a.trace}: skipped {len(loaded.skipped):,} invalid line(s) (--skip-invalid)"] if loaded.skipped else []
    retimed = cfg.max_concurrency is not None or cfg.request_rate is not None
    trace, rate, window = plan_window(a.trace, a.target_rate, a.plan_requests, retimed, out, skip_invalid)
    if window:
        print(window, file=sys.stderr)
    jobs: dict = {}
    rows = plan_fleet(
        trace,
        values,
        gpus,
        slos,
        a.fleet_max_gpus,
        routers,
        rate,
        a.kv_link,
        a.workers,
        a.backend,
        a.address,
        allocator,
        a.fleet_tp,
        notes,
        a.fleet_pp,
        a.kv_link_shared,
        a.fleet_dp,
        [False, True] if a.fleet_ep else None,
        jobs,
    )
    for note in notes:
        print(note, file=sys.stderr)
    notes[:0] = skipped  # printed above, said in summary.md too
    best = cheapest(rows)
    front = pareto(rows)
    whole = verify_on_whole_trace(rows, jobs, a.trace, a.target_rate, a.workers, a.backend, a.address) if window else []
    if window:
        notes.insert(0, window)
        best = [r for r in whole if r["meets_slo"]]
    chosen = best[0] if best else None
    # the page (kvsim ui) and a user's own plots find the front and the answer in the table itself
    table = pd.DataFrame(rows + whole)
    table["pareto"] = [any(r is f for f in front) for r in rows + whole]
    table["chosen"] = [r is chosen for r in rows + whole]
    write_table(table, out / "fleet_plan", "csv")
    key = lambda k: lambda r: r.get(k)  # noqa: E731
    cols = [
        Column("layout", "layout", "", "text", "", key("layout")),
        Column("router", "router", "", "text", "", key("router")),
        Column("gpus", "GPUs", "", "int", "", key("gpus")),
        Column("ok", "SLO", "", "text", "", lambda r: "met" if r["meets_slo"] else "no"),
        Column("attain", "attain", "%", "pct", "", key("slo_attainment")),
        Column("tokgpu", "out tok/s", "/GPU", "int", "", key("tok_s_per_gpu")),
        Column("ttft", "TTFT", "p99", "latency", "", key("ttft_p99_s")),
        Column("tpot", "TPOT", "p99", "latency", "", key("tpot_p99_s")),
        Column("cost", "$ per M", "out tok", "money", "", key("cost_per_m_output_tokens"), optional=True),
    ]
    title = (
        f"fleet plan · {Path(a.trace).name} at {load_text(cfg, a.target_rate)} · {cfg.model.name} · "
        f"{', '.join(g for g, _ in gpus)} · SLO {', '.join(map(str, slos))}"
    )
    cols.insert(0, Column("pick", "", "", "text", "", lambda r: "->" if r is chosen else ""))
    shown = front + ([chosen] if chosen is not None and chosen not in front else [])  # the answer, always
    print_rows(
        shown,
        cols,
        title
        + " · Pareto front (throughput per GPU vs TTFT p99)"
        + (" and the cheapest layout meeting the SLOs (->)" if chosen is not None else ""),
    )
    lines = [
        f"# {title}",
        "",
        f"{len(rows)} layouts simulated (up to {a.fleet_max_gpus} GPUs per type).",
        "",
        *[f"- {n}" for n in notes],
        *([""] if notes else []),
    ]
    if whole:
        print_rows(whole, cols, "the window's cheapest layouts on the whole trace")
        lines += ["## The window's cheapest layouts on the whole trace", "", markdown_table(whole, cols), ""]
    if best:
        b = best[0]
        from kvsim.allocators import parse_allocator

        from kvsim.hardware.models import serve_name
        from kvsim.option_table import DEFAULT_MODEL

        cmds = vllm_commands(
            b, serve_name(values.get("model") or DEFAULT_MODEL), values, parse_allocator(allocator).prefix
        )
        size = f"{b['gpus']} GPU" + ("s" if b["gpus"] > 1 else "")
        print(
            f"\ncheapest layout meeting the SLOs: {b['layout']} behind {b['router']} ({size}"
            + (f", ${b['cost_per_hour']:.2f}/h" if b.get("cost_per_hour") is not None else "")
            + ")"
        )
        print("\n".join(cmds))
        from kvsim.commands.simulate import warn_if_api_server_busy

        warn_if_api_server_busy(f"{b['layout']} (busiest replica)", b["api_server_busy"])
        write_text_atomically(out / "vllm_serve.sh", "\n".join(cmds) + "\n")
        lines += [
            f"**Cheapest layout meeting the SLOs:** {b['layout']} behind {b['router']} ({size}).",
            "",
            "```bash",
            *cmds,
            "```",
            "",
        ]
    elif whole:
        print(
            f"\nnone of the {len(whole)} cheapest layouts meeting the SLOs on the window meets them on the whole "
            "trace (see above); raise --plan-requests (0: search on the whole trace) or --fleet-max-gpus"
        )
        lines += [
            f"None of the {len(whole)} cheapest layouts meeting the SLOs on the window meets them on the whole trace.",
            "",
        ]
    elif any(": stopped at " in n for n in notes):  # planning/fleet_plan.py's early stop: more GPUs do not help
        print("\nno layout meets the SLOs, and larger fleets brought them no closer (see above); relax --slo")
        lines += ["No layout meets the SLOs, and larger fleets brought them no closer.", ""]
    else:
        print(f"\nno layout of up to {a.fleet_max_gpus} GPUs meets the SLOs; raise --fleet-max-gpus or relax --slo")
        lines += [f"No layout of up to {a.fleet_max_gpus} GPUs meets the SLOs.", ""]
    lines += [
        "## Pareto front",
        "",
        markdown_table(front, cols),
        "",
        "## Every layout simulated",
        "",
        markdown_table(sorted(rows, key=lambda r: (r["gpus"], r["layout"], r["router"])), cols),
    ]
    write_text_atomically(out / "summary.md", "\n".join(lines) + "\n")


def print_plan(cap, slos, target, console=None, heading: str = "") -> None:
    """The capacity table, fitted to the terminal; why-not reasons and inconclusive searches as notes below."""
    from kvsim.output.table import Column, print_rows

    def rate(r: dict) -> str:
        status = r.get("search", "found")
        if not r.get("meets_slo"):
            return "never" if status == "never" else "not found"
        v = f"{r['max_rate_req_s']:.3f}"
        return ">=" + v if status == "lower-bound" else v + "~" if status == "unconverged" else v

    cols = [
        Column("config", "configuration", "", "text", "", lambda r: r["config"]),
        Column("rate", "max", "req/s", "text", "", rate),
        Column("steps", "sims", "", "int", "", lambda r: r.get("search_steps")),
        Column("replicas", "repli-", "cas", "int", "", lambda r: r.get("replicas"), optional=True),
        Column("cost", "$ per M", "out tok", "money", "", lambda r: r.get("cost_per_m_output_tokens"), optional=True),
        Column(
            "cost_all",
            "$ per M",
            "tokens",
            "money",
            "",
            lambda r: r.get("cost_per_m_tokens"),
            optional=True,
            drop_order=3,
        ),
        Column("ttft", "TTFT", "p99", "latency", "", lambda r: r.get("at_max_ttft_p99_s"), drop_order=2),
        Column("tpot", "TPOT", "p99", "latency", "", lambda r: r.get("at_max_tpot_p99_s"), drop_order=1),
    ]
    if not target:  # replicas answer "how many for a target rate": without one there is no such line
        cols = [c for c in cols if c.name != "replicas"]
    rows = [dict(r) for _, r in cap.iterrows()]
    title = (
        (f"{heading} · " if heading else "")
        + f"SLOs: {', '.join(str(s) for s in slos)}"
        + (f"; target {target:g} req/s" if target else "")
    )
    print_rows(rows, cols, title, console)
    _print_notes([f"{r['config']}: {r['reason']}" for r in rows if r.get("reason")])


def _print_notes(notes: list[str]) -> None:
    import shutil
    import textwrap

    width = shutil.get_terminal_size((80, 24)).columns
    for n in notes:
        print(textwrap.fill(n, width=max(40, width - 1), initial_indent="  ", subsequent_indent="    "))


def print_sweep(table, console=None) -> None:
    """One line per point: the options that vary across the sweep, then throughput, latency and memory."""
    from kvsim.output.table import BY_NAME, Column, print_rows
    from kvsim.report.builder import varying_config_columns

    varying = varying_config_columns(table)
    for rate in ("cfg_rate", "cfg_rate_scale"):
        if rate in table.columns and table[rate].astype(str).nunique() > 1:
            varying.append(rate)
    cols = [Column(c, c.removeprefix("cfg_"), "", "text", "", (lambda k: lambda r: r.get(k))(c)) for c in varying]
    cols += [
        BY_NAME[n]
        for n in ("done", "rej", "unfin", "tok_s", "ttft_p99", "tpot_p50", "preempt", "hit", "token", "waste")
    ]
    if not varying:
        cols.insert(0, Column("index", "point", "", "int", "", lambda r: r.get("index")))
    print_rows([dict(r) for _, r in table.iterrows()], cols, None, console)


def cmd_sweep(a: argparse.Namespace) -> int:
    from kvsim.files import check_output_file
    from kvsim.planning.sweep import load_grid, run_sweep

    points = load_grid(a.grid)
    out = a.out or str(Path(DEFAULT_OUT) / f"sweep-{Path(a.grid).stem}.csv")
    if Path(out).suffix not in (".csv", ".parquet"):
        from kvsim.errors import ConfigError

        raise ConfigError(f"--out {out}: the results table must end in .csv or .parquet")
    check_output_file(out, "--out", [a.grid, *{str(p.get("trace")) for p in points}])
    table, computed, reused = run_sweep(points, out, a.workers, a.backend, a.address)
    print_sweep(table)
    print(f"{len(points)} points: {computed} simulated, {reused} reused from an earlier run; wrote {out}")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    import pandas as pd

    from kvsim.errors import ConfigError
    from kvsim.files import prepare_results_dir, results_folder
    from kvsim.planning.slo import parse_slos
    from kvsim.planning.sweep import read_table
    from kvsim.report.builder import build_report

    out = prepare_results_dir(a.output, "-o", a.results, ["report.html", "report.md"])
    caps, pts, fleets = [], [], []
    notes = [f"from {', '.join(a.results)}"]
    fleet_slos: list[str] = []
    for path in _result_tables(a.results):
        df = _numeric_metrics(read_table(path), path)
        if not RESULT_MARKERS & set(df.columns):
            raise ConfigError(
                f"{path}: not a results table of plan, sweep, compare or run (it has none of the columns "
                f"{', '.join(sorted(RESULT_MARKERS))})"
            )
        if FLEET_MARKERS <= set(df.columns):  # a fleet plan: its layouts, and the SLOs its summary names
            fleets.append(df)
            title_line = _fleet_title(Path(path).with_name("summary.md"))
            if title_line:
                notes.append(title_line)
                fleet_slos += (
                    [t.strip() for t in title_line.split(" · SLO ", 1)[1].split(",")] if " · SLO " in title_line else []
                )
            continue
        (caps if "max_rate_req_s" in df.columns else pts).append(df)
    cap = pd.concat(caps, ignore_index=True) if caps else None
    points = pd.concat(pts, ignore_index=True) if pts else None
    fleet = pd.concat(fleets, ignore_index=True) if fleets else None
    if a.slo is not None:
        slos = parse_slos(a.slo)
    else:
        try:  # the summary writes them as ttft_p99<=1s
            slos = parse_slos(",".join(t.replace("<=", "=") for t in fleet_slos)) if fleet_slos else []
        except ConfigError:
            slos = []
    with results_folder(out, "-o") as stage:
        build_report(stage, cap, points, slos, a.title, notes, fleet)
    print(f"wrote {out / 'report.html'} and {out / 'report.md'}")
    return 0


RESULT_TABLES = (
    "plan.csv",
    "plan_points.csv",
    "fleet_plan.csv",
    "runs.csv",
    "runs.parquet",
)  # in a results folder, what a report reads
FLEET_MARKERS = {"layout", "router", "meets_slo", "tok_s_per_gpu"}  # a fleet plan's table (fleet_plan.csv)


def _fleet_title(summary: Path) -> str:
    """The first line of a fleet plan's summary.md (model, GPUs, load and SLOs), '' when there is none."""
    try:
        first = summary.read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        return ""
    return first.lstrip("# ").strip() if first.startswith("# fleet plan") else ""


RESULT_MARKERS = {"max_rate_req_s", "throughput_tok_s"}  # a plan table has the first, every run summary the second


def _result_tables(paths: list[str]) -> list[str]:
    """The tables to report on: files as given; for a folder (of `plan`, `compare` or `run`), its tables."""
    out = []
    for p in paths:
        try:
            is_dir = Path(p).is_dir()
        except OSError:  # a name too long for the file system: reading it reports the error
            is_dir = False
        if is_dir:
            found = [str(Path(p) / n) for n in RESULT_TABLES if (Path(p) / n).is_file()]
            if not found:
                from kvsim.errors import ConfigError

                raise ConfigError(
                    f"{p}: a folder without results to report on (expected one of {', '.join(RESULT_TABLES)})"
                )
            out += found
        else:
            out.append(p)
    return out


TEXT_COLUMNS = {
    "allocator",
    "config",
    "trace",
    "reason",
    "why",
    "search",
    "status",
    "point_id",
    "meets_slo",
    "ok",
    *text_option_columns(),
}


def _numeric_metrics(df, path: str):
    """Metric columns as numbers; values that are not numbers (a hand-edited table) become missing, and
    are counted on stderr rather than dropped silently."""
    import pandas as pd

    for c in df.columns:
        if c.startswith("cfg_") or c in TEXT_COLUMNS or pd.api.types.is_numeric_dtype(df[c]):
            continue
        num = pd.to_numeric(df[c], errors="coerce")
        bad = int((num.isna() & df[c].notna()).sum())
        if bad and bad < int(df[c].notna().sum()):  # a numeric column with a few bad cells
            print(f"{path}: column '{c}': {bad} value(s) are not numbers; shown as missing", file=sys.stderr)
            df[c] = num
        elif bad == 0:
            df[c] = num
    return df


def register(sub) -> None:
    from kvsim.commands.simulate import add_sim_args

    pl = sub.add_parser(
        "plan",
        help="highest SLO-meeting rate per configuration, replicas and cost",
        description="Find, per GPU type and allocator, the highest request rate that meets the SLOs "
        "(scaling the trace's arrival gaps), and the replicas and cost for a target rate.",
    )
    add_sim_args(pl, "plan")
    pl.add_argument(
        "--gpus", help="GPU types with optional $ per GPU-hour, e.g. h100-80gb:4.5,a100-80gb:2 [default: --gpu]"
    )
    pl.add_argument(
        "--allocators",
        help="comma-separated allocator names [default: what vLLM serves the model with: paged:16, hybrid for "
        "models whose layers differ, with +prefix as vLLM V1 unless --no-enable-prefix-caching]",
    )
    pl.add_argument(
        "--slo", required=True, help="e.g. ttft_p99=2s,tpot_p99=100ms (ttft/tpot/e2e at p50/p90/p99; s, ms or us)"
    )
    pl.add_argument("--target-rate", type=positive, help="requests/s to provision for (replicas, cost)")
    pl.add_argument("--study", choices=["block-size", "gpu-mem-util"], help="built-in plan variants")
    pl.add_argument("--kernel-bench", help="block-size study: a `kvsim kernels bench` CSV with block sizes")
    pl.add_argument(
        "--tol",
        type=fraction_open,
        default=0.02,
        help="stop when the bracket is within this fraction of the rate [default: 0.02]",
    )
    pl.add_argument(
        "--max-steps", type=positive_int, default=20, help="most simulations per configuration [default: 20]"
    )
    pl.add_argument("--workers", type=positive_int, default=1, help="configurations run in parallel [default: 1]")
    pl.add_argument("--backend", choices=["local", "ray"], default="local", help="[default: local processes]")
    pl.add_argument("--address", help="Ray cluster address HOST:PORT [default: start a local instance]")
    pl.add_argument("--no-report", action="store_true", help="skip report.html / report.md")
    from kvsim.planning.window import PLAN_REQUESTS

    pl.add_argument(
        "--plan-requests",
        type=non_negative_int,
        default=PLAN_REQUESTS,
        metavar="N",
        help="a longer trace is searched on its busiest N consecutive requests (the fleet plan: the first "
        "N under --max-concurrency / --request-rate) and the answer then run on the whole trace (the "
        "capacity plan: each configuration's capacity, in the whole trace's rate; the fleet plan: "
        f"the cheapest layouts until one meets the SLOs); 0: search on the whole trace [default: "
        f"{PLAN_REQUESTS:,}]",
    )
    fl = pl.add_argument_group("fleet plan")
    fl.add_argument(
        "--fleet-max-gpus",
        type=positive_int,
        metavar="N",
        help="plan a fleet instead of one replica: search fleets of up to N GPUs per GPU type, "
        "aggregated and disaggregated (every P:D split), serving the trace at --target-rate (or "
        "its own rate, or as --request-rate / --max-concurrency clients send it), and report the "
        "cheapest layout meeting --slo (N at most 4,096; the search stops early when a fleet "
        "twice as large brings the SLOs no closer)",
    )
    fl.add_argument(
        "--fleet-routers",
        default="least-requests,prefix+load",
        help="routers the fleet plan tries [default: least-requests,prefix+load]",
    )
    fl.add_argument(
        "--fleet-tp",
        metavar="LIST",
        type=int_list(),
        help="tensor-parallel sizes the fleet plan tries for each pool, e.g. 1,2,4: aggregated replicas "
        "of each size, and prefill and decode pools of any two [default: --tensor-parallel-size]",
    )
    fl.add_argument(
        "--fleet-pp",
        metavar="LIST",
        type=int_list(),
        help="pipeline stage counts the fleet plan tries, e.g. 1,2: each searched on its own, every "
        "replica of a layout with as many stages [default: --pipeline-parallel-size]",
    )
    fl.add_argument(
        "--fleet-dp",
        metavar="LIST",
        type=int_list(),
        help="data-parallel rank counts the fleet plan tries, e.g. 1,8 (MoE models: DeepSeek-style "
        "serving): each searched on its own, every replica of a layout with as many ranks "
        "[default: --data-parallel-size]",
    )
    fl.add_argument(
        "--fleet-ep",
        action="store_true",
        help="MoE models: the fleet plan tries every layout with and without expert parallelism "
        "(--enable-expert-parallel) [default: as --enable-expert-parallel says]",
    )
    from kvsim.commands.fleet import add_kv_link_options

    add_kv_link_options(fl, "fleet plan: ")
    from kvsim.commands.fleet_time import add_options as add_over_time_options

    add_over_time_options(pl)  # --autoscaler: the capacity plan's rates, then the whole trace autoscaled
    pl.set_defaults(func=cmd_plan)
    sw = sub.add_parser("sweep", help="run a grid of simulations (local processes or Ray), resumable")
    sw.add_argument("grid", help="YAML file with base / grid / points (docs/planning.md)")
    sw.add_argument("--out", help=f"results table, .csv or .parquet [default: {DEFAULT_OUT}/sweep-<grid>.csv]")
    sw.add_argument("--workers", type=positive_int, default=1, help="points run in parallel [default: 1]")
    sw.add_argument("--backend", choices=["local", "ray"], default="local", help="[default: local processes]")
    sw.add_argument("--address", help="Ray cluster address HOST:PORT [default: start a local instance]")
    sw.set_defaults(func=cmd_sweep)
    rep = sub.add_parser("report", help="HTML + Markdown report from plan or sweep results")
    rep.add_argument("results", nargs="+", help="plan.csv / plan_points.csv / sweep tables")
    rep.add_argument("-o", "--output", required=True, help="output folder")
    rep.add_argument("--slo", help="SLO lines to draw, e.g. ttft_p99=2s,tpot_p99=100ms")
    rep.add_argument("--title", default="kvsim report", help="[default: kvsim report]")
    rep.set_defaults(func=cmd_report)
