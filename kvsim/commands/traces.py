"""`kvsim trace generate | convert | stats`: make, import and inspect traces."""

from __future__ import annotations

import argparse

from kvsim.commands.args import non_negative, number, positive, positive_int
from kvsim.validation import ARRIVAL_CV, LOGNORMAL_SIGMA, RATE, SEED, Number

MAX_GENERATED = (
    10_000_000  # requests one generate writes: kvsim's largest runs are 1M; beyond this, memory runs out first
)

SCENARIOS = ["system-prompt", "few-shot", "multi-turn", "doc-summary"]


# the synthetic generator's own flags and their defaults (None in the parser, so that a given one is seen)
GENERATE_DEFAULTS = {
    "num_requests": 1000,
    "rate": 1.0,
    "arrival": "poisson",
    "cv": 1.0,
    "prompt_mean": 300.0,
    "prompt_sigma": 1.0,
    "output_mean": 250.0,
    "output_sigma": 1.0,
    "max_total": None,
    "seed": 0,
}


def cmd_generate(a: argparse.Namespace) -> int:
    from kvsim.files import check_output_file
    from kvsim.trace import write_trace
    from kvsim.trace.generate import ArrivalSpec, LengthSpec, generate

    check_output_file(a.output, "-o", [a.lengths_csv, a.rate_profile])
    from kvsim.options import values_from_namespace

    if values_from_namespace(a):  # a benchmark client's flag (the options table's "load" group): its workload
        return _generate_bench(a)
    if a.rate_profile is not None:
        from kvsim.errors import ConfigError

        for flag, given in (("--rate", a.rate), ("--scenario", a.scenario), ("--turns-per-s", a.turns_per_s)):
            if given is not None:
                raise ConfigError(f"{flag} and --rate-profile: the profile sets the rate; give one")
    for k, v in GENERATE_DEFAULTS.items():
        if getattr(a, k) is None and not (k == "num_requests" and a.rate_profile is not None):
            setattr(a, k, v)
    from kvsim.trace.generate import NO_CAP

    if a.rate_profile is None and a.rate_scale is not None:
        from kvsim.errors import ConfigError

        raise ConfigError("--rate-scale scales a --rate-profile; give one (or use --rate)")
    arrivals = ArrivalSpec(a.arrival, a.rate, a.cv)
    lengths = LengthSpec(
        a.prompt_mean, a.prompt_sigma, a.output_mean, a.output_sigma, a.max_total or NO_CAP, a.lengths_csv
    )
    notes: list[str] = []
    if a.turns_per_s is not None and a.scenario != "multi-turn":
        from kvsim.errors import ConfigError

        raise ConfigError("--turns-per-s: multi-turn conversations only (--scenario multi-turn)")
    if a.rate_profile:
        reqs = _generate_profile(a, lengths, notes)
    elif a.scenario:
        from kvsim.trace.scenarios import ScenarioSpec, generate_scenario

        spec = ScenarioSpec(
            a.scenario, a.shared_tokens, a.num_prefixes, a.turns_mean, a.think_s, a.hash_block_tokens, a.turns_per_s
        )
        reqs = generate_scenario(spec, a.num_requests, arrivals, lengths, seed=a.seed, notes=notes)
    else:
        reqs = generate(a.num_requests, arrivals, lengths, seed=a.seed, notes=notes)
    import sys as _sys

    for note in notes:
        print(note, file=_sys.stderr)
    if a.lengths_csv:
        import sys

        from kvsim.trace.csv_read import read_length_pairs

        pairs, rows, skipped = read_length_pairs(a.lengths_csv)  # cached: the file is not read again
        print(
            f"lengths from {a.lengths_csv}: {len(pairs)} of {rows} rows"
            + "".join(f"; skipped {n}: {why}" for why, n in skipped.most_common()),
            file=sys.stderr,
        )
    write_trace(reqs, a.output)
    print(f"wrote {len(reqs)} requests to {a.output}")
    return 0


def _generate_profile(a: argparse.Namespace, lengths, notes: list[str]) -> list:
    """Requests under a rate that changes by window (--rate-profile), -n of them at most."""
    import sys

    import numpy as np

    from kvsim.trace.generate import requests_at
    from kvsim.trace.rate_profile import profile_arrivals, read_rate_profile

    profile = read_rate_profile(a.rate_profile)
    scale = 1.0 if a.rate_scale is None else a.rate_scale
    rng = np.random.default_rng(a.seed)
    cv = a.cv if a.arrival == "gamma" else 1.0
    t = profile_arrivals(profile, rng, scale, cv, a.num_requests)
    if len(t) == 0:
        from kvsim.errors import ConfigError

        raise ConfigError(f"{a.rate_profile}: no request arrives under it (x {scale:g}); raise --rate-scale")
    peak = float(profile.rates.max()) * scale
    print(
        f"{a.rate_profile}: {len(profile.starts):,} windows over {profile.duration_s / 3600:.2f} h, rates x {scale:g}: "
        f"mean {profile.expected_requests(scale) / profile.duration_s:.3g}, peak {peak:.3g} requests/s; "
        f"{len(t):,} requests" + (f" (the first {a.num_requests:,})" if a.num_requests is not None else ""),
        file=sys.stderr,
    )
    return requests_at(t, lengths, rng, notes)


def _generate_bench(a: argparse.Namespace) -> int:
    """`kvsim trace generate --bench ...`: a benchmark client's workload (kvsim/trace/bench_load.py) as JSONL."""
    import math
    import sys
    from dataclasses import replace

    from kvsim.errors import ConfigError
    from kvsim.options import normalize, values_from_namespace
    from kvsim.trace import write_trace
    from kvsim.trace.bench_load import from_options

    own = [
        f
        for k, f in (
            ("scenario", "--scenario"),
            ("lengths_csv", "--lengths-csv"),
            ("rate", "--rate"),
            ("rate_profile", "--rate-profile"),
            ("arrival", "--arrival"),
            ("cv", "--cv"),
            ("prompt_mean", "--prompt-mean"),
            ("prompt_sigma", "--prompt-sigma"),
            ("output_mean", "--output-mean"),
            ("output_sigma", "--output-sigma"),
            ("max_total", "--max-total"),
        )
        if getattr(a, k, None) is not None
    ]
    if own:
        raise ConfigError(
            f"{own[0]}: the lognormal generator's flag; a --bench workload takes --random-input-len, "
            "--random-output-len, --random-range-ratio, --request-rate, --burstiness, ..."
        )
    values = normalize(values_from_namespace(a))
    if a.num_requests is not None:
        if "num_prompts" in values:
            raise ConfigError("-n/--num-requests and --num-prompts: give one")
        values["num_prompts"] = a.num_requests
    if a.seed is not None:
        values["random_seed"] = a.seed
    bench = from_options(values)
    if bench.warmup:  # a trace has no warm-up phase: its requests are the measured ones
        print(
            f"note: {bench.name}: the client's {bench.warmup} warm-up requests are not written (a trace has no "
            "warm-up phase; kvsim run --warmup-request-count simulates one)",
            file=sys.stderr,
        )
        bench = replace(bench, warmup=0)
    reqs = bench.requests()
    for note in bench.notes():
        print(note, file=sys.stderr)
    if bench.max_concurrency is not None:
        print(
            f"note: a trace holds send times, not the client limit: simulate it with --max-concurrency "
            f"{bench.max_concurrency}"
            + (" (and no --request-rate: the times are the client's)" if bench.request_rate != math.inf else ""),
            file=sys.stderr,
        )
    write_trace(reqs, a.output)
    print(f"wrote {len(reqs)} requests to {a.output} ({bench.describe()})")
    return 0


def cmd_convert(a: argparse.Namespace) -> int:
    from kvsim.errors import TraceError
    from kvsim.files import check_output_file
    from kvsim.trace import write_trace
    from kvsim.trace.generate import ArrivalSpec
    from kvsim.trace.importers import CSV_FORMATS, convert, stream_convert

    check_output_file(a.output, "-o", [a.input])
    if a.fmt in CSV_FORMATS:  # timestamped CSVs of any length: streamed, memory stays flat
        conv = stream_convert(a.fmt, a.input, a.output, a.limit)
        for line in conv.report(a.input):
            print(line)
    else:
        conv = convert(a.fmt, a.input, a.limit, ArrivalSpec(a.arrival, a.rate, a.cv), a.seed)
        for line in conv.report(a.input):
            print(line)
        if not conv.requests:
            raise TraceError(a.input, 0, None, "no usable requests to write")
        write_trace(conv.requests, a.output)
    print(f"wrote {conv.count} requests to {a.output}")
    return 0


def cmd_stats(a: argparse.Namespace) -> int:
    from kvsim.trace import load_trace
    from kvsim.trace.stats import trace_stats

    loaded = load_trace(a.file, skip_invalid=a.skip_invalid)
    for note in loaded.notes():
        print(note)
    st = trace_stats(loaded.requests)
    print(
        f"{a.file}: {st['requests']} requests over {st['span_s']:.1f} s ({st['rate_req_s']:.2f} req/s); "
        f"{st['with_hash_ids']} carry hash_ids"
    )
    if st["with_hash_ids"]:
        print(f"ideal prefix reuse (infinite cache): {100 * st['ideal_prefix_reuse']:.1f}% of prompt tokens")
    print(f"{'tokens':>8} {'mean':>9} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for k in ("prompt", "output", "total"):
        print(
            f"{k:>8} {st[k + '_mean']:9.1f} {st[k + '_p50']:8.0f} {st[k + '_p90']:8.0f} {st[k + '_p99']:8.0f} "
            f"{st[k + '_max']:8d}"
        )
    return 0


def register(sub) -> None:
    t = sub.add_parser("trace", help="make, convert and inspect traces")
    tsub = t.add_subparsers(dest="trace_command", required=True, metavar="{generate,convert,stats}")
    g = tsub.add_parser("generate", help="a seeded synthetic trace (or a prefix-sharing scenario)")
    g.add_argument("-o", "--output", required=True, help="JSONL file to write")
    g.add_argument(
        "-n",
        "--num-requests",
        type=number(int, Number(integer=True, min=1, max=MAX_GENERATED)),
        default=None,
        help=f"requests (at most {MAX_GENERATED:,}) [default: 1000]",
    )
    g.add_argument(
        "--rate",
        type=number(float, RATE),
        default=None,
        help="mean arrival rate, requests/s (multi-turn: conversations started per second, each of "
        "--turns-mean turns; see --turns-per-s) [default: 1]",
    )
    g.add_argument(
        "--turns-per-s",
        type=number(float, RATE),
        default=None,
        help="multi-turn: requests (turns) per second over the trace: conversations start at this / "
        "--turns-mean per second and the trace keeps the first -n turns in time order",
    )
    g.add_argument(
        "--rate-profile",
        metavar="CSV",
        help="a rate that changes over time instead of --rate: a CSV of windows, columns start_s (window start, "
        "seconds) and rate (requests/s), e.g. traces/servegen_m_large_day_rates.csv (a day of a production "
        "service); arrivals are Poisson (or gamma, --arrival gamma --cv) at each window's rate, all of them "
        "unless -n",
    )
    g.add_argument(
        "--rate-scale",
        type=number(float, Number(min=0, min_open=True, max=1e9)),
        default=None,
        help="with --rate-profile: multiply its rates by this (size the day to your fleet) [default: 1]",
    )
    g.add_argument("--arrival", choices=["poisson", "gamma"], default=None, help="arrival process [default: poisson]")
    g.add_argument(
        "--cv",
        type=number(float, ARRIVAL_CV),
        default=None,
        help="gamma arrivals: coefficient of variation of the gaps (> 1 is burstier than Poisson) [default: 1]",
    )
    g.add_argument("--prompt-mean", type=positive, default=None, help="lognormal prompt mean, tokens [default: 300]")
    g.add_argument(
        "--prompt-sigma",
        type=number(float, LOGNORMAL_SIGMA),
        default=None,
        help="lognormal prompt shape (<= 10) [default: 1]",
    )
    g.add_argument("--output-mean", type=positive, default=None, help="lognormal output mean, tokens [default: 250]")
    g.add_argument(
        "--output-sigma",
        type=number(float, LOGNORMAL_SIGMA),
        default=None,
        help="lognormal output shape (<= 10) [default: 1]",
    )
    g.add_argument(
        "--max-total",
        type=number(int, Number(integer=True, min=2)),
        default=None,
        help="cap on prompt + output tokens (>= 2; what it shortens is said) [default: none]",
    )
    g.add_argument(
        "--lengths-csv",
        help="sample (prompt, output) pairs from this CSV instead of lognormals "
        "(columns: prompt_tokens,output_tokens or Vidur/Azure/Mooncake/BurstGPT names)",
    )
    g.add_argument(
        "--seed",
        type=number(int, SEED),
        default=None,
        help="random seed (>= 0; --bench: the same as --random-seed) [default: 0]",
    )
    g.add_argument("--scenario", choices=SCENARIOS, help="a prefix-sharing workload with hash_ids (docs/traces.md)")
    g.add_argument(
        "--shared-tokens", type=positive_int, default=1024, help="scenario: shared prefix, tokens [default: 1024]"
    )
    g.add_argument(
        "--num-prefixes", type=positive_int, default=4, help="few-shot: distinct example blocks [default: 4]"
    )
    g.add_argument(
        "--turns-mean", type=positive, default=4.0, help="multi-turn: mean turns per conversation [default: 4]"
    )
    g.add_argument(
        "--think-s", type=non_negative, default=20.0, help="multi-turn: mean seconds between turns [default: 20]"
    )
    g.add_argument(
        "--hash-block-tokens", type=positive_int, default=16, help="scenario: tokens per hash id [default: 16]"
    )
    from kvsim.options import add_options
    from kvsim.trace.bench_load import DATASET_KEYS

    # a benchmark client's workload (kvsim/trace/bench_load.py): the same flags as `kvsim run` takes
    add_options(g, (), keys=tuple(k for k in DATASET_KEYS if k != "random_seed") + ("max_concurrency", "request_rate"))
    g.set_defaults(func=cmd_generate)
    cv = tsub.add_parser("convert", help="convert a public trace to kvsim JSONL")
    cv.add_argument(
        "--from",
        dest="fmt",
        required=True,
        choices=["mooncake", "azure", "burstgpt", "vidur", "lengths-csv"],
        help="source format",
    )
    cv.add_argument("input", help="file to convert")
    cv.add_argument("-o", "--output", required=True, help="JSONL file to write")
    cv.add_argument("--limit", type=positive_int, help="convert only the first N rows")
    cv.add_argument(
        "--rate", type=number(float, RATE), default=1.0, help="lengths-csv: arrival rate, requests/s [default: 1]"
    )
    cv.add_argument("--arrival", choices=["poisson", "gamma"], default="poisson", help="lengths-csv [default: poisson]")
    cv.add_argument(
        "--cv",
        type=number(float, ARRIVAL_CV),
        default=1.0,
        help="lengths-csv, gamma: gaps' coefficient of variation [default: 1]",
    )
    cv.add_argument("--seed", type=number(int, SEED), default=0, help="lengths-csv: random seed (>= 0) [default: 0]")
    cv.set_defaults(func=cmd_convert)
    s = tsub.add_parser("stats", help="count, span, rate, length percentiles and ideal prefix reuse")
    s.add_argument("file", help="kvsim JSONL trace")
    s.add_argument("--skip-invalid", action="store_true", help="skip bad lines (and say how many) instead of stopping")
    s.set_defaults(func=cmd_stats)
