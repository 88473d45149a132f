"""A vLLM user's first hour: `vllm serve` flags pasted onto any kvsim command are taken (applied where kvsim models
them, listed once as not modelled otherwise), typos still get a one-line error with a fitting suggestion, and the
command lines kvsim prints name the model as `vllm serve` takes it."""

import json
import shlex

import pytest

from kvsim.cli import main, make_parser
from kvsim.hardware.models import serve_name

SERVE = ("--trust-remote-code --dtype bfloat16 --host 0.0.0.0 --port 8000 --served-model-name a b "
         "--enable-chunked-prefill --no-enable-prefix-caching --async-scheduling --disable-log-requests "
         "--max-cudagraph-capture-size 512 --tool-call-parser hermes --enable-auto-tool-choice")


def test_kvsim_memory_takes_a_pasted_vllm_serve_command_line(capsys):
    assert main(["memory", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", *shlex.split(SERVE)]) == 0
    err = capsys.readouterr().err
    assert err.count("accepted with no effect") == 1  # listed once
    for flag in ("--trust-remote-code", "--dtype bfloat16", "--host 0.0.0.0", "--served-model-name a b",
                 "--enable-chunked-prefill", "--async-scheduling", "--tool-call-parser hermes"):
        assert flag in err


def test_flags_kvsim_models_are_applied(tmp_path, capsys):
    assert main(["memory", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--kv-cache-memory-bytes", "8G"]) == 0
    out = capsys.readouterr()
    assert "8.00 GiB per GPU (set: --kv-pool-gb 8)" in out.out and "applied as kvsim's --kv-pool-gb" in out.err
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i * 0.1, "prompt_tokens": 300, "output_tokens": 20}) + "\n"
                             for i in range(10)))
    runs = {}
    for extra in ([], ["--enforce-eager"], ["--cudagraph-capture-sizes", "none"]):
        out_dir = tmp_path / f"o{len(runs)}"
        assert main(["run", "--trace", str(trace), "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--no-plots",
                     "--out", str(out_dir), *extra]) == 0
        runs[" ".join(extra)] = (out_dir / "requests.csv").read_text()
    assert runs["--enforce-eager"] == runs["--cudagraph-capture-sizes none"] != runs[""]


@pytest.mark.parametrize("command", ["run", "compare", "cluster", "plan", "sweep", "memory", "latency"])
def test_every_command_with_options_takes_vllm_flags(command, capsys):
    """Parsing only: each command's parser with a pasted serve line leaves nothing unrecognised."""
    from kvsim.cli import _chosen_parser, _take_vllm_flags

    parser = make_parser()
    base = {"run": ["--trace", "t.jsonl"], "compare": ["--trace", "t.jsonl"], "cluster": ["--trace", "t.jsonl"],
            "plan": ["--trace", "t.jsonl"], "sweep": ["grid.yaml"], "memory": [], "latency": []}[command]
    try:
        ns, unknown = parser.parse_known_args([command, *base, *shlex.split(SERVE)])
    except SystemExit:
        pytest.skip(f"{command} needs other arguments to parse")
    assert _take_vllm_flags(_chosen_parser(parser, ns), ns, unknown) == []


def test_a_typo_is_still_an_error_and_the_suggestion_fits(capsys):
    with pytest.raises(SystemExit):
        main(["memory", "--model", "llama-3.1-8b", "--enabel-prefix-cachin"])
    assert "did you mean: --enabel-prefix-cachin -> --enable-prefix-caching" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["memory", "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "lots"])
    assert "not a size in bytes" in capsys.readouterr().err


def test_chunked_prefill_is_never_suggested_as_expert_parallel(capsys):
    assert main(["memory", "--model", "llama-3.1-8b", "--enable-chunked-prefill"]) == 0
    assert "enable-expert-parallel" not in capsys.readouterr().err


@pytest.mark.parametrize("given, served", [
    ("llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
    ("gpt-oss-120b", "openai/gpt-oss-120b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("nvidia/Llama-3.3-70B-Instruct-FP4", "nvidia/Llama-3.3-70B-Instruct-FP4"),
    ("custom:layers=2,kv_heads=1,head_dim=64,params=1e8", "<your-model>"),
])
def test_the_model_is_named_as_vllm_serve_takes_it(given, served):
    assert serve_name(given) == served


def test_a_config_json_is_served_from_its_folder_or_its_hub_id(tmp_path):
    cfg = json.load(open("tests/data/llama-3.1-8b-config.json"))
    d = tmp_path / "my model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**cfg, "_name_or_path": "$(rm -rf ~)"}))
    assert serve_name(str(d / "config.json")) == str(d)  # not a hub id: the local folder vLLM loads
    (d / "config.json").write_text(json.dumps({**cfg, "_name_or_path": "acme/llama-ft"}))
    assert serve_name(str(d / "config.json")) == "acme/llama-ft"
