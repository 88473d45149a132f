"""Regression tests for bugs found by adversarial testing (issue: reliability), one per cause."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time

import pandas as pd
import pytest

from kvsim.allocators import make_allocator
from kvsim.cli import main
from kvsim.config import MemoryConfig, plan_pool
from kvsim.errors import ConfigError, TraceError
from kvsim.hardware import get_gpu, get_model
from kvsim.planning.capacity import Evaluation, find_capacity


def test_readme_mooncake_radix_with_partial_preemption_runs(tmp_path):
    """Was IndexError in radix._evict_one: an unreferenced cached node with a held child was counted as
    evictable (release_tail did not truncate the radix cursor)."""
    out = tmp_path / "o"
    assert (
        main(
            [
                "compare",
                "--trace",
                "traces/mooncake_excerpt.jsonl",
                "--model",
                "qwen2.5-7b",
                "--max-model-len",
                "131072",
                "--gpu",
                "h200-141gb",
                "--allocators",
                "radix,paged+prefix",
                "--partial-preemption",
                "--kv-pool-gb",
                "8",
                "--no-plots",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    req = pd.read_csv(out / "requests.csv")
    assert len(req) == 2 * 393 and (req.cached_prompt_tokens <= req.prompt_tokens).all()
    runs = pd.read_csv(out / "runs.csv")
    assert (runs.preemptions > 0).all()  # the 8 GiB pool does force partial preemptions
    # the per-request cache hits add up to the run's hit counter, summed over restarts
    for alloc, g in req.groupby("allocator"):
        row = runs[runs.allocator == alloc].iloc[0]
        assert g.cache_hit_tokens_all_starts.sum() == row.prefill_tokens_saved


def test_block_pools_are_lazy():
    """A tiny model on a big GPU gives 10^8 blocks: the pool must not build a Python object per block."""
    a = make_allocator("paged:16+prefix", 16 * 10**8, 4096)
    assert a.num_free_blocks == 10**8 and len(a.pool.ref) == 0
    r = make_allocator("radix:16", 16 * 10**8, 4096)
    assert r.num_free_blocks == 10**8 and len(r.pool.ref) == 0


def test_a_set_pool_must_fit_the_gpu():
    model, gpu = get_model("llama-2-7b"), get_gpu("a100-40gb")
    with pytest.raises(ConfigError, match="does not fit on a100-40gb"):
        plan_pool(model, gpu, MemoryConfig(kv_pool_gb=123))
    with pytest.raises(ConfigError, match="--num-blocks"):
        plan_pool(model, gpu, MemoryConfig(num_blocks=10**7))
    assert plan_pool(model, gpu, MemoryConfig(kv_pool_gb=123, ignore_gpu_memory=True)).pool_bytes == 123 * 2**30
    assert plan_pool(model, gpu, MemoryConfig(kv_pool_gb=20)).pool_bytes == 20 * 2**30


def test_trace_error_crosses_process_boundaries():
    e = pickle.loads(pickle.dumps(TraceError("t.jsonl", 3, "prompt_tokens", "must be >= 1")))
    assert str(e) == "t.jsonl:3: field 'prompt_tokens': must be >= 1" and e.line == 3


def test_capacity_search_says_when_it_ran_out_of_steps():
    def always(ok):
        return lambda r: Evaluation(r, ok, [] if ok else ["ttft too high"])

    never = find_capacity(always(False), 10.0, max_steps=3)
    assert never.status == "not-found" and not never.conclusive and "raise --max-steps" in never.reason
    really_never = find_capacity(always(False), 10.0, max_steps=100)
    assert really_never.status == "never" and "fails even at" in really_never.reason
    unbounded = find_capacity(always(True), 10.0, max_steps=3)
    assert unbounded.status == "lower-bound" and unbounded.max_rate == 40.0
    bracketed = find_capacity(lambda r: Evaluation(r, r <= 13.0, []), 10.0, max_steps=3)
    assert bracketed.status == "unconverged" and bracketed.bracket == (10.0, 15.0)
    done = find_capacity(lambda r: Evaluation(r, r <= 13.0, []), 10.0, tol=0.02, max_steps=40)
    assert done.status == "found" and done.bracket[0] <= 13.0 <= done.bracket[1]


def _sweep(tmp_path, trace):
    grid = tmp_path / "g.yaml"
    grid.write_text(f"base: {{trace: {trace}, allocator: paged}}\ngrid: {{rate: [4, 8]}}\n")
    from kvsim.planning.sweep import load_grid, run_sweep

    return run_sweep(load_grid(str(grid)), str(tmp_path / "s.csv"))


def test_sweep_resume_recomputes_points_whose_trace_changed(tmp_path):
    trace = tmp_path / "t.jsonl"
    reqs = [{"arrival_s": 0.1 * i, "prompt_tokens": 50, "output_tokens": 10} for i in range(30)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    _, computed, reused = _sweep(tmp_path, trace)
    assert (computed, reused) == (2, 0)
    _, computed, reused = _sweep(tmp_path, trace)
    assert (computed, reused) == (0, 2)
    reqs[5]["output_tokens"] = 99  # same file name, new content
    trace.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    from kvsim.planning.point import _load

    _load.cache_clear()
    table, computed, reused = _sweep(tmp_path, trace)
    assert (computed, reused) == (2, 0)
    assert not list((tmp_path / "s.csv.parts").glob("*.tmp*"))  # no temporary left behind


def test_sweep_nan_rate_is_an_error_not_a_hang(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {trace: traces/chat.jsonl}\ngrid: {rate: [.nan]}\n")
    assert main(["sweep", str(grid), "--out", str(tmp_path / "s.csv")]) == 2
    assert "'rate': must be finite" in capsys.readouterr().err


def test_ray_address_that_answers_nothing_fails_fast(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {trace: traces/chat.jsonl}\ngrid: {rate: [4]}\n")
    t0 = time.monotonic()
    rc = main(["sweep", str(grid), "--out", str(tmp_path / "s.csv"), "--backend", "ray", "--address", "127.0.0.1:1"])
    assert rc == 2 and "no Ray cluster answers" in capsys.readouterr().err
    assert time.monotonic() - t0 < 60  # a deadline, not a benchmark: it used to retry for minutes


WATCHED_CHILD = """
import multiprocessing as mp, os, sys, time
from kvsim.planning.parallel import watch_parent

def child(parent):
    watch_parent(parent, interval_s=0.1)
    time.sleep(120)

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=child, args=(os.getpid(),))
    p.start()
    print(p.pid, flush=True)
    time.sleep(1.0)  # let the child start its watch
    os._exit(0)  # like kill -9: no chance to stop the child
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX parent ids")
def test_workers_exit_when_their_parent_is_killed(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WATCHED_CHILD)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    pid = int(r.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    pytest.fail("the orphaned worker kept running")


def test_dedup_share_is_bounded_and_apart_from_memory_shares(tmp_path):
    """saved% used to be saved/pool (396% beside shares adding to 100%); dedup% is saved/(held) < 100%."""
    trace = tmp_path / "t.jsonl"
    reqs = [
        {
            "arrival_s": 0.01 * i,
            "prompt_tokens": 512,
            "output_tokens": 4,
            "n": 4,
            "hash_ids": list(range(32)),
            "hash_block_tokens": 16,
        }
        for i in range(40)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    out = tmp_path / "o"
    assert (
        main(
            [
                "run",
                "--trace",
                str(trace),
                "--allocator",
                "paged+prefix",
                "--num-blocks",
                "400",
                "--no-plots",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    row = pd.read_csv(out / "runs.csv").iloc[0]
    assert 0 < row.sharing_dedup_frac < 1
    shares = sum(row[f"mem_{c}"] for c in ("token_states", "reserved", "internal_frag", "external_frag", "free"))
    assert shares == pytest.approx(1.0)


def test_an_output_path_equal_to_an_input_path_is_refused(tmp_path, capsys):
    """`run --record-batches <trace>`, `calibrate M.csv -o M.csv`, `trace convert IN -o IN` and the like once
    replaced their input silently; now they refuse before reading anything, and the input is intact."""
    import shutil

    from kvsim.cli import main

    trace = tmp_path / "t.jsonl"
    shutil.copy("traces/chat.jsonl", trace)
    raw = tmp_path / "m.jsonl"
    shutil.copy("traces/mooncake_excerpt_raw.jsonl", raw)
    csv = tmp_path / "lengths.csv"
    shutil.copy("traces/azure_conv_lengths.csv", csv)
    mlp = tmp_path / "mlp.csv"
    mlp.write_text("x\n")  # refused before it is read
    grid = tmp_path / "g.yaml"
    grid.write_text(f"base: {{trace: {trace}}}\ngrid: {{allocator: [max]}}\n")
    before = {p: p.read_bytes() for p in (trace, raw, csv, mlp, grid)}
    cases = [
        [
            "run",
            "--trace",
            str(trace),
            "--allocator",
            "paged",
            "--record-batches",
            str(trace),
            "--out",
            str(tmp_path / "o"),
        ],
        ["trace", "convert", "--from", "mooncake", str(raw), "-o", str(raw)],
        ["trace", "generate", "-o", str(csv), "-n", "10", "--lengths-csv", str(csv)],
        ["calibrate", str(mlp), "-o", str(mlp), "--gpu", "a100-80gb"],
        ["latency", "--shapes", str(csv), "--out", str(csv)],
    ]
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "is the input file" in err and "Traceback" not in err, (argv, err)
    assert {p: p.read_bytes() for p in before} == before


def test_a_run_that_mostly_rejects_says_so_and_one_that_rejects_all_still_writes_its_plots(tmp_path, capsys):
    from kvsim.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(open("traces/chat.jsonl").readlines()[:60]))
    assert (
        main(
            [
                "compare",
                "--trace",
                str(trace),
                "--max-model-len",
                "100",
                "--allocators",
                "paged",
                "--out",
                str(tmp_path / "a"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "warning: paged:16 rejected" in err and "exceeds max_model_len" in err
    # nothing finishes at all: the latency plot once crashed on an empty legend
    assert (
        main(
            [
                "compare",
                "--trace",
                str(trace),
                "--max-model-len",
                "2",
                "--allocators",
                "paged,max",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    assert (tmp_path / "b" / "latency_cdf.png").exists()


@pytest.mark.parametrize(
    "flags",
    [
        ["--kv-pool-gb", "1e300"],
        ["--kv-pool-gb", "1e300", "--ignore-gpu-memory"],
        ["--swap-space", "1e300", "--preemption-mode", "swap"],
        ["--activation-reserve-gb", "1e300"],
        ["--kv-pool-gb", "1e9", "--ignore-gpu-memory"],
    ],
)
def test_memory_sizes_at_extreme_values_are_clean_errors(flags, tmp_path, capsys):
    """Once an internal error (an infinite byte count converted to an integer)."""
    from kvsim.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(open("traces/chat.jsonl").readlines()[:5]))
    assert main(["run", "--trace", str(trace), *flags, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvsim: error:") and "internal error" not in err


def test_report_reads_a_compare_folder_and_a_csv_with_a_byte_order_mark(tmp_path, capsys):
    """Both were internal errors: a compare's runs have no rate column, and a spreadsheet's BOM hid the
    first column's name."""
    from kvsim.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(open("traces/chat.jsonl").readlines()[:40]))
    cmp = tmp_path / "cmp"
    assert main(["compare", "--trace", str(trace), "--allocators", "max,paged", "--no-plots", "--out", str(cmp)]) == 0
    assert main(["report", str(cmp), "-o", str(tmp_path / "r1")]) == 0
    md = (tmp_path / "r1" / "report.md").read_text()
    assert "| max |" in md and "| paged:16 |" in md
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (cmp / "runs.csv").read_bytes())
    assert main(["report", str(bom), "-o", str(tmp_path / "r2")]) == 0
    assert "| max |" in (tmp_path / "r2" / "report.md").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty), "-o", str(tmp_path / "r3")]) == 2
    assert "without results" in capsys.readouterr().err


def test_plan_terminal_names_model_gpu_price_and_shows_replicas_only_for_a_target(tmp_path, capsys):
    from kvsim.cli import main

    trace = tmp_path / "t.jsonl"
    with open("traces/chat.jsonl") as f:
        trace.write_text("".join(next(f) for _ in range(300)))
    assert (
        main(
            [
                "plan",
                "--trace",
                str(trace),
                "--slo",
                "ttft_p99=1s",
                "--gpus",
                "a100-80gb:2.5",
                "--no-report",
                "--out",
                str(tmp_path / "a"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "llama-2-7b on a100-80gb ($2.5/GPU-h)" in out and "repli" not in out
    assert (
        main(
            [
                "plan",
                "--trace",
                str(trace),
                "--slo",
                "ttft_p99=1s",
                "--gpus",
                "a100-80gb:2.5",
                "--no-report",
                "--target-rate",
                "30",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "repli" in out and "target 30 req/s" in out
    import pandas as pd

    row = pd.read_csv(tmp_path / "b" / "plan.csv").iloc[0]
    # blended price: the same dollars over prompt + output tokens
    assert row.cost_per_m_tokens == pytest.approx(
        row.cost_per_m_output_tokens * row.mean_output_tokens / (row.mean_prompt_tokens + row.mean_output_tokens)
    )


def test_a_results_folder_is_replaced_whole(tmp_path, monkeypatch):
    """A failure while writing leaves the earlier results as they were and no staging folder; a swap that a
    kill cut between its two renames is finished by the next writer; a folder with a user's own files is
    written in place, keeping them."""
    from kvsim.cli import main
    from kvsim.files import recover_results_folder
    from kvsim.output import writer

    trace = tmp_path / "t.jsonl"
    with open("traces/chat.jsonl") as f:
        trace.write_text("".join(next(f) for _ in range(50)))
    out = tmp_path / "res"
    assert main(["run", "--trace", str(trace), "--no-plots", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def half_then_fail(stage, *args):
        (stage / "requests.csv").write_text("half")
        raise RuntimeError("killed")

    monkeypatch.setattr(writer, "_write_results", half_then_fail)
    with pytest.raises(RuntimeError):
        writer.write_results(out, [], {}, [])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res", "t.jsonl"]
    monkeypatch.undo()
    # killed between the renames: the old folder retired, the complete new one not yet in place
    new = tmp_path / ".res.kvsim-new-99999999"
    out.rename(tmp_path / ".res.kvsim-old-99999999")
    new.mkdir()
    (new / "summary.md").write_text("new")
    (new / ".complete").write_text("")
    recover_results_folder(out)
    assert (out / "summary.md").read_text() == "new" and not (out / ".complete").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res", "t.jsonl"]
    # a user's own file: results written in place beside it
    (out / "my-notes.txt").write_text("mine")
    assert main(["run", "--trace", str(trace), "--no-plots", "--out", str(out)]) == 0
    assert (out / "my-notes.txt").read_text() == "mine" and (out / "runs.csv").exists()
