"""Calibration from measured vLLM kernels (NVIDIA AIConfigurator's tables; excerpts in tests/data/aic).

The reader's units are checked by hand, the fitting path's vectorised formulas against PerOpModel itself,
the shipped calibrations against the excerpts (within what the full validation measured,
reports/latency-validation/aic.md), and `kvsim calibrate --aic` end to end."""

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu, get_model
from kvsim.calibrate.aic import check_against_perop, evaluate_calibration, fit_aic, read_aic
from kvsim.latency.calibration import Calibration, LinkParams, shipped_calibration
from kvsim.latency.cpu import get_cpu_overhead
from kvsim.latency.perop import PerOpModel

AIC = "tests/data/aic"


def test_the_reader_gives_per_layer_seconds_and_bytes():
    d = read_aic(AIC, "a100_sxm")
    assert d.gpu.name == "a100-80gb"
    raw = pd.read_parquet(f"{AIC}/a100_sxm/attention/vllm/0.14.0/generation_attention_perf.parquet").iloc[0]
    row = d.decode[
        (d.decode.num_seqs == raw.batch_size)
        & (d.decode.q_heads == raw.num_heads)
        & (d.decode.kv_heads == raw.num_key_value_heads)
        & (d.decode.context == raw.isl + raw.step)
    ].iloc[0]
    assert row.seconds == pytest.approx(raw.latency * 1e-3)  # milliseconds in the table
    assert row.kv_bytes == raw.batch_size * (raw.isl + raw.step) * 2 * raw.num_key_value_heads * raw.head_dim * 2
    ar = d.all_reduce
    assert set(ar.backend) <= {"vllm_graph", "nccl"}
    small = ar[(ar.num_gpus == 2)].iloc[0]
    raw = pd.read_parquet(f"{AIC}/a100_sxm/comm/vllm/0.14.0/custom_allreduce_perf.parquet")
    first = raw[(raw.num_gpus == 2) & (raw.backend == "vllm_graph")].sort_values("message_size").iloc[0]
    assert small.message_bytes == 2 * first.message_size  # an element count of bf16
    assert small.seconds <= first.latency * 1e-3 + 1e-12  # the faster of custom all-reduce and NCCL


def test_fitting_formulas_equal_the_model_that_prices_iterations():
    for system in ("a100_sxm", "h100_sxm"):
        d = read_aic(AIC, system)
        calib, _ = shipped_calibration(d.gpu)
        assert check_against_perop(d, calib) < 1e-9
        assert check_against_perop(d, fit_aic(d, calib).calibration(calib)) < 1e-9


@pytest.mark.parametrize("system", ["a100_sxm", "h100_sxm"])
def test_shipped_calibrations_hold_their_measured_error_on_the_excerpts(system):
    """On the excerpt, each regime's median predicted/measured lies within the p10-p90 band the calibration
    recorded on the full tables (its fit["aic"], also in reports/latency-validation/aic.md)."""
    d = read_aic(AIC, system)
    calib, note = shipped_calibration(d.gpu)
    assert note == "" and "AIConfigurator" in calib.sources["decode_attention"]
    recorded = calib.fit["aic"]["in_sample"]
    ev = evaluate_calibration(d, calib)
    checked = 0
    for table in ("decode", "prefill", "all_reduce"):
        assert 0.9 <= recorded[table]["all"]["median"] <= 1.1
        for regime, s in ev[table].items():
            full = recorded[table].get(regime)
            if s.get("n", 0) >= 3 and full:
                assert full["p10"] - 0.05 <= s["median"] <= full["p90"] + 0.05, (table, regime, s, full)
                checked += 1
    assert checked >= 10


def test_fit_on_the_excerpt_predicts_it():
    d = read_aic(AIC, "h100_sxm")
    calib, _ = shipped_calibration(d.gpu)
    f = fit_aic(d, calib)
    assert f.gemm is not None and "gemm_perf" in f.sources["gemm"]
    ev = evaluate_calibration(d, f.calibration(calib))
    for table in ("decode", "prefill", "all_reduce"):
        assert 0.85 <= ev[table]["all"]["median"] <= 1.15, (table, ev[table]["all"])


def test_a_slow_all_reduce_group_is_fitted_not_refused():
    """GB300's 16-GPU all-reduce starts at 46 us: the fit's start (5x the fastest time for NCCL's latency) lay
    past its 200 us bound and kvsim calibrate crashed. The start is clipped into the bounds."""
    from kvsim.calibrate.aic import fit_all_reduce

    sizes = np.array([2.0**k for k in range(10, 30)])
    secs = np.minimum(46e-6 + sizes / 40e9, 120e-6 + sizes / 300e9)
    links = fit_all_reduce(pd.DataFrame({"num_gpus": 16, "message_bytes": sizes, "seconds": secs}))
    link = links["16"]
    assert link.seconds(1024) == pytest.approx(46e-6 + 1024 / 40e9, rel=0.05)
    assert link.seconds(2.0**29) == pytest.approx(120e-6 + 2.0**29 / 300e9, rel=0.05)


def test_all_reduce_takes_the_faster_of_custom_and_nccl_lines():
    link = LinkParams(5e-6, 50e9, 30e-6, 200e9)
    assert link.seconds(1e3) == pytest.approx(5e-6 + 1e3 / 50e9)  # custom all-reduce
    assert link.seconds(1e8) == pytest.approx(30e-6 + 1e8 / 200e9)  # NCCL
    assert LinkParams(5e-6, 50e9).seconds(1e8) == pytest.approx(5e-6 + 1e8 / 50e9)  # one line
    m = PerOpModel(
        get_model("llama-2-70b"),
        get_gpu("h100-80gb"),
        shipped_calibration(get_gpu("h100-80gb"))[0],
        get_cpu_overhead("none"),
        4,
    )
    link = m._links
    act, logits = link.seconds(16 * 8192 * 2), link.seconds(16 * 8000 * 2)
    assert m.communication_s(16, 16) == pytest.approx(161 * act + logits, rel=1e-12)


def test_b200_has_a_preset_and_a_measured_calibration():
    g = get_gpu("b200")
    assert g.sms == 148 and g.memory_bytes == 182641 << 20  # as CUDA reports it (nvidia-smi: 183,359 MiB)
    calib, note = shipped_calibration(g)
    assert note == "" and "b200_sxm" in calib.sources["gemm"]
    assert "borrowed" in calib.sources["elementwise"]


@pytest.mark.parametrize(
    "name,sms,mib,nvlink", [("gb200", 152, 188733, 72), ("b300", 148, 274113, 8), ("gb300", 152, 283136, 72)]
)
def test_grace_blackwell_and_b300_presets_with_measured_calibrations(name, sms, mib, nvlink):
    """Memory as CUDA reports it (vLLM's and PyTorch's totals, see kvsim/hardware/gpus.py), CUDA's SM count,
    the NVLink domain; kernels fitted on the GPU's own AIConfigurator tables, element-wise kernels borrowed
    through B200's."""
    g = get_gpu(name.upper())
    assert g.name == name and g.sms == sms and g.memory_bytes == mib << 20 and g.nvlink_gpus == nvlink
    assert g.arch == "blackwell" and g.tensor_core_speedup("fp4") == 4.0
    calib, note = shipped_calibration(g)
    system = "b300_sxm" if name == "b300" else name
    assert note == "" and calib.derived_from == "" and f" {system}/attention/vllm" in calib.sources["decode_attention"]
    assert calib.sources["elementwise"].startswith("borrowed from b200")
    assert "flashinfer-trtllm" in calib.moe_backends["mxfp4"]
    assert 0.9 <= calib.fit["aic"]["held_out"]["decode"]["all"]["median"] <= 1.1


def test_rtx_pro_6000_is_a_pcie_blackwell_card_with_its_own_calibration():
    from kvsim.activation_reserve import non_torch_bytes

    g = get_gpu("NVIDIA RTX PRO 6000")
    assert g.name == "rtx-pro-6000" and g.sms == 188 and g.memory_bytes == 97250 << 20 and not g.nvlink
    assert g.tensor_core_speedup("fp8") == 2.0  # sm_120 has FP8 (and FP4) tensor cores
    assert non_torch_bytes(g, 4) == pytest.approx((0.13 + 3 * 0.05) * (1 << 30))  # PCIe peers, no NVLink buffers
    calib, note = shipped_calibration(g)
    assert note == "" and "rtx_pro_6000_server/attention/vllm" in calib.sources["decode_attention"]
    assert set(calib.all_reduce) == {"nvswitch"} and "PCIe" in calib.sources["all_reduce"]
    assert calib.sources["elementwise"].startswith("borrowed from l40s")


def test_l40s_is_measured_and_its_all_reduce_is_the_pcie_one():
    calib, note = shipped_calibration(get_gpu("l40s"))
    assert note == "" and "l40s/attention/vllm" in calib.sources["decode_attention"]
    assert set(calib.all_reduce) == {"nvswitch"} and "PCIe" in calib.sources["all_reduce"]
    assert calib.sources["elementwise"].startswith("borrowed: a40's")


def test_data_parallel_exchange_stays_on_nvlink_within_an_nvl72_rack():
    """DP16 of a MoE model: on HGX B200s the exchange crosses nodes and runs at one NIC per GPU; on GB200 the
    16 GPUs share one NVLink domain and keep the measured NCCL line."""
    model = get_model("deepseek-v3")
    times = {}
    for name in ("b200", "gb200"):
        g = get_gpu(name)
        m = PerOpModel(model, g, shipped_calibration(g)[0], get_cpu_overhead("none"), 1, dp=16, expert_parallel=True)
        link = m._dispatch
        size = 4096 * m.hidden_bytes
        times[name] = (m.dispatch_s(4096), link.seconds(size))
    assert times["gb200"][0] == pytest.approx(times["gb200"][1])
    assert times["b200"][0] > times["b200"][1]


def test_calibrate_from_an_aic_folder(tmp_path, capsys):
    from kvsim.cli import main

    out = tmp_path / "c.json"
    assert main(["calibrate", "--aic", AIC, "--system", "h100_sxm", "-o", str(out)]) == 0
    c = json.loads(out.read_text())
    assert c["gpu"] == "h100-80gb" and "vLLM 0.24.0" in c["sources"]["decode_attention"]
    assert "gemm_perf" in c["sources"]["gemm"] and "kept from" in c["sources"]["elementwise"]
    assert "moe_perf" in c["sources"]["moe"] and c["moe"]["t0_s"] > 0
    # every kernel family of the table gets its own fit (--moe-backend), from this table, none kept from another
    assert set(c["moe_backends"]) == {"bf16"} and set(c["moe_backends"]["bf16"]) == {"triton"}
    assert "moe_perf" in c["sources"]["moe_backends"]
    assert c["sources"]["elementwise"].count("kept from") == 1  # a refit of a refit names one origin
    assert math.isfinite(c["decode_attention"]["per_seq_tokens"])
    # the A100 excerpt has no GEMM table: GEMMs stay the base calibration's, and it says so
    assert main(["calibrate", "--aic", AIC, "--system", "a100_sxm", "-o", str(tmp_path / "a.json")]) == 0
    assert "GEMMs not fitted" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--aic", "nowhere"], "not a folder"),
        (["--aic", AIC], "say which system"),
        (["--aic", AIC, "--system", "b300_sxm"], "no such AIConfigurator system"),
        ([], "give measurement files"),
    ],
)
def test_calibrate_refuses_bad_aic_input_cleanly(tmp_path, capsys, args, msg):
    from kvsim.cli import main

    assert main(["calibrate", *args, "-o", str(tmp_path / "c.json")]) != 0
    assert msg in capsys.readouterr().err


def _package_layout(tmp_path, system="h100_sxm", as_system=None):
    """A fake pip package ``aiconfigurator_core`` laid out as the real one: systems/data/<system>/ with
    systems/<system>.yaml one level above the tables (the shared folder keeps the yaml beside them)."""
    pkg = tmp_path / "site" / "aiconfigurator_core"
    (pkg / "systems" / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('kvsim must find the tables without importing')\n")
    shutil.copytree(f"{AIC}/{system}", pkg / "systems" / "data" / (as_system or system))
    return pkg


def test_tables_of_the_installed_package_are_found_without_importing_it(tmp_path, monkeypatch, capsys):
    from kvsim.cli import main
    from kvsim.calibrate.aic import installed_tables, system_root

    pkg = _package_layout(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert installed_tables() == pkg / "systems" / "data"
    # each system from the first folder that has it
    assert system_root([str(tmp_path / "empty"), "installed", AIC], "h100_sxm") == pkg / "systems" / "data"
    assert system_root(["installed", AIC], "a100_sxm") == Path(AIC)
    with pytest.raises(ConfigError, match="no b200_sxm folder"):
        system_root(["installed", AIC], "b200_sxm")
    out = tmp_path / "c.json"
    assert main(["calibrate", "--aic", "--system", "h100_sxm", "-o", str(out)]) == 0
    c = json.loads(out.read_text())
    assert c["gpu"] == "h100-80gb" and "h100_sxm/attention/vllm/0.24.0" in c["sources"]["decode_attention"]


def test_a_system_without_a_preset_takes_its_peaks_from_the_package_yaml(tmp_path, monkeypatch):
    pkg = _package_layout(tmp_path, as_system="x9_sxm")
    (pkg / "systems" / "x9_sxm.yaml").write_text(
        "gpu:\n  mem_bw: 5000000000000\n  mem_capacity: 100000000000\n  bfloat16_tc_flops: 1.0e+15\n  sm_version: 90\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    d = read_aic("installed", "x9_sxm", kinds=("decode",))
    assert d.gpu.name == "x9-sxm" and d.gpu.hbm_bandwidth == 5e12 and d.gpu.sms == 132


def test_no_installed_package_is_a_clear_error(monkeypatch, tmp_path, capsys):
    import importlib.util

    from kvsim.cli import main

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert main(["calibrate", "--aic", "--system", "h100_sxm", "-o", str(tmp_path / "c.json")]) != 0
    assert "pip install aiconfigurator-core" in capsys.readouterr().err


def _write_text_cell(path, column, row, text):
    """Put ``text`` in one numeric cell of a parquet table (a hand-edited or corrupt file)."""
    df = pd.read_parquet(path)
    df[column] = df[column].astype(str)
    df.loc[row, column] = text
    df.to_parquet(path)


def test_a_table_with_a_bad_cell_is_named(tmp_path):
    root = tmp_path / "aic"
    shutil.copytree(f"{AIC}/h100_sxm", root / "h100_sxm")
    _write_text_cell(root / "h100_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet", "latency", 3, "fast")
    with pytest.raises(ConfigError, match="generation_attention_perf.parquet.*latency"):
        read_aic(root, "h100_sxm")
    _write_text_cell(root / "h100_sxm/moe/vllm/0.24.0/moe_perf.parquet", "num_tokens", 5, "many")
    with pytest.raises(ConfigError, match="moe_perf.parquet: row 6: column 'num_tokens'"):
        read_aic(root, "h100_sxm", kinds=("moe",))
    assert np.isfinite(read_aic(AIC, "h100_sxm").decode.seconds).all()


def test_moe_rows_are_read_in_seconds_per_rank_and_priced_as_the_model_prices_them():
    """The fused-MoE table: milliseconds -> seconds, one expert's width on a rank; the fitting formula is the
    one PerOpModel's MoE layers use, expert parallelism included."""
    from kvsim.calibrate.aic import moe_seconds_table
    from kvsim.latency.perop import MoeOp

    d = read_aic(AIC, "h100_sxm", kinds=("moe",))
    m = d.moe
    raw = pd.read_parquet(f"{AIC}/h100_sxm/moe/vllm/0.24.0/moe_perf.parquet")
    # every routing kvsim models, each row with its own (kvsim.latency.routing)
    raw = raw[raw.distribution.isin(["balanced", "power_law_1.01", "power_law_1.2"])]
    assert len(m) == len(raw) and set(m.routing) <= {"balanced", "power-law-1.01", "power-law-1.2"}
    r = raw[
        (raw.moe_tp_size == 4)
        & (raw.num_tokens == 64)
        & (raw.hidden_size == 4096)
        & (raw.distribution == "power_law_1.01")
    ].iloc[0]
    row = m[(m.tp == 4) & (m.tokens == 64) & (m.hidden == 4096) & (m.routing == "power-law-1.01")].iloc[0]
    assert row.seconds == pytest.approx(r.latency * 1e-3) and row.inter == 14336 // 4
    calib, _ = shipped_calibration(d.gpu)
    assert calib.moe is not None and "moe_perf" in calib.sources["moe"]
    table = moe_seconds_table(calib.moe, d.gpu, m)
    for i in range(0, len(m), 17):
        x = m.iloc[i]
        op = MoeOp(int(x.hidden), int(x.inter), int(x.experts), int(x.topk), 2, True, int(x.ep), routing=x.routing)
        assert op.seconds(calib, d.gpu, int(x.tokens), 2) == pytest.approx(table[i], rel=1e-12)


def test_shipped_moe_fit_holds_on_the_excerpt_and_a_fit_on_it_predicts_it():
    from kvsim.calibrate.aic import evaluate_moe, fit_moe_table

    d = read_aic(AIC, "h100_sxm", kinds=("moe",))
    calib, _ = shipped_calibration(d.gpu)
    recorded = calib.fit["aic"]["moe"]["in_sample"]
    ev = evaluate_moe(d.moe, calib, d.gpu)
    for regime, s in ev.items():
        full = recorded[regime]
        assert full["p10"] - 0.05 <= s["median"] <= full["p90"] + 0.05, (regime, s, full)
    refit = replace(calib, moe=fit_moe_table(d.moe, d.gpu))
    assert 0.9 <= evaluate_moe(d.moe, refit, d.gpu)["all"]["median"] <= 1.1
    # without MoE parameters (an older calibration file) the layers are priced by the GEMM parameters, as before
    old = Calibration.from_json({**calib.to_json(), "moe": None})
    assert old.moe is None and evaluate_moe(d.moe, old, d.gpu)["all"]["median"] < 0.9


def test_expert_parallelism_changes_only_the_routed_experts():
    from kvsim.options import config_from_args
    from kvsim.latency import build_latency
    from kvsim.latency.base import StepShape

    shapes = [StepShape.of([(1, 1000)] * 32), StepShape.of([(2048, 0)])]
    dense = [
        build_latency(config_from_args(["--model", "llama-3-70b", "--gpu", "h100-80gb", "-tp", "4", *ep]))
        for ep in ([], ["--enable-expert-parallel"])
    ]
    assert [dense[0].step_time(s) for s in shapes] == [dense[1].step_time(s) for s in shapes]  # no experts
    tp, ep = (
        build_latency(config_from_args(["--model", "llama-4-scout", "--gpu", "h100-80gb", "-tp", "8", *e]))
        for e in ([], ["--enable-expert-parallel"])
    )
    (_, _, e_tp), (_, _, e_ep) = tp.classes[-1], ep.classes[-1]
    assert (e_tp.ep, e_ep.ep) == (1, 8) and e_ep.width == 8 * e_tp.width == 8192  # whole experts, 2 per GPU
    for s in shapes:
        a, b = tp.breakdown(s), ep.breakdown(s)
        assert a["attention_s"] == b["attention_s"] and a["communication_s"] == b["communication_s"]
        assert a["dense_s"] != b["dense_s"]


def test_quantized_experts_are_priced_from_their_own_kernels():
    """FP8 (block-scaled) and MXFP4 experts use the calibration's moe_quant parameters: FP8 GEMMs at twice the
    bf16 FLOP rate where the GPU has FP8 tensor cores (H100), at the bf16 rate where it has not (A100, whose
    vLLM runs FP8 weights through weight-only kernels); a calibration without them prices the quantized weights'
    bytes with the bf16 parameters, as before. A fit on rows made by known parameters recovers them."""
    from kvsim.calibrate.aic import fit_moe_table, moe_seconds_table
    from kvsim.latency.calibration import MoeParams
    from kvsim.latency.perop import MoeOp, PerOpModel, moe_formula
    from kvsim.latency.cpu import get_cpu_overhead

    h100, a100 = get_gpu("h100-80gb"), get_gpu("a100-80gb")
    fp8 = MoeParams(30e-6, 2e-7, 2e-9, 0.0, 0.3, 0.8, 1.6)
    calib = Calibration("h100-80gb", moe=MoeParams(), moe_quant={"fp8": fp8})
    op = MoeOp(7168, 2048, 256, 8, 1.0, True, 8, "fp8", "uniform")  # moe_formula's own expert count
    t = op.seconds(calib, h100, 512, 2)
    assert t == pytest.approx(
        moe_formula(Calibration("x", moe=replace(fp8, flops_eff=0.6)), h100, 512, 7168, 2048, 256, 8, 8, 1.0, 2),
        rel=1e-12,
    )  # twice the rate = half the FLOP time
    assert op.seconds(calib, a100, 512, 2) == pytest.approx(
        moe_formula(Calibration("x", moe=fp8), a100, 512, 7168, 2048, 256, 8, 8, 1.0, 2), rel=1e-12
    )
    assert replace(op, quant=None).seconds(calib, h100, 512, 2) == pytest.approx(
        moe_formula(Calibration("x", moe=MoeParams()), h100, 512, 7168, 2048, 256, 8, 8, 1.0, 2), rel=1e-12
    )
    rows = pd.DataFrame(
        [
            (tok, h, w, e, k, 1, ep)
            for tok in (1, 4, 16, 64, 256, 1024, 4096)
            for h, w, e, k, ep in ((7168, 2048, 256, 8, 8), (4096, 1536, 128, 8, 1), (2048, 768, 128, 8, 4))
        ],
        columns=["tokens", "hidden", "inter", "experts", "topk", "tp", "ep"],
    )
    rows["seconds"] = moe_seconds_table(fp8, h100, rows, "fp8")
    got = fit_moe_table(rows, h100, "fp8")
    assert moe_seconds_table(got, h100, rows, "fp8") == pytest.approx(rows.seconds.to_numpy(), rel=0.02)
    # the presets: DeepSeek-V3's experts are FP8, gpt-oss's MXFP4, and the shipped H100 calibration has both
    shipped, _ = shipped_calibration(h100)
    assert set(shipped.moe_quant) == {"fp8", "mxfp4", "int4"}
    for name, quant in (("deepseek-v3", "fp8"), ("gpt-oss-20b", "mxfp4"), ("llama-4-scout", None)):
        m = PerOpModel(get_model(name), h100, shipped, get_cpu_overhead("none"), 8)
        assert {experts.quant for _, _, experts in m.classes if experts is not None} == {quant}
    assert Calibration.from_json(shipped.to_json()).moe_quant == shipped.moe_quant


def _mla_layers(c, g, rows, tokens, attention) -> list[float]:
    """Per row (heads per GPU, sequences, context): one DeepSeek-V3 MLA layer as PerOpModel prices it, its
    projections on ``tokens(b, ctx)`` tokens plus ``attention(model, b, ctx)``."""
    from kvsim.latency.perop import mla_ops

    m = get_model("deepseek-v3")
    out = []
    for h, b, ctx in zip(rows.heads, rows.tokens, rows.context):
        tp = 128 // h
        pm = PerOpModel(m, g, c, get_cpu_overhead("none"), tp)
        out.append(sum(op.seconds(c, g, tokens(b, ctx), 2) for op in mla_ops(m, tp)) + attention(pm, b, ctx))
    return out


def test_mla_decode_is_priced_as_the_fit_prices_it():
    """The MLA module fit's vectorised pricing equals PerOpModel's for a DeepSeek-V3 layer: the module's
    projection kernels plus decode attention with the calibration's mla_decode (and, without one, the generic
    decode attention, as before)."""
    import numpy as np

    from kvsim.calibrate.aic import mla_seconds

    g = get_gpu("h100-80gb")
    calib, _ = shipped_calibration(g)
    assert calib.mla_decode is not None and "mla_generation_module_perf" in calib.sources["mla_decode"]
    rows = pd.DataFrame(
        {
            "model": "deepseek-v3",
            "heads": [128, 16, 16],
            "tokens": [1, 32, 256],
            "context": [1000, 8000, 300],
            "seconds": 1.0,
        }
    )
    for c in (calib, replace(calib, mla_decode=None)):
        want = _mla_layers(c, g, rows, lambda b, ctx: b, lambda pm, b, ctx: pm.decode_attention_layer_s(b, b * ctx))
        assert mla_seconds(c.mla_decode, c, g, rows) == pytest.approx(np.array(want), rel=1e-12)
    # the generic pricing left MLA layers about 40% short on H100 (reports/latency-validation/aic.md)
    assert calib.fit["aic"]["mla_decode"]["held_out"]["all"]["median"] == pytest.approx(1.0, abs=0.1)
    assert calib.fit["aic"]["mla_decode"]["before"]["all"]["median"] < 0.75


def test_mla_prefill_is_priced_as_the_fit_prices_it():
    import numpy as np

    from kvsim.calibrate.aic import mla_prefill_seconds

    g = get_gpu("b200")
    calib, _ = shipped_calibration(g)
    assert calib.mla_prefill is not None
    rows = pd.DataFrame(
        {
            "model": "deepseek-v3",
            "heads": [128, 16, 32],
            "tokens": [1, 4, 2],
            "context": [4096, 256, 1000],
            "seconds": 1.0,
        }
    )
    for c in (calib, replace(calib, mla_prefill=None)):
        want = _mla_layers(
            c, g, rows, lambda b, new: b * new, lambda pm, b, new: pm.prefill_attention_layer_s([(new, 0)] * b)
        )
        assert mla_prefill_seconds(c.mla_prefill, c, g, rows) == pytest.approx(np.array(want), rel=1e-12)


def test_quantized_gemms_come_from_the_newest_plausible_table():
    """The excerpt's vLLM 0.24 fp8_block rows take several times bf16's time on small GEMMs (a floor no kernel
    in a CUDA graph has): fp8_block comes from 0.19, per-tensor fp8 from 0.24; both fits predict their rows."""
    from kvsim.calibrate.aic import gemm_seconds_table, quant_gemm_excess, read_gemm

    d = read_aic(AIC, "h100_sxm")
    assert d.versions["gemm_perf:fp8"] == "0.24.0" and d.versions["gemm_perf:fp8_block"] == "0.19.0"
    newest = d.files["gemm_perf"]
    assert quant_gemm_excess(read_gemm(newest, ("fp8_block",))[0], read_gemm(newest)[0]) > 2
    assert any("fp8_block GEMMs from vLLM 0.19.0" in n for n in d.notes)
    calib, _ = shipped_calibration(d.gpu)
    f = fit_aic(d, calib)
    assert set(f.gemm_quant) == {"fp8", "fp8_block"} and "0.19.0" in f.sources["gemm_quant"]
    for q, rows in d.gemm_quant.items():
        for c in (f.calibration(calib), calib):  # the excerpt's own fit, and the shipped one (full tables)
            r = gemm_seconds_table(c.gemm_quant[q], d.gpu, rows, q) / rows["seconds"].to_numpy()
            assert 0.75 <= np.median(r) <= 1.3, (q, np.median(r))


def test_quantized_checkpoints_price_their_gemms_on_their_own_kernels():
    """DeepSeek-V3 (FP8, 128x128 block scales): on H100 its projections and dense MLPs run on FP8 kernels, priced
    with the per-tensor FP8 fit (the fp8_block tables time a path serving does not run: perop.quant_gemm_scheme),
    the router, embedding and LM head in bf16; on A100, which has no FP8 tensor cores, as weight-only GEMMs of
    8-bit weights (vLLM's FP8 Marlin: the W8A16 fit of measured weight-only kernels)."""
    from kvsim.latency.perop import gemm_seconds, quant_gemm_seconds

    ds = get_model("deepseek-v3")
    assert ds.weight_quant == "fp8_block"
    h100 = get_gpu("h100-80gb")
    calib, _ = shipped_calibration(h100)
    assert set(calib.gemm_quant) >= {"fp8", "fp8_block"}
    assert "nvfp4" in shipped_calibration(get_gpu("b200"))[0].gemm_quant
    model = PerOpModel(ds, h100, calib, get_cpu_overhead("none"), tp=8)
    _, ops, _ = model.classes[-1]
    gemms = [op for op in ops if not op.kind]
    assert {op.quant for op in gemms if op.name != "moe_router"} == {"fp8_block"}
    assert next(op for op in gemms if op.name == "moe_router").quant is None
    op = next(op for op in gemms if op.name == "attn_post_proj")  # its input quantized on its own: not fused
    assert not op.fused_quant
    assert op.seconds(calib, h100, 64, 2) == quant_gemm_seconds(
        calib.gemm_quant["fp8"], h100, 64, op.k, op.n, "fp8_block"
    ) * calib.gemm_shapes["fp8"].factor(64, op.n, op.k)
    bf16 = PerOpModel(replace(ds, weight_quant=None), h100, calib, get_cpu_overhead("none"), tp=8)
    assert model.dense_s(64, 64) != bf16.dense_s(64, 64)
    a100 = get_gpu("a100-80gb")
    ac, _ = shipped_calibration(a100)
    assert set(ac.gemm_quant) == {"w4a16", "w8a16", "w8a8_int8"}
    # no FP8 tensor cores on Ampere: vLLM's FP8 Marlin kernels read 1-byte weights and multiply in bf16
    wo = ac.gemm_quant["w8a16"]
    assert op.seconds(ac, a100, 64, 2) == quant_gemm_seconds(wo, a100, 64, op.k, op.n, "fp8_block")
    assert op.seconds(ac, a100, 1, 2) < gemm_seconds(ac.gemm, a100, 1, op.k, op.n, 2)
    assert quant_gemm_seconds(wo, a100, 1 << 14, op.k, op.n, "fp8_block") == pytest.approx(
        gemm_seconds(ac.gemm, a100, 1 << 14, op.k, op.n, 2), rel=0.1
    )  # compute-bound: about bf16's rate


def test_the_fp8_scheme_follows_the_checkpoint_config(tmp_path):
    from kvsim.hardware import get_model as load

    cfg = json.load(open("tests/data/llama-3.1-8b-config.json"))
    for quant, scheme in (
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8_block"),
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
    ):
        p = tmp_path / f"{scheme}.json"
        p.write_text(json.dumps({**cfg, "quantization_config": quant}))
        m = load(str(p))
        assert (m.weight_dtype, m.weight_quant) == ("fp8", scheme)


def test_a_calibration_with_an_unknown_gemm_scheme_is_refused():
    d = Calibration(gpu="h100-80gb").to_json()
    d["gemm_quant"] = {"int3": {"t0_s": 1e-6, "flops_eff": 0.5, "bw_eff": 0.5, "knee": 2.0}}
    with pytest.raises(ConfigError, match="gemm_quant has parameters for 'int3'"):
        Calibration.from_json(d)


def test_quantization_fp8_loads_a_bf16_checkpoint_in_fp8_as_vllm_does():
    """`--quantization fp8`: FP8 weights (embedding and LM head bf16), per-tensor FP8 GEMMs; an FP8 checkpoint
    keeps its own scheme; a model quantized otherwise is refused."""
    from kvsim.options import config_from_args

    base = ["--model", "qwen3-32b", "--gpu", "h100-80gb"]
    bf16, fp8 = config_from_args(base), config_from_args([*base, "--quantization", "fp8"])
    m = fp8.model
    assert (m.weight_dtype, m.weight_quant) == ("fp8", "fp8")
    embed = m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)
    assert m.weight_bytes == pytest.approx((m.params - embed) * 1 + embed * 2)
    assert fp8.pool_plan().pool_bytes > bf16.pool_plan().pool_bytes
    from kvsim.latency import build_latency
    from kvsim.latency.base import StepShape

    shape = StepShape.decode(32, 32 * 1000)
    assert build_latency(fp8).breakdown(shape)["dense_s"] < build_latency(bf16).breakdown(shape)["dense_s"]
    assert (
        config_from_args(["--model", "deepseek-v3", "-q", "fp8", "--gpu", "h200", "-tp", "8"]).model.weight_quant
        == "fp8_block"
    )
    with pytest.raises(ConfigError, match="already quantized"):
        config_from_args(["--model", "gpt-oss-120b", "--quantization", "fp8"])


def test_fp8_gemms_after_a_norm_or_activation_do_not_pay_their_quant_kernel():
    """AIConfigurator's FP8 tables time each GEMM with its activation-quant kernel; serving fuses that quant into
    the RMSNorm before qkv and gate_up and the SiLU-and-mul before down (not o_proj's, after attention), so those
    three pay the fit's fixed cost over bf16's less, by hand; weight-only FP8 (no FP8 tensor cores) pays none."""
    from kvsim.latency.perop import FUSED_QUANT, quant_gemm_seconds

    h100 = get_gpu("h100-80gb")
    calib, _ = shipped_calibration(h100)
    model = PerOpModel(get_model("qwen3-32b-fp8"), h100, calib, get_cpu_overhead("none"))
    gemms = {op.name: op for op in model.classes[0][1] if not op.kind}
    assert {n for n, op in gemms.items() if op.fused_quant} == set(FUSED_QUANT)
    p = calib.gemm_quant["fp8"]
    launch = p.t0_s - calib.gemm.t0_s
    assert launch > 2e-6  # the quant kernel the tables time: microseconds
    for name, op in gemms.items():  # the fit at the table's measured / fitted ratio for the shape, less the launch
        raw = quant_gemm_seconds(p, h100, 4, op.k, op.n, op.quant) * calib.gemm_shapes["fp8"].factor(4, op.n, op.k)
        assert op.seconds(calib, h100, 4, 2) == pytest.approx(raw - launch if op.fused_quant else raw, rel=1e-12)
    assert gemms["mlp_up_proj"].seconds(calib, h100, 0, 2) == 0.0
    a100 = get_gpu("a100-80gb")
    ac, _ = shipped_calibration(a100)
    up = gemms["mlp_up_proj"]
    assert up.seconds(ac, a100, 4, 2) == quant_gemm_seconds(ac.gemm_quant["w8a16"], a100, 4, up.k, up.n, up.quant)
