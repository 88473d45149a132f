"""--vllm-version: the kernel tables of one vLLM release time the per-op model (kvsim/latency/releases.py)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from kvsim.errors import ConfigError
from kvsim.hardware import get_gpu
from kvsim.latency import build_latency
from kvsim.calibrate.aic import locate_table, read_aic
from kvsim.latency.base import StepShape
from kvsim.latency.calibration import load_calibration, shipped_calibration
from kvsim.releases import RELEASES_INDEX, SHIPPED, release_calibration, release_key, vllm_releases, vllm_version_rule
from kvsim.options import config_from_args

AIC = "tests/data/aic"


def test_release_names_order_as_releases():
    assert release_key("0.19") == release_key("0.19.0") == release_key("v0.19.0") == (0, 19, 0)
    assert release_key("0.19.1rc1") == (0, 19, 1) and release_key("0.1.dev19262") == (0, 1, 0)
    assert sorted(["0.24.0", "0.9.2", "0.14.0", "0.10.1.1", "0.19"], key=release_key) == [
        "0.9.2",
        "0.10.1.1",
        "0.14.0",
        "0.19",
        "0.24.0",
    ]
    for good in ("0.19", "0.19.1", "v0.10.1.1", "0.19.1rc1", "0.11.0+cu128", "0.6.1.post1"):
        assert vllm_version_rule(good) is None, good
    for bad in ("banana", "", "0.x", "latest", "1..2", "19"):
        assert "expected a vLLM release" in vllm_version_rule(bad), bad


def test_the_index_names_shipped_files_fitted_on_that_release_or_the_newest_before_it():
    """Every release maps to a calibration whose attention tables are of that release or of one it reuses
    (the data's reuse notes map H100 0.22 to 0.24's kernels); the newest release is the chip's default file."""
    index = vllm_releases()
    assert {"a100-80gb", "h100-80gb", "b200"} <= set(index)
    assert set(index["h100-80gb"]) == {"0.14.0", "0.19.0", "0.22.0", "0.24.0"}
    for chip, rels in index.items():
        newest = max(rels, key=release_key)
        assert rels[newest] == f"{chip}.json"
        for rel, file in rels.items():
            c = load_calibration(SHIPPED / file)
            attention = c.fit["aic"]["versions"]["generation_attention_perf"]
            assert c.gpu == chip and c.measured_on == "gpu"
            if file != f"{chip}.json":
                assert c.fit["aic"]["release"] == rel and attention in rels  # its own, or a reuse note's
    assert (
        load_calibration(SHIPPED / index["h100-80gb"]["0.22.0"]).fit["aic"]["versions"]["generation_attention_perf"]
        == "0.24.0"
    )


def test_a_release_between_measurements_runs_the_kernels_of_the_one_before_it():
    path, note = release_calibration("h100-80gb", "0.20.2")
    assert path.name == "h100-80gb-0.19.0.json" and "0.19.0" in note and not note.startswith("warning")
    path, note = release_calibration("h100-80gb", "0.19")
    assert path.name == "h100-80gb-0.19.0.json" and note == ""
    path, note = release_calibration("h100-80gb", "0.30")  # newer than measured: the newest
    assert path.name == "h100-80gb.json"
    path, note = release_calibration("b200", "0.11")  # older than measured: the oldest, with a warning
    assert path.name == "b200-0.19.0.json" and note.startswith("warning") and "oldest" in note
    path, note = release_calibration("a40", "0.19")  # nothing per release on the A40
    assert path is None and note.startswith("warning")
    assert release_calibration("h100-80gb", None) == (None, "")


def test_derived_gpus_take_their_chips_release():
    """A Hopper GPU without a calibration of its own (a PCIe H100, say) borrows the first measured Hopper's
    (h100-80gb, by name), at the release asked for."""
    pcie = replace(get_gpu("h100-80gb"), name="h100-pcie", hbm_bandwidth=2.0e12)
    c, note = shipped_calibration(pcie, "0.14")
    assert c.gpu == "h100-pcie" and c.derived_from == "h100-80gb" and c.fit["aic"]["release"] == "0.14.0"
    assert "derived from h100-80gb" in note
    newest, _ = shipped_calibration(pcie)
    assert newest.decode_attention != c.decode_attention


def test_h200_has_its_own_measured_calibration():
    """H200's kernels come from its own tables (the pip package aiconfigurator-core), not H100's efficiencies
    at H200's peaks: its GEMMs run only 2-4% faster than H100's in those tables."""
    c, note = shipped_calibration(get_gpu("h200-141gb"))
    assert note == "" and c.derived_from == "" and "h200_sxm" in c.sources["gemm"]
    assert "h200_sxm" in c.sources["decode_attention"] and "aiconfigurator-core" in c.sources["data"]
    assert "borrowed" in c.sources["elementwise"]
    h100, _ = shipped_calibration(get_gpu("h100-80gb"))
    assert c.decode_attention != h100.decode_attention and "marlin" in c.moe_backends["mxfp4"]
    _, old = shipped_calibration(get_gpu("h200-141gb"), "0.11")  # older than its tables: the oldest, warned
    assert old.startswith("warning") and "0.14.0" in old
    # every release AIConfigurator measured on H200 has its own tables (0.14, 0.18, 0.19, 0.22, 0.24)
    c19, note19 = shipped_calibration(get_gpu("h200-141gb"), "0.19.1")
    assert "kernels of vLLM 0.19.0 on h200-141gb" in note19 and "h200_sxm/gemm/vllm/0.19.0" in c19.sources["gemm"]
    assert c19.gemm_quant["fp8"] != c.gemm_quant["fp8"]


def _step_s(args: list[str], shape: StepShape) -> float:
    return build_latency(config_from_args(args)).step_time(shape)


def test_the_option_changes_only_the_kernel_tables():
    """The same configuration on the 0.14 tables of an H100 against the newest (0.24): the times differ, and the run
    equals a per-op model built on the 0.14 calibration file given as --latency (bf16 weights: 0.14's FP8 GEMMs
    are priced by 0.19's, tests/test_served_checkpoints.py)."""
    base = [
        "--model",
        "llama-3.3-70b",
        "--gpu",
        "h100-80gb",
        "-tp",
        "2",
        "--cpu-overhead",
        "none",
        "--frontend",
        "none",
    ]
    cfg_new = config_from_args(base)
    cfg_old = config_from_args(base + ["--vllm-version", "0.14"])
    assert cfg_old.vllm_version == "0.14" and cfg_new.vllm_version is None
    old, new = build_latency(cfg_old), build_latency(cfg_new)
    direct = build_latency(config_from_args(base + ["--latency", str(SHIPPED / "vllm" / "h100-80gb-0.14.0.json")]))
    decode, prefill = StepShape.decode(64, 64 * 2049), StepShape.of([(4096, 0)])
    for s in (decode, prefill):
        assert old.step_time(s) == direct.step_time(s)
        assert old.step_time(s) != new.step_time(s)


def test_with_another_latency_model_the_release_decides_the_layout_only():
    from kvsim.runner import served_allocator
    from kvsim.latency import latency_notes

    cfg = config_from_args(
        ["--model", "llama-4-scout", "--gpu", "h200", "-tp", "8", "--latency", "roofline", "--vllm-version", "0.11"]
    )
    assert served_allocator(cfg) == "naive+prefix"  # no hybrid manager in 0.11, whatever prices the steps
    roof = build_latency(
        config_from_args(["--model", "llama-4-scout", "--gpu", "h200", "-tp", "8", "--latency", "roofline"])
    )
    s = StepShape.decode(8, 8000)
    assert build_latency(cfg).step_time(s) == roof.step_time(s)
    assert "the times come from --latency roofline" in latency_notes(cfg)[0]


def test_the_option_is_refused_where_it_cannot_act():
    with pytest.raises(ConfigError, match="expected a vLLM release"):
        config_from_args(["--vllm-version", "newest-please"])


def test_a_table_missing_from_a_release_comes_from_the_newest_before_it(tmp_path):
    """locate_table: the release's own table, then the one its reuse note names, then the newest earlier one;
    an error (naming what exists) only when nothing at or before the release has it."""
    sysdir = tmp_path / "h100_sxm"
    shutil.copytree(f"{AIC}/h100_sxm", sysdir)
    f, v, note = locate_table(sysdir, "gemm", "0.20")
    assert v == "0.19.0" and "not measured" in note and f.parent.name == "0.19.0"
    f, v, note = locate_table(sysdir, "gemm", "0.19")
    assert v == "0.19.0" and note == ""
    f, v, note = locate_table(sysdir, "custom_allreduce", "0.30.1")
    assert v == "0.24.0"
    (sysdir / "gemm" / "vllm" / "0.22.0").mkdir()
    (sysdir / "gemm" / "vllm" / "0.22.0" / "reuse.yaml").write_text(
        "reuse:\n- table: gemm_perf\n  from_version: 0.24.0\n", encoding="utf-8"
    )
    f, v, note = locate_table(sysdir, "gemm", "0.22.0")
    assert v == "0.24.0" and "reuses" in note
    with pytest.raises(ConfigError, match="at or before 0.14"):
        locate_table(sysdir, "gemm", "0.14")
    with pytest.raises(ConfigError, match="generation_attention_perf table .* at or before 0.20"):
        read_aic(sysdir, version="0.20")  # the excerpt's attention was measured on 0.24 only


def test_the_index_is_json_of_files_that_exist():
    doc = json.loads((SHIPPED / RELEASES_INDEX).read_text(encoding="utf-8"))
    assert doc["format"] == "kvsim-vllm-releases"
    for rels in doc["releases"].values():
        for file in rels.values():
            assert (SHIPPED / file).is_file(), file


def test_chunked_attention_ran_without_the_hybrid_manager_in_0_10_to_0_12():
    from kvsim.hardware import get_model
    from kvsim.releases import hybrid_manager_on

    scout, gemma, llama = get_model("llama-4-scout"), get_model("gemma-2-9b"), get_model("llama-3-8b")
    assert [hybrid_manager_on(scout, v) for v in (None, "0.9.2", "0.10.0", "0.11", "0.12.0", "0.13", "0.24")] == [
        True,
        True,
        False,
        False,
        False,
        True,
        True,
    ]
    assert (
        hybrid_manager_on(gemma, "0.11") and not hybrid_manager_on(llama, "0.11") and not hybrid_manager_on(llama, None)
    )


def test_a_fleet_of_llama_4_on_those_releases_lays_every_layer_out_in_full():
    from kvsim.runner import served_allocator

    assert served_allocator(config_from_args(["--model", "llama-4-scout", "--vllm-version", "0.11"])) == "naive+prefix"
    assert served_allocator(config_from_args(["--model", "llama-4-scout"])) == "hybrid+prefix"
    assert served_allocator(config_from_args(["--model", "gemma-2-9b", "--vllm-version", "0.11"])) == "hybrid+prefix"
    assert served_allocator(config_from_args(["--model", "llama-3-8b", "--vllm-version", "0.11"])) == "paged+prefix"


def test_the_logged_kv_cache_size_follows_the_release():
    """Llama-4-Scout at TP8 in a 10 GiB pool, by hand: 512 B per layer and token per GPU; the hybrid manager's
    4 groups of 12 layers take pages of 12 x 16 x 512 B, 109,226 of them; up to 0.19 vLLM logs 109,226 // 4
    x 16 = 436,896 tokens (the same as one group of all 48 layers: 27,306 blocks x 16); later releases log
    concurrency x max_model_len: 109,226 / (8,192 full + 3 x 1,024 chunked blocks) x 131,072 = 1,270,993."""
    from kvsim.memory_budget import memory_budget

    def logged(*extra):
        b = memory_budget(
            config_from_args(
                [
                    "--model",
                    "llama-4-scout",
                    "--gpu",
                    "h200-141gb",
                    "-tp",
                    "8",
                    "--kv-pool-gb",
                    "10",
                    "--max-model-len",
                    "131072",
                    *extra,
                ]
            )
        )
        return b.vllm_kv_size_tokens(b.concurrency_by_layout())

    assert logged("--vllm-version", "0.11") == 27_306 * 16 == 436_896  # no hybrid manager: one group
    assert logged("--vllm-version", "0.13") == 109_226 // 4 * 16
    assert logged() == int(109_226 / (8_192 + 3 * 1_024) * 131_072) == 1_270_993
