"""The example outputs and held-out replays committed under reports/ are what kvsim gives today.

The README and docs quote these tables; a latency change that moves them without regenerating them
(benchmarks/make_reports.sh, the validate_* scripts) leaves a user reading numbers kvsim no longer produces,
which happened more than once before these tests. Each case reruns the command or script that wrote the report
into a temporary folder and compares every column but the wall-clock ones. The slower replays (fleets, hybrid
layouts, InferenceMAX) are not rerun here; llm-d's and the AIConfigurator comparison have their own tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
WALL_CLOCK = {"wall_s"}  # seconds this machine took: the only column a rerun may change


def _same_table(committed: Path, fresh: Path) -> None:
    """Every row and column of ``committed`` equals ``fresh``'s (floats to 1e-9 relative), wall clock aside."""
    a, b = pd.read_csv(committed), pd.read_csv(fresh)
    assert list(a.columns) == list(b.columns), f"{committed}: columns differ from a rerun's"
    assert len(a) == len(b), f"{committed}: {len(a)} rows, a rerun gives {len(b)}"
    for col in a.columns:
        if col in WALL_CLOCK:
            continue
        x, y = a[col], b[col]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            ok = np.isclose(x.to_numpy(float), y.to_numpy(float), rtol=1e-9, atol=0, equal_nan=True)
        else:
            ok = (x.fillna("").astype(str) == y.fillna("").astype(str)).to_numpy()
        bad = np.flatnonzero(~ok)
        assert not len(bad), (
            f"{committed.name} in {committed.parent.name}/ is stale: column {col!r}, row {bad[0]}: committed {x.iloc[bad[0]]!r}, "
            f"kvsim now {y.iloc[bad[0]]!r} ({len(bad)} rows differ; regenerate it and the docs that quote it)"
        )


def test_same_table_finds_a_changed_number(tmp_path):
    a = tmp_path / "a.csv"
    b = tmp_path / "b.csv"
    pd.DataFrame({"allocator": ["x", "y"], "ttft_p99_s": [0.5, 1.0], "wall_s": [1.0, 2.0]}).to_csv(a, index=False)
    pd.DataFrame({"allocator": ["x", "y"], "ttft_p99_s": [0.5, 1.0], "wall_s": [9.0, 9.0]}).to_csv(b, index=False)
    _same_table(a, b)  # the wall clock may differ
    pd.DataFrame({"allocator": ["x", "y"], "ttft_p99_s": [0.5, 1.01], "wall_s": [1.0, 2.0]}).to_csv(b, index=False)
    with pytest.raises(AssertionError, match="ttft_p99_s.*row 1"):
        _same_table(a, b)


def _report_commands() -> dict[str, list[str]]:
    """The kvsim commands of benchmarks/make_reports.sh by the report folder they write (their ``--out`` taken
    off): the script that made the committed reports is the one source of their arguments."""
    import shlex

    script = (ROOT / "benchmarks" / "make_reports.sh").read_text(encoding="utf-8").replace("\\\n", " ")
    commands = {}
    for line in script.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["kvsim"] and "--out" in words:
            at = words.index("--out")
            commands[Path(words[at + 1]).name] = words[1:at] + words[at + 2 :]
    return commands


# the README's main job on built-in defaults, the Mooncake prefix comparison, docs/planning.md's plan: each
# report folder and the tables of it compared (make_reports.sh's other commands take longer)
REPORT_TABLES = {
    "compare-chat": ("runs.csv",),
    "prefix-mooncake": ("runs.csv",),
    "capacity-chat": ("plan.csv", "plan_points.csv"),
}


def test_the_report_commands_are_make_reports_own():
    commands = _report_commands()
    assert commands["compare-chat"] == ["compare", "--trace", "traces/chat.jsonl"]
    assert set(REPORT_TABLES) <= set(commands)


@pytest.mark.parametrize("folder", sorted(REPORT_TABLES))
def test_example_report_is_todays(folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main([*_report_commands()[folder], "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    for table in REPORT_TABLES[folder]:
        _same_table(REPORTS / folder / table, tmp_path / table)


@pytest.mark.parametrize(
    "script, folder",
    [
        ("validate_silybench.py", "validation-silybench"),
        ("validate_gpustack.py", "validation-gpustack"),
        ("validate_ree2raz.py", "validation-ree2raz"),
        ("validate_minimax.py", "validation-minimax"),
    ],
)
def test_held_out_replay_is_todays(script, folder, tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    _same_table(REPORTS / folder / "validate.csv", tmp_path / "validate.csv")
