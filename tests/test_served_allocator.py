"""Every place that picks an allocator for the user picks the one vLLM serves the model with
(kvsim.runner.served_allocator): `kvsim run`, `kvsim validate`, plan points and the validation harnesses in
benchmarks/. Until 2026-12-07 the harnesses replayed every model with `paged`, which on gpt-oss keeps every
layer's tokens: half the sequences vLLM's hybrid manager holds, and 4x the measured speed of decode on a
held-out run whose pool fills."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from kvsim.options import config_from_args
from kvsim.runner import served_allocator

ROOT = Path(__file__).resolve().parents[1]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--model", "gpt-oss-120b"], "hybrid+prefix"),
        (["--model", "gpt-oss-120b", "--no-enable-prefix-caching"], "hybrid"),
        (["--model", "llama-4-scout", "--vllm-version", "0.11"], "naive+prefix"),  # no hybrid manager then
        (["--model", "llama-3-8b"], "paged+prefix"),
    ],
)
def test_the_served_allocator(args, expected):
    assert served_allocator(config_from_args(args)) == expected


def test_kvsim_run_lays_out_what_the_release_serves(tmp_path, capsys):
    from kvsim.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(open(ROOT / "traces" / "chat.jsonl").readlines()[:20]))
    base = ["run", "--trace", str(trace), "--model", "llama-4-scout", "--gpu", "h200", "-tp", "8", "--no-plots"]
    for version, kind in (("0.11", "naive"), ("0.13", "hybrid")):
        out = tmp_path / version
        assert main([*base, "--vllm-version", version, "--out", str(out)]) == 0
        assert pd.read_csv(out / "runs.csv").allocator.tolist() == [f"{kind}:16+prefix"]
    capsys.readouterr()


def test_a_plan_point_without_an_allocator_takes_the_served_one():
    from kvsim.planning.point import point_config

    _, spec, _ = point_config({"trace": "t.jsonl", "model": "gpt-oss-20b"})
    assert str(spec) == "hybrid:16+prefix"
    _, spec, _ = point_config({"trace": "t.jsonl", "model": "gpt-oss-20b", "allocator": "paged"})
    assert str(spec) == "paged:16"  # named: as named


def test_the_gpustack_harness_replays_gpt_oss_with_the_hybrid_manager():
    """gpt-oss-120b on one A100, 100 prompts of 32,000 tokens at once (held out): the pool holds about two
    such prompts with every layer full, four with the sliding layers keeping their window. Measured TPOT
    228 ms; replayed 52 ms with `paged`, 199 ms now."""
    v = _module("validate_gpustack")
    runs = v.load(str(ROOT / "benchmarks" / "data" / "gpustack_vllm_held_out.csv"))
    r = runs[(runs.page == "gpt-oss-120b_a100") & (runs.isl == 32000) & (runs.tp == 1)].iloc[0]
    got = v.replay(r)
    assert 0.8 <= got["tpot_p50"] / (r.median_tpot_ms / 1e3) <= 1.2
    assert 0.7 <= got["ttft_p50"] / (r.median_ttft_ms / 1e3) <= 1.2


def test_kvsim_plan_without_allocators_plans_the_served_layout(tmp_path, capsys):
    from kvsim.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(open(ROOT / "traces" / "chat.jsonl").readlines()[:30]))
    out = tmp_path / "plan"
    args = ["plan", "--trace", str(trace), "--model", "gpt-oss-20b", "--gpu", "h100", "--slo", "ttft_p99=5s"]
    assert main([*args, "--max-steps", "2", "--out", str(out), "--no-plots"]) == 0
    assert set(pd.read_csv(out / "plan.csv").allocator) == {"hybrid:16+prefix"}
    capsys.readouterr()
