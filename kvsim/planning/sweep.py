"""`kvsim sweep GRID.yaml`: many independent simulations, one row each, resumable.

GRID.yaml:

    base:            # options every point shares (keys as in planning/point.py)
      trace: traces/chat.jsonl
      model: llama-2-7b
    grid:            # cartesian product of these lists
      allocator: [max, paged:16]
      rate: [4, 8, 12]
    points:          # optional explicit extra points (merged over base)
      - {allocator: oracle, rate: 6}

Each finished point is saved at once under ``OUT.parts/<key>.json``; a rerun skips points whose
part exists, so an interrupted sweep resumes without redoing finished work. The key covers the point's
options, the bytes of its trace file and the kvsim version: editing a trace (or upgrading kvsim)
recomputes the points that used it. A sweep has at most MAX_POINTS (100,000) points, counted before the grid
is expanded. The table is assembled in
the points' order, so local and Ray runs of the same grid give the same table.
"""

from __future__ import annotations

import itertools
import json
import math
import reprlib
from pathlib import Path

import pandas as pd

from kvsim.errors import ConfigError
from kvsim.files import write_text_atomically
from kvsim.planning.point import point_id

MAX_POINTS = 100_000  # points of one sweep (grid product + explicit points), counted before expanding the grid


def load_grid(path: str) -> list[dict]:
    import yaml

    try:
        spec = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    except (RecursionError, ValueError) as e:  # nested too deeply; an integer of over 4,300 digits
        raise ConfigError(f"{path}: not readable YAML ({e})") from None
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: expected a mapping with base / grid / points")
    unknown = set(spec) - {"base", "grid", "points"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))} (base, grid, points)")
    base = spec.get("base") or {}
    grid = spec.get("grid") or {}
    if not isinstance(base, dict) or not isinstance(grid, dict):
        raise ConfigError(f"{path}: 'base' and 'grid' must be mappings")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"{path}: grid '{k}' must be a non-empty list")
    extra = spec.get("points") or []
    n = math.prod(len(v) for v in grid.values()) if grid else 0
    n += len(extra) if isinstance(extra, list) else 0
    if n > MAX_POINTS:
        raise ConfigError(
            f"{path}: the grid has {n:,} points; a sweep runs at most {MAX_POINTS:,} (split it into several sweeps)"
        )
    points = []
    if grid:
        keys = list(grid)
        for combo in itertools.product(*(grid[k] for k in keys)):
            points.append({**base, **dict(zip(keys, combo))})
    if not isinstance(extra, list):
        raise ConfigError(f"{path}: 'points' must be a list of mappings")
    for i, p in enumerate(extra):
        if not isinstance(p, dict):
            raise ConfigError(f"{path}: points[{i}] must be a mapping")
        points.append({**base, **p})
    if not points:
        raise ConfigError(f"{path}: no points (give a grid or points)")
    for p in points:
        if "trace" not in p:
            raise ConfigError(f"{path}: point {reprlib.repr(p)} has no trace")
    return points


def evaluate_row(point: dict) -> dict:
    """One sweep point -> one row: the point's options, then its run summary."""
    from kvsim.planning.point import evaluate

    s = evaluate(point)
    row = {"point_id": point_id(point), **{f"cfg_{k}": v for k, v in point.items()}}
    row.update(s)
    return row


def validate_points(points: list[dict]) -> None:
    """Fail before any simulation runs if a point's options are wrong."""
    from kvsim.planning.point import point_config

    seen_traces = set()
    for p in points:
        try:
            point_config(p)
        except ConfigError as e:
            raise ConfigError(f"point {reprlib.repr(p)}: {e}") from None
        t = str(p["trace"])
        if t not in seen_traces and not Path(t).exists():
            raise ConfigError(f"point {reprlib.repr(p)}: trace '{t}' does not exist")
        seen_traces.add(t)


def resume_keys(points: list[dict]) -> list[str]:
    """Per point, the name of its saved part: its options + the content of every file it reads (the trace,
    a model config.json, a latency calibration: any option value naming a file) + the kvsim version."""
    import hashlib

    from kvsim import __version__
    from kvsim.files import file_digest

    digests: dict[str, str] = {}
    keys = []
    for p in points:
        pid = point_id(p)
        files = sorted({str(v) for v in p.values() if isinstance(v, (str, Path)) and Path(v).is_file()})
        for f in files:
            if f not in digests:
                digests[f] = file_digest(f)
        content = "|".join(f"{f}={digests[f]}" for f in files)
        keys.append(f"{pid}-{hashlib.sha256(f'{pid}|{content}|{__version__}'.encode()).hexdigest()[:16]}")
    return keys


def _saved_row(path: Path, point: dict) -> dict | None:
    """The row a part holds, or None when it is missing, unreadable or not this point's finished row (a
    truncated or hand-edited part is recomputed)."""
    try:
        row = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if (
        not isinstance(row, dict)
        or "index" in row
        or row.get("point_id") != point_id(point)
        or "requests" not in row
        or any(f"cfg_{k}" not in row for k in point)
    ):
        return None
    return row


def run_sweep(
    points: list[dict], out: str, workers: int = 1, backend: str = "local", address: str | None = None
) -> tuple[pd.DataFrame, int, int]:
    """(table, points computed now, points reused from an earlier run)."""
    validate_points(points)
    parts = Path(str(out) + ".parts")
    parts.mkdir(parents=True, exist_ok=True)
    ids = resume_keys(points)
    todo = [(i, p) for i, (p, pid) in enumerate(zip(points, ids)) if _saved_row(parts / f"{pid}.json", p) is None]
    reused = len(points) - len(todo)

    def save(j: int, row: dict) -> None:
        # atomic, under a temporary name of its own: a killed sweep never leaves half a part, and two
        # sweeps into one folder never write the same temporary file
        write_text_atomically(parts / f"{ids[todo[j][0]]}.json", json.dumps(row, default=str))

    from kvsim.planning.parallel import run_jobs

    run_jobs(evaluate_row, [p for _, p in todo], workers, backend, address, label="sweep", on_result=save)
    rows = [_saved_row(parts / f"{pid}.json", p) for p, pid in zip(points, ids)]
    table = pd.DataFrame(rows)
    table.insert(0, "index", range(len(table)))
    write_table(table, out)
    return table, len(todo), reused


def write_table(df: pd.DataFrame, out: str) -> None:
    """The results table, as Parquet when ``out`` ends in .parquet, else CSV (atomically)."""
    from kvsim.output.writer import write_table as write_frame

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_frame(df, Path(out), "parquet" if str(out).endswith(".parquet") else "csv")


def read_table(path: str) -> pd.DataFrame:
    try:
        # utf-8-sig: a CSV saved by a spreadsheet starts with a byte-order mark
        return pd.read_parquet(path) if str(path).endswith(".parquet") else pd.read_csv(path, encoding="utf-8-sig")
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read results table ({e})") from None
