"""Measured MoE shapes (kvsim/latency/moe_shapes.py): the fit times the ratio stored for the layer's shape."""

import json
import math

import pytest

from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu, get_model
from kvsim.hardware.checkpoints import apply_scheme
from kvsim.latency.calibration import (
    Calibration,
    MoeParams,
    load_calibration,
    save_calibration,
    shipped_calibration,
    with_moe_backend,
)
from kvsim.latency.moe_shapes import check_table, knot_rows, shape_factor, shape_key
from kvsim.latency.perop import layer_classes

TABLE = {"4096,1536,128,8,8,1": {"power-law-1.2": [[1, 16, 256], [0.5, 1.0, 2.0]], "balanced": [[4], [3.0]]}}
KEY = "4096,1536,128,8,8,1"


def test_factor_at_knots_between_them_in_log_tokens_and_held_at_the_ends():
    f = lambda t, r="power-law-1.2": shape_factor(TABLE, KEY, r, t)  # noqa: E731
    assert f(16) == 1.0 and f(1) == 0.5 and f(256) == 2.0
    assert f(4) == pytest.approx(0.75)  # halfway between 1 and 16 in log scale
    assert f(64) == pytest.approx(1.5)
    assert f(0.5) == 0.5 and f(10_000) == 2.0
    assert f(123, "balanced") == 3.0  # one knot: held everywhere
    assert f(4, "power-law-1.01") == pytest.approx(0.75)  # no ratios of its own: power-law-1.2's
    assert f(4, "uniform") == pytest.approx(0.75)
    assert shape_factor(TABLE, "4096,1536,128,8,4,1", "power-law-1.2", 16) == 1.0  # a split not measured
    assert shape_factor({}, KEY, "power-law-1.2", 16) == 1.0


def test_knots_are_the_measured_token_counts_nearest_each_decade_step():
    ts = [1, 2, 3, 4, 8, 16, 32, 48, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert [ts[i] for i in knot_rows(ts)] == [1, 4, 16, 64, 256, 1024, 4096, 16384]
    few = [1, 2, 6, 20]
    assert [few[i] for i in knot_rows(few)] == [1, 6, 20]  # the nearest to 1, 4 and 16; none beyond


def test_the_moe_layer_of_a_model_with_its_shape_measured_takes_the_ratio():
    model = get_model("qwen3-235b-a22b")
    gpu = get_gpu("h100-80gb")
    base = Calibration(gpu="h100-80gb", moe=MoeParams())
    [(_, _, experts)] = [c for c in layer_classes(model, 8) if c[2] is not None]
    assert experts.shape == shape_key(4096, 1536, 128, 8, 8, 1)
    plain = experts.seconds(base, gpu, 16, 2)
    priced = Calibration(gpu="h100-80gb", moe=MoeParams(), moe_shapes={"bf16": TABLE})
    assert experts.seconds(priced, gpu, 16, 2) == pytest.approx(plain)
    assert experts.seconds(priced, gpu, 256, 2) == pytest.approx(2.0 * experts.seconds(base, gpu, 256, 2))
    # expert parallelism over the 8 GPUs is another split: not this shape's ratios
    [(_, _, ep)] = [c for c in layer_classes(model, 8, expert_parallel=True) if c[2] is not None]
    assert ep.shape == shape_key(4096, 1536, 128, 8, 1, 8)
    assert ep.seconds(priced, gpu, 256, 2) == pytest.approx(ep.seconds(base, gpu, 256, 2))
    # FP8 experts look up their own dtype's ratios
    fp8 = Calibration(gpu="h100-80gb", moe=MoeParams(), moe_quant={"fp8": MoeParams()}, moe_shapes={"bf16": TABLE})
    [(_, _, q)] = [c for c in layer_classes(get_model("qwen3-235b-a22b-fp8"), 8) if c[2] is not None]
    assert q.quant == "fp8"
    assert q.seconds(fp8, gpu, 256, 1) == pytest.approx(q.seconds(replace_shapes(fp8, {}), gpu, 256, 1))


def replace_shapes(c, shapes):
    from dataclasses import replace

    return replace(c, moe_shapes=shapes)


def test_a_moe_backend_chosen_by_hand_drops_the_dtypes_ratios():
    c = Calibration(
        gpu="h100-80gb",
        moe=MoeParams(),
        moe_backends={"bf16": {"triton": MoeParams(t0_s=1e-5)}},
        moe_shapes={"bf16": TABLE, "fp8": TABLE},
    )
    picked = with_moe_backend(c, "triton", None)
    assert "bf16" not in picked.moe_shapes and picked.moe_shapes["fp8"] == TABLE
    assert with_moe_backend(c, "auto", None).moe_shapes == c.moe_shapes


def test_shipped_calibrations_carry_the_presets_shapes_and_round_trip(tmp_path):
    c, _ = shipped_calibration(get_gpu("h100-80gb"))
    key = shape_key(4096, 1536, 128, 8, 8, 1)  # Qwen3-235B-A22B at TP8
    assert key in c.moe_shapes["bf16"] and "power-law-1.2" in c.moe_shapes["bf16"][key]
    ts, rs = c.moe_shapes["bf16"][key]["power-law-1.2"]
    assert ts == sorted(ts) and all(0.2 < r < 5 for r in rs)
    assert "moe_shapes" in c.sources and c.fit["moe_shapes"]["shapes"] > 50
    save_calibration(c, tmp_path / "c.json")
    assert load_calibration(tmp_path / "c.json") == c
    text = (tmp_path / "c.json").read_text()
    assert "[1, 4, 16, 64, 256, 1024, 4096, 16384]" in text  # number lists on one line


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"4096,1536,128,8": {}}, "six positive whole numbers"),
        ({KEY: {"zipf": [[1], [1.0]]}}, "unknown routing"),
        ({KEY: {"balanced": [[4, 1], [1.0, 1.0]]}}, "ascending"),
        ({KEY: {"balanced": [[1, 4], [1.0]]}}, "as many of each"),
        ({KEY: {"balanced": [[1], [math.inf]]}}, "finite"),
        ({KEY: {"balanced": [[1], [0.0]]}}, "above 0"),
        ({KEY: {"balanced": [1, 2]}}, "[[tokens...], [ratios...]]"),
    ],
)
def test_a_bad_shape_table_is_refused_by_name(tmp_path, bad, says):
    with pytest.raises(ValueError, match=None) as e:
        check_table(bad, "moe_shapes bf16")
    assert says in str(e.value)
    c = Calibration(gpu="h100-80gb").to_json()
    c["moe_shapes"] = {"bf16": bad}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(c))
    with pytest.raises(ConfigError, match="not a usable latency calibration"):
        load_calibration(path)


SCOUT_TP4 = "5120,8192,16,1,4,1"  # Llama-4-Scout's experts split over 4 GPUs: timed by vLLM 0.22 and 0.24 on H100


def _file(release: str) -> Calibration:
    from kvsim.latency.calibration import SHIPPED, vllm_releases

    return load_calibration(SHIPPED / vllm_releases()["h100-80gb"][release])


def test_a_shape_a_release_did_not_time_takes_the_nearest_releases_ratios():
    h100 = get_gpu("h100-80gb")
    assert SCOUT_TP4 not in _file("0.14.0").moe_shapes["fp8"]  # 0.14's own table has no Scout
    measured = _file("0.22.0").moe_shapes["fp8"][SCOUT_TP4]
    for release in ("0.14", "0.19"):
        c, _ = shipped_calibration(h100, release)
        assert c.moe_shapes["fp8"][SCOUT_TP4] == measured
        assert c.moe_shapes["bf16"][SCOUT_TP4] == _file("0.22.0").moe_shapes["bf16"][SCOUT_TP4]
    # a shape the release timed keeps its own ratios
    own = _file("0.14.0").moe_shapes["fp8"]
    c, _ = shipped_calibration(h100, "0.14")
    assert all(c.moe_shapes["fp8"][k] == v for k, v in own.items())
    # INT4 and MXFP4 experts change kernels between releases: nothing carries over
    assert c.moe_shapes.get("mxfp4", {}) == _file("0.14.0").moe_shapes.get("mxfp4", {})
    assert c.moe_shapes["int4"] == _file("0.14.0").moe_shapes["int4"]


def test_the_carried_ratio_multiplies_the_releases_own_fit():
    """Scout's FP8 experts at vLLM 0.14 on H100, 16 tokens: 0.14's fit times 0.22's measured / fitted ratio
    there (its power-law-1.2 knot at 16 tokens)."""
    h100 = get_gpu("h100-80gb")
    model = apply_scheme(get_model("llama-4-scout"), "compressed-tensors")  # RedHatAI's FP8-dynamic checkpoint
    c14, _ = shipped_calibration(h100, "0.14")
    ts, rs = _file("0.22.0").moe_shapes["fp8"][SCOUT_TP4]["power-law-1.2"]
    assert 16 in ts
    ratio = rs[ts.index(16)]
    without = replace_shapes(
        c14, {q: {k: v for k, v in t.items() if k != SCOUT_TP4} for q, t in c14.moe_shapes.items()}
    )
    [experts] = [e for _, _, e in layer_classes(model, 4) if e is not None]
    assert experts.shape == SCOUT_TP4 and experts.quant == "fp8"
    assert experts.seconds(c14, h100, 16, 2) == pytest.approx(experts.seconds(without, h100, 16, 2) * ratio, rel=1e-12)
    assert ratio > 1.1  # the fit alone is more than 10% fast on this shape


def test_a_release_whose_table_times_another_kernel_borrows_no_shapes():
    """B200's vLLM 0.19 FP8 MoE rows time Triton (KERNEL_MISMATCHES): its FP8 experts are 0.24's, fit and shapes."""
    b200 = get_gpu("b200")
    c, _ = shipped_calibration(b200, "0.19")
    from kvsim.latency.calibration import SHIPPED

    assert c.moe_shapes["fp8"] == load_calibration(SHIPPED / "b200.json").moe_shapes["fp8"]


def test_carried_ratios_beat_the_fit_alone_on_the_shapes_several_releases_timed():
    """benchmarks/moe_shapes_carry_over.py, whose figures docs/latency.md quotes (79,043 points, median |error|
    12.2% -> 5.8%) and a run's note on a shape no table times (_moe_shape_note)."""
    import importlib.util
    from pathlib import Path

    import numpy as np

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "moe_shapes_carry_over.py"
    spec = importlib.util.spec_from_file_location("moe_shapes_carry_over", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.points()
    fit = np.array([r["fit_error"] for r in rows])
    carried = np.array([r["carried_error"] for r in rows])
    assert len(rows) == 79_043
    assert np.expm1(np.median(fit)) == pytest.approx(0.122, abs=5e-4)
    assert np.expm1(np.median(carried)) == pytest.approx(0.058, abs=5e-4)
    assert np.expm1(np.percentile(fit, 90)) == pytest.approx(0.50, abs=5e-3)  # the run's note on an unmeasured shape
    assert {r["dtype"] for r in rows} == {"bf16", "fp8", "nvfp4"}


# MoE presets whose expert shape no AIConfigurator MoE table times (H100, vLLM 0.14-0.24): the fit alone prices them
NOT_IN_THE_TABLES = {  # GLM-4.5-Air, Jamba, GLM-4.5, Qwen3-Next-80B-A3B
    (4096, 1408, 128, 8),
    (4096, 14336, 16, 2),
    (5120, 1536, 160, 8),
    (2048, 512, 512, 10),
}


def test_every_moe_presets_shape_the_tables_time_is_kept():
    """A MoE preset added later keeps the fit alone until its shape is fitted (python -m kvsim.calibrate.ship ...
    --moe-shapes): this fails when a preset's shape is in neither the newest H100 calibration nor the list of shapes
    the tables do not time."""
    from kvsim.calibrate.aic import preset_moe_shapes
    from kvsim.latency.calibration import SHIPPED

    c = load_calibration(SHIPPED / "h100-80gb.json")
    kept = {tuple(int(x) for x in key.split(",")[:4]) for table in c.moe_shapes.values() for key in table}
    assert preset_moe_shapes() - kept == NOT_IN_THE_TABLES


def _shape_notes(*args: str) -> list[str]:
    from kvsim.latency import latency_notes
    from kvsim.options import config_from_args

    return [n for n in latency_notes(config_from_args(list(args))) if "routed experts" in n]


def test_the_run_says_where_its_expert_shapes_times_come_from():
    """A shape its own release times: nothing said; timed by another release only: that release is named; timed by
    none: a warning with the fit's error on the shapes the tables time."""
    assert _shape_notes("--model", "qwen3-235b-a22b", "--gpu", "h100-80gb", "-tp", "8") == []
    scout = ["--model", "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", "--gpu", "h100-80gb", "-tp", "4"]
    assert _shape_notes(*scout, "--vllm-version", "0.22") == []
    [carried] = _shape_notes(*scout, "--vllm-version", "0.14")
    assert "vLLM 0.14.0's tables on h100-80gb do not time this shape" in carried
    assert "vLLM 0.22.0's" in carried and "fp8, 16 of width 8192, top 1" in carried
    assert not carried.startswith("warning")
    [unmeasured] = _shape_notes("--model", "glm-4.5-air", "--gpu", "h100-80gb", "-tp", "4")
    assert unmeasured.startswith("warning: glm-4.5-air's routed experts (bf16, 128 of width 1408, top 8)")
    assert "no kernel table on h100-80gb times this shape" in unmeasured and "50% at p90" in unmeasured
    # a GPU with no measured MoE kernels at all (A40: Vidur's dense ops) has no shapes to speak of
    assert _shape_notes("--model", "qwen3-30b-a3b", "--gpu", "a40") == []
    # a backend chosen by hand is priced by its own fit, which no shape's ratio scales: nothing to say
    assert _shape_notes("--model", "glm-4.5-air", "--gpu", "h100-80gb", "-tp", "4", "--moe-backend", "triton") == []


def test_no_moe_layer_streams_its_activated_experts_faster_than_the_gpus_hbm_peak():
    """L40S's MoE table times one module over and over: Qwen3-30B-A3B's 8 experts of one token (75.5 MB) stay in
    its 96 MiB L2 and the row reads 0.4x the HBM time, faster than 2 tokens (which spill). By hand: 8 experts x 3
    matrices x 2,048 x 768 x 2 bytes = 75,497,472 bytes over 864 GB/s = 87.38 us at 1 token, never above the
    2-token time; on an H100, whose table streams from HBM, the measured shape's time stands."""
    model = get_model("qwen3-30b-a3b")
    l40s = get_gpu("l40s")
    c, _ = shipped_calibration(l40s)
    [(_, _, experts)] = [k for k in layer_classes(model, 1) if k[2] is not None]
    one = experts.seconds(c, l40s, 1, 2)
    assert one == pytest.approx(8 * 3 * 2048 * 768 * 2 / 864e9)
    assert one < experts.seconds(c, l40s, 2, 2)
    h100 = get_gpu("h100-80gb")
    c, _ = shipped_calibration(h100)
    t = experts.seconds(c, h100, 1, 2)
    assert t > 1.2 * 8 * 3 * 2048 * 768 * 2 / h100.hbm_bandwidth
    assert experts.shape in c.moe_shapes["bf16"]  # the measured shape prices it, above the bound
