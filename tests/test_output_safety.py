"""What a command writes never destroys what was there (issue 37): `--out .`, a symlinked folder or file, a
folder holding the user's own files, an earlier run's results, inputs inside the results folder, a dangling
link, a file where a folder is expected, `--out ~`. Every command that takes an output flag is covered: a new
one fails test_every_output_flag_is_covered until it is added to CASES here."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from kvsim.cli import main, make_parser
from kvsim.files import MANIFEST

ROOT = Path(__file__).resolve().parents[1]
BENCH = str(ROOT / "tests" / "data" / "vllm_bench_result.json")
VIDUR = str(ROOT / "tests" / "data" / "vidur_sample.csv")
TINY = "custom:name=tiny,layers=4,kv_heads=2,q_heads=4,head_dim=32,params=1e8"
OUTPUT_FLAGS = {"--out", "--output", "--record-batches"}


@pytest.fixture(scope="module")
def inp(tmp_path_factory) -> dict[str, str]:
    """Small inputs for every command, made once."""
    d = tmp_path_factory.mktemp("inputs")
    trace = d / "t.jsonl"
    assert (
        main(
            [
                "trace",
                "generate",
                "-o",
                str(trace),
                "-n",
                "12",
                "--rate",
                "5",
                "--seed",
                "1",
                "--prompt-mean",
                "120",
                "--output-mean",
                "30",
                "--max-total",
                "512",
            ]
        )
        == 0
    )
    record = d / "rec.jsonl.gz"
    assert (
        main(
            [
                "run",
                "--trace",
                str(trace),
                "--allocator",
                "paged:16",
                "--model",
                TINY,
                "--kv-pool-gb",
                "0.0005",
                "--max-seq-len",
                "512",
                "--record-batches",
                str(record),
                "--no-plots",
                "--out",
                str(d / "rec"),
            ]
        )
        == 0
    )
    assert (
        main(["compare", "--trace", str(trace), "--allocators", "max,paged:16", "--no-plots", "--out", str(d / "cmp")])
        == 0
    )
    shapes = d / "shapes.csv"
    shapes.write_text("batch,context,new_tokens\n1,128,1\n4,512,1\n")
    meas = d / "m.csv"
    pd.DataFrame(
        [
            {
                "kind": "decode",
                "num_seqs": n,
                "kv_bytes": n * c * 4096,
                "time_s": 1e-5 + n * c * 1e-9,
                "device": "cuda",
                "impl": "synthetic",
            }
            for n in (1, 4, 16)
            for c in (256, 1024, 4096)
        ]
    ).to_csv(meas, index=False)
    grid = d / "grid.yaml"
    grid.write_text(f"base:\n  trace: {trace}\n  model: llama-2-7b\npoints:\n  - {{allocator: paged:16, rate: 3}}\n")
    return {
        "trace": str(trace),
        "record": str(record),
        "runs": str(d / "cmp" / "runs.csv"),
        "shapes": str(shapes),
        "meas": str(meas),
        "grid": str(grid),
    }


@dataclass(frozen=True)
class Case:
    id: str
    command: tuple[str, ...]  # the subcommand's path in the parser
    flag: str  # the output flag it takes
    kind: str  # "folder" or "file"
    argv: Callable[[dict, str], list[str]]  # (inputs, output path) -> arguments
    input: str | None = None  # a key of ``inp`` that names one of the command's input files


CASES = [
    Case(
        "run",
        ("run",),
        "--out",
        "folder",
        lambda i, o: ["run", "--trace", i["trace"], "--no-plots", "--out", o],
        "trace",
    ),
    Case(
        "compare",
        ("compare",),
        "--out",
        "folder",
        lambda i, o: ["compare", "--trace", i["trace"], "--allocators", "max,paged:16", "--no-plots", "--out", o],
        "trace",
    ),
    Case(
        "cluster",
        ("cluster",),
        "--out",
        "folder",
        lambda i, o: ["cluster", "--trace", i["trace"], "--groups", "a100-80gb:2", "--out", o],
        "trace",
    ),
    Case(
        "plan",
        ("plan",),
        "--out",
        "folder",
        lambda i, o: [
            "plan",
            "--trace",
            i["trace"],
            "--slo",
            "ttft_p99=2s",
            "--max-steps",
            "3",
            "--no-report",
            "--out",
            o,
        ],
        "trace",
    ),
    Case(
        "fleet-plan",
        ("plan",),
        "--out",
        "folder",
        lambda i, o: ["plan", "--trace", i["trace"], "--slo", "ttft_p99=2s", "--fleet-max-gpus", "1", "--out", o],
        "trace",
    ),
    Case(
        "validate",
        ("validate",),
        "--out",
        "folder",
        lambda i, o: ["validate", BENCH, "--model", "llama-3-8b", "--gpu", "a100-80gb", "--no-plots", "--out", o],
    ),
    Case("memory", ("memory",), "--out", "folder", lambda i, o: ["memory", "--context", "4096", "--out", o]),
    Case("report", ("report",), "--output", "folder", lambda i, o: ["report", i["runs"], "-o", o], "runs"),
    Case(
        "trace-generate",
        ("trace", "generate"),
        "--output",
        "file",
        lambda i, o: ["trace", "generate", "-n", "5", "--seed", "1", "-o", o],
    ),
    Case(
        "trace-convert",
        ("trace", "convert"),
        "--output",
        "file",
        lambda i, o: ["trace", "convert", "--from", "vidur", VIDUR, "--limit", "5", "-o", o],
    ),
    Case(
        "latency",
        ("latency",),
        "--out",
        "file",
        lambda i, o: ["latency", "--shapes", i["shapes"], "--out", o],
        "shapes",
    ),
    Case(
        "calibrate",
        ("calibrate",),
        "--output",
        "file",
        lambda i, o: ["calibrate", i["meas"], "--gpu", "h100-80gb", "-o", o],
        "meas",
    ),
    Case(
        "kernels-replay",
        ("kernels", "replay"),
        "--output",
        "file",
        lambda i, o: ["kernels", "replay", i["record"], "--sample", "2", "--device", "cpu", "-o", o],
        "record",
    ),
    Case(
        "kernels-bench",
        ("kernels", "bench"),
        "--output",
        "file",
        lambda i, o: [
            "kernels",
            "bench",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "20",
            "--block-size",
            "8",
            "--q-heads",
            "4",
            "--kv-heads",
            "2",
            "--head-dim",
            "32",
            "--dtype",
            "fp32",
            "-o",
            o,
        ],
    ),
    Case("sweep", ("sweep",), "--out", "file", lambda i, o: ["sweep", i["grid"], "--out", o + ".csv"], "grid"),
    Case(
        "run-record",
        ("run",),
        "--record-batches",
        "file",
        lambda i, o: [
            "run",
            "--trace",
            i["trace"],
            "--allocator",
            "paged:16",
            "--model",
            TINY,
            "--kv-pool-gb",
            "0.0005",
            "--max-seq-len",
            "512",
            "--no-plots",
            "--record-batches",
            o,
            "--out",
            str(Path(o).parent / "rec-results"),
        ],
        "trace",
    ),
    Case(
        "compare-record",
        ("compare",),
        "--record-batches",
        "file",
        lambda i, o: [
            "compare",
            "--trace",
            i["trace"],
            "--allocators",
            "paged:16",
            "--model",
            TINY,
            "--kv-pool-gb",
            "0.0005",
            "--max-seq-len",
            "512",
            "--no-plots",
            "--record-batches",
            o,
            "--out",
            str(Path(o).parent / "rec-results"),
        ],
        "trace",
    ),
]
# flags that a command accepts (shared option groups) but does not write with, each with the reason
NOT_WRITTEN = {(("plan",), "--record-batches"): "plan does not record batches (a known gap, not a write)"}
FOLDERS = [c for c in CASES if c.kind == "folder"]
FILES = [c for c in CASES if c.kind == "file"]


def _output_flags(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _output_flags(sub, path + (name,))
        else:
            for flag in OUTPUT_FLAGS & set(action.option_strings):
                yield path, flag


def test_every_output_flag_is_covered():
    """Every subcommand flag that names where to write has a case here (a new command must be added)."""
    have = {(c.command, c.flag) for c in CASES}
    missing = sorted(set(_output_flags(make_parser())) - have - set(NOT_WRITTEN))
    assert not missing, f"commands with an output flag missing from CASES in {__file__}: {missing}"


def _own(folder: Path) -> set[str]:
    return set((folder / MANIFEST).read_text().split())


def _run(case: Case, inp: dict, out) -> int:
    return main(case.argv(inp, str(out)))


def _written(case: Case, out: str) -> Path:
    return Path(out + ".csv") if case.id == "sweep" else Path(out)


# ---------------------------------------------------------------- folders


@pytest.mark.parametrize("case", FOLDERS, ids=lambda c: c.id)
def test_out_dot_from_an_empty_and_a_results_only_folder(case, inp, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert _run(case, inp, ".") == 0
    assert work.is_dir() and Path(os.getcwd()) == work
    first = _own(work)
    assert first and all((work / n).is_file() for n in first)
    assert _run(case, inp, ".") == 0  # now a results-only folder
    assert work.is_dir() and Path(os.getcwd()) == work and _own(work) == first
    assert sorted(os.listdir(tmp_path)) == ["work"]  # nothing beside it (no staging or retired sibling)
    assert not [n for n in os.listdir(work) if n.startswith(".kvsim-stage")]


@pytest.mark.parametrize("case", FOLDERS, ids=lambda c: c.id)
def test_out_symlink_is_written_through_and_kept(case, inp, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "notes.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    for _ in range(2):
        assert _run(case, inp, link) == 0
        assert link.is_symlink() and os.readlink(link) == str(real)
        assert (real / "notes.txt").read_text() == "mine"
        assert _own(real) and all((real / n).is_file() for n in _own(real))
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


@pytest.mark.parametrize("case", FOLDERS, ids=lambda c: c.id)
def test_a_rerun_removes_earlier_results_and_keeps_the_users_files(case, inp, tmp_path):
    out = tmp_path / "res"
    assert _run(case, inp, out) == 0
    (out / "notes.txt").write_text("mine")
    # a file an earlier run (or an earlier kvsim) wrote that this run does not write
    (out / "old_table.csv").write_text("stale")
    (out / MANIFEST).write_text((out / MANIFEST).read_text() + "old_table.csv\n")
    assert _run(case, inp, out) == 0
    assert not (out / "old_table.csv").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert "notes.txt" not in _own(out)


@pytest.mark.parametrize("case", FOLDERS, ids=lambda c: c.id)
def test_a_users_file_of_a_result_name_is_refused_not_replaced(case, inp, tmp_path, capsys):
    probe = tmp_path / "probe"
    assert _run(case, inp, probe) == 0
    name = sorted(n for n in _own(probe) if not n.startswith("."))[0]
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("the user's own")
    capsys.readouterr()
    assert _run(case, inp, out) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and name in err[0]
    assert sorted(os.listdir(out)) == [name] and (out / name).read_text() == "the user's own"


@pytest.mark.parametrize("case", FOLDERS, ids=lambda c: c.id)
def test_bad_folder_targets_are_one_line_errors(case, inp, tmp_path, capsys):
    # a dangling symlink
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert _run(case, inp, dangling) != 0
    assert "does not exist" in capsys.readouterr().err
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    # a file (the trace itself, where the command reads one)
    target = Path(inp[case.input]) if case.input else tmp_path / "a-file"
    if not case.input:
        target.write_text("data")
    before = target.read_bytes()
    assert _run(case, inp, target) != 0
    assert "not a folder" in capsys.readouterr().err and target.read_bytes() == before
    # a folder under a file
    (tmp_path / "a-file-2").write_text("data")
    assert _run(case, inp, tmp_path / "a-file-2" / "x") != 0
    assert "cannot write there" in capsys.readouterr().err and (tmp_path / "a-file-2").read_text() == "data"


@pytest.mark.parametrize("case", FOLDERS[:1] + [c for c in FOLDERS if c.id == "report"], ids=lambda c: c.id)
def test_out_under_a_read_only_folder(case, inp, tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert _run(case, inp, ro / "res") != 0
        assert "cannot write there" in capsys.readouterr().err
    finally:
        ro.chmod(0o755)


def test_out_home(inp, tmp_path, monkeypatch):
    """`--out ~` (quoted, so the shell left it) is the home folder, not a folder named '~'; the user's files there
    are kept."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("mine")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--trace", inp["trace"], "--no-plots", "--out", "~"]) == 0
    assert not (tmp_path / "~").exists()
    assert (home / ".bashrc").read_text() == "mine" and (home / "runs.csv").is_file()


def test_a_quoted_tilde_file_is_refused_and_a_folder_named_like_the_model_is_fine(inp, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert main(["trace", "generate", "-n", "3", "-o", "~/t.jsonl"]) != 0
    assert "did not expand" in capsys.readouterr().err and not (tmp_path / "~").exists()
    assert main(["run", "--trace", inp["trace"], "--model", "llama-3-8b", "--no-plots", "--out", "llama-3-8b"]) == 0
    assert (tmp_path / "llama-3-8b" / "runs.csv").is_file()


def test_out_dot_beside_the_trace_keeps_it(inp, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(Path(inp["trace"]).read_bytes())
    assert main(["run", "--trace", "t.jsonl", "--no-plots", "--out", "."]) == 0
    assert main(["run", "--trace", "t.jsonl", "--no-plots", "--allocator", "max", "--out", "."]) == 0
    assert trace.read_bytes() == Path(inp["trace"]).read_bytes() and "max" in (tmp_path / "runs.csv").read_text()


def test_fewer_outputs_on_a_rerun_leave_no_stale_files(inp, tmp_path):
    """run with plots then without; validate the same; plan with a report and a window, then without; cluster
    in Parquet then CSV."""
    t = inp["trace"]
    run = tmp_path / "run"
    assert main(["run", "--trace", t, "--out", str(run)]) == 0
    assert (run / "latency_cdf.png").exists()
    assert main(["run", "--trace", t, "--no-plots", "--out", str(run)]) == 0
    assert not list(run.glob("*.png"))
    val = tmp_path / "val"
    args = ["validate", BENCH, "--model", "llama-3-8b", "--gpu", "a100-80gb", "--out", str(val)]
    assert main(args) == 0 and (val / "predicted_vs_measured.png").exists()
    assert main(args + ["--no-plots"]) == 0
    assert sorted(os.listdir(val)) == [".kvsim-config", MANIFEST, "requests.csv", "summary.md", "validate.csv"]
    plan = tmp_path / "plan"
    args = ["plan", "--trace", t, "--slo", "ttft_p99=2s", "--max-steps", "3", "--out", str(plan)]
    assert main(args + ["--plan-requests", "6"]) == 0
    assert (plan / "report.md").exists() and (plan / "plan_window.jsonl").exists()
    assert main(args + ["--no-report", "--plan-requests", "0"]) == 0
    assert sorted(os.listdir(plan)) == [".kvsim-config", MANIFEST, "plan.csv", "plan_points.csv"]
    cl = tmp_path / "cl"
    args = ["cluster", "--trace", t, "--groups", "a100-80gb:2", "--out", str(cl)]
    assert main(args + ["--format", "parquet"]) == 0 and (cl / "fleet.parquet").exists()
    assert main(args) == 0 and not list(cl.glob("*.parquet"))


def test_inputs_inside_the_results_folder_are_refused(inp, tmp_path, capsys):
    cmp = tmp_path / "cmp"
    assert (
        main(["compare", "--trace", inp["trace"], "--allocators", "max,paged:16", "--no-plots", "--out", str(cmp)]) == 0
    )
    before = {p.name: p.read_bytes() for p in cmp.iterdir()}
    assert main(["report", str(cmp / "runs.csv"), "-o", str(cmp)]) != 0
    assert "holds the input" in capsys.readouterr().err
    assert main(["report", str(cmp), "-o", str(cmp)]) != 0
    assert "is the input folder" in capsys.readouterr().err
    plan = tmp_path / "plan"
    assert (
        main(
            [
                "plan",
                "--trace",
                inp["trace"],
                "--slo",
                "ttft_p99=2s",
                "--max-steps",
                "3",
                "--no-report",
                "--plan-requests",
                "6",
                "--out",
                str(plan),
            ]
        )
        == 0
    )
    window = (plan / "plan_window.jsonl").read_bytes()
    assert main(["run", "--trace", str(plan / "plan_window.jsonl"), "--no-plots", "--out", str(plan)]) != 0
    assert "holds the input" in capsys.readouterr().err
    assert (plan / "plan_window.jsonl").read_bytes() == window
    assert {p.name: p.read_bytes() for p in cmp.iterdir()} == before


def test_a_failed_run_leaves_the_earlier_results(inp, tmp_path, monkeypatch):
    out = tmp_path / "res"
    assert (
        main(["validate", BENCH, "--model", "llama-3-8b", "--gpu", "a100-80gb", "--no-plots", "--out", str(out)]) == 0
    )
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    from kvsim.commands import validate

    def fail(*a, **k):
        from kvsim.errors import ConfigError

        raise ConfigError("disk full")  # a failure part-way through writing

    monkeypatch.setattr(validate, "save_table", fail)
    assert main(["validate", BENCH, "--model", "llama-3-8b", "--gpu", "a100-80gb", "--out", str(out)]) != 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ---------------------------------------------------------------- files


@pytest.mark.parametrize("case", FILES, ids=lambda c: c.id)
def test_a_symlink_to_a_file_is_written_through(case, inp, tmp_path):
    target = tmp_path / "data" / "target"
    target.parent.mkdir()
    link = tmp_path / "out" / "link"
    link.parent.mkdir()
    real = _written(case, str(target))
    real.write_text("old")
    shown = _written(case, str(link))
    shown.symlink_to(real)
    assert _run(case, inp, link) == 0
    assert shown.is_symlink() and os.readlink(shown) == str(real)
    assert real.read_bytes() != b"old" and real.stat().st_size > 0
    assert not [n for n in os.listdir(link.parent) if n.endswith(".tmp") or ".tmp." in n]
    assert not [n for n in os.listdir(target.parent) if n != real.name and not n.endswith(".parts")]


@pytest.mark.parametrize("case", FILES, ids=lambda c: c.id)
def test_bad_file_targets_are_one_line_errors(case, inp, tmp_path, capsys):
    dangling = _written(case, str(tmp_path / "dangling"))
    dangling.symlink_to(tmp_path / "nowhere")
    assert _run(case, inp, tmp_path / "dangling") != 0
    assert "does not exist" in capsys.readouterr().err
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    folder = _written(case, str(tmp_path / "folder"))
    folder.mkdir()
    (folder / "keep").write_text("mine")
    assert _run(case, inp, tmp_path / "folder") != 0
    assert "is a folder" in capsys.readouterr().err and (folder / "keep").read_text() == "mine"
    if case.input and case.id != "sweep":  # the output is the command's input
        src = Path(inp[case.input])
        before = src.read_bytes()
        assert _run(case, inp, src) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "input" in err[0] and src.read_bytes() == before
