"""The committed comparison with AIConfigurator's estimator on the held-out closed-loop runs
(benchmarks/compare_aiconfigurator.py --held-out): it covers every client run of validate_gpustack.py's
held-out tables once, says why a run has no estimate, and its table is what the files give."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "validation-gpustack"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_held_out_client_run_is_estimated_or_says_why():
    cmp = _module("compare_aiconfigurator")
    runs = pd.DataFrame(cmp.held_out_runs()).astype({"clients": str, "prompts": int})
    aic = pd.read_csv(REPORT / "aiconfigurator.csv", comment="#", dtype={"vllm": str, "clients": str})
    keys = list(cmp.HELD_OUT_KEYS)
    assert not runs.duplicated(keys).any()
    both = runs.merge(aic, on=keys, how="outer", indicator=True, validate="one_to_one", suffixes=("", "_saved"))
    assert (both["_merge"] == "both").all(), both[both["_merge"] != "both"][keys]
    # the estimator was given the run's mean lengths and clients (what the docstring says), not other numbers
    assert (both.isl == both.isl_saved).all() and (both.osl == both.osl_saved).all()
    unknown = ~both.model.isin(list(cmp.AIC_MODELS))
    assert (both.status[unknown] == "no configuration of this model").all()
    ok = both.status == "ok"
    assert ok.sum() >= 9 and both.status[~ok & ~unknown].str.startswith("error: ").all()
    kv = pd.read_csv(REPORT / "validate.csv", dtype={"vllm": str, "clients": str})
    scored = kv.merge(aic[aic.status == "ok"], on=keys, validate="one_to_one")
    assert len(scored) == ok.sum()
    # kvsim's TPOT on these runs, as docs/validation.md states it: within 10% (median |error|)
    assert float(np.median(np.abs(scored.tpot_p50_ratio - 1))) <= 0.10


def test_the_held_out_table_is_rebuilt_from_the_saved_files(tmp_path):
    cmp = _module("compare_aiconfigurator")
    out = tmp_path / "aiconfigurator.md"
    text = cmp.write_held_out_table(REPORT / "aiconfigurator.csv", REPORT / "validate.csv", out)
    assert text == (REPORT / "aiconfigurator.md").read_text(encoding="utf-8")
    assert "| AIConfigurator priced it | 9 |" in text
