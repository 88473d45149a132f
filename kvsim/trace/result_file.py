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
    return _from_object(path, read_json_object(path, path))


def _from_object(path: str, d: dict) -> MeasuredRun | MeasuredSummary:
    """The run of one result object ``d`` (``path``: what errors and tables call it)."""
    tool = export_tool(d)
    if tool is not None:
        return read_perf_export(path, d, tool)
    if any(isinstance(d.get(k), list) for k in PER_REQUEST) or not all(k in d for k in LOAD_FIELDS):
        return read_bench_result(path, d)
    return summary(path, d)


def read_results(path: str) -> list[MeasuredRun | MeasuredSummary]:
    """Every run recorded in ``path``: one, or one per line where `vllm bench serve --append-result` appended
    several runs to the file (each called by the file and its line: ``results.json:3``); a folder: its runs
    (:func:`read_folder`)."""
    from pathlib import Path

    from kvsim.errors import ConfigError

    if Path(path).is_dir():
        return read_folder(path)
    try:
        return [read_result(path)]
    except ConfigError as e:
        if str(path).endswith(".jsonl") or "Extra data" not in str(e):
            raise
    from kvsim.files import json_object_lines

    return [_from_object(f"{path}:{k}", d) for k, d in json_object_lines(path, "one appended run")]


# the files a client's artifact folder keeps its run in, in order of preference (the per-request records first)
ARTIFACTS = ("profile_export.jsonl", "profile_export_aiperf.json", "profile_export_genai_perf.json")


def read_folder(path: str) -> list[MeasuredRun | MeasuredSummary]:
    """The runs in folder ``path``: an AIPerf or GenAI-Perf artifact folder's run (its per-request records where it
    has them, else its summary; their other files are the client's own), or else every ``*.json`` / ``*.jsonl``
    file in it that is a benchmark result, in name order; the others are named on the terminal as skipped, and a
    folder without any result is an error."""
    import sys
    from pathlib import Path

    from kvsim.errors import ConfigError

    folder = Path(path)
    for name in ARTIFACTS:
        if (folder / name).is_file():
            return [read_result(str(folder / name))]
    runs, skipped = [], []
    for f in sorted(p for p in folder.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file()):
        try:
            runs += read_results(str(f))
        except ConfigError as e:
            skipped.append(f"{f.name} ({str(e).removeprefix(str(f) + ': ')[:80]})")
    if skipped:
        print(
            f"{path}: skipped {len(skipped)} file(s) that are not benchmark results: {'; '.join(skipped)}",
            file=sys.stderr,
        )
    if not runs:
        raise ConfigError(f"{path}: no benchmark result file in the folder (*.json, *.jsonl)")
    return runs
