"""`kvsim cluster`: replicas behind routers on one clock; one row per router."""

from __future__ import annotations

import argparse
import math
import reprlib
import sys
from pathlib import Path

from kvsim.commands.args import DEFAULT_OUT, non_negative, number
from kvsim.errors import ConfigError
from kvsim.validation import MIN_GBS, Number

MAX_REPLICAS = 4096  # per group: a fleet of more engines than this is a typo, and its set-up alone would take minutes
MAX_GROUPS = 64  # groups of one --groups / --prefill / --decode: each is a configuration checked and set up on its own

DEFAULT_ROUTERS = "round-robin,least-requests,prefix,prefix+load"


def _groups(a: argparse.Namespace, cfg, allocator, text: str | None = None, flag: str = "--groups"):
    """Replica groups: --replicas copies of the configured GPU, or ``text`` = GPU:COUNT[:tpN][:ppN][:dpN],...
    (``flag`` names the option in errors)."""
    from kvsim.commands.simulate import config_values
    from kvsim.fleet.cluster import ReplicaGroup
    from kvsim.options import config_from_options

    if not text:
        return _bounded([ReplicaGroup(_group_name(cfg), cfg, allocator, a.replicas)], "--replicas")
    out = []
    keys = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size"}
    parts = text.split(",")
    if len(parts) > MAX_GROUPS:
        raise ConfigError(f"{flag}: {len(parts):,} groups; at most {MAX_GROUPS} (a group per GPU type and shape)")
    for part in parts:
        fields = part.strip().split(":")
        sizes = {f[:2]: f[2:] for f in fields[2:]}
        if (
            len(fields) < 2
            or not fields[0]
            or not _whole(fields[1])
            or int(fields[1]) < 1
            or len(sizes) != len(fields) - 2
            or any(k not in keys or not _whole(v) or int(v) < 1 for k, v in sizes.items())
        ):
            raise ConfigError(
                f"{flag} {reprlib.repr(text)}: each group is GPU:COUNT, optionally with :tpN, :ppN and "
                f":dpN (e.g. h100-80gb:4, a100-80gb:2:tp2:pp2 or h200:1:dp8), got {reprlib.repr(part)}"
            )
        if int(fields[1]) > MAX_REPLICAS:
            raise ConfigError(f"{flag} {reprlib.repr(part.strip())}: at most {MAX_REPLICAS} replicas per group")
        values = config_values(a)  # (a generated workload's --request-rate already spaced its requests)
        values["gpu"] = fields[0]
        for k, v in sizes.items():
            values[keys[k]] = int(v)
        try:
            g_cfg = config_from_options(values)
        except ConfigError as e:
            raise ConfigError(f"{flag} {reprlib.repr(part.strip())}: {e}") from None
        out.append(ReplicaGroup(_group_name(g_cfg), g_cfg, allocator, int(fields[1])))
    return _bounded(out, flag)


def _whole(text: str) -> bool:
    """A count written in ASCII digits, short enough to read (str.isdigit also takes '²' and other scripts' digits,
    which int() then refuses or reads)."""
    return text.isascii() and text.isdigit() and len(text) <= 9


def _bounded(groups, flag: str):
    """``groups``, unless one runs more engines (replicas x data-parallel ranks) than MAX_REPLICAS."""
    for g in groups:
        if g.engines > MAX_REPLICAS:
            raise ConfigError(
                f"{flag}: {g.count} replicas of {g.cfg.dp} data-parallel ranks are {g.engines:,} engines; "
                f"at most {MAX_REPLICAS} per group"
            )
    return groups


def _group_name(cfg) -> str:
    """A replica group's name: its GPU, with its tensor, pipeline and data parallelism when above one."""
    return (
        cfg.gpu.name
        + (f"x{cfg.tp}" if cfg.tp > 1 else "")
        + (f"pp{cfg.pp}" if cfg.pp > 1 else "")
        + (f"dp{cfg.dp}" if cfg.dp > 1 else "")
    )


def _store(text: str | None):
    """--shared-kv-store GIB[:GB_S[:LATENCY_MS]] as a shared tier (default 10 GB/s into a GPU, 1 ms per load)."""
    if not text:
        return None
    from kvsim.allocators.kv_tier import TierSpec

    parts = text.split(":")
    defaults = ["", "10", "1"]  # GiB (required), GB/s, ms
    try:  # ASCII only: float() also reads other scripts' digits
        gib, gbs, ms = (
            (float(x) for x in parts + defaults[len(parts) :])
            if len(parts) <= 3 and text.isascii()
            else (math.nan,) * 3
        )
    except ValueError:
        gib = gbs = ms = math.nan
    if not (0 < gib <= 1 << 30 and MIN_GBS <= gbs <= 1e6 and 0 <= ms <= 1e6):  # NaN fails every comparison
        raise ConfigError(
            f"--shared-kv-store {reprlib.repr(text)}: expected GIB[:GB_S[:LATENCY_MS]] with GiB in "
            f"(0, 2^30], GB/s in [{MIN_GBS:g}, 1e6] and ms in [0, 1e6], e.g. 1024:10:1"
        )
    return TierSpec("store", gib * (1 << 30), gbs * 1e9, ms / 1e3, shared=True)


def _gpus(groups) -> int:
    return sum(g.gpus for g in groups)


def _weights(text: str | None) -> dict[str, float]:
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        key, sep, val = part.partition("=")
        key = key.strip()
        if not sep or key not in ("prefix", "queue", "kv"):
            raise ConfigError(f"--router-weights: expected prefix=W,queue=W,kv=W, got {part!r}")
        try:
            w = float(val)
        except ValueError:
            raise ConfigError(f"--router-weights: {key} must be a number, got {val!r}") from None
        if not math.isfinite(w) or w < 0:
            raise ConfigError(f"--router-weights: {key} must be a finite number >= 0, got {val!r}")
        out[f"{key}_weight"] = w
    return out


def cmd_cluster(a: argparse.Namespace) -> int:
    from kvsim.commands.fleet_results import fleet_columns, write_fleet_results
    from kvsim.planning.slo import add_slo_columns

    from kvsim.allocators.registry import model_problem
    from kvsim.commands.simulate import (
        build_config,
        check_accounted,
        load_workload,
        setting_warnings,
        start_warnings,
        warn_if_api_server_busy,
        warn_if_mostly_rejected,
    )
    from kvsim.files import prepare_results_dir
    from kvsim.fleet.cluster import simulate_fleet
    from kvsim.fleet.routers import PREFIX_ROUTERS, RouterOptions, parse_router_params, parse_routers
    from kvsim.runner import resolve_allocator, served_allocator
    from kvsim.output.progress import Progress

    routers = parse_routers(a.routers, "--routers")
    cfg = build_config(a)
    spec = resolve_allocator(a.allocator or served_allocator(cfg), cfg, named=a.allocator is not None)
    problem = model_problem(spec, cfg.model)
    if problem:
        raise ConfigError(problem)
    options = RouterOptions(
        seed=a.seed, approx_ttl_s=a.router_ttl, **_weights(a.router_weights), **parse_router_params(a.router_params)
    ).validate()
    for flag, v in (("--groups", a.groups), ("--prefill", a.prefill), ("--decode", a.decode)):
        if v is not None and not v.strip():
            raise ConfigError(f"{flag} is empty: name at least one group (GPU:COUNT)")
    if bool(a.prefill) != bool(a.decode):
        raise ConfigError("disaggregated serving needs both --prefill and --decode pools")
    if a.prefill and a.groups:
        raise ConfigError(
            "--groups (aggregated replicas) and --prefill/--decode (disaggregated pools) exclude each other"
        )
    parse_routers(a.decode_router, "--decode-router")
    from kvsim.fleet.disagg import parse_link
    from kvsim.planning.slo import parse_slos

    link = parse_link(a.kv_link)
    store = _store(a.shared_kv_store)
    for warning in setting_warnings(cfg, [], [], shared_store=store is not None):
        print(warning, file=sys.stderr)
    slos = parse_slos(a.slo) if a.slo is not None else []
    layouts = []  # (label, groups or (prefill groups, decode groups))
    if a.prefill:
        pools = (_groups(a, cfg, spec, a.prefill, "--prefill"), _groups(a, cfg, spec, a.decode, "--decode"))
        layouts.append(("disagg", pools))
        if a.also_aggregated:  # the same GPUs, every one serving both phases
            layouts.append(("agg", _merged(pools[0] + pools[1])))
    else:
        layouts.append(("agg", _groups(a, cfg, spec, a.groups)))
    for warning in start_warnings({g.name: g.cfg for _, pools in layouts for g in _flat(pools)}):
        print(warning, file=sys.stderr)
    # --trace, or a benchmark client's flags (without its warm-up: not simulated in a fleet)
    loaded, trace_name, _, bench_notes = load_workload(a, warmup=False, command="cluster")
    for note in bench_notes:
        print(note, file=sys.stderr)
    from kvsim.commands.args import result_marker, results_dir

    out, out_note = results_dir(a, Path(DEFAULT_OUT) / f"cluster-{trace_name}")
    ext = "parquet" if a.format == "parquet" else "csv"
    from kvsim.commands.fleet_time import over_time_asked, run_over_time

    changing = over_time_asked(a)
    out = prepare_results_dir(
        out,
        "--out",
        [a.trace, getattr(a, "model", None), getattr(a, "latency", None)],
        [f"{n}.{ext}" for n in ("fleet", "replicas", "requests") + (("timeline",) if changing else ())]
        + ["summary.md"]
        + (["replicas_over_time.png"] if changing else []),
    )
    for note in loaded.notes():
        print(note, file=sys.stderr)
    if "session" in routers and not any(r.session for r in loaded.requests):
        print(
            "warning: the session router needs a session field in the trace; without one it routes by load",
            file=sys.stderr,
        )
    if any(r in PREFIX_ROUTERS for r in routers) and not any(r.hash_ids for r in loaded.requests):
        print("warning: the trace has no hash_ids, so prefix-aware routers see no prefixes", file=sys.stderr)
    elif any(r.startswith("prefix") for r in routers) and not (spec.prefix or spec.kind == "radix"):
        print(
            f"warning: the replicas' allocator {spec} caches no prefixes, so routing by prefix saves no prefill "
            "(prefix and prefix+load find nothing cached and route by load)",
            file=sys.stderr,
        )
    if changing:
        title = f"{trace_name} · {cfg.model.name} · {_layout_name(layouts[0][1])} over time · {spec}"
        return run_over_time(a, layouts, routers, loaded.requests, options, slos, out, title, result_marker(a))
    from kvsim.fleet.disagg import simulate_disagg

    fleets = []
    for kind, groups in layouts:
        for r in routers:
            label = r
            with Progress(len(loaded.requests), f"{kind} {label}"[:24].rjust(18)) as bar:
                if kind == "agg":
                    f = simulate_fleet(loaded.requests, groups, r, options, progress=bar.update, store=store)
                else:
                    f = simulate_disagg(
                        loaded.requests,
                        *groups,
                        r,
                        a.decode_router,
                        options,
                        link,
                        bar.update,
                        store=store,
                        shared_link=a.kv_link_shared,
                    )
            f.summary["layout"] = _layout_name(groups)
            add_slo_columns(f.summary, f.requests, slos, _gpus(groups if kind == "agg" else groups[0] + groups[1]))
            check_accounted(label, f.summary)
            warn_if_mostly_rejected(label, f.requests)
            warn_if_api_server_busy(f"{label} (busiest replica)", f.api_server_busy)
            for o in f.replicas:  # their tables are built: the sequences go before the next router's run
                o.result.sequences = []
            fleets.append(f)
    replicas = max(len(f.replicas) for f in fleets)
    title = f"{trace_name} · {cfg.model.name} · " + " vs ".join(_layout_name(g) for _, g in layouts) + f" · {spec}"
    if a.prefill:
        title += f" · decode router {a.decode_router} · KV link {link.name}"
    from kvsim.output.table import print_rows

    print_rows([f.summary for f in fleets], fleet_columns(fleets, slos), title)
    written = write_fleet_results(out, fleets, title, a.format, fleet_columns(fleets, slos), result_marker(a))
    if out_note:
        print(out_note, file=sys.stderr)
    print(f"wrote {len(written)} files to {out}/ (summary.md, fleet, replicas, requests)")
    if replicas == 1:
        print(
            "note: one replica is the single-engine run (`kvsim run`); every router sends it everything",
            file=sys.stderr,
        )
    return 0


def _flat(pools) -> list:
    """A layout's replica groups: a list of them (aggregated), or (prefill groups, decode groups)."""
    return [g for pool in pools for g in pool] if isinstance(pools, tuple) else list(pools)


def _merged(groups):
    """Groups with the same configuration as one group."""
    from dataclasses import replace

    out = {}
    for g in groups:
        key = (g.name, g.cfg)
        out[key] = replace(out[key], count=out[key].count + g.count) if key in out else g
    return list(out.values())


def _layout_name(groups) -> str:
    """``4x h100-80gb``, or for pools ``1P3D h100-80gb`` (``P 1xa100 / D 2xh100`` when the GPUs differ)."""
    if isinstance(groups, tuple):
        names = {g.name for g in groups[0] + groups[1]}
        if len(names) == 1:
            return f"{sum(g.count for g in groups[0])}P{sum(g.count for g in groups[1])}D {names.pop()}"
        return (
            "P "
            + "+".join(f"{g.count}x{g.name}" for g in groups[0])
            + " / D "
            + "+".join(f"{g.count}x{g.name}" for g in groups[1])
        )
    return " + ".join(f"{g.count}x {g.name}" for g in groups)


def add_kv_link_options(group, who: str = "") -> None:
    """--kv-link and --kv-link-shared, stated once for `kvsim cluster` and the fleet plan (``who``: a prefix
    saying which command's layouts they set)."""
    group.add_argument(
        "--kv-link",
        default="rdma",
        metavar="nvlink|nvlink5|rdma|tcp|GB_S[:LATENCY_MS]",
        help=f"{who}link from a prefill GPU to a decode GPU: nvlink 450 GB/s (Hopper), nvlink5 900 GB/s "
        "(Blackwell; a GB200/GB300 NVL72 rack), rdma 38.5 GB/s after 0.57 ms (a 400 Gb/s NIC at the 77%% of line "
        "rate vLLM's RDMA connectors reach), tcp 12.5 GB/s, or GB/s per GPU pair and fixed latency (ms) "
        "[default: rdma]",
    )
    group.add_argument(
        "--kv-link-shared",
        action="store_true",
        help=f"{who}each engine's links carry one KV transfer at a time (transfers to or from a busy engine "
        "queue, first come first served) [default: every transfer has its GPU pairs' lanes to itself]",
    )


def cmd_run(a: argparse.Namespace) -> int:
    """`kvsim run`: one engine, or with --data-parallel-size N > 1 one replica of N engines behind vLLM's load
    balancer, which is a fleet of one replica: `kvsim cluster --replicas 1 --routers dp-lb` with the same options
    (the terminal-table and plot flags aside, which the fleet's report does not take)."""
    from kvsim.commands import simulate
    from kvsim.options import normalize, values_from_namespace

    dp = normalize(values_from_namespace(a)).get("data_parallel_size", 1)
    if dp <= 1:
        return simulate.cmd_run(a)
    if a.record_batches:
        raise ConfigError("--record-batches records one engine's batches; a data-parallel replica runs several")
    assert _CLUSTER_PARSER is not None, "register() makes the cluster parser first"
    ns = argparse.Namespace(**{x.dest: x.default for x in _CLUSTER_PARSER._actions if x.dest != "help"})
    for k, v in vars(a).items():
        if k in vars(ns) and k != "func":
            setattr(ns, k, v)
    ns.replicas, ns.routers = 1, "dp-lb"
    unused = [f for f, v in (("--columns", a.columns), ("--wide", a.wide), ("--no-plots", a.no_plots)) if v]
    print(
        f"note: --data-parallel-size {dp}: one replica of {dp} engines behind vLLM's load balancer, run as "
        "`kvsim cluster --replicas 1 --routers dp-lb`"
        + (f" (whose report has its own columns and no plots: {', '.join(unused)} unused)" if unused else ""),
        file=sys.stderr,
    )
    return cmd_cluster(ns)


_CLUSTER_PARSER: argparse.ArgumentParser | None = None  # cmd_run takes its defaults


def register(sub) -> None:
    from kvsim.commands.simulate import add_sim_args
    from kvsim.fleet.routers import ROUTERS

    global _CLUSTER_PARSER

    c = sub.add_parser(
        "cluster",
        help="simulate replicas behind routers on one clock and compare the routers",
        description="Serve a trace with N replicas of an engine behind each router; every replica "
        "has its own allocator, prefix cache, scheduler and latency model, all on one "
        "simulated clock.",
    )
    add_sim_args(c, "cluster", fleet=True, workload=True, seed_alias=False)  # --seed: the routers
    _CLUSTER_PARSER = c
    sub.choices["run"].set_defaults(func=cmd_run)  # registered before: a data-parallel run is a fleet
    g = c.add_argument_group("fleet")
    g.add_argument(
        "--replicas",
        type=number(int, Number(integer=True, min=1, max=MAX_REPLICAS)),
        default=4,
        help=f"replicas of the configured GPU (at most {MAX_REPLICAS:,}) [default: 4]",
    )
    g.add_argument(
        "--groups",
        metavar="GPU:COUNT,...",
        help="heterogeneous replicas instead of --replicas: GPU:COUNT[:tpN][:ppN][:dpN],..., e.g. "
        "h100-80gb:4,a100-80gb:2:tp2 (other options apply to every group; a replica of dpN is N "
        "engines, each routed to)",
    )
    g.add_argument(
        "--routers",
        default=DEFAULT_ROUTERS,
        help="comma-separated routers to compare: "
        + "; ".join(f"{n}: {r.help}" for n, r in ROUTERS.items())
        + f" [default: {DEFAULT_ROUTERS}]",
    )
    g.add_argument(
        "--allocator",
        default=None,
        help="each replica's allocator [default: paged+prefix, as vLLM V1 caches prefixes by default; "
        "hybrid+prefix for models whose layers differ]",
    )
    g.add_argument(
        "--router-ttl",
        type=non_negative,
        default=120.0,
        metavar="S",
        help="prefix-approx: seconds after which the router forgets where it sent a prefix [default: 120]",
    )
    g.add_argument(
        "--router-weights",
        metavar="prefix=W,queue=W,kv=W",
        help="prefix+load: weights of the cached prompt fraction, a short queue and free KV "
        "[default: prefix=2,queue=1,kv=1]",
    )
    g.add_argument(
        "--router-params",
        metavar="KEY=VALUE,...",
        help="settings of sglang-cache-aware (and prefix-approx's balance guard) and llm-d, as the real "
        "routers ship them unless set: cache_threshold=0.3, balance_abs_threshold=64, "
        "balance_rel_threshold=1.5, eviction_interval_s=120, max_tree_size=67108864 (characters, 4 "
        "a token), cache_miss=least-load (or smallest-tree, as sgl-router before the gateway); "
        "llmd_prefix_weight=3, llmd_queue_weight=2, llmd_kv_weight=2, llmd_max_prefix_blocks=256, "
        "llmd_lru_blocks=0 (0: each replica's KV pool in blocks)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of the random and llm-d routers [default: 0]")
    g.add_argument(
        "--slo",
        metavar="ttft_p99=2s,...",
        help="SLOs to report: whether each run meets them, the share of requests within every limit "
        "(attainment) and those requests per second per GPU (goodput)",
    )
    g.add_argument(
        "--shared-kv-store",
        metavar="GIB[:GB_S[:LATENCY_MS]]",
        help="a KV store shared by every replica (Mooncake store, LMCache remote, SGLang HiCache): "
        "blocks evicted from a replica's GPU (or its --kv-offloading-size CPU tier) go there, and "
        "any replica loads them back on a prefix hit [default speed: 10 GB/s into a GPU, 1 ms]",
    )
    d = c.add_argument_group("disaggregated prefill/decode")
    d.add_argument(
        "--prefill",
        metavar="GPU:COUNT[:tpN][:ppN][:dpN],...",
        help="a prefill pool (with --decode): its engines compute prompts and hand the KV over; "
        "--routers pick among them",
    )
    d.add_argument(
        "--decode",
        metavar="GPU:COUNT[:tpN][:ppN][:dpN],...",
        help="a decode pool (with --prefill): its engines load the KV and generate",
    )
    d.add_argument(
        "--decode-router", default="least-requests", help="router of the decode pool [default: least-requests]"
    )
    add_kv_link_options(d)
    d.add_argument(
        "--also-aggregated",
        action="store_true",
        help="also run the same GPUs as aggregated replicas (each serving prefill and decode)",
    )
    from kvsim.commands.fleet_time import add_options as add_over_time_options

    add_over_time_options(c)
    from kvsim.commands.args import positive_int

    g = c.add_argument_group("several autoscaler settings (--autoscaler 'A;B;...')")
    g.add_argument("--workers", type=positive_int, default=1, help="settings run in parallel [default: 1]")
    g.add_argument("--backend", choices=["local", "ray"], default="local", help="[default: local processes]")
    g.add_argument("--address", help="Ray cluster address HOST:PORT [default: start a local instance]")
    c.set_defaults(func=cmd_cluster)
