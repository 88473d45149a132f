"""A finished job's results as the API returns them: the files the command wrote (the same the CLI writes)
and its tables as JSON, bounded in rows."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from kvsim.errors import KvsimError

MAX_ROWS = 200_000  # rows of one table the API returns at most (the file has them all)
TEXT_FILES = (".md", ".sh", ".txt", ".csv", ".json", ".html")


class NotFound(KvsimError):
    """No such job, file or table (HTTP 404)."""


def result_files(out: Path) -> list[dict[str, Any]]:
    """The plain files of a results folder (kvsim's bookkeeping files and links left out), by name."""
    try:
        names = sorted(os.listdir(out))
    except OSError:
        return []
    files = []
    for name in names:
        p = out / name
        if name.startswith(".") or p.is_symlink() or not p.is_file():
            continue
        files.append({"name": name, "bytes": p.stat().st_size})
    return files


def result_file(out: Path, name: str) -> Path:
    """The file ``name`` of a results folder: one of :func:`result_files`, nothing else."""
    if name not in {f["name"] for f in result_files(out)}:
        raise NotFound(f"no result file {name!r}")
    return out / name


def read_table(out: Path, stem: str, limit: int = MAX_ROWS) -> dict[str, Any]:
    """Table ``stem`` (CSV or Parquet, as the command wrote it): columns, rows (lists; NaN as null, infinity as "inf"), how many
    rows the file has, and whether rows were left out (``limit``)."""
    import pandas as pd

    names = {f["name"] for f in result_files(out)}
    if f"{stem}.csv" in names:
        df = pd.read_csv(out / f"{stem}.csv", keep_default_na=True)
    elif f"{stem}.parquet" in names:
        df = pd.read_parquet(out / f"{stem}.parquet")
    else:
        raise NotFound(f"no result table {stem!r}")
    limit = max(0, min(int(limit), MAX_ROWS))
    total = len(df)
    shown = df.iloc[:limit]
    rows = [[_cell(v) for v in row] for row in shown.itertuples(index=False, name=None)]
    return {
        "name": stem,
        "columns": [str(c) for c in df.columns],
        "rows": rows,
        "total_rows": total,
        "truncated": total > len(rows),
    }


def _cell(v: Any) -> Any:
    if v is None:
        return None
    if hasattr(v, "item"):  # numpy scalars
        v = v.item()
    if isinstance(v, float):  # JSON has neither NaN nor infinity: an empty cell is null, inf is "inf"
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else v
    if isinstance(v, (bool, int, str)):
        return v
    return str(v)


def read_text(out: Path, name: str, limit: int = 200_000) -> str:
    """A text result file (summary.md, vllm_serve.sh), its first ``limit`` characters."""
    if not name.endswith(TEXT_FILES):
        raise NotFound(f"{name!r} is not a text file")
    with open(result_file(out, name), encoding="utf-8", errors="replace") as fh:
        return fh.read(limit)
