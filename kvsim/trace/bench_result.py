"""A measured benchmark run: the result file of `vllm bench serve --save-result` (also the older
`benchmarks/benchmark_serving.py`), as requests kvsim can replay and the latencies the client measured.

Fields read: ``input_lens``, ``output_lens``, ``ttfts`` (seconds), ``itls`` (seconds between streamed
chunks, per request), ``errors`` (a failed request has a message; it is skipped and counted),
``request_rate`` (``"inf"`` or requests/s), ``max_concurrency`` (absent or null: unlimited),
``duration`` (seconds), ``model_id``, ``date`` (as written, e.g. "20240812-101530"), and where the file has them
(vLLM 0.27 and later with ``--save-detailed``) ``start_times`` (when the client sent each request, after any
--max-concurrency wait) and ``queue_times`` (that wait): the requests then arrive when the benchmark scheduled
them (send time - wait; :attr:`MeasuredRun.timed`). Older files record no times: at a finite rate the replay
draws its own Poisson arrivals at that rate. The streamed chunks per request show how many tokens the server delivered at a time
(:attr:`MeasuredRun.tokens_per_chunk`: about N under vLLM V0's multi-step scheduling of N steps).

A file saved without ``--save-detailed`` holds only the summary: kvsim/trace/result_file.py reads it as a
:class:`MeasuredSummary` (its load: request count, token totals, rate, burstiness, clients; and the client's
mean / median / p99 TTFT, TPOT, ITL, E2E and output tokens/s), which `kvsim validate` replays as the random
workload of those numbers and compares figure by figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvsim.errors import ConfigError
from kvsim.trace.request import Request
from kvsim.trace.jsonl import MAX_TOKENS  # one request's bound, as a trace line's
from kvsim.validation import POSITIVE, POSITIVE_INT, RATE, is_finite, shown


@dataclass(frozen=True)
class MeasuredRun:
    path: str
    requests: list[Request]  # the successful requests, in file order, all arriving at 0
    ttft_s: list[float]  # measured per request (NaN: it streamed no text, so the client timed nothing)
    e2e_s: list[float]  # TTFT + the sum of its inter-token latencies (NaN likewise)
    itl_s: list[float]  # every inter-token latency of every request
    request_rate: float  # requests/s, inf: all at once
    max_concurrency: int | None
    duration_s: float | None
    model_id: str
    skipped: int  # failed requests (an error message)
    date: str = ""  # when the benchmark ran, as the file writes it
    # output tokens after the first per streamed chunk (over requests with more than one token): 1 when every
    # token was streamed alone; about N when vLLM V0's multi-step scheduling (N steps) delivered them
    tokens_per_chunk: float = 1.0
    # successful requests that streamed no text (output 0: the model ended at once): their prompt was computed
    # and one token sampled, so they are replayed as one-token requests, but nothing of theirs was timed
    silent: int = 0
    timed: bool = False  # the requests arrive at the file's scheduled send times (start_times - queue_times)
    warmups: int = 0  # the client's warm-up requests the file records, left out (AIPerf's per-request records)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.requests)


PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls")  # what --save-detailed adds to a result file


def _number(v, where: str, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_finite(v) or v < lo or v > hi:
        bound = f" and <= {hi:,.0f}" if hi != math.inf else ""
        raise ConfigError(f"{where}: must be a finite number >= {lo:g}{bound}, got {shown(v)}")
    return float(v)


def _summary_load_hint(d: dict) -> str:
    """For a summary-only result: the `kvsim run` flags of its load (its prompts, mean lengths from its token
    totals, clients, rate), to compare the medians by hand; "" where the summary does not say them."""
    done, tin, tout = (d.get(k, 0) for k in ("completed", "total_input_tokens", "total_output_tokens"))
    if any(POSITIVE_INT(v) for v in (done, tin, tout)):
        return ""
    flags = [f"--bench vllm-random --num-prompts {done}"]
    flags.append(f"--random-input-len {round(tin / done)} --random-output-len {round(tout / done)}")
    conc, rate, burst = d.get("max_concurrency"), d.get("request_rate"), d.get("burstiness")
    if not POSITIVE_INT(conc):
        flags.append(f"--max-concurrency {conc}")
    if not RATE(rate):  # a finite rate ("inf", every request at once, is the flags' default)
        flags.append(f"--request-rate {rate:g}")
        if not POSITIVE(burst) and burst != 1:
            flags.append(f"--burstiness {burst:g}")
    varied = tin % done or tout % done
    return f"; to replay its summary's load and compare the medians yourself: `kvsim run ... {' '.join(flags)}`" + (
        " (its prompts' and outputs' mean lengths: they varied, give --random-range-ratio)" if varied else ""
    )


def _rate(d: dict, path: str) -> float:
    """The file's ``request_rate``: requests/s, inf for "inf" (every request at once) or none given."""
    rate = d.get("request_rate", "inf")
    if isinstance(rate, str) and rate.strip().lower() in ("inf", "infinity"):
        return math.inf
    rate = _number(rate, f"{path}: field 'request_rate'")
    from kvsim.validation import request_rate

    problem = request_rate(rate) if rate > 0 else "must be > 0"
    if problem:  # the file's value, not a flag the user gave
        raise ConfigError(f"{path}: field 'request_rate' {problem}")
    return rate


def _concurrency(d: dict, path: str) -> int | None:
    """The file's ``max_concurrency`` (None: absent or null, no limit)."""
    conc = d.get("max_concurrency")
    if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int) or conc < 1):
        raise ConfigError(f"{path}: field 'max_concurrency' must be a positive integer or null, got {conc!r}")
    return conc


# a summary's figures: the result file's field (milliseconds; output tokens/s) -> kvsim's name (seconds; tokens/s)
SUMMARY_FIELDS = {
    "mean_ttft_ms": "ttft_mean",
    "median_ttft_ms": "ttft_p50",
    "p99_ttft_ms": "ttft_p99",
    "mean_tpot_ms": "tpot_mean",
    "median_tpot_ms": "tpot_p50",
    "p99_tpot_ms": "tpot_p99",
    "median_itl_ms": "itl_p50",
    "p99_itl_ms": "itl_p99",
    "mean_e2el_ms": "e2e_mean",
    "median_e2el_ms": "e2e_p50",
    "p99_e2el_ms": "e2e_p99",
    "output_throughput": "output_tok_s",
}
LOAD_FIELDS = ("completed", "total_input_tokens", "total_output_tokens")  # what a summary replay needs


@dataclass(frozen=True)
class MeasuredSummary:
    """A summary-only result file (`vllm bench serve --save-result` without ``--save-detailed``): the load its
    client sent and the figures it measured."""

    path: str
    completed: int  # requests that succeeded
    failed: int
    input_tokens: int  # over the successful requests
    output_tokens: int
    request_rate: float  # requests/s, inf: all at once
    burstiness: float
    max_concurrency: int | None
    measured: dict[str, float]  # SUMMARY_FIELDS' names: seconds, output tokens/s
    model_id: str = ""
    date: str = ""
    duration_s: float | None = None
    tokens_per_chunk: float = 1.0  # not in a summary: as if every token was streamed alone
    harness: str = "vllm-random"  # whose client sent the load (--bench): vllm-random, genai-perf, aiperf
    timed: bool = False  # (a summary keeps no send times: its load is replayed from its numbers)
    load: dict = field(default_factory=dict)  # more kvsim options of the load the file records (spreads, warm-ups)

    @property
    def varied(self) -> bool:
        """Whether the lengths differed between requests (a token total is not a multiple of the count)."""
        return bool(self.input_tokens % self.completed or self.output_tokens % self.completed)

    def load_values(self, given: dict) -> dict:
        """kvsim options of the workload with this summary's numbers (``given``: the user's options, whose --bench,
        --seed and, for a vllm bench serve file, --random-range-ratio and --random-range-ratio-mode are kept): its
        successful requests, their mean lengths (outputs generated in full: --ignore-eos), its clients, rate and
        burstiness; for GenAI-Perf and AIPerf also what else their file records (:attr:`load`) where the user did
        not say otherwise. Raises ConfigError when a vllm bench serve file's lengths varied and no
        --random-range-ratio says how."""
        random = self.harness == "vllm-random"
        if random and self.varied and given.get("random_range_ratio") is None:
            raise ConfigError(
                f"{self.path}: a summary only (no per-request fields); its prompts or outputs varied in length "
                f"(mean {self.input_tokens / self.completed:,.2f} and {self.output_tokens / self.completed:,.2f} "
                "tokens): give the benchmark's --random-range-ratio (and --random-range-ratio-mode) to replay it, "
                "or save the run with --save-detailed"
            )
        v: dict = {
            "bench": given.get("bench") or self.harness,
            "num_prompts": self.completed,
            "random_input_len": max(1, round(self.input_tokens / self.completed)),
            "random_output_len": max(1, round(self.output_tokens / self.completed)),
            "ignore_eos": True,
            "request_rate": self.request_rate,
            "burstiness": self.burstiness,
        }
        if self.max_concurrency is not None:
            v["max_concurrency"] = self.max_concurrency
        if not random:
            v.update({k: x for k, x in self.load.items() if given.get(k) is None})
        elif not self.varied and given.get("random_range_ratio") is None:
            v["random_range_ratio"] = 0.0
        return v


def summary(path: str, d: dict) -> MeasuredSummary:
    """``d`` (a result file's object, with the LOAD_FIELDS) as a summary; errors name the file and field."""
    counts = {}
    for key in LOAD_FIELDS:
        v = d[key]
        if POSITIVE_INT(v):
            raise ConfigError(f"{path}: field '{key}' must be a positive whole number, got {shown(v)}")
        counts[key] = v
    failed = d.get("failed") or 0
    if isinstance(failed, bool) or not isinstance(failed, int) or failed < 0:
        raise ConfigError(f"{path}: field 'failed' must be a whole number >= 0, got {shown(failed)}")
    burst = d.get("burstiness", 1.0)
    burst = 1.0 if burst is None else _number(burst, f"{path}: field 'burstiness'")
    if burst <= 0:
        raise ConfigError(f"{path}: field 'burstiness' must be > 0, got {shown(burst)}")
    measured = {}
    for key, name in SUMMARY_FIELDS.items():
        # vllm bench serve writes milliseconds (median_ttft_ms); copies of its script in seconds (median_ttft:
        # InferenceX's benchmark_serving_random.py)
        seconds = key.removesuffix("_ms") if key.endswith("_ms") else None
        if d.get(key) is None and seconds is not None and d.get(seconds) is not None:
            measured[name] = _number(d[seconds], f"{path}: field '{seconds}'")
            continue
        v = d.get(key)
        if v is None:  # not measured (vLLM writes only the --percentile-metrics asked for)
            continue
        v = _number(v, f"{path}: field '{key}'")
        measured[name] = v if name == "output_tok_s" else v / 1000.0
    if not measured:
        raise ConfigError(
            f"{path}: no measured figure to compare ({', '.join(SUMMARY_FIELDS)}); save the run with "
            "`vllm bench serve ... --save-result --save-detailed`"
        )
    duration = d.get("duration")
    return MeasuredSummary(
        str(path),
        counts["completed"],
        failed,
        counts["total_input_tokens"],
        counts["total_output_tokens"],
        _rate(d, path),
        burst,
        _concurrency(d, path),
        measured,
        str(d.get("model_id", "")),
        str(d.get("date") or ""),
        None if duration is None else _number(duration, f"{path}: field 'duration'"),
    )


def read_bench_result(path: str, d: dict | None = None) -> MeasuredRun:
    """The run recorded in ``path`` (``d``: its JSON object, if read already); every error names the file and the
    field (and the request index)."""
    from kvsim.files import read_json_object

    if d is None:
        d = read_json_object(path, path)
    missing = [k for k in PER_REQUEST if not isinstance(d.get(k), list)]
    if missing:
        have = [k for k in d if not isinstance(d[k], (list, dict))][:8]
        raise ConfigError(
            f"{path}: no per-request field{'s' if len(missing) > 1 else ''} {', '.join(missing)}: "
            "kvsim compares request by request; save the run with `vllm bench serve ... --save-result "
            "--save-detailed` (--save-result alone writes only the summary"
            + (f": {', '.join(have)}, ...)" if have else ")")
            + _summary_load_hint(d)
        )
    lists = {k: d[k] for k in PER_REQUEST}
    n = len(lists["input_lens"])
    for key, v in lists.items():
        if len(v) != n:
            raise ConfigError(f"{path}: field '{key}' has {len(v)} entries, 'input_lens' {n}")
    errors = d.get("errors") or [""] * n
    if not isinstance(errors, list) or len(errors) != n:
        raise ConfigError(f"{path}: field 'errors' must be a list of {n} entries")
    rate, conc = _rate(d, path), _concurrency(d, path)
    sends = _send_times(d, path, n)
    duration = d.get("duration")
    duration = None if duration is None else _number(duration, f"{path}: field 'duration'")
    reqs, ttft, e2e, itl = [], [], [], []
    skipped = later_tokens = silent = 0
    for i in range(n):
        where = f"{path}: request {i}"
        p = _number(lists["input_lens"][i], f"{where}: field 'input_lens'", hi=MAX_TOKENS)
        o = _number(lists["output_lens"][i], f"{where}: field 'output_lens'", hi=MAX_TOKENS)
        if errors[i] or p < 1:
            skipped += 1
            continue
        if o < 1:  # it succeeded without text: prefilled, one token sampled (an end of text), nothing timed
            silent += 1
            reqs.append(Request(str(i), sends[i], int(p), 1, line=i + 1))
            ttft.append(math.nan)
            e2e.append(math.nan)
            continue
        t = _number(lists["ttfts"][i], f"{where}: field 'ttfts'")
        gaps = lists["itls"][i]
        if not isinstance(gaps, list):
            raise ConfigError(f"{where}: field 'itls' must be a list of seconds")
        gaps = [_number(g, f"{where}: field 'itls'") for g in gaps]
        reqs.append(Request(str(i), sends[i], int(p), int(o), line=i + 1))
        ttft.append(t)
        e2e.append(t + sum(gaps))
        itl += gaps
        if gaps:
            later_tokens += int(o) - 1
    if len(reqs) == silent:
        raise ConfigError(
            f"{path}: no successful request with output to compare ({skipped} failed, {silent} without text)"
        )
    first = min(r.arrival_s for r in reqs)
    if first:  # the first request sent arrives at 0, in the order they were sent
        from dataclasses import replace

        order = sorted(range(len(reqs)), key=lambda k: reqs[k].arrival_s)
        reqs = [replace(reqs[k], arrival_s=reqs[k].arrival_s - first) for k in order]
        ttft, e2e = [ttft[k] for k in order], [e2e[k] for k in order]
    return MeasuredRun(
        str(path),
        reqs,
        ttft,
        e2e,
        itl,
        rate,
        conc,
        duration,
        str(d.get("model_id", "")),
        skipped,
        str(d.get("date") or ""),
        later_tokens / len(itl) if itl else 1.0,
        silent,
        any(sends),
    )


def _send_times(d: dict, path: str, n: int) -> list[float]:
    """When the benchmark scheduled each of the ``n`` requests (seconds on the client's clock): its
    ``start_times`` less its ``queue_times`` (the --max-concurrency wait; none: 0); all 0 where the file records
    no times."""
    starts = d.get("start_times")
    if not isinstance(starts, list) or not starts:
        return [0.0] * n
    waits = d.get("queue_times")
    if not isinstance(waits, list) or len(waits) != n:
        waits = [0.0] * n
    if len(starts) != n:
        raise ConfigError(f"{path}: field 'start_times' has {len(starts)} entries, 'input_lens' {n}")
    return [
        _number(s, f"{path}: request {i}: field 'start_times'")
        - _number(w, f"{path}: request {i}: field 'queue_times'")
        for i, (s, w) in enumerate(zip(starts, waits))
    ]
