"""Any GPU (issue 37): presets for the GPUs people rent and own, nvidia-smi's names, and a GPU of one's own
(custom:... or a YAML file). Every preset's numbers are worked by hand from the sources in docs/gpus.md."""

import pytest

from kvsim.cli import main
from kvsim.errors import ConfigError
from kvsim.hardware import GPU_PRESETS, get_gpu
from kvsim.hardware.gpus import PRESET_SOURCES
from kvsim.latency.calibration import calibration_source, shipped_calibration

MiB, GiB = 1 << 20, 1 << 30

# name: (memory in MiB as CUDA reports it, bandwidth B/s, dense bf16 FLOP/s, SMs, arch, measured GPU borrowed)
NEW = {
    # 23,034 MiB on nvidia-smi; 22.05 GiB (22.05 x 1024 MiB) as OOM messages of 24 GB data-centre cards print
    "l4": (22579, 300e9, 121e12, 58, "ada", "l40s"),  # L4 datasheet: 242 TFLOP/s with sparsity / 2
    "a10g": (22579, 600e9, 80 * 1.71e9 * 512, 80, "ampere-ga102", "a40"),  # 80 SMs x 1,710 MHz x 512 = 70 TF
    "l40": (45486, 864e9, 181.05e12, 142, "ada", "l40s"),  # same 48 GB board as the L40S
    "h20": (97871 - 479, 4.0e12, 148e12, 78, "hopper", "h100-80gb"),  # nvidia-smi less H100's 479 MiB
    "h100-pcie": (81080, 2.0e12, 1513e12 / 2, 114, "hopper", "h100-80gb"),  # 1,513 sparse / 2
    "h100-nvl": (round(93.10 * 1024), 3.9e12, 1671e12 / 2 - 0.5e12, 132, "hopper", "h100-80gb"),  # 835
    "rtx-5090": (round(31.36 * 1024), 512 / 8 * 28e9, 170 * 2.407e9 * 512, 170, "blackwell", "rtx-pro-6000"),
    "rtx-3090": (24576 - (24564 - 24218), 384 / 8 * 19.5e9, 71e12, 82, "ampere-ga102", "a40"),
    "a100-40gb-pcie": (40438, 1.555e12, 312e12, 108, "ampere-a100", "a100-80gb"),
    "a100-80gb-pcie": (81152, 1.935e12, 312e12, 108, "ampere-a100", "a100-80gb"),
    "mi300x": (round(191.98 * 1024), 5.3e12, 1307.4e12, 304, "cdna3", "h100-80gb"),
    "mi325x": (256 * 1024 - round(0.02 * 1024), 6.0e12, 1307.4e12, 304, "cdna3", "h100-80gb"),
    # the export parts: H100 SXM's and A100 SXM 80GB's dies, memory and peaks (NVLink below)
    "h800": (81080, 3.35e12, 989e12, 132, "hopper", "h100-80gb"),
    "a800-80gb": (81152, 2.039e12, 312e12, 108, "ampere-a100", "a100-80gb"),
}


@pytest.mark.parametrize("name", NEW)
def test_new_presets_match_their_datasheets(name):
    mib, bw, flops, sms, arch, borrowed = NEW[name]
    g = GPU_PRESETS[name]
    assert g.memory_bytes == mib * MiB
    assert g.hbm_bandwidth == pytest.approx(bw, rel=2e-3) and g.bf16_flops == pytest.approx(flops, rel=2e-3)
    assert (g.sms, g.arch) == (sms, arch)
    chip, note = calibration_source(g)
    assert chip == borrowed
    assert note.startswith("warning") == (arch == "cdna3")  # AMD: NVIDIA efficiencies, said as a warning


def test_every_preset_says_where_its_numbers_come_from():
    assert set(PRESET_SOURCES) == set(GPU_PRESETS)
    for memory, peaks in PRESET_SOURCES.values():
        assert memory in ("measured", "sibling", "derived", "nvidia-smi") and peaks in ("datasheet", "derived")


def test_pcie_cards_are_not_on_nvlink_and_fp8_follows_the_architecture():
    for name in ("h100-pcie", "h100-nvl", "a100-40gb-pcie", "rtx-5090", "l4"):
        assert not GPU_PRESETS[name].nvlink
    assert GPU_PRESETS["h20"].nvlink and GPU_PRESETS["mi300x"].nvlink
    assert GPU_PRESETS["l4"].tensor_core_speedup("fp8") == 2.0 == GPU_PRESETS["mi300x"].tensor_core_speedup("fp8")
    assert GPU_PRESETS["a10g"].tensor_core_speedup("fp8") == 1.0
    assert GPU_PRESETS["rtx-5090"].tensor_core_speedup("fp4") == 4.0


def test_export_parts_take_their_collectives_slower_by_their_nvlink():
    """H800 and A800 (NVLink 200 GB/s each way, against H100's 450 and A100's 300) are priced by H100's and A100's
    measured all-reduces with the bandwidth-bound part 2.25x and 1.5x slower: a 64 MiB message at TP8 takes
    about that much longer, a decode step's 16 KiB about the same; the kernels are the measured GPU's. A GPU of
    one's own on the same die with nvlink_gbs=200 is priced as the H800."""
    big, small = 64 * MiB, 16 * 1024
    for export, own, ratio in (("h800", "h100-80gb", 2.25), ("a800-80gb", "a100-80gb", 1.5)):
        mine = shipped_calibration(get_gpu(export))[0]
        theirs = shipped_calibration(get_gpu(own))[0]
        for n in (2, 4, 8):
            a, b = mine.link(n, "nvswitch"), theirs.link(n, "nvswitch")
            assert 0.85 * ratio < a.seconds(big) / b.seconds(big) <= ratio
            assert 1.0 <= a.seconds(small) / b.seconds(small) < 1.15
        assert mine.gemm == theirs.gemm and mine.decode_attention == theirs.decode_attention
    custom = get_gpu(
        "custom:memory_gb=79.18,bandwidth_gbs=3350,bf16_tflops=989,arch=hopper,chip=gh100,nvlink_gpus=8,nvlink_gbs=200"
    )
    assert shipped_calibration(custom)[0].all_reduce == shipped_calibration(get_gpu("h800"))[0].all_reduce


def test_a_slower_link_by_hand():
    """Two lines (custom all-reduce: 5 us + bytes / 100 GB/s; NCCL: 20 us + bytes / 400 GB/s) and two measured
    points, over a link half as fast: the lines' bandwidths halve, latencies stay; each point gains its bytes over
    the bandwidth of the line that is faster at its size (1 MB: the custom line, 10 us more; 64 MB: NCCL's,
    160 us more)."""
    from kvsim.latency.calibration import LinkParams

    link = LinkParams(5e-6, 100e9, 20e-6, 400e9, ((1e6, 14e-6), (64e6, 180e-6)))
    half = link.slower(2.0)
    assert (half.latency_s, half.bandwidth, half.large_latency_s, half.large_bandwidth) == (5e-6, 50e9, 20e-6, 200e9)
    assert [b for b, _ in half.points] == [1e6, 64e6]
    assert [t for _, t in half.points] == pytest.approx([24e-6, 340e-6])
    assert half.seconds(1e6) == pytest.approx(24e-6) and half.seconds(64e6) == pytest.approx(340e-6)


def test_amd_gpus_borrow_hopper_efficiencies_with_a_warning():
    c, note = shipped_calibration(get_gpu("mi300x"))
    assert c.gpu == "mi300x" and c.derived_from == "h100-80gb"
    assert note.startswith("warning") and "NVIDIA Hopper" in note and "no AMD kernel was measured" in note


@pytest.mark.parametrize(
    "smi,preset",
    [
        ("NVIDIA H100 80GB HBM3", "h100-80gb"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb-pcie"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("NVIDIA H200", "h200-141gb"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L40", "l40"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA H800", "h800"),
        ("NVIDIA A800-SXM4-80GB", "a800-80gb"),
        ("NVIDIA H800 PCIe", "h100-pcie"),  # a PCIe export card: the PCIe card it was cut from
        ("NVIDIA A800 80GB PCIe", "a100-80gb-pcie"),
        ("NVIDIA H100 80GB PCIe", "h100-pcie"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("AMD Instinct MI300X", "mi300x"),
        ("nvidia_h100_80gb_hbm3", "h100-80gb"),
        ("nvidia-geforce-rtx-5090", "rtx-5090"),
        ("H100", "h100-80gb"),
    ],
)
def test_nvidia_smi_names(smi, preset):
    assert get_gpu(smi).name == preset


def test_unknown_and_other_products_list_the_closest_presets():
    with pytest.raises(ConfigError, match=r"unknown GPU 'NVIDIA L20'.*did you mean 'l40'.*custom:memory_gb"):
        get_gpu("NVIDIA L20")
    with pytest.raises(ConfigError, match="Workstation Edition .* is not the Server Edition"):
        get_gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition")
    with pytest.raises(ConfigError, match="ambiguous.*a100-40gb, a100-80gb, a100-40gb-pcie, a100-80gb-pcie"):
        get_gpu("A100")


def test_custom_gpu_through_kvsim_memory(capsys):
    """44.4 GiB at 0.9 = 39.96 GiB usable, as on an L40S: the same pool as the preset."""
    spec = "custom:memory_gb=44.42,bandwidth_gbs=864,bf16_tflops=362,arch=ada,sms=142,name=my-l40s"
    assert main(["memory", "--model", "llama-3.1-8b", "--gpu", spec]) == 0
    mine = capsys.readouterr().out
    assert "my-l40s" in mine and "44.42 GiB per GPU" in mine
    g = get_gpu(spec)
    assert g.memory_bytes == round(44.42 * GiB) and g.hbm_bandwidth == 864e9 and g.bf16_flops == 362e12
    assert (g.pcie_bandwidth, g.nvlink_gpus, g.nvlink) == (32e9, 1, False)  # a PCIe card unless told
    assert calibration_source(g)[0] == "l40s"


def test_yaml_gpu_through_kvsim_memory(tmp_path, capsys):
    p = tmp_path / "gpu.yaml"
    p.write_text(
        "name: lab-h100\nmemory_gb: 79.18\nbandwidth_gbs: 3350\nbf16_tflops: 989\narch: hopper\n"
        "sms: 132\nnvlink_gpus: 8\npcie_gbs: 64\n"
    )
    assert main(["memory", "--model", "llama-3.1-8b", "--gpu", str(p)]) == 0
    out = capsys.readouterr().out
    assert "lab-h100" in out and "79.18 GiB per GPU" in out
    g = get_gpu(str(p))
    assert g.nvlink and g.sms == 132 and calibration_source(g)[0] == "h100-80gb"
    c, note = shipped_calibration(g)
    assert c.gpu == "lab-h100" and "same architecture" in note


def test_gpu_without_arch_borrows_the_roofline_nearest_with_a_warning():
    g = get_gpu("custom:memory_gb=20,bandwidth_gbs=500,bf16_tflops=100")
    chip, note = calibration_source(g)
    assert chip == "a40" and note.startswith("warning") and "arch=" in note


@pytest.mark.parametrize(
    "spec,message",
    [
        ("custom:memory_gb=-1,bandwidth_gbs=500,bf16_tflops=100", "memory_gb must be from 0.5 to 4096, got -1"),
        ("custom:memory_gb=inf,bandwidth_gbs=500,bf16_tflops=100", "memory_gb must be a finite number"),
        ("custom:memory_gb=24,bandwidth_gbs=lots,bf16_tflops=100", "bandwidth_gbs must be a number, got 'lots'"),
        ("custom:memory_gb=24,bandwidth_gbs=5e6,bf16_tflops=100", "bandwidth_gbs must be from 1 to 100000"),
        ("custom:memory_gb=24,bandwidth_gbs=500,bf16_tflops=0", "bf16_tflops must be from 0.1"),
        ("custom:memory_gb=24,bandwidth_gbs=500,bf16_tflops=100,sms=1.5", "sms must be a whole number"),
        ("custom:memory_gb=24,bandwidth_gbs=500,bf16_tflops=100,hbm=3", r"unknown key\(s\) hbm"),
        ("custom:memory_gb=24", "missing bandwidth_gbs, bf16_tflops"),
        ("custom:memory_gb=24,bandwidth_gbs=500,bf16_tflops=100,arch=volta", "arch 'volta' is not one of"),
        ("custom:memory_gb=24,bandwidth_gbs=500,bf16_tflops=100,name=h100-80gb", "is a preset's"),
        ("custom:memory_gb=24,bandwidth_gbs=500,bf16_tflops=100,name=../x", "name must be letters"),
        ("custom:memory_gb", "is not key=value"),
    ],
)
def test_bad_custom_values_give_one_line_errors(spec, message, capsys):
    with pytest.raises(ConfigError, match=message):
        get_gpu(spec)
    assert main(["memory", "--model", "llama-3.1-8b", "--gpu", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_bad_yaml_files_name_the_problem(tmp_path):
    p = tmp_path / "gpu.yaml"
    p.write_text("- not a mapping\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        get_gpu(str(p))
    p.write_text("memory_gb: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        get_gpu(str(p))
    p.write_text("memory_gb: 24\nbandwidth_gbs: .nan\nbf16_tflops: 100\n")
    with pytest.raises(ConfigError, match="bandwidth_gbs must be a finite number"):
        get_gpu(str(p))
    with pytest.raises(ConfigError, match="cannot read"):
        get_gpu(str(tmp_path / "missing.yaml"))


def test_list_gpus_shows_each_preset_and_where_its_numbers_come_from(capsys):
    assert main(["list", "gpus"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if line.split() and line.split()[0] in GPU_PRESETS
    }
    assert set(rows) == set(GPU_PRESETS)
    for name, row in rows.items():
        memory, peaks = PRESET_SOURCES[name]
        assert row[3] == memory and row[6] == peaks  # name, size, "GiB", memory from, TB/s, TFLOP/s, peaks
    assert rows["h100-80gb"][-1] == "measured" and rows["rtx-5090"][-1] == "derived"
    assert rows["rtx-5090"][-4] == "rtx-pro-6000" and rows["mi300x"][-1] == "borrowed"
    assert "memory from:" in out and "docs/gpus.md" in out


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_every_preset_answers_kvsim_memory(name, capsys):
    """Every preset sizes Llama-3.1-8B's pool, or says in one line that the model does not fit."""
    rc = main(["memory", "--model", "llama-3.1-8b", "--gpu", name])
    out, err = capsys.readouterr()
    assert rc in (0, 2) and "Traceback" not in err
    if rc == 0:
        assert f"on {name}" in out and "KV pool" in out
    else:
        assert "does not fit" in err
