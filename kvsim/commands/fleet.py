"""`kvsim cluster`: replicas behind routers on one clock; one row per router."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from kvsim.commands.args import DEFAULT_OUT, non_negative, positive_int
from kvsim.errors import ConfigError

DEFAULT_ROUTERS = "round-robin,least-requests,prefix,prefix+load"


def _groups(a: argparse.Namespace, cfg, allocator: str):
    """The replica groups: --replicas copies of the configured GPU, or --groups GPU:COUNT,..."""
    from kvsim.fleet.cluster import ReplicaGroup
    from kvsim.options import config_from_options, values_from_namespace

    if not a.groups:
        return [ReplicaGroup(cfg.gpu.name + (f"x{cfg.tp}" if cfg.tp > 1 else ""), cfg, allocator, a.replicas)]
    out = []
    for part in a.groups.split(","):
        fields = part.strip().split(":")
        tp = fields.pop() if len(fields) == 3 else None
        if len(fields) != 2 or not fields[0] or not fields[1].isdigit() or int(fields[1]) < 1 or (
                tp is not None and not (tp.startswith("tp") and tp[2:].isdigit() and int(tp[2:]) >= 1)):
            raise ConfigError(f"--groups {a.groups!r}: each group is GPU:COUNT or GPU:COUNT:tpN (e.g. h100-80gb:4 "
                              f"or a100-80gb:2:tp2), got {part!r}")
        values = values_from_namespace(a)
        values["gpu"] = fields[0]
        if tp is not None:
            values["tensor_parallel_size"] = int(tp[2:])
        try:
            g_cfg = config_from_options(values)
        except ConfigError as e:
            raise ConfigError(f"--groups {part.strip()}: {e}") from None
        out.append(ReplicaGroup(g_cfg.gpu.name + (f"x{g_cfg.tp}" if g_cfg.tp > 1 else ""), g_cfg, allocator,
                                int(fields[1])))
    return out


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
    from kvsim.allocators.registry import model_problem, parse_allocator
    from kvsim.commands.simulate import build_config, check_accounted, warn_if_mostly_rejected
    from kvsim.files import prepare_output_dir
    from kvsim.fleet.cluster import simulate_fleet
    from kvsim.fleet.routers import ROUTERS, RouterOptions
    from kvsim.output.progress import Progress
    from kvsim.trace import load_trace

    routers = [r.strip() for r in a.routers.split(",") if r.strip()]
    for r in routers:
        if r not in ROUTERS:
            raise ConfigError(f"--routers: unknown router {r!r}; choose from {', '.join(ROUTERS)}")
    if not routers:
        raise ConfigError("--routers: name at least one router")
    cfg = build_config(a)
    allocator = a.allocator or ("hybrid" if cfg.model.is_hybrid else "paged") + "+prefix"
    spec = parse_allocator(allocator).resolve(cfg.block_size, cfg.enable_prefix_caching)
    problem = model_problem(spec, cfg.model)
    if problem:
        raise ConfigError(problem)
    options = RouterOptions(seed=a.seed, approx_ttl_s=a.router_ttl, **_weights(a.router_weights)).validate()
    groups = _groups(a, cfg, spec)
    loaded = load_trace(a.trace, skip_invalid=bool(a.skip_invalid))
    trace_name = Path(a.trace).stem
    from kvsim.commands.args import mark_results, results_dir

    out, out_note = results_dir(a, Path(DEFAULT_OUT) / f"cluster-{trace_name}")
    out = prepare_output_dir(out, "--out")
    for note in loaded.notes():
        print(note, file=sys.stderr)
    if "session" in routers and not any(r.session for r in loaded.requests):
        print("warning: the session router needs a session field in the trace; without one it routes by load",
              file=sys.stderr)
    if any(r.startswith("prefix") for r in routers) and not any(r.hash_ids for r in loaded.requests):
        print("warning: the trace has no hash_ids, so prefix-aware routers see no prefixes", file=sys.stderr)
    fleets = []
    for r in routers:
        with Progress(len(loaded.requests), f"{r:>14}") as bar:
            f = simulate_fleet(loaded.requests, groups, r, options, progress=bar.update)
        check_accounted(r, f.summary)
        warn_if_mostly_rejected(r, f.requests)
        fleets.append(f)
    replicas = sum(g.count for g in groups)
    title = (f"{trace_name} · {cfg.model.name} · {' + '.join(f'{g.count}x {g.name}' for g in groups)} · "
             f"{spec}")
    from kvsim.output.table import print_rows

    print_rows([f.summary for f in fleets], fleet_columns(), title)
    written = write_fleet_results(out, fleets, title, a.format)
    mark_results(out, a)
    if out_note:
        print(out_note, file=sys.stderr)
    print(f"wrote {len(written)} files to {out}/ (summary.md, fleet, replicas, requests)")
    if replicas == 1:
        print("note: one replica is the single-engine run (`kvsim run`); every router sends it everything",
              file=sys.stderr)
    return 0


def fleet_columns():
    """The terminal and summary.md columns, one row per router (the comparison table's where they agree)."""
    from dataclasses import replace

    from kvsim.output.table import BY_NAME, Column

    key = lambda k: lambda s: s.get(k)  # noqa: E731
    # a narrow terminal drops imbalance, queue and TPOT before the hit rate and TTFT, which routers decide
    return [Column("router", "router", "", "text", "", key("router")),
            BY_NAME["done"], BY_NAME["rej"], BY_NAME["unfin"], BY_NAME["tok_s"],
            replace(BY_NAME["hit"], drop_order=0), replace(BY_NAME["ttft_p50"], drop_order=0), BY_NAME["ttft_p99"],
            replace(BY_NAME["tpot_p50"], drop_order=2),
            Column("queue_p99", "queue", "p99", "latency", "", key("queue_p99_s"), drop_order=3),
            Column("imb_req", "imbal", "req", "float2", "", key("imbalance_requests"), drop_order=5),
            Column("imb_busy", "imbal", "busy", "float2", "", key("imbalance_busy"), drop_order=4)]


def write_fleet_results(out: Path, fleets, title: str, fmt: str) -> list[Path]:
    import pandas as pd

    from kvsim.files import write_text_atomically
    from kvsim.output.writer import remove_stale, write_table

    written = [write_table(pd.DataFrame([f.summary for f in fleets]), out / "fleet", fmt),
               write_table(pd.concat([f.replica_table.assign(router=f.router) for f in fleets], ignore_index=True),
                           out / "replicas", fmt),
               write_table(pd.concat([f.requests.assign(router=f.router) for f in fleets], ignore_index=True),
                           out / "requests", fmt)]
    from kvsim.output.table import markdown_table

    text = [f"# {title}", "", markdown_table([f.summary for f in fleets], fleet_columns()), "",
            "Per replica (routed requests, busy fraction, TTFT p99 s, prefix hit rate):", ""]
    for f in fleets:
        t = f.replica_table
        text.append(f"- **{f.router}**: " + "; ".join(
            f"{int(r.replica)}: {int(r.routed)} req, busy {r.busy_frac:.2f}, TTFT p99 {r.ttft_p99_s:.3f}"
            + ("" if math.isnan(r.prefix_hit_rate_tokens) else f", hit {100 * r.prefix_hit_rate_tokens:.1f}%")
            for r in t.itertuples()))
    write_text_atomically(out / "summary.md", "\n".join(text) + "\n")
    written.append(out / "summary.md")
    remove_stale(out, [f"{n}.{ext}" for n in ("fleet", "replicas", "requests") for ext in ("csv", "parquet")], written)
    return written


def register(sub) -> None:
    from kvsim.commands.simulate import add_sim_args
    from kvsim.fleet.routers import ROUTERS

    c = sub.add_parser("cluster", help="simulate replicas behind routers on one clock and compare the routers",
                       description="Serve a trace with N replicas of an engine behind each router; every replica "
                                   "has its own allocator, prefix cache, scheduler and latency model, all on one "
                                   "simulated clock.")
    add_sim_args(c, "cluster", fleet=True)
    g = c.add_argument_group("fleet")
    g.add_argument("--replicas", type=positive_int, default=4, help="replicas of the configured GPU [default: 4]")
    g.add_argument("--groups", metavar="GPU:COUNT,...",
                   help="heterogeneous replicas instead of --replicas: GPU:COUNT[:tpN],..., e.g. "
                        "h100-80gb:4,a100-80gb:2:tp2 (other options apply to every group)")
    g.add_argument("--routers", default=DEFAULT_ROUTERS,
                   help="comma-separated routers to compare: " + "; ".join(f"{n}: {r.help}" for n, r in ROUTERS.items())
                        + f" [default: {DEFAULT_ROUTERS}]")
    g.add_argument("--allocator", default=None,
                   help="each replica's allocator [default: paged+prefix, as vLLM V1 caches prefixes by default; "
                        "hybrid+prefix for models whose layers differ]")
    g.add_argument("--router-ttl", type=non_negative, default=120.0, metavar="S",
                   help="prefix-approx: seconds after which the router forgets where it sent a prefix [default: 120]")
    g.add_argument("--router-weights", metavar="prefix=W,queue=W,kv=W",
                   help="prefix+load: weights of the cached prompt fraction, a short queue and free KV "
                        "[default: prefix=2,queue=1,kv=1]")
    g.add_argument("--seed", type=int, default=0, help="seed of the random router [default: 0]")
    c.set_defaults(func=cmd_cluster)
