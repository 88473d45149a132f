"""Issue 37, third hardening pass: one test per class the adversarial pass reproduced (unbounded work from a
small input, non-ASCII digits, subnormal bandwidths, hostile system yaml / JSON, a missing PyTorch, user text in
shell command lines and tables). Each is fast: the bounds are checked before any simulation runs."""

from __future__ import annotations

import json
import shlex
import shutil
import sys

import pytest

from kvsim.cli import main
from kvsim.errors import ConfigError


def kvsim(capsys, *args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr), asserting the one-line-error contract (no traceback, no internal error)."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, (args, err)
    assert rc in (0, 1, 2), (args, rc, err)
    if rc == 2:
        lines = [ln for ln in err.strip().splitlines() if ln.startswith("kvsim: error:")]
        assert lines, (args, err)
    return rc, out, err


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.jsonl"
    p.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "arrival_s": 0.1 * i, "prompt_tokens": 20 + i, "output_tokens": 3}) + "\n"
            for i in range(8)
        )
    )
    return p


# --- unbounded work from a small input ----------------------------------------------------------------------
def test_a_sweep_grid_is_counted_before_it_is_expanded(tiny, tmp_path, capsys):
    from kvsim.planning.sweep import MAX_POINTS, load_grid

    g = tmp_path / "g.yaml"  # 7 keys x 10 values: 10^7 points from 400 bytes
    g.write_text(
        f"base: {{trace: {tiny}}}\ngrid:\n" + "".join(f"  k{i}: [{', '.join(map(str, range(10)))}]\n" for i in range(7))
    )
    rc, _, err = kvsim(capsys, "sweep", g, "--out", tmp_path / "s.csv")
    assert rc == 2 and "10,000,000 points" in err and f"{MAX_POINTS:,}" in err
    g.write_text(f"base: {{trace: {tiny}}}\ngrid: {{rate: [1, 2]}}\npoints: 5")
    with pytest.raises(ConfigError, match="'points' must be a list"):
        load_grid(str(g))


def test_fleet_max_gpus_is_bounded_and_the_search_stops_when_more_gpus_do_not_help(tiny, tmp_path, capsys):
    from kvsim.planning.fleet_plan import MAX_FLEET_GPUS, _search

    rc, _, err = kvsim(
        capsys,
        "plan",
        "--trace",
        tiny,
        "--slo",
        "ttft_p99=1s",
        "--fleet-max-gpus",
        MAX_FLEET_GPUS + 1,
        "--out",
        tmp_path / "p",
    )
    assert rc == 2 and "--fleet-max-gpus" in err and f"{MAX_FLEET_GPUS:,}" in err
    assert not (tmp_path / "p").exists()

    # a layout whose SLO metric no fleet size improves (the SLO is below one request's own time)
    sizes, stopped = [], []

    def flat(n):
        sizes.append(n)
        return [{"gpus": n, "meets_slo": False, "slo_ratio": 5.0}]

    _search(flat, 1, 1, MAX_FLEET_GPUS, 1, stopped.append)
    assert sizes == [1, 2, 4] and stopped == [4]  # not 13 doublings up to 4,096 GPUs

    def improving(n):  # queueing: twice the GPUs, half the wait, until 64 GPUs meet it
        sizes.append(n)
        return [{"gpus": n, "meets_slo": n >= 64, "slo_ratio": 64 / n}]

    sizes.clear()
    rows = _search(improving, 1, 1, MAX_FLEET_GPUS, 1, stopped.append)
    assert min(r["gpus"] for r in rows if r["meets_slo"]) == 64 and stopped == [4]


def test_an_unmeetable_slo_ends_the_fleet_plan_early_and_says_so(tiny, tmp_path, capsys):
    rc, out, err = kvsim(
        capsys,
        "plan",
        "--trace",
        tiny,
        "--model",
        "llama-3-8b",
        "--gpus",
        "h100-80gb",
        "--slo",
        "ttft_p99=1us",
        "--fleet-max-gpus",
        4096,
        "--fleet-routers",
        "least-requests",
        "--out",
        tmp_path / "p",
    )
    assert rc == 0 and "stopped at" in err and "brought them no closer" in out
    assert "stopped at" in (tmp_path / "p" / "summary.md").read_text()


def test_the_number_of_fleet_groups_is_bounded(tiny, tmp_path, capsys):
    from kvsim.commands.fleet import MAX_GROUPS

    many = ",".join(["h100-80gb:1"] * (MAX_GROUPS + 1))
    for flag in ("--groups", "--prefill"):
        args = ["cluster", "--trace", tiny, flag, many, "--out", tmp_path / "c"]
        if flag == "--prefill":
            args += ["--decode", "h100-80gb:1"]
        rc, _, err = kvsim(capsys, *args)
        assert rc == 2 and f"{MAX_GROUPS + 1:,} groups" in err and flag in err
    rc, _, err = kvsim(
        capsys,
        "plan",
        "--trace",
        tiny,
        "--slo",
        "ttft_p99=1s",
        "--gpus",
        ",".join(f"g{i}" for i in range(100)),
        "--out",
        tmp_path / "p",
    )
    assert rc == 2 and "100 GPU types" in err


# --- unclear errors and internal errors ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec",
    [
        "h100-80gb:\u00b2",
        "h100-80gb:\u0663",
        "h100-80gb:1:tp\u0662",
        "h100-80gb:" + "9" * 5000,
        "h100-80gb:1:tp" + "1" * 20,
    ],
)
def test_group_counts_take_ascii_digits_only(spec, tiny, tmp_path, capsys):
    rc, _, err = kvsim(capsys, "cluster", "--trace", tiny, "--groups", spec, "--out", tmp_path / "c")
    assert rc == 2 and "each group is GPU:COUNT" in err and len(err) < 600


def test_other_specs_take_ascii_digits_only(tiny, tmp_path, capsys):
    from kvsim.fleet.disagg import parse_link
    from kvsim.planning.parallel import check_ray_address
    from kvsim.planning.plan import parse_gpus

    with pytest.raises(ConfigError, match="cost"):
        parse_gpus("h100-80gb:\u0663")
    with pytest.raises(ConfigError, match="--kv-link"):
        parse_link("\u0661\u0660\u0660:1")
    for address in ("127.0.0.1:\u0663\u0663", "127.0.0.1:99999", "127.0.0.1:" + "9" * 5000):
        with pytest.raises(ConfigError, match="HOST:PORT"):
            check_ray_address(address)
    rc, _, err = kvsim(capsys, "cluster", "--trace", tiny, "--shared-kv-store", "\u0661\u0660", "--out", tmp_path / "c")
    assert rc == 2 and "--shared-kv-store" in err


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--kv-offloading-size", "1", "--kv-offloading-bandwidth", "1e-310"],
        ["run", "--kv-offloading-size", "1", "--kv-offloading-bandwidth", "5e-324"],
        ["cluster", "--prefill", "h100-80gb:1", "--decode", "h100-80gb:1", "--kv-link", "1e-310:0"],
        ["cluster", "--shared-kv-store", "10:1e-310:1"],
    ],
)
def test_subnormal_bandwidths_are_refused_by_name(args, tiny, tmp_path, capsys):
    from kvsim.validation import MIN_GBS

    plots = ["--no-plots"] if args[0] == "run" else []
    rc, _, err = kvsim(capsys, *args, "--trace", tiny, "--out", tmp_path / "o", *plots)
    flag = next(a for a in args if a in ("--kv-offloading-bandwidth", "--kv-link", "--shared-kv-store"))
    assert rc == 2 and flag in err and f"{MIN_GBS:g}" in err


@pytest.mark.parametrize(
    "yaml_text, field",
    [
        ("gpu: {mem_bw: abc, mem_capacity: 100000000000, bfloat16_tc_flops: 1.0e+15, sm_version: 90}", "gpu.mem_bw"),
        ("gpu: {mem_bw: 5.0e+12, mem_capacity: 1e400, bfloat16_tc_flops: 1.0e+15, sm_version: 90}", "gpu.mem_capacity"),
        ("gpu: {mem_bw: 1.0e-310, mem_capacity: 100000000000, bfloat16_tc_flops: 1.0e+15}", "gpu.mem_bw"),
        ("gpu: {mem_bw: 5.0e+12, mem_capacity: 100000000000, bfloat16_tc_flops: .nan}", "gpu.bfloat16_tc_flops"),
        (
            "gpu: {mem_bw: 5.0e+12, mem_capacity: 100000000000, bfloat16_tc_flops: 1.0e+15, sm_version: x}",
            "gpu.sm_version",
        ),
        (
            "gpu: {mem_bw: 5.0e+12, mem_capacity: 100000000000, bfloat16_tc_flops: 1.0e+15}\nnode: {pcie_bw: [1]}",
            "node.pcie_bw",
        ),
        ("gpu: [1]", "'gpu' must be a mapping"),
        ("[1]", "expected a mapping"),
    ],
)
def test_a_system_yaml_with_bad_peaks_names_file_and_field(yaml_text, field, tmp_path, capsys):
    shutil.copytree("tests/data/aic/h100_sxm", tmp_path / "x9_sxm")
    (tmp_path / "x9_sxm.yaml").write_text(yaml_text)
    rc, _, err = kvsim(capsys, "calibrate", "--aic", tmp_path, "--system", "x9_sxm", "-o", tmp_path / "c.json")
    assert rc == 2 and "x9_sxm.yaml" in err and field in err


def test_a_system_yaml_peak_written_without_a_dot_is_read_as_a_number(tmp_path):
    from kvsim.calibrate.aic import gpu_for_system

    (tmp_path / "x9_sxm").mkdir()
    (tmp_path / "x9_sxm.yaml").write_text(
        "gpu: {mem_bw: 5e12, mem_capacity: 1e11, bfloat16_tc_flops: 1e15, sm_version: 90}\n"
    )
    g = gpu_for_system("x9_sxm", tmp_path / "x9_sxm")
    assert g.hbm_bandwidth == 5e12 and g.memory_bytes == 10**11 and g.sms == 132


@pytest.mark.parametrize(
    "text, says",
    [
        ("[" * 100_000, "characters"),
        ('{"method": ' + "[" * 20 + "]" * 20 + "}", "nested"),
        ('{"method": "eagle", "num_speculative_tokens": ' + "9" * 4000 + "}", "4000-digit"),
        ('{"method": "eagle", "num_speculative_tokens": 2, "a\\nb": 1}', "a\\nb"),
    ],
)
def test_speculative_config_json_deep_or_huge_is_one_line_naming_the_flag(text, says, tiny, tmp_path, capsys):
    rc, _, err = kvsim(
        capsys,
        "run",
        "--trace",
        tiny,
        "--no-plots",
        "--out",
        tmp_path / "o",
        "--speculative-config",
        text,
        "--acceptance-length",
        "2",
    )
    line = err.strip().splitlines()[-1]
    assert rc == 2 and line.startswith("kvsim: error: --speculative-config") and says in line and len(line) < 300


def test_kernels_replay_without_pytorch_says_how_to_install_it(tiny, tmp_path, capsys, monkeypatch):
    rec = tmp_path / "rec.jsonl.gz"
    assert kvsim(capsys, "run", "--trace", tiny, "--no-plots", "--out", tmp_path / "o", "--record-batches", rec)[0] == 0
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails as without PyTorch
    for args in (["replay", rec], ["bench"]):
        rc, _, err = kvsim(capsys, "kernels", *args, "--device", "cpu", "-o", tmp_path / "k.csv")
        assert rc == 2 and "pip install" in err and len(err.strip().splitlines()) == 1


HOSTILE_NAME = "org/a b'\"[/]\n\x1b[31m$(rm -rf ~)"


def test_a_model_name_from_a_config_is_one_inert_shell_word(tmp_path):
    from kvsim.planning.fleet_plan import vllm_commands

    cmds = vllm_commands(
        {"mode": "aggregated", "decode": 2, "gpu": "h100-80gb", "router": "rr", "tp": 1},
        HOSTILE_NAME,
        {"max_num_seqs": 4},
    )
    line = cmds[1]
    assert "\n" not in line and "\x1b" not in line
    words = shlex.split(line)
    assert words[:2] == ["vllm", "serve"] and "$(rm -rf ~)" in words[2] and words[3] == "--tensor-parallel-size"


def test_a_model_name_with_markup_and_control_characters_is_escaped_in_tables(tiny, tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 2,
                "vocab_size": 32,
                "intermediate_size": 64,
                "max_position_embeddings": 4096,
                "_name_or_path": HOSTILE_NAME,
            }
        )
    )
    rc, out, _ = kvsim(capsys, "run", "--trace", tiny, "--model", cfg, "--no-plots", "--out", tmp_path / "o")
    assert rc == 0 and "[/]" in out and "\x1b" not in out and "\\x1b" in out
    summary = (tmp_path / "o" / "summary.md").read_text()
    assert "\x1b" not in summary and all(not ln.startswith("[31m") for ln in summary.splitlines())

    from kvsim.output.table import printable, shell_line

    assert printable("a\nb\tc\x00") == "a\\nb\\tc\\x00" and printable("h100 · ok") == "h100 · ok"
    assert shlex.split(shell_line(["kvsim", "run", "--model", "a b"])) == ["kvsim", "run", "--model", "a b"]


def test_a_float_option_given_an_integer_too_large_for_a_float_is_named(tiny, tmp_path, capsys):
    rc, _, err = kvsim(
        capsys, "run", "--trace", tiny, "--no-plots", "--out", tmp_path / "o", "--kv-pool-gb", "1" + "0" * 400
    )
    assert rc == 2 and "--kv-pool-gb" in err
