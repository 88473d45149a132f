"""`kvsim compare` and `kvsim run`: simulate a trace with one or more allocators and write the results."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvsim.commands.args import DEFAULT_OUT
from kvsim.errors import ConfigError

DEFAULT_ALLOCATORS = "max,pow2,oracle,paged"  # paged takes --block-size
HYBRID_DEFAULT_ALLOCATORS = "naive,static-split,hybrid"  # models whose layers keep different caches


def add_sim_args(
    p: argparse.ArgumentParser, command: str, fleet: bool = False, workload: bool = False, seed_alias: bool = True
) -> None:
    """--trace, every simulation option (kvsim/options.py), and the output flags (``fleet``: folder and format).
    ``workload``: the command also takes a generated benchmark workload (--dataset-name random, ...) instead of
    --trace (kvsim/trace/bench_load.py); other commands keep --trace required and refuse the workload flags.
    ``seed_alias``: --seed stands for --random-seed, as vLLM spells it (not where the command has a --seed of
    its own)."""
    from kvsim.options import add_options

    if workload:
        p.add_argument(
            "--trace",
            help="request trace, kvsim JSONL (docs/traces.md; other formats: `kvsim trace "
            "convert`); or, instead, a benchmark client's generated workload: --dataset-name random, "
            "--random-input-len, ... (group 'load')",
        )
    else:
        p.add_argument(
            "--trace",
            required=True,
            help="request trace, kvsim JSONL (docs/traces.md; other formats: `kvsim trace convert`)",
        )
    add_options(p)
    if workload and seed_alias:  # vLLM's spelling; not in the options table
        p.add_argument(
            "--seed",
            dest="random_seed",
            metavar="INT",
            default=None,
            help="the same as --random-seed (`vllm bench serve --seed`) [default: 0]",
        )
    g = p.add_argument_group("output")
    g.add_argument("--out", help=f"output folder [default: {DEFAULT_OUT}/{command}-<trace name>]")
    g.add_argument("--format", choices=["csv", "parquet"], default="csv", help="table format [default: csv]")
    if fleet:
        return
    g.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    from kvsim.output.table import COLUMNS

    g.add_argument(
        "--columns",
        metavar="NAMES",
        help="terminal table columns, comma-separated, from: "
        + ", ".join(c.name for c in COLUMNS)
        + " (docs/output.md) [default: "
        + ",".join(c.name for c in COLUMNS if c.default)
        + ", fitted to the terminal's width]",
    )
    g.add_argument("--wide", action="store_true", help="every table column, however wide the table gets")
    g.add_argument(
        "--record-batches",
        metavar="FILE",
        help="record the executed batches (gzip JSON lines) for `kvsim kernels replay`; one allocator",
    )


def build_config(a: argparse.Namespace):
    """The SimConfig of a parsed command line (through the options table, :func:`config_values`)."""
    from kvsim.options import config_from_options

    return config_from_options(config_values(a))


def config_values(a: argparse.Namespace) -> dict:
    """The option values of a parsed command line that configure the engines. With a generated benchmark workload
    (:func:`bench_workload`) --request-rate spaces that workload's send times, so the configuration does not
    re-time it again (every replica group of a fleet is configured from these)."""
    from kvsim.options import normalize, values_from_namespace
    from kvsim.option_table import BY_KEY
    from kvsim.trace.bench_load import DATASET_KEYS

    values = values_from_namespace(a)
    given = [k for k in DATASET_KEYS if k in values]
    if given:
        normalize(values)  # a bad value is named first
        flag = BY_KEY[given[0]].flag
        if getattr(a, "trace", None) is not None:
            raise ConfigError(
                f"{flag} describes a generated benchmark workload and --trace a recorded one: give one "
                "(write the workload as a trace with `kvsim trace generate --bench ...`)"
            )
        values = {k: v for k, v in values.items() if k != "request_rate"}
    elif getattr(a, "trace", "") is None:
        raise ConfigError(
            "--trace is required, or a benchmark client's workload instead: --dataset-name random "
            "(with --random-input-len, --random-output-len, --num-prompts, ...; docs/traces.md)"
        )
    return values


def bench_workload(a: argparse.Namespace):
    """The generated benchmark workload (kvsim.trace.bench_load.BenchLoad) the command line asks for, or None
    when it reads --trace."""
    from kvsim.options import normalize, values_from_namespace
    from kvsim.trace.bench_load import from_options

    return from_options(normalize(values_from_namespace(a)))


def load_workload(a: argparse.Namespace, warmup: bool = True, command: str = "run"):
    """(the loaded requests (kvsim.trace.jsonl.LoadedTrace), the workload's name for result folders, how the
    summary names it, the generated workload's notes) of --trace or a benchmark client's flags. ``warmup``
    False: ``command`` does not simulate a client's warm-up (an explicit --warmup-request-count is refused, a
    client's default one left out with a note)."""
    from dataclasses import replace

    from kvsim.trace import load_trace
    from kvsim.trace.jsonl import LoadedTrace

    bench = bench_workload(a)
    if bench is not None:
        notes = []
        if bench.warmup and not warmup:
            if getattr(a, "warmup_request_count", None):
                raise ConfigError(
                    f"--warmup-request-count: kvsim {command} does not simulate a client's warm-up (kvsim run "
                    "and compare do); drop it"
                )
            notes.append(f"note: {bench.name}: the client's {bench.warmup} warm-up requests are not simulated here")
            bench = replace(bench, warmup=0)
        loaded = LoadedTrace(bench.requests(), bench.name)
        measured = sum(not r.warmup for r in loaded.requests)
        return loaded, bench.name, f"{bench.describe()} (generated: {measured} requests)", bench.notes() + notes
    loaded = load_trace(a.trace, skip_invalid=bool(a.skip_invalid))
    return loaded, Path(a.trace).stem, f"{a.trace} ({len(loaded.requests)} requests)", []


def setting_warnings(cfg, requests, allocators, shared_store: bool = False) -> list[str]:
    """Legal but suspicious settings (``shared_store``: the fleet shares a KV store)."""
    out = []
    if cfg.kv_load_layerwise and not cfg.kv_offloading_size and not shared_store:
        out.append(
            "warning: --kv-load-layerwise changes nothing without a lower cache tier (--kv-offloading-size, "
            "or --shared-kv-store in kvsim cluster)"
        )
    if cfg.scheduler.max_model_len > cfg.model.max_context:
        out.append(
            f"warning: --max-model-len {cfg.scheduler.max_model_len} is beyond {cfg.model.name}'s context "
            f"({cfg.model.max_context} tokens)"
        )
    caching = [str(s) for s in allocators if s.kind == "radix" or s.prefix]
    if caching and not any(r.hash_ids for r in requests):
        out.append(
            f"warning: {', '.join(caching)} cache prompt prefixes, but no request in the trace carries "
            "hash_ids, so nothing can be shared (docs/traces.md)"
        )
    return out


def start_warnings(configs: dict) -> list[str]:
    """Where vLLM would refuse to start a configuration kvsim simulates anyway (SimConfig.start_problem);
    ``configs``: label -> configuration (a fleet's replica groups by name; "" for a single engine)."""
    return [
        f"warning: {label + ': ' if label else ''}{problem}; kvsim simulates the configuration as given"
        for label, cfg in configs.items()
        if (problem := cfg.start_problem())
    ]


def simulate_all(a: argparse.Namespace, allocator_names: str, command: str) -> int:
    from kvsim.allocators import parse_allocator_list
    from kvsim.files import check_output_file, prepare_results_dir
    from kvsim.latency import describe_latency, latency_notes
    from kvsim.output.progress import Progress
    from kvsim.output.table import print_table, printable, shell_line
    from kvsim.output.writer import write_results
    from kvsim.runner import simulate

    from kvsim.output.table import choose_columns

    columns = choose_columns(a.columns, a.wide)  # a bad name fails now, not after the simulation
    from kvsim.runner import prefix_caching, served_allocator

    cfg = build_config(a)
    named = allocator_names is not None
    if not named:
        if command == "compare":
            allocator_names = HYBRID_DEFAULT_ALLOCATORS if cfg.model.is_hybrid else DEFAULT_ALLOCATORS
        else:
            allocator_names = served_allocator(cfg)
    allocators = parse_allocator_list(allocator_names, cfg.block_size, prefix_caching(cfg, named))
    from kvsim.allocators.registry import model_problem

    for spec in allocators:  # refuse before simulating anything, not at the allocator that cannot
        problem = model_problem(spec, cfg.model)
        if problem:
            raise ConfigError(problem)
    if a.record_batches and len(allocators) != 1:
        raise ConfigError("--record-batches records one allocator's run; pass a single allocator")
    pool = cfg.pool_plan()
    loaded, trace_name, trace_text, bench_notes = load_workload(a)
    # outputs are checked after the inputs (a bad trace leaves no empty folder) and before simulating
    from kvsim.commands.args import result_marker, results_dir

    out, out_note = results_dir(a, Path(DEFAULT_OUT) / f"{command}-{trace_name}")
    from kvsim.output.writer import result_names

    out = prepare_results_dir(out, "--out", [a.trace, a.model, a.latency], result_names(a.format, not a.no_plots))
    if a.record_batches:
        check_output_file(a.record_batches, "--record-batches", [a.trace, a.model, a.latency])
        if Path(a.record_batches).resolve().parent == out.resolve():
            raise ConfigError(
                f"--record-batches {a.record_batches}: is inside the results folder {out}, whose files "
                "each run replaces; give a path outside it"
            )
    notes = (
        loaded.notes()
        + bench_notes
        + latency_notes(cfg)
        + setting_warnings(cfg, loaded.requests, allocators if named else [])
        + start_warnings({"": cfg})
    )
    for note in notes:
        print(note, file=sys.stderr)
    recorder = None
    if a.record_batches:
        from kvsim.replay.record import BatchRecorder

        import os  # a symlink is written through: the link stays, its target gets the record

        recorder = BatchRecorder(os.path.realpath(a.record_batches), cfg, pool)
    outputs = []
    ok = False
    try:
        for name in allocators:
            with Progress(len(loaded.requests), f"{str(name):>12}") as bar:
                o = simulate(loaded.requests, cfg, name, pool, observer=recorder, progress=bar.update)
            # its tables are built: its sequences go before the next allocator's run (a million of them each)
            o.result.sequences = []
            outputs.append(o)
        ok = True
    finally:
        if recorder is not None:
            recorder.close(keep=ok)
    for o in outputs:
        check_accounted(o.summary["allocator"], o.summary)
    for o in outputs:
        warn_if_mostly_rejected(o.summary["allocator"], o.requests)
        warn_if_api_server_busy(o.summary["allocator"], o.summary.get("api_server_busy", 0.0))
    context = {
        "command": "`" + shell_line(["kvsim", *sys.argv[1:]]) + "`"
        if sys.argv and sys.argv[0].endswith("kvsim")
        else "",
        "trace": trace_text,
        "model": f"{cfg.model.name} (KV {cfg.model.kv_bytes_per_token / 1024:g} KiB/token for the whole model, "
        f"{pool.kv_bytes_per_token / 1024:g} KiB per GPU), tensor parallel {cfg.tp}"
        + (f", {cfg.pp} pipeline stages (the scheduler's token budget per micro-batch)" if cfg.pp > 1 else ""),
        "gpu": cfg.gpu.name,
        "KV pool": f"{pool.pool_bytes / (1 << 30):.2f} GiB per GPU = {pool.pool_tokens:,} token slots ({pool.source})",
        "scheduler": f"{cfg.scheduler.batching} batching, max_model_len {cfg.scheduler.max_model_len}, max_num_seqs "
        f"{cfg.scheduler.max_num_seqs}, max_num_batched_tokens {cfg.scheduler.max_num_batched_tokens}, "
        f"victim policy {cfg.victim_policy}",
        "latency": describe_latency(cfg),
    }
    if cfg.scheduler.preemption_mode == "swap" or cfg.scheduler.partial_preemption:
        context["preemption"] = f"{cfg.scheduler.preemption_mode}, CPU pool {cfg.swap_space:g} GiB" + (
            ", partial preemption" if cfg.scheduler.partial_preemption else ""
        )
    context = {k: printable(v) for k, v in context.items() if v}  # one line each: names from files escaped
    print_table(
        [o.summary for o in outputs],
        title=f"{trace_name} · {cfg.model.name} · {cfg.gpu.name}"
        + (f" x{cfg.tp}" if cfg.tp > 1 else "")
        + (f" pp{cfg.pp}" if cfg.pp > 1 else "")
        + f" · KV pool {pool.pool_bytes / (1 << 30):.1f} GiB = {_tokens(pool.pool_tokens)} tokens",
        columns=columns,
        fit=not a.wide,
    )
    written = write_results(out, outputs, context, notes, plots=not a.no_plots, fmt=a.format, marker=result_marker(a))
    if out_note:
        print(out_note, file=sys.stderr)
    print(
        f"wrote {len(written)} files to {out}/ (summary.md, requests, runs, memory_timeline"
        + (", plots)" if not a.no_plots else ")")
    )
    return 0


def check_accounted(label: str, s: dict) -> None:
    """Every request is finished, rejected or unfinished, or nothing is written."""
    if s["finished"] + s["rejected"] + s["unfinished"] != s["requests"]:
        raise RuntimeError(
            f"{label}: {s['finished'] + s['rejected'] + s['unfinished']} of {s['requests']} requests accounted for"
        )


def warn_if_mostly_rejected(label: str, requests) -> None:
    """A run that mostly rejects answers another question than the one asked: say so, with the main reason."""
    rejected = requests.loc[requests.status == "rejected", "reason"]
    if len(rejected) > len(requests) / 2:
        top = rejected.str.replace(r"\d+", "N", regex=True).value_counts()
        print(
            f"warning: {label} rejected {len(rejected):,} of {len(requests):,} requests "
            f"({100 * len(rejected) / len(requests):.0f}%), most because: {top.index[0]} ({top.iloc[0]:,}); "
            "the results describe the rest only",
            file=sys.stderr,
        )


API_SERVER_BUSY_WARN = 0.9  # share of a run an API server's event loop works (handlers, streaming)


def warn_if_api_server_busy(label: str, busy: float) -> None:
    """An API server whose event loop works nearly all the time (``busy``: the share of the run) decides the
    latencies: say so, with vLLM's ways out."""
    if busy > API_SERVER_BUSY_WARN:
        print(
            f"warning: {label}: the API server's event loop was busy {100 * busy:.0f}% of the run (request "
            "handlers and streaming each token, kvsim/frontend.py): new requests and tokens queue behind it; "
            "vLLM's --api-server-count N or --stream-interval N take work off it",
            file=sys.stderr,
        )


def _tokens(n: int) -> str:
    return f"{n:,}" if n < 10**6 else f"{n / 1e6:.2f} M"


def cmd_compare(a: argparse.Namespace) -> int:
    return simulate_all(a, a.allocators, "compare")


def cmd_run(a: argparse.Namespace) -> int:
    """`kvsim run` of one engine (with --data-parallel-size > 1, kvsim/commands/fleet.py runs it as a fleet)."""
    return simulate_all(a, a.allocator, "run")


def register(sub) -> None:
    from kvsim.allocators import allocator_help

    names = "; ".join(f"{k}: {v}" for k, v in allocator_help().items())
    c = sub.add_parser(
        "compare",
        help="simulate a trace with several allocators and compare them",
        description="Simulate a trace with several KV-cache allocators on the same GPU and compare "
        "throughput, latency and where the KV memory went.",
    )
    add_sim_args(c, "compare", workload=True)
    c.add_argument(
        "--allocators",
        default=None,
        help=f"comma-separated allocator names ({names}) [default: {DEFAULT_ALLOCATORS}; for models whose"
        f" layers differ (sliding, chunked, mamba): {HYBRID_DEFAULT_ALLOCATORS}]",
    )
    c.set_defaults(func=cmd_compare)
    r = sub.add_parser(
        "run", help="simulate a trace with one allocator", description="Simulate a trace with one KV-cache allocator."
    )
    add_sim_args(r, "run", workload=True)
    r.add_argument(
        "--allocator",
        default=None,
        help=f"allocator name ({names}) [default: paged; hybrid for models whose layers differ]",
    )
    r.set_defaults(func=cmd_run)
