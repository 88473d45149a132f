"""Command-line entry point. Heavy libraries are imported inside the commands that need them."""

from __future__ import annotations

import argparse
import sys

from kvsim.errors import KvsimError

DEFAULT_ALLOCATORS = "max,pow2,oracle,paged:16"


def _add_sim_args(p: argparse.ArgumentParser) -> None:
    from kvsim.options import add_options

    p.add_argument("--trace", required=True, help="JSONL trace (see README: Trace format)")
    add_options(p)
    g = p.add_argument_group("output")
    g.add_argument("--out", help="output folder (default reports/<command>-<trace name>)")
    g.add_argument("--format", choices=["csv", "parquet"], default="csv")
    g.add_argument("--no-plots", action="store_true")
    g.add_argument("--record-batches", metavar="FILE", help="record executed batches for `kvsim kernels replay` (one allocator)")


def build_config(a: argparse.Namespace):
    """The SimConfig of a parsed command line (through the options table)."""
    from kvsim.options import config_from_options, values_from_namespace

    return config_from_options(values_from_namespace(a))


def _simulate_all(a: argparse.Namespace, allocator_names: str, command: str) -> int:
    from pathlib import Path

    from kvsim.allocators import parse_allocator_list
    from kvsim.config import plan_pool
    from kvsim.output.table import print_table
    from kvsim.output.writer import write_results
    from kvsim.runner import simulate
    from kvsim.trace import load_trace

    from kvsim.latency import describe_latency, latency_notes

    cfg = build_config(a)
    allocators = parse_allocator_list(allocator_names, cfg.block_size, cfg.enable_prefix_caching)
    for note in latency_notes(cfg):
        print(note, file=sys.stderr)
    loaded = load_trace(a.trace, skip_invalid=bool(a.skip_invalid))
    for note in loaded.notes():
        print(note, file=sys.stderr)
    pool = plan_pool(cfg.model, cfg.gpu, cfg.memory, cfg.tp)
    recorder = None
    if a.record_batches:
        if len(allocators) != 1:
            from kvsim.errors import ConfigError

            raise ConfigError("--record-batches records one allocator's run; pass a single --allocator(s)")
        from kvsim.replay.record import BatchRecorder

        recorder = BatchRecorder(a.record_batches, cfg, pool)
    from kvsim.output.progress import Progress

    outputs = []
    for name in allocators:
        with Progress(len(loaded.requests), f"{str(name):>12}") as bar:
            outputs.append(simulate(loaded.requests, cfg, name, pool, observer=recorder, progress=bar.update))
    if recorder is not None:
        recorder.close()
    summaries = [o.summary for o in outputs]
    trace_name = Path(a.trace).stem
    context = {
        "command": "`kvsim " + " ".join(sys.argv[1:]) + "`" if sys.argv and sys.argv[0].endswith("kvsim") else "",
        "trace": f"{a.trace} ({len(loaded.requests)} requests)",
        "model": f"{cfg.model.name} (KV {cfg.model.kv_bytes_per_token // 1024} KiB/token), tp={cfg.tp}",
        "gpu": cfg.gpu.name,
        "KV pool": f"{pool.pool_bytes / (1 << 30):.2f} GiB = {pool.pool_tokens:,} token slots ({pool.source})",
        "scheduler": f"{cfg.scheduler.batching} batching, max_model_len {cfg.scheduler.max_seq_len}, max_num_seqs "
                     f"{cfg.scheduler.max_num_seqs}, max_num_batched_tokens {cfg.scheduler.max_num_batched_tokens}, "
                     f"victim policy {cfg.victim_policy}",
        "latency": describe_latency(cfg),
    }
    if cfg.scheduler.preemption_mode == "swap" or cfg.scheduler.partial_preemption:
        context["preemption"] = (f"{cfg.scheduler.preemption_mode}, CPU pool {cfg.swap_space_gb:g} GiB"
                                 + (", partial preemption" if cfg.scheduler.partial_preemption else ""))
    context = {k: v for k, v in context.items() if v}
    print_table(summaries, title=f"kvsim {command}: {trace_name} on {cfg.model.name} / {cfg.gpu.name} "
                              f"(KV pool {pool.pool_bytes / (1 << 30):.1f} GiB, {pool.pool_tokens:,} slots)")
    out = Path(a.out) if a.out else Path("reports") / f"{command}-{trace_name}"
    notes = loaded.notes() + latency_notes(cfg)
    written = write_results(out, outputs, context, notes, plots=not a.no_plots, fmt=a.format)
    print(f"wrote {len(written)} files to {out}/ (summary.md, requests, runs, memory_timeline"
          + (", plots)" if not a.no_plots else ")"))
    for o in outputs:
        s = o.summary
        acct = s["finished"] + s["rejected"] + s["unfinished"]
        if acct != s["requests"]:  # every request must be accounted for
            raise RuntimeError(f"{s['allocator']}: {acct} of {s['requests']} requests accounted for")
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    return _simulate_all(a, a.allocators, "compare")


def cmd_run(a: argparse.Namespace) -> int:
    return _simulate_all(a, a.allocator, "run")


def cmd_trace_generate(a: argparse.Namespace) -> int:
    from kvsim.trace import write_trace
    from kvsim.trace.generate import ArrivalSpec, LengthSpec, generate

    arrivals = ArrivalSpec(a.arrival, a.rate, a.cv)
    lengths = LengthSpec(a.prompt_mean, a.prompt_sigma, a.output_mean, a.output_sigma, a.max_total, a.lengths_csv)
    if a.scenario:
        from kvsim.trace.scenarios import ScenarioSpec, generate_scenario

        spec = ScenarioSpec(a.scenario, a.shared_tokens, a.num_prefixes, a.turns_mean, a.think_s, a.hash_block_tokens)
        reqs = generate_scenario(spec, a.num_requests, arrivals, lengths, seed=a.seed)
    else:
        reqs = generate(a.num_requests, arrivals, lengths, seed=a.seed)
    write_trace(reqs, a.output)
    print(f"wrote {len(reqs)} requests to {a.output}")
    return 0


def cmd_trace_convert(a: argparse.Namespace) -> int:
    from kvsim.trace import write_trace
    from kvsim.trace.generate import ArrivalSpec
    from kvsim.trace.importers import convert

    conv = convert(a.fmt, a.input, a.limit, ArrivalSpec(a.arrival, a.rate, a.cv), a.seed)
    for line in conv.report(a.input):
        print(line)
    if not conv.requests:
        from kvsim.errors import TraceError

        raise TraceError(a.input, 0, None, "no usable requests to write")
    write_trace(conv.requests, a.output)
    print(f"wrote {len(conv.requests)} requests to {a.output}")
    return 0


def cmd_trace_stats(a: argparse.Namespace) -> int:
    from kvsim.trace import load_trace
    from kvsim.trace.stats import trace_stats

    loaded = load_trace(a.file, skip_invalid=a.skip_invalid)
    for note in loaded.notes():
        print(note)
    st = trace_stats(loaded.requests)
    print(f"{a.file}: {st['requests']} requests over {st['span_s']:.1f} s ({st['rate_req_s']:.2f} req/s); "
          f"{st['with_hash_ids']} carry hash_ids")
    if st["with_hash_ids"]:
        print(f"ideal prefix reuse (infinite cache): {100 * st['ideal_prefix_reuse']:.1f}% of prompt tokens")
    print(f"{'tokens':>8} {'mean':>9} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for k in ("prompt", "output", "total"):
        print(f"{k:>8} {st[k + '_mean']:9.1f} {st[k + '_p50']:8.0f} {st[k + '_p90']:8.0f} {st[k + '_p99']:8.0f} {st[k + '_max']:8d}")
    return 0


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        from kvsim.errors import ConfigError

        raise ConfigError(f"expected comma-separated integers, got '{text}'") from None


def _write_rows(rows: list[dict], out: str) -> None:
    import pandas as pd
    from pathlib import Path

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out, index=False)


def cmd_kernels_replay(a: argparse.Namespace) -> int:
    from kvsim.replay.replay import ReplayOptions, replay

    rows = replay(a.record, ReplayOptions(a.device, a.sample, a.check_seqs, a.max_pool_gib, a.seed))
    if not rows:
        print(f"{a.record}: no iterations recorded")
        return 1
    _write_rows(rows, a.output)
    bad = [r for r in rows if not r["ok"]]
    print(f"replayed {len(rows)} iterations of {a.record} on {rows[0]['device']} ({rows[0]['check']});"
          f" {len(rows) - len(bad)} match the reference; timing: {rows[0]['impl']}")
    print(f"{'group':>6} {'kind':>7} {'seqs':>5} {'tokens':>7} {'context':>8} {'time ms':>9} {'max err':>9} ok")
    for r in rows:
        print(f"{r['group']:>6} {r['kind']:>7} {r['num_seqs']:>5} {r['new_tokens']:>7} {r['total_context']:>8}"
              f" {1000 * r['time_s']:9.3f} {r['max_abs_err']:9.2e} {'yes' if r['ok'] else 'NO'}")
    print(f"wrote {a.output}")
    return 0 if not bad else 1


def cmd_kernels_bench(a: argparse.Namespace) -> int:
    from kvsim.hardware import get_gpu
    from kvsim.replay.bench import BenchOptions, bench

    prefill = []
    for part in filter(None, (a.prefill or "").split(",")):
        chunk, _, cached = part.partition(":")
        prefill.append(tuple(_ints(f"{chunk},{cached or 0}")))
    opts = BenchOptions(_ints(a.batch), _ints(a.context), _ints(a.block_size), a.dtype, a.q_heads, a.kv_heads,
                        a.head_dim, get_gpu(a.gpu).hbm_bandwidth, a.device, a.max_pool_gib, a.seed, prefill)
    rows = bench(opts)
    _write_rows(rows, a.output)
    print(f"decode attention on {rows[0]['device']}, timing: {rows[0]['impl']}; peak bandwidth {opts.peak_bandwidth / 1e12:.2f} TB/s ({a.gpu})")
    print(f"{'block':>5} {'batch':>5} {'context':>7} {'time ms':>9} {'GB/s':>8} {'% peak':>7} {'sdpa ms':>9} {'vs sdpa':>8}")
    for r in rows:
        if r["kind"] != "decode":
            continue
        print(f"{r['block_size']:>5} {r['num_seqs']:>5} {r['max_context']:>7} {1000 * r['time_s']:9.3f}"
              f" {r['achieved_bw'] / 1e9:8.1f} {100 * r['frac_of_peak']:7.1f} {1000 * r['sdpa_time_s']:9.3f} {r['ratio_vs_sdpa']:8.2f}")
    print(f"wrote {a.output}")
    return 0


def cmd_calibrate(a: argparse.Namespace) -> int:
    from kvsim.latency.calibration import save_calibration
    from kvsim.latency.fit import fit_calibration

    c = fit_calibration(a.measurements, a.gpu)
    save_calibration(c, a.output)
    print(f"calibration for {c.gpu} (measured on: {c.measured_on})")
    for group in ("gemm", "elementwise", "decode_attention", "prefill_attention", "all_reduce"):
        print(f"  {group:18s} {c.sources.get(group, 'from the shipped calibration / physics defaults')}")
    stats = c.fit.get("dense_in_sample", {}).get("layer", {})
    if stats:
        print("  whole dense layer, predicted/measured (median [p10, p90]) by tokens: " + "; ".join(
            f"{k}: {v['median']:.3f} [{v['p10']:.2f}, {v['p90']:.2f}]" for k, v in stats.items()))
    if c.measured_on != "gpu":
        print("  note: measured in the CPU interpreter: a pipeline check, not GPU times")
    print(f"wrote {a.output}; use it with: kvsim compare --latency {a.output} --gpu {c.gpu} ...")
    return 0


def _shape_rows(path: str) -> list[tuple[int, int, int]]:
    """(batch, context, new_tokens) rows of a shapes CSV, checked: errors name file, line and field."""
    import csv

    from kvsim.errors import TraceError

    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as e:
        raise TraceError(path, 0, None, f"cannot open: {e.strerror}") from None
    rows = []
    with fh:
        reader = csv.DictReader(fh)
        missing = {"batch", "context", "new_tokens"} - set(reader.fieldnames or [])
        if missing:
            raise TraceError(path, 1, None, f"missing column(s) {', '.join(sorted(missing))} (need batch,context,new_tokens)")
        for line, r in enumerate(reader, start=2):
            vals = []
            for f, lo in (("batch", 1), ("context", 0), ("new_tokens", 1)):
                try:
                    v = float(r[f])
                    if not v.is_integer():
                        raise ValueError
                    v = int(v)
                except (TypeError, ValueError):
                    raise TraceError(path, line, f, f"must be an integer, got {r[f]!r}") from None
                if v < lo:
                    raise TraceError(path, line, f, f"must be >= {lo}, got {v}")
                vals.append(v)
            rows.append(tuple(vals))
    if not rows:
        raise TraceError(path, 0, None, "no shapes in file")
    return rows


def cmd_latency(a: argparse.Namespace) -> int:
    from kvsim.latency import StepShape, build_latency, describe_latency, latency_notes

    cfg = build_config(a)
    model = build_latency(cfg)
    for note in latency_notes(cfg):
        print(note, file=sys.stderr)
    parts = ("total_s", "dense_s", "attention_s", "communication_s", "cpu_s")
    if a.shapes:
        if not a.out:
            from kvsim.errors import ConfigError

            raise ConfigError("--shapes needs --out FILE.csv")
        import csv

        rows = _shape_rows(a.shapes)
        with open(a.out + ".tmp", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["batch", "context", "new_tokens", *parts])
            for b, c, n in rows:
                bd = model.breakdown(StepShape.of([(n, c)] * b))
                w.writerow([b, c, n, *(repr(bd[k]) for k in parts)])
        import os

        os.replace(a.out + ".tmp", a.out)
        print(f"wrote {len(rows)} rows to {a.out} ({describe_latency(cfg)})")
        return 0
    if a.batch is None or a.context is None:
        from kvsim.errors import ConfigError

        raise ConfigError("give --batch B --context C [--new-tokens N], or --shapes FILE.csv --out FILE.csv")
    for flag, v, lo in (("--batch", a.batch, 1), ("--context", a.context, 0), ("--new-tokens", a.new_tokens, 1)):
        if v < lo:
            from kvsim.errors import ConfigError

            raise ConfigError(f"{flag}: must be >= {lo}, got {v}")
    bd = model.breakdown(StepShape.of([(a.new_tokens, a.context)] * a.batch))
    kind = "decode" if a.new_tokens == 1 else "prefill"
    print(f"{cfg.model.name} on {cfg.gpu.name}, tensor parallel {cfg.tp}: {describe_latency(cfg)}")
    print(f"one {kind} iteration: {a.batch} sequence(s) x {a.new_tokens} new token(s) after {a.context} cached")
    total = bd["total_s"]
    for k in parts:
        label = k[:-2].replace("_", " ")
        share = f"{100 * bd[k] / total:5.1f}%" if total > 0 else ""
        print(f"  {label:14s} {1000 * bd[k]:10.3f} ms  {share}")
    return 0


def cmd_plan(a: argparse.Namespace) -> int:
    from pathlib import Path

    import pandas as pd

    from kvsim.planning.parallel import run_jobs
    from kvsim.planning.plan import add_costs, make_jobs, parse_gpus, run_job
    from kvsim.planning.slo import parse_slos
    from kvsim.planning.sweep import validate_points
    from kvsim.report.builder import build_report

    slos = parse_slos(a.slo)
    if a.target_rate is not None and a.target_rate <= 0:
        raise KvsimError("--target-rate must be > 0")
    from kvsim.allocators import parse_allocator_list
    from kvsim.options import DEFAULT_GPU, values_from_namespace

    cfg = build_config(a)  # validate the shared options once
    base = {"trace": a.trace, **values_from_namespace(a)}
    gpus = parse_gpus(a.gpus) if a.gpus else [(a.gpu or DEFAULT_GPU, None)]
    allocators = parse_allocator_list(a.allocators, cfg.block_size, cfg.enable_prefix_caching)
    jobs = make_jobs(base, gpus, allocators, slos, a.study, a.tol, a.max_steps, a.kernel_bench)
    validate_points([j.point for j in jobs])
    results = run_jobs(run_job, jobs, a.workers, a.backend, a.address, label="plan")
    rows = [r for r, _ in results]
    points = [p for _, pts in results for p in pts]
    add_costs(rows, a.target_rate)
    cap = pd.DataFrame(rows)
    pts = pd.DataFrame(points)
    out = Path(a.out) if a.out else Path("reports") / f"plan-{Path(a.trace).stem}"
    out.mkdir(parents=True, exist_ok=True)
    cap.to_csv(out / "plan.csv", index=False)
    pts.to_csv(out / "plan_points.csv", index=False)
    _print_plan(cap, slos, a.target_rate)
    if not a.no_report:
        notes = [f"trace {a.trace}, model {cfg.model.name}; capacity = highest rate (scaling the trace's inter-arrival"
                 f" times) meeting every SLO with a stable queue, bisection to {100 * a.tol:g}% (at most {a.max_steps} simulations)"]
        if a.target_rate:
            notes.append(f"replicas and cost for a target of {a.target_rate:g} req/s")
        notes.append("command: kvsim " + " ".join(sys.argv[1:]))
        build_report(out, cap, pts, slos, f"Capacity plan: {Path(a.trace).name}", notes)
    print(f"wrote {out}/plan.csv, plan_points.csv" + ("" if a.no_report else ", report.html, report.md"))
    return 0


def _print_plan(cap, slos, target) -> None:
    from kvsim.output.table import format_cell

    print(f"SLOs: {', '.join(str(s) for s in slos)}" + (f"; target {target:g} req/s" if target else ""))
    hdr = f"{'configuration':<34} {'max req/s':>9} {'steps':>5} {'replicas':>8} {'$/M out tok':>11} {'TTFT p99':>8} {'TPOT p99':>8}"
    print(hdr)
    for _, r in cap.iterrows():
        if r.get("meets_slo"):
            print(f"{r['config']:<34} {r['max_rate_req_s']:9.3f} {int(r['search_steps']):5d} {format_cell(r.get('replicas'), '{:d}'):>8}"
                  f" {format_cell(r.get('cost_per_m_output_tokens'), '{:.3f}'):>11} {r['at_max_ttft_p99_s']:8.3f} {r['at_max_tpot_p99_s']:8.4f}")
        else:
            print(f"{r['config']:<34} {'never':>9} {int(r['search_steps']):5d}   {r['reason']}")


def cmd_sweep(a: argparse.Namespace) -> int:
    from pathlib import Path

    from kvsim.planning.sweep import load_grid, run_sweep

    points = load_grid(a.grid)
    out = a.out or str(Path("reports") / f"sweep-{Path(a.grid).stem}.csv")
    table, computed, reused = run_sweep(points, out, a.workers, a.backend, a.address)
    print(f"{len(points)} points: {computed} simulated, {reused} reused from an earlier run; wrote {out}")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    import pandas as pd

    from kvsim.planning.slo import parse_slos
    from kvsim.planning.sweep import read_table
    from kvsim.report.builder import build_report

    caps, pts = [], []
    for path in a.results:
        df = read_table(path)
        (caps if "max_rate_req_s" in df.columns else pts).append(df)
    cap = pd.concat(caps, ignore_index=True) if caps else None
    points = pd.concat(pts, ignore_index=True) if pts else None
    slos = parse_slos(a.slo) if a.slo else []
    files = build_report(a.output, cap, points, slos, a.title, [f"from {', '.join(a.results)}"])
    print(f"wrote {files['html']} and {files['md']}")
    return 0


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvsim", description="KV-cache memory manager simulator for LLM serving")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compare", help="run several allocators on one trace and compare them")
    _add_sim_args(c)
    c.add_argument("--allocators", default=DEFAULT_ALLOCATORS, help=f"comma-separated (default {DEFAULT_ALLOCATORS})")
    c.set_defaults(func=cmd_compare)

    r = sub.add_parser("run", help="simulate one configuration")
    _add_sim_args(r)
    r.add_argument("--allocator", default="paged", help="allocator name (default paged, blocks of --block-size)")
    r.set_defaults(func=cmd_run)

    t = sub.add_parser("trace", help="make, inspect and convert traces")
    tsub = t.add_subparsers(dest="trace_command", required=True)
    g = tsub.add_parser("generate", help="synthetic seeded trace")
    g.add_argument("-o", "--output", required=True)
    g.add_argument("-n", "--num-requests", type=int, default=1000)
    g.add_argument("--rate", type=float, default=1.0, help="requests per second")
    g.add_argument("--arrival", choices=["poisson", "gamma"], default="poisson")
    g.add_argument("--cv", type=float, default=1.0, help="gamma: coefficient of variation of gaps (>1 bursty)")
    g.add_argument("--prompt-mean", type=float, default=300.0)
    g.add_argument("--prompt-sigma", type=float, default=1.0)
    g.add_argument("--output-mean", type=float, default=250.0)
    g.add_argument("--output-sigma", type=float, default=1.0)
    g.add_argument("--max-total", type=int, default=4096, help="cap on prompt+output tokens")
    g.add_argument("--lengths-csv", help="sample (prompt, output) pairs from this CSV instead of lognormals")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--scenario", choices=["system-prompt", "few-shot", "multi-turn", "doc-summary"],
                   help="a prefix-sharing workload with hash_ids (see README)")
    g.add_argument("--shared-tokens", type=int, default=1024, help="scenario: shared prefix length")
    g.add_argument("--num-prefixes", type=int, default=4, help="few-shot: distinct example blocks")
    g.add_argument("--turns-mean", type=float, default=4.0, help="multi-turn: mean turns per conversation")
    g.add_argument("--think-s", type=float, default=20.0, help="multi-turn: mean seconds between turns")
    g.add_argument("--hash-block-tokens", type=int, default=16, help="scenario: tokens per hash id")
    g.set_defaults(func=cmd_trace_generate)
    cv = tsub.add_parser("convert", help="convert a public trace to kvsim JSONL")
    cv.add_argument("--from", dest="fmt", required=True, choices=["mooncake", "azure", "burstgpt", "vidur", "lengths-csv"])
    cv.add_argument("input")
    cv.add_argument("-o", "--output", required=True)
    cv.add_argument("--limit", type=int, help="convert only the first N rows")
    cv.add_argument("--rate", type=float, default=1.0, help="lengths-csv: arrival rate, requests/s")
    cv.add_argument("--arrival", choices=["poisson", "gamma"], default="poisson")
    cv.add_argument("--cv", type=float, default=1.0)
    cv.add_argument("--seed", type=int, default=0)
    cv.set_defaults(func=cmd_trace_convert)
    s = tsub.add_parser("stats", help="count, span, rate and length percentiles")
    s.add_argument("file")
    s.add_argument("--skip-invalid", action="store_true")
    s.set_defaults(func=cmd_trace_stats)

    k = sub.add_parser("kernels", help="run, check and time the Triton kernels")
    ksub = k.add_subparsers(dest="kernels_command", required=True)
    rp = ksub.add_parser("replay", help="replay a recorded run's batches (see --record-batches) on the kernels")
    rp.add_argument("record")
    rp.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda if present")
    rp.add_argument("--sample", type=int, default=20, help="iterations to replay, evenly spaced")
    rp.add_argument("--check-seqs", type=int, default=4, help="cpu: sequences per iteration checked in the interpreter")
    rp.add_argument("--max-pool-gib", type=float, default=8.0)
    rp.add_argument("--seed", type=int, default=0)
    rp.add_argument("-o", "--output", default="reports/kernels/replay.csv")
    rp.set_defaults(func=cmd_kernels_replay)
    bn = ksub.add_parser("bench", help="decode attention: batch x context x block size sweep")
    bn.add_argument("--device", choices=["cuda", "cpu"])
    bn.add_argument("--batch", default="1,8,64")
    bn.add_argument("--context", default="512,4096")
    bn.add_argument("--prefill", help="prefill rows too: CHUNK:CACHED pairs, e.g. 512:0,512:2048,2048:0")
    bn.add_argument("--block-size", default="16")
    bn.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    bn.add_argument("--q-heads", type=int, default=32)
    bn.add_argument("--kv-heads", type=int, default=8)
    bn.add_argument("--head-dim", type=int, default=128)
    bn.add_argument("--gpu", default="h200-141gb", help="GPU preset whose peak bandwidth the results are compared to")
    bn.add_argument("--max-pool-gib", type=float, default=40.0)
    bn.add_argument("--seed", type=int, default=0)
    bn.add_argument("-o", "--output", default="reports/kernels/bench.csv")
    bn.set_defaults(func=cmd_kernels_bench)

    pl = sub.add_parser("plan", help="highest SLO-meeting rate per configuration, replicas and cost")
    _add_sim_args(pl)
    pl.add_argument("--gpus", help="GPU types with optional $ per GPU-hour, e.g. h100-80gb:4.5,a100-80gb:2 (default --gpu)")
    pl.add_argument("--allocators", default="paged:16")
    pl.add_argument("--slo", required=True, help="e.g. ttft_p99=2s,tpot_p99=100ms (ttft/tpot/e2e at p50/p90/p99)")
    pl.add_argument("--target-rate", type=float, help="requests/s to provision for (replicas, cost)")
    pl.add_argument("--study", choices=["block-size", "gpu-mem-util"], help="built-in plan variants")
    pl.add_argument("--kernel-bench", help="block-size study: a `kvsim kernels bench` CSV with block sizes")
    pl.add_argument("--tol", type=float, default=0.02, help="bisection stops when the bracket is within this fraction")
    pl.add_argument("--max-steps", type=int, default=20, help="most simulations per configuration")
    pl.add_argument("--workers", type=int, default=1)
    pl.add_argument("--backend", choices=["local", "ray"], default="local")
    pl.add_argument("--address", help="Ray cluster address (default: start a local instance)")
    pl.add_argument("--no-report", action="store_true")
    pl.set_defaults(func=cmd_plan)

    sw = sub.add_parser("sweep", help="run a grid of simulations (local processes or Ray), resumable")
    sw.add_argument("grid", help="YAML file with base / grid / points")
    sw.add_argument("--out", help="results table (.csv or .parquet; default reports/sweep-<grid>.csv)")
    sw.add_argument("--workers", type=int, default=1)
    sw.add_argument("--backend", choices=["local", "ray"], default="local")
    sw.add_argument("--address", help="Ray cluster address (default: start a local instance)")
    sw.set_defaults(func=cmd_sweep)

    rep = sub.add_parser("report", help="HTML + Markdown report from plan or sweep results")
    rep.add_argument("results", nargs="+", help="plan.csv / plan_points.csv / sweep tables")
    rep.add_argument("-o", "--output", required=True, help="output folder")
    rep.add_argument("--slo", help="SLO lines to draw, e.g. ttft_p99=2s,tpot_p99=100ms")
    rep.add_argument("--title", default="kvsim report")
    rep.set_defaults(func=cmd_report)

    cal = sub.add_parser("calibrate", help="fit a latency calibration from measured GPU profiles")
    cal.add_argument("measurements", nargs="+", help="Vidur-format mlp.csv / attention.csv / all_reduce.csv / "
                     "send_recv.csv, and `kvsim kernels bench` / `replay` CSVs")
    cal.add_argument("--gpu", help="GPU preset the measurements are from (default: named in the Vidur paths)")
    cal.add_argument("-o", "--output", required=True, help="calibration JSON to write")
    cal.set_defaults(func=cmd_calibrate)

    lat = sub.add_parser("latency", help="predicted iteration time of a model / GPU / tensor parallelism, by part")
    from kvsim.options import add_options

    add_options(lat, ("model and hardware", "latency"))
    g = lat.add_argument_group("iteration shape")
    g.add_argument("--batch", type=int, help="sequences in the iteration")
    g.add_argument("--context", type=int, help="cached tokens of each sequence")
    g.add_argument("--new-tokens", type=int, default=1, help="tokens each sequence computes (1 = decode) [default: 1]")
    g.add_argument("--shapes", help="CSV with columns batch,context,new_tokens (one iteration per row)")
    g.add_argument("--out", help="with --shapes: CSV of the input columns + total_s, dense_s, attention_s, "
                   "communication_s, cpu_s (seconds)")
    lat.set_defaults(func=cmd_latency)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KvsimError as e:
        print(f"kvsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
