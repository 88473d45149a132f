"""The held-out llm-d runs of Llama-4-Scout FP8 on four H100s (benchmarks/validate_llmd.py): the excerpt is what
its README says, a resent prompt finds its own cached blocks in the replay, and the committed report is what the
replay gives now."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from kvsim.commands.validate import SUMMARY_METRICS

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "validation-llmd" / "validate.csv"


def _module():
    spec = importlib.util.spec_from_file_location("validate_llmd", ROOT / "benchmarks" / "validate_llmd.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_excerpt_is_28_runs_of_the_same_252_prompts():
    d = _module().load()
    assert d.groupby(["session", "qps"]).size().eq(252).all() and d.groupby(["session", "qps"]).ngroups == 28
    first = d[d.qps == 4].sort_values("prompt").prompt_tokens.to_numpy()
    for _, run in d.groupby("qps"):
        assert (run.sort_values("prompt").prompt_tokens.to_numpy() == first).all()
    assert d.groupby("session").launch_s.min().eq(0).all()


def test_the_committed_report_is_the_replay_of_today():
    v = _module()
    d = v.load()
    rows = pd.DataFrame(v.replay(d[d.session == 1]))
    saved = pd.read_csv(REPORT)
    saved = saved[saved.session == 1].set_index("qps")
    for r in rows.itertuples():
        for m in SUMMARY_METRICS:
            assert getattr(r, f"{m}_predicted") == pytest.approx(saved.loc[r.qps, f"{m}_predicted"], rel=1e-9)
    # the runs after the first find every full block of their prompts cached by the run before
    assert (saved.cache == ["empty"] + ["warm"] * (len(saved) - 1)).all()


def test_a_resent_prompt_is_served_from_its_cached_blocks():
    v = _module()
    d = v.load()
    two = d[(d.session == 1) & d.qps.isin([4, 8])]
    from kvsim.options import config_from_options
    from kvsim.runner import served_spec, simulate

    cfg = config_from_options(v.SERVER)
    out = simulate(v.session_requests(two), cfg, served_spec(cfg))
    q = out.requests
    second = q[q.id.str.startswith("8/")]
    first = q[q.id.str.startswith("4/")]
    assert first.cached_prompt_tokens.sum() == 0
    # all but the last partial block (vLLM recomputes at least the last token)
    full = (second.prompt_tokens - 1) // v.BLOCK * v.BLOCK
    assert (second.cached_prompt_tokens.to_numpy() >= full.to_numpy() - v.BLOCK).all()
    assert second.cached_prompt_tokens.sum() / second.prompt_tokens.sum() > 0.95
