"""A benchmark client's result file, whichever client wrote it: `vllm bench serve`'s request by request
(kvsim/trace/bench_result.py) or its summary, GenAI-Perf's and AIPerf's summaries and AIPerf's per-request records
(kvsim/trace/perf_export.py)."""

from __future__ import annotations

from kvsim.trace.bench_result import LOAD_FIELDS, PER_REQUEST, MeasuredRun, MeasuredSummary, read_bench_result, summary
from kvsim.trace.perf_export import export_tool, read_aiperf_records, read_perf_export


def read_result(path: str) -> MeasuredRun | MeasuredSummary:
    """The run recorded in ``path``: request by request where the file has the per-request fields
    (:func:`~kvsim.trace.bench_result.read_bench_result`, AIPerf's ``.jsonl`` records), else its summary where it has
    the load's totals (:class:`~kvsim.trace.bench_result.MeasuredSummary`); GenAI-Perf's and AIPerf's summary files
    likewise."""
    from kvsim.files import read_json_object

    if str(path).endswith(".jsonl"):  # AIPerf's per-request records
        return read_aiperf_records(path)
    d = read_json_object(path, path)
    tool = export_tool(d)
    if tool is not None:
        return read_perf_export(path, d, tool)
    if any(isinstance(d.get(k), list) for k in PER_REQUEST) or not all(k in d for k in LOAD_FIELDS):
        return read_bench_result(path, d)
    return summary(path, d)
