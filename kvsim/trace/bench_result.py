"""A measured benchmark run: the result file of `vllm bench serve --save-result` (also the older
`benchmarks/benchmark_serving.py`), as requests kvsim can replay and the latencies the client measured.

Fields read: ``input_lens``, ``output_lens``, ``ttfts`` (seconds), ``itls`` (seconds between streamed
chunks, per request), ``errors`` (a failed request has a message; it is skipped and counted),
``request_rate`` (``"inf"`` or requests/s), ``max_concurrency`` (absent or null: unlimited),
``duration`` (seconds), ``model_id``, ``date`` (as written, e.g. "20240812-101530"). The file does not record
arrival times: at a finite rate the replay draws its own Poisson arrivals at that rate (the benchmark's own draw is
not in the file). The streamed chunks per request show how many tokens the server delivered at a time
(:attr:`MeasuredRun.tokens_per_chunk`: about N under vLLM V0's multi-step scheduling of N steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def read_bench_result(path: str) -> MeasuredRun:
    """The run recorded in ``path``; every error names the file and the field (and the request index)."""
    from kvsim.files import read_json_object

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
    rate = d.get("request_rate", "inf")
    if isinstance(rate, str) and rate.strip().lower() in ("inf", "infinity"):
        rate = math.inf
    else:
        rate = _number(rate, f"{path}: field 'request_rate'")
        from kvsim.validation import request_rate

        problem = request_rate(rate) if rate > 0 else "must be > 0"
        if problem:  # the file's value, not a flag the user gave
            raise ConfigError(f"{path}: field 'request_rate' {problem}")
    conc = d.get("max_concurrency")
    if conc is not None:
        if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
            raise ConfigError(f"{path}: field 'max_concurrency' must be a positive integer or null, got {conc!r}")
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
            reqs.append(Request(str(i), 0.0, int(p), 1, line=i + 1))
            ttft.append(math.nan)
            e2e.append(math.nan)
            continue
        t = _number(lists["ttfts"][i], f"{where}: field 'ttfts'")
        gaps = lists["itls"][i]
        if not isinstance(gaps, list):
            raise ConfigError(f"{where}: field 'itls' must be a list of seconds")
        gaps = [_number(g, f"{where}: field 'itls'") for g in gaps]
        reqs.append(Request(str(i), 0.0, int(p), int(o), line=i + 1))
        ttft.append(t)
        e2e.append(t + sum(gaps))
        itl += gaps
        if gaps:
            later_tokens += int(o) - 1
    if len(reqs) == silent:
        raise ConfigError(
            f"{path}: no successful request with output to compare ({skipped} failed, {silent} without text)"
        )
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
    )
