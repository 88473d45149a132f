"""GenAI-Perf's and AIPerf's summary files (``profile_export_genai_perf.json``, ``profile_export_aiperf.json``) as
runs `kvsim validate` replays: the load their client sent and the figures it measured.

Both tools write each figure as ``{"unit": "ms", "avg": .., "p50": .., "p99": .., ...}`` (GenAI-Perf 0.0.10+,
AIPerf 0.2+ at the top level; AIPerf 0.1 under ``records``, TTFT as ``ttft``) and the command's settings under
``input_config``, whose layout changed between releases: GenAI-Perf flat up to 0.0.12 (``concurrency``,
``request_rate``, ``synthetic_input_tokens_stddev``, ...) and nested from 0.0.13 (``perf_analyzer.stimulus``,
``input.synthetic_tokens``, ...); AIPerf's ``loadgen`` / ``input.prompt`` up to 0.8 and ``phases`` / ``datasets``
from 0.9 (layouts read from both tools' exporters and from runs of AIPerf 0.1.1, 0.8, 0.9 and 0.13). Their
``inter_token_latency`` is each request's (latency - TTFT) / (output tokens - 1): a TPOT. The requests are
replayed with the measured mean lengths (``input_sequence_length``, ``output_sequence_length``), the lengths'
spread, the dataset's size and the warm-up requests the file records; GenAI-Perf's request rate is constant
(perf_analyzer's default distribution), AIPerf's Poisson unless its arrival pattern says constant.
"""

from __future__ import annotations

import math
from typing import Any

from kvsim.errors import ConfigError
from kvsim.validation import is_finite, shown

TIME_UNITS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "us": 1e-6, "ns": 1e-9}
# the file's figure -> its statistic -> kvsim's name (MeasuredSummary.measured)
FIGURES = {
    "time_to_first_token": {"avg": "ttft_mean", "p50": "ttft_p50", "p99": "ttft_p99"},
    "inter_token_latency": {"avg": "tpot_mean", "p50": "tpot_p50", "p99": "tpot_p99"},
    "request_latency": {"avg": "e2e_mean", "p50": "e2e_p50", "p99": "e2e_p99"},
}


def export_tool(d: dict) -> str | None:
    """Which client wrote the result object ``d``: "aiperf", "genai-perf", or None (neither)."""
    config = d.get("input_config")
    if not isinstance(config, dict):
        return None
    if "schema_version" in d or "aiperf_version" in d or "records" in d or config.keys() & {"loadgen", "phases"}:
        return "aiperf"
    return "genai-perf" if any(k in d for k in FIGURES) or "request_count" in d else None


def _at(d, path: str):
    """``d``'s value at a dotted ``path``; None where a key is missing or holds GenAI-Perf's "" (unset)."""
    for key in path.split("."):
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return None if d == "" else d


def _stat(path: str, metrics: dict, name: str, stat: str = "avg") -> float | None:
    """Figure ``name``'s statistic ``stat`` (None: not recorded); a value that is not a finite number >= 0 is an
    error naming the field."""
    block = metrics.get(name)
    v = block.get(stat) if isinstance(block, dict) else None
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_finite(v) or v < 0:
        raise ConfigError(f"{path}: field '{name}.{stat}' must be a finite number >= 0, got {shown(v)}")
    return float(v)


def _number(path: str, field: str, v, integer: bool = False) -> float | None:
    """A setting of ``input_config`` (None: unset); an error naming it where it is not a number >= 0."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_finite(v) or v < 0:
        raise ConfigError(f"{path}: field 'input_config.{field}' must be a number >= 0, got {shown(v)}")
    if integer and int(v) != v:
        raise ConfigError(f"{path}: field 'input_config.{field}' must be a whole number, got {shown(v)}")
    return v


def _genai_perf_load(path: str, c: dict) -> dict:
    """GenAI-Perf's load settings: concurrency, request_rate, warm-ups, the lengths' spreads, dataset entries."""
    nested = "perf_analyzer" in c
    get = {
        "concurrency": "perf_analyzer.stimulus.concurrency" if nested else "concurrency",
        "request_rate": "perf_analyzer.stimulus.request_rate" if nested else "request_rate",
        "warmup": "perf_analyzer.warmup_request_count" if nested else "warmup_request_count",
        "isl_sd": "input.synthetic_tokens.stddev" if nested else "synthetic_input_tokens_stddev",
        "osl_sd": "input.output_tokens.stddev" if nested else "output_tokens_stddev",
        "entries": "input.num_dataset_entries" if nested else "num_dataset_entries",
    }
    load: dict[str, Any] = {
        k: _number(path, f, _at(c, f), k in ("concurrency", "warmup", "entries")) for k, f in get.items()
    }
    if load["entries"] is None and not nested:
        load["entries"] = _number(path, "num_prompts", _at(c, "num_prompts"), True)  # 0.0.8
    load["burstiness"] = math.inf  # perf_analyzer's --request-distribution constant
    if load["request_rate"] is not None:  # a rate run: no client limit (perf_analyzer takes one or the other)
        load["concurrency"] = None
    models = _at(c, "model_names" if nested else "model")
    load["model"] = models[0] if isinstance(models, list) and models else ""
    return load


def _aiperf_load(path: str, c: dict, version: str) -> dict:
    """AIPerf's load settings (its 0.1-0.8 ``loadgen`` or its 0.9+ ``phases``), as :func:`_genai_perf_load`'s."""
    load: dict[str, Any] = {}
    if "phases" in c:
        phases = c["phases"]
        phases = list(phases.values()) if isinstance(phases, dict) else phases
        if not isinstance(phases, list) or not all(isinstance(p, dict) for p in phases):
            raise ConfigError(f"{path}: field 'input_config.phases' must be a list of phases")
        measured = [p for p in phases if not p.get("exclude_from_results")]
        if len(measured) != 1:
            raise ConfigError(f"{path}: {len(measured)} measured phases in input_config.phases; kvsim replays one")
        p = measured[0]
        kind = str(p.get("type", "concurrency"))
        if kind not in ("concurrency", "poisson", "constant"):
            raise ConfigError(f"{path}: a '{kind}' phase; kvsim replays concurrency, poisson and constant loads")
        load["concurrency"] = _number(path, "phases.concurrency", p.get("concurrency"), True)
        load["request_rate"] = _number(path, "phases.rate", p.get("rate"))
        load["burstiness"] = math.inf if kind == "constant" else 1.0
        warm = [
            _number(path, "phases.requests", q.get("requests"), True) for q in phases if q.get("exclude_from_results")
        ]
        load["warmup"] = sum(w or 0 for w in warm) or None
        datasets = c.get("datasets")
        d = datasets[0] if isinstance(datasets, list) and datasets and isinstance(datasets[0], dict) else {}
        load["isl_sd"] = _number(path, "datasets.prompts.isl.stddev", _at(d, "prompts.isl.stddev"))
        load["osl_sd"] = _number(path, "datasets.prompts.osl.stddev", _at(d, "prompts.osl.stddev"))
        load["entries"] = _number(path, "datasets.entries", d.get("entries"), True)
        models = _at(c, "models.items")
        load["model"] = str(models[0].get("name", "")) if isinstance(models, list) and models else ""
    else:
        lg = c.get("loadgen")
        lg = lg if isinstance(lg, dict) else {}
        load["concurrency"] = _number(path, "loadgen.concurrency", lg.get("concurrency"), True)
        load["request_rate"] = _number(path, "loadgen.request_rate", lg.get("request_rate"))
        pattern = str(lg.get("arrival_pattern") or lg.get("request_rate_mode") or "poisson")
        load["burstiness"] = math.inf if "constant" in pattern else 1.0
        load["warmup"] = _number(path, "loadgen.warmup_request_count", lg.get("warmup_request_count"), True)
        load["isl_sd"] = _number(path, "input.prompt.input_tokens.stddev", _at(c, "input.prompt.input_tokens.stddev"))
        load["osl_sd"] = _number(path, "input.prompt.output_tokens.stddev", _at(c, "input.prompt.output_tokens.stddev"))
        entries = _at(c, "input.conversation.num_dataset_entries") or _at(c, "input.conversation.num")
        load["entries"] = _number(path, "input.conversation.num_dataset_entries", entries, True)
        models = _at(c, "endpoint.model_names")
        load["model"] = models[0] if isinstance(models, list) and models else ""
    # how requests take the dataset's prompts: with replacement before 0.3, shuffled passes 0.3-0.8, in turn since
    from kvsim.releases import release_key

    v = release_key(version) if version else (0, 9, 0)
    load["sampling"] = "random" if v < (0, 3, 0) else "shuffle" if v < (0, 9, 0) else "sequential"
    return load


def read_perf_export(path: str, d: dict, tool: str):
    """The run a GenAI-Perf or AIPerf (``tool``, :func:`export_tool`) summary object ``d`` of ``path`` records, as a
    :class:`~kvsim.trace.bench_result.MeasuredSummary`; errors name the file and the field."""
    from kvsim.trace.bench_result import MeasuredSummary

    metrics = d["records"] if isinstance(d.get("records"), dict) else d
    if "ttft" in metrics and "time_to_first_token" not in metrics:  # AIPerf 0.1
        metrics = {**metrics, "time_to_first_token": metrics["ttft"]}
    measured: dict[str, float] = {}
    for name, stats in FIGURES.items():
        block = metrics.get(name)
        if not isinstance(block, dict):
            continue
        unit = str(block.get("unit", "ms"))
        if unit not in TIME_UNITS:
            raise ConfigError(f"{path}: field '{name}.unit' is '{unit}', not a time unit ({', '.join(TIME_UNITS)})")
        for stat, kvsim_name in stats.items():
            v = _stat(path, metrics, name, stat)
            if v is not None:
                measured[kvsim_name] = v * TIME_UNITS[unit]
    tok_s = _stat(path, metrics, "output_token_throughput")
    if tok_s is not None:
        measured["output_tok_s"] = tok_s
    if not measured:
        raise ConfigError(f"{path}: no measured figure to compare ({', '.join(FIGURES)}, output_token_throughput)")
    count = _stat(path, metrics, "request_count")
    if not count or int(count) != count:
        raise ConfigError(
            f"{path}: field 'request_count.avg' missing or not a positive whole number ({tool} writes it from "
            "GenAI-Perf 0.0.10 and AIPerf 0.1 on)"
        )
    n = int(count)
    config = d["input_config"]
    version = str(d.get("aiperf_version") or ("0.1" if "records" in d else ""))  # 0.1 kept figures in records
    load = _genai_perf_load(path, config) if tool == "genai-perf" else _aiperf_load(path, config, version)
    lengths = {}
    for key, field, fallback in (
        (
            "in",
            "input_sequence_length",
            ("input.synthetic_tokens.mean", "synthetic_input_tokens_mean", "input.prompt.input_tokens.mean"),
        ),
        (
            "out",
            "output_sequence_length",
            ("input.output_tokens.mean", "output_tokens_mean", "input.prompt.output_tokens.mean"),
        ),
    ):
        mean = _stat(path, metrics, field)
        if mean is None:
            mean = next((v for f in fallback if isinstance(v := _at(config, f), (int, float)) and v > 0), None)
        if not mean:
            raise ConfigError(f"{path}: field '{field}.avg' missing: the mean length kvsim replays")
        lengths[key] = mean
    rate = load["request_rate"]
    conc = load["concurrency"]
    if rate is None and conc is None:
        conc = 1  # both tools' default: one client
    failed = _stat(path, metrics, "error_request_count") or 0
    duration = _stat(path, metrics, "benchmark_duration")
    throughput = _stat(path, metrics, "request_throughput")
    if duration is None and throughput:
        duration = n / throughput
    start = str(d.get("start_time") or "")
    extra = {
        "warmup_request_count": load["warmup"],
        "synthetic_input_tokens_stddev": load["isl_sd"],
        "output_tokens_stddev": load["osl_sd"],
        "num_dataset_entries": load["entries"] or None,  # (GenAI-Perf writes 0 for "not set")
        "dataset_sampling_strategy": load.get("sampling"),
    }
    return MeasuredSummary(
        str(path),
        n,
        int(failed),
        round(lengths["in"] * n),
        round(lengths["out"] * n),
        math.inf if rate is None else float(rate),
        load["burstiness"] if rate is not None else 1.0,
        None if conc is None else int(conc),
        measured,
        str(load["model"]),
        start[:10].replace("-", "") if start[:4].isdigit() else "",
        duration,
        harness=tool,
        load={k: v for k, v in extra.items() if v is not None},
    )


def _value(path: str, line: int, metrics: dict, name: str) -> float | None:
    """A per-request record's metric ``name`` in seconds (times) or its own unit (token counts); None if absent."""
    m = metrics.get(name)
    if not isinstance(m, dict) or m.get("value") is None:
        return None
    v = m["value"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_finite(v) or v < 0:
        raise ConfigError(f"{path}:{line}: field 'metrics.{name}.value' must be a finite number >= 0, got {shown(v)}")
    unit = str(m.get("unit", ""))
    return float(v) * TIME_UNITS[unit] if unit in TIME_UNITS else float(v)


def read_aiperf_records(path: str):
    """AIPerf's per-request ``profile_export.jsonl`` as a :class:`~kvsim.trace.bench_result.MeasuredRun`: each
    measured request's lengths, TTFT, latency and streamed chunks (warm-up records left out, failed ones skipped
    and counted). The load comes from ``profile_export_aiperf.json`` beside it: at a request rate each request
    arrives when AIPerf issued it (``credit_issued_ns``); with clients only, all at once in the order sent, the
    clients holding them back as they did; without that file, at the issue times with no client limit."""
    from pathlib import Path

    from kvsim.files import json_object_lines, read_json_object
    from kvsim.trace.bench_result import MeasuredRun
    from kvsim.trace.jsonl import MAX_TOKENS
    from kvsim.trace.request import Request

    summary_path = Path(path).with_name("profile_export_aiperf.json")
    summary = None
    if summary_path.is_file():
        d = read_json_object(summary_path, str(summary_path))
        if export_tool(d) == "aiperf":
            summary = read_perf_export(str(summary_path), d, "aiperf")
    rows = []
    skipped = warmups = 0
    for k, rec in json_object_lines(path, "one AIPerf request record"):
        meta, metrics = rec.get("metadata"), rec.get("metrics")
        if not isinstance(meta, dict) or not isinstance(metrics, dict):
            raise ConfigError(f"{path}:{k}: an AIPerf record has 'metadata' and 'metrics' objects")
        if meta.get("benchmark_phase") == "warmup":
            warmups += 1
            continue
        if rec.get("error") or meta.get("was_cancelled"):
            skipped += 1
            continue
        sent = meta.get("credit_issued_ns", meta.get("request_start_ns"))
        if isinstance(sent, bool) or not isinstance(sent, (int, float)):
            raise ConfigError(f"{path}:{k}: field 'metadata.request_start_ns' missing or not a number")
        isl, osl = (_value(path, k, metrics, f) for f in ("input_sequence_length", "output_sequence_length"))
        latency = _value(path, k, metrics, "request_latency")
        if not isl or osl is None or latency is None or isl > MAX_TOKENS or osl > MAX_TOKENS:
            raise ConfigError(
                f"{path}:{k}: fields 'metrics.input_sequence_length', 'output_sequence_length' and 'request_latency' "
                f"must be given (lengths of at most {MAX_TOKENS:,} tokens)"
            )
        chunks = metrics.get("inter_chunk_latency")
        chunks = chunks if isinstance(chunks, dict) else {}
        gaps = chunks.get("value")
        gaps = [g * TIME_UNITS.get(str(chunks.get("unit", "ms")), 1e-3) for g in gaps] if isinstance(gaps, list) else []
        rows.append(
            (float(sent), k, int(isl), max(1, int(osl)), _value(path, k, metrics, "time_to_first_token"), latency, gaps)
        )
    if not rows:
        raise ConfigError(f"{path}: no measured request ({skipped} failed)")
    rows.sort()
    rate = summary.request_rate if summary is not None else math.inf
    timed = summary is None or rate != math.inf  # a rate run (or no summary): when AIPerf issued each request
    first = rows[0][0]
    reqs, ttft, e2e, itl = [], [], [], []
    later_tokens = 0
    for sent, k, isl, osl, t, latency, gaps in rows:
        reqs.append(Request(str(k), (sent - first) * 1e-9 if timed else 0.0, isl, osl, line=k))
        ttft.append(math.nan if t is None else t)
        e2e.append(latency)
        itl += gaps
        if gaps:
            later_tokens += osl - 1
    return MeasuredRun(
        str(path),
        reqs,
        ttft,
        e2e,
        itl,
        rate,
        summary.max_concurrency if summary is not None else None,
        summary.duration_s if summary is not None else None,
        summary.model_id if summary is not None else "",
        skipped,
        summary.date if summary is not None else "",
        later_tokens / len(itl) if itl else 1.0,
        0,
        timed,
        warmups,
    )
