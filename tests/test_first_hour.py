"""A vLLM user's first hour: `vllm serve` flags pasted onto any kvsim command are taken (applied where kvsim models
them, listed once as not modelled otherwise), typos still get a one-line error with a fitting suggestion, and the
command lines kvsim prints name the model as `vllm serve` takes it."""

import json
import shlex

import pytest

from kvsim.cli import main, make_parser
from kvsim.hardware.models import serve_name

SERVE = (
    "--trust-remote-code --dtype bfloat16 --host 0.0.0.0 --port 8000 --served-model-name a b "
    "--enable-chunked-prefill --no-enable-prefix-caching --async-scheduling --disable-log-requests "
    "--max-cudagraph-capture-size 512 --tool-call-parser hermes --enable-auto-tool-choice"
)


def test_kvsim_memory_takes_a_pasted_vllm_serve_command_line(capsys):
    assert main(["memory", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", *shlex.split(SERVE)]) == 0
    err = capsys.readouterr().err
    assert err.count("accepted with no effect") == 1  # listed once
    for flag in (
        "--trust-remote-code",
        "--dtype bfloat16",
        "--host 0.0.0.0",
        "--served-model-name a b",
        "--enable-chunked-prefill",
        "--async-scheduling",
        "--tool-call-parser hermes",
    ):
        assert flag in err


def test_a_json_option_given_a_field_at_a_time_as_vllm_takes_it(capsys):
    """vLLM's `--speculative-config.method mtp --speculative-config.num_speculative_tokens 1` (from InferenceX's
    GLM-5 serve line) is `--speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'`, put last as
    vLLM's parser puts it (so the fields win over the option given whole); a pass-through JSON flag
    (`--compilation-config.cudagraph_mode=FULL`) is taken the same way; other dotted values are left."""
    from kvsim.vllm_flags import expand_dotted, vllm_argv

    assert expand_dotted(
        ["--speculative-config.method", "mtp", "-tp", "8", "--speculative-config.num_speculative_tokens", "1"]
    ) == ["-tp", "8", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}']
    assert expand_dotted(["--a.b.c=true", "--out", "x.y", "--trace", "t.jsonl", "--a.l+", "1,2", "--a.l+=3"]) == [
        "--out",
        "x.y",
        "--trace",
        "t.jsonl",
        "--a",
        '{"b": {"c": true}, "l": ["1", "2", "3"]}',
    ]
    # vLLM 0.13+: -O is --optimization-level; -cc / -ac the compilation and attention configs; -O.x (older) and
    # --x_y (underscores before the first dot) as vLLM reads them
    assert vllm_argv(["-O3", "-O", "0", "-O.cudagraph_mode", "FULL", "-ac.backend", "FLASHINFER"]) == [
        "--optimization-level",
        "3",
        "--optimization-level",
        "0",
        "--compilation-config",
        '{"cudagraph_mode": "FULL"}',
        "--attention-config",
        '{"backend": "FLASHINFER"}',
    ]
    assert vllm_argv(["--max_num_seqs=4", "--compilation_config.pass_config.fuse_allreduce_rms", "true"]) == [
        "--max-num-seqs=4",
        "--compilation-config",
        '{"pass_config": {"fuse_allreduce_rms": true}}',
    ]
    base = ["memory", "--model", "zai-org/GLM-4.6", "--gpu", "h200", "-tp", "8", "--acceptance-length", "1.8"]
    dotted = ["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "1"]
    assert main([*base, *dotted, "--compilation-config.cudagraph_mode=FULL"]) == 0
    a = capsys.readouterr()
    assert "--compilation-config" in a.err
    assert main([*base, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}']) == 0
    assert capsys.readouterr().out == a.out
    # the whole option, then its fields: vLLM's parser passes the fields' JSON last, which replaces the whole
    whole = ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}']
    assert main([*base, *dotted[:2], *whole, *dotted[2:]]) == 0
    assert capsys.readouterr().out == a.out


def test_a_vllm_config_file_is_read_as_vllm_reads_it(tmp_path, capsys):
    """`vllm serve --config FILE.yaml` (InferenceX's gpt-oss-120b H100 script writes one): its options go before
    the command line's, which wins; true is the flag, false its --no- form, a mapping JSON; bad files are one-line
    errors naming the file."""
    from kvsim.vllm_flags import vllm_argv

    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "no-enable-prefix-caching: true\nmax-cudagraph-capture-size: 2048\nmax-num-batched-tokens: 8192\n"
        "max_model_len: 10240\nasync-scheduling: false\nenforce-eager: false\nserved-model-name: [a, b]\n"
        "compilation-config:\n  pass_config:\n    fuse_allreduce_rms: true\n"
    )
    negatable = {"--no-async-scheduling"}
    assert vllm_argv(["run", "--trace", "t.jsonl", "--config", str(cfg), "-tp", "2"], negatable) == [
        "run",
        "--no-enable-prefix-caching",
        "--max-cudagraph-capture-size",
        "2048",
        "--max-num-batched-tokens",
        "8192",
        "--max-model-len",
        "10240",
        "--no-async-scheduling",
        "--no-enforce-eager",  # a vLLM boolean flag (VLLM_FLAGS "bool")
        "--served-model-name",
        "a",
        "b",
        "--compilation-config",
        '{"pass_config": {"fuse_allreduce_rms": true}}',
        "--trace",
        "t.jsonl",
        "-tp",
        "2",
    ]
    argv = ["memory", "--model", "openai/gpt-oss-120b", "--gpu", "h100", "--vllm-version", "0.21", "--config"]
    assert main([*argv, str(cfg), "--max-model-len", "4096", "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "--max-cudagraph-capture-size 2048: applied as kvsim's --cudagraph-capture-sizes 1,2,4,...,2048" in err
    assert "--compilation-config {" in err and "accepted with no effect" in err
    assert (tmp_path / "o" / "memory.csv").read_text().count(",4096,") == 1  # the command line over the file
    for text, message in (
        ("a: [", "not valid YAML"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("port:\n", "option 'port' has no value"),
    ):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        assert main([*argv, str(bad)]) == 2
        assert f"--config {bad}: {message}" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "none.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main([*argv, str(cfg), "--config", str(cfg)]) == 2
    assert "more than one config file" in capsys.readouterr().err
    assert main([*argv[:-1], "--config=c.json"]) == 2
    assert "must be YAML" in capsys.readouterr().err


def test_cuda_graph_flags_mean_what_they_do_in_vllm(capsys):
    """Eager (--enforce-eager, -O0, cudagraph_mode NONE) subtracts no CUDA-graph memory from the KV cache on vLLM
    0.20+, and smaller captured sizes less (kvsim memory); no graph beats any sizes given with it."""
    base = ["memory", "--model", "qwen3-8b", "--gpu", "h100-80gb", "--vllm-version", "0.21", "--out"]
    pools = {}
    for extra in (
        [],
        ["--enforce-eager"],
        ["-O0"],
        ["--compilation-config", '{"cudagraph_mode": "NONE"}'],
        ["--max-cudagraph-capture-size", "64", "--enforce-eager"],
        ["--cuda-graph-sizes", "64"],
        ["-cc.cudagraph_capture_sizes", "[1,2,4,8,16,24,32,40,48,56,64]"],
        ["--compilation-config", '{"max_cudagraph_capture_size": 64}'],
        ["-O3"],
    ):
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            assert main([*base, d, *extra]) == 0
            import pandas as pd

            pools[" ".join(extra)] = pd.read_csv(f"{d}/memory.csv")["pool_bytes"][0]
    capsys.readouterr()
    default, eager = pools[""], pools["--enforce-eager"]
    assert eager > default  # the graphs' estimate (888 MiB here) stays in the KV pool
    assert pools["-O0"] == pools['--compilation-config {"cudagraph_mode": "NONE"}'] == eager
    assert pools["--max-cudagraph-capture-size 64 --enforce-eager"] == eager
    assert default < pools["--cuda-graph-sizes 64"] < eager
    sizes_64 = pools['--compilation-config {"max_cudagraph_capture_size": 64}']
    assert (
        pools["-cc.cudagraph_capture_sizes [1,2,4,8,16,24,32,40,48,56,64]"]
        == sizes_64
        == pools["--cuda-graph-sizes 64"]
    )
    assert pools["-O3"] == default


def test_flags_kvsim_models_are_applied(tmp_path, capsys):
    assert main(["memory", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--kv-cache-memory-bytes", "8G"]) == 0
    out = capsys.readouterr()
    assert "8.00 GiB per GPU (set: --kv-pool-gb 8)" in out.out and "applied as kvsim's --kv-pool-gb" in out.err
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"arrival_s": i * 0.1, "prompt_tokens": 300, "output_tokens": 20}) + "\n" for i in range(10))
    )
    runs = {}
    for extra in ([], ["--enforce-eager"], ["--cudagraph-capture-sizes", "none"]):
        out_dir = tmp_path / f"o{len(runs)}"
        assert (
            main(
                [
                    "run",
                    "--trace",
                    str(trace),
                    "--model",
                    "llama-3.1-8b",
                    "--gpu",
                    "h100-80gb",
                    "--no-plots",
                    "--out",
                    str(out_dir),
                    *extra,
                ]
            )
            == 0
        )
        runs[" ".join(extra)] = (out_dir / "requests.csv").read_text()
    assert runs["--enforce-eager"] == runs["--cudagraph-capture-sizes none"] != runs[""]


@pytest.mark.parametrize("command", ["run", "compare", "cluster", "plan", "sweep", "memory", "latency"])
def test_every_command_with_options_takes_vllm_flags(command, capsys):
    """Parsing only: each command's parser with a pasted serve line leaves nothing unrecognised."""
    from kvsim.cli import _chosen_parser, _take_vllm_flags

    parser = make_parser()
    base = {
        "run": ["--trace", "t.jsonl"],
        "compare": ["--trace", "t.jsonl"],
        "cluster": ["--trace", "t.jsonl"],
        "plan": ["--trace", "t.jsonl"],
        "sweep": ["grid.yaml"],
        "memory": [],
        "latency": [],
    }[command]
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


@pytest.mark.parametrize(
    "given, served",
    [
        ("llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
        ("gpt-oss-120b", "openai/gpt-oss-120b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("nvidia/Llama-3.3-70B-Instruct-FP4", "nvidia/Llama-3.3-70B-Instruct-FP4"),
        ("custom:layers=2,kv_heads=1,head_dim=64,params=1e8", "<your-model>"),
    ],
)
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


def test_trace_generate_caps_nothing_unless_asked_and_says_what_a_cap_changed(tmp_path, capsys):
    from kvsim.trace import load_trace

    out = tmp_path / "t.jsonl"
    assert (
        main(
            [
                "trace",
                "generate",
                "-o",
                str(out),
                "-n",
                "200",
                "--prompt-mean",
                "8000",
                "--output-mean",
                "1000",
                "--prompt-sigma",
                "0.1",
                "--output-sigma",
                "0.1",
            ]
        )
        == 0
    )
    reqs = load_trace(str(out)).requests
    assert min(r.prompt_tokens for r in reqs) > 5000 and min(r.output_tokens for r in reqs) > 600
    assert "shortened" not in capsys.readouterr().err
    assert (
        main(
            [
                "trace",
                "generate",
                "-o",
                str(out),
                "-n",
                "200",
                "--prompt-mean",
                "8000",
                "--output-mean",
                "1000",
                "--prompt-sigma",
                "0.1",
                "--output-sigma",
                "0.1",
                "--max-total",
                "4096",
            ]
        )
        == 0
    )
    assert "--max-total 4,096 shortened 200 prompts and 200 outputs of 200 requests" in capsys.readouterr().err


def test_multi_turn_rate_says_what_it_means_and_a_turn_rate_is_steady(tmp_path, capsys):
    import numpy as np

    from kvsim.trace import load_trace

    rates = {}
    for flag in ("--rate", "--turns-per-s"):
        for r in (8, 40):
            out = tmp_path / f"m{flag}{r}.jsonl"
            assert (
                main(["trace", "generate", "-o", str(out), "--scenario", "multi-turn", flag, str(r), "-n", "2000"]) == 0
            )
            t = np.array([q.arrival_s for q in load_trace(str(out)).requests])
            rates[flag, r] = len(t) / (t[-1] - t[0])
            tenth = len(t) // 10
            if flag == "--turns-per-s":  # steady: the first and last tenths at the asked rate
                for part in (t[:tenth], t[-tenth:]):
                    assert len(part) / (part[-1] - part[0]) == pytest.approx(r, rel=0.25)
    err = capsys.readouterr().err
    assert "8 conversations/s (--rate)" in err and "--turns-per-s R asks for R requests/s" in err
    assert rates["--turns-per-s", 8] == pytest.approx(8, rel=0.1)
    assert rates["--turns-per-s", 40] == pytest.approx(40, rel=0.1)


@pytest.mark.parametrize(
    "header, row, scale",
    [
        ("timestamp,input_tokens,output_tokens", "{t},{p},{o}", 1.0),
        ("Time,Prompt Tokens,Completion Tokens", "{t},{p},{o}", 1.0),
        ("timestamp_ms,prompt_len,output_len", "{t_ms},{p},{o}", 1.0),
        ("arrival_time,isl,osl", "2024-05-10T10:00:{ss},{p},{o}", 1.0),
    ],
)
def test_a_plain_csv_of_times_and_lengths_imports_without_renaming(tmp_path, header, row, scale, capsys):
    from kvsim.trace import load_trace

    p = tmp_path / "mine.csv"
    lines = [header] + [
        row.format(t=5 + 0.5 * i, t_ms=5000 + 500 * i, ss=f"{10 + 0.5 * i:06.3f}", p=100 + i, o=10 + i)
        for i in range(6)
    ]
    p.write_text("\n".join(lines) + "\n")
    reqs = load_trace(str(p)).requests
    assert [r.arrival_s for r in reqs] == pytest.approx([0.5 * i for i in range(6)])
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(100 + i, 10 + i) for i in range(6)]
    assert main(["run", "--trace", str(p), "--no-plots", "--out", str(tmp_path / "o")]) == 0


def test_a_jsonl_with_other_field_names_imports_and_an_unknown_layout_says_what_was_looked_for(tmp_path, capsys):
    from kvsim.errors import TraceError
    from kvsim.trace import load_trace

    p = tmp_path / "mine.jsonl"
    p.write_text("".join(json.dumps({"time": i, "input_tokens": 50, "output_tokens": 5}) + "\n" for i in range(3)))
    assert [r.arrival_s for r in load_trace(str(p)).requests] == [0, 1, 2]
    bad = tmp_path / "bad.csv"
    bad.write_text("when,a,b\n1,2,3\n")
    with pytest.raises(TraceError, match="no time column: looked for arrival_s, .*timestamp.*the file has when, a, b"):
        load_trace(str(bad))
    bad.write_text("timestamp,input_tokens,output_tokens\n1,2,3\nx,2,3\n")
    with pytest.raises(TraceError, match=r"bad.csv:3: field 'timestamp': not a number of seconds or a date-time"):
        load_trace(str(bad))
    assert len(load_trace(str(bad), skip_invalid=True).requests) == 1


def test_validate_names_the_flags_that_make_a_usable_result_file(tmp_path):
    from kvsim.errors import ConfigError
    from kvsim.trace.bench_result import read_bench_result

    p = tmp_path / "r.json"
    p.write_text(json.dumps({"duration": 10, "completed": 5, "request_throughput": 0.5, "mean_ttft_ms": 20}))
    with pytest.raises(
        ConfigError,
        match="no per-request fields input_lens, output_lens, ttfts, itls: .*"
        "--save-result --save-detailed.*duration, completed",
    ):
        read_bench_result(str(p))
    # a summary with its token totals also says how to replay its load (mean lengths; they varied: said so)
    summary = {"completed": 40, "total_input_tokens": 40960, "total_output_tokens": 5120, "max_concurrency": 4}
    p.write_text(json.dumps({**summary, "request_rate": "inf", "median_ttft_ms": 477.0}))
    with pytest.raises(ConfigError) as e:
        read_bench_result(str(p))
    hint = "--num-prompts 40 --random-input-len 1024 --random-output-len 128 --max-concurrency 4`"
    assert hint in str(e.value) and "varied" not in str(e.value)
    p.write_text(json.dumps({**summary, "total_input_tokens": 40961, "request_rate": 2.5, "burstiness": 0.5}))
    with pytest.raises(ConfigError, match=r"--random-input-len 1024 .*--request-rate 2.5 --burstiness 0.5`.*varied"):
        read_bench_result(str(p))
    detail = {"input_lens": [10**300], "output_lens": [5], "ttfts": [0.1], "itls": [[0.01] * 4]}
    p.write_text(json.dumps(detail))
    with pytest.raises(ConfigError, match="request 0: field 'input_lens': must be a finite number >= 0 and <="):
        read_bench_result(str(p))
    p.write_text(json.dumps({**detail, "input_lens": [10], "request_rate": 1e-300}))
    with pytest.raises(ConfigError, match="field 'request_rate' must be >= 1e-06"):
        read_bench_result(str(p))


def _bench_run(tmp_path, name: str, args: list[str]) -> str:
    out_dir = tmp_path / name
    base = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--vllm-version", "0.11.0", "--no-plots"]
    assert main([*base, "--out", str(out_dir), *args]) == 0
    return (out_dir / "requests.csv").read_text()


def test_kvsim_run_takes_a_pasted_vllm_bench_serve_command_line(tmp_path, capsys):
    """`vllm bench serve`'s flags: the workload's are kvsim options, --backend/--endpoint pick the endpoint (as
    the URL path too), --input-len/--output-len are the random dataset's lengths, and where it sends, what it
    saves and its sampling parameters are accepted and listed once as not modelled."""
    bench = shlex.split(
        "--backend openai-chat --base-url http://localhost:8000 --endpoint /v1/chat/completions "
        "--dataset-name random --input-len 200 --output-len 12 --num-prompts 12 --max-concurrency 3 "
        "--random-range-ratio 0.5 --ignore-eos --temperature 0 --percentile-metrics ttft,tpot,itl "
        "--metric-percentiles 50,99 --save-result --result-dir /nowhere --header x-a=1 x-b=2 --label run1"
    )
    pasted = _bench_run(tmp_path, "pasted", bench)
    err = capsys.readouterr().err
    assert err.count("accepted with no effect") == 1
    for flag in ("--base-url http://localhost:8000", "--temperature 0", "--save-result", "--header x-a=1 x-b=2"):
        assert flag in err
    own = shlex.split(
        "--endpoint chat --dataset-name random --random-input-len 200 --random-output-len 12 --num-prompts 12 "
        "--max-concurrency 3 --random-range-ratio 0.5 --ignore-eos"
    )
    assert pasted == _bench_run(tmp_path, "own", own)
    # the chat endpoint of 0.11.0 parses the template per request: the backend is not ignored
    completions = [a if a != "chat" else "completions" for a in own]
    assert pasted != _bench_run(tmp_path, "completions", completions)
    assert _bench_run(tmp_path, "backend-only", ["--backend", "openai-chat", *own[2:]]) == pasted
    assert _bench_run(tmp_path, "vllm", ["--backend", "vllm", *completions[2:]]) == _bench_run(
        tmp_path, "completions-2", completions
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "openai-chat", "--endpoint", "/v1/completions"], "but --endpoint /v1/completions is given too"),
        (["--backend", "openai-embeddings"], "'openai-embeddings' is not a backend kvsim simulates"),
        (["--endpoint", "/v1/embeddings"], "'/v1/embeddings' is not one of completions, chat"),
    ],
)
def test_a_bench_client_flag_kvsim_cannot_honour_is_an_error(args, message, capsys):
    base = ["run", "--model", "llama-3.1-8b", "--dataset-name", "random", "--num-prompts", "2"]
    try:
        code = main([*base, *args])
    except SystemExit as e:
        code = e.code
    assert code == 2 and message in capsys.readouterr().err


def test_a_pasted_vllm_serve_line_with_its_positional_model_runs(capsys):
    """`vllm serve MODEL --flags` pasted after a kvsim command: `vllm serve` dropped, the model tag read as --model
    (said); a word that names no model, or a second model beside --model, is still an error."""
    line = ["vllm", "serve", "Qwen/Qwen3-8B", "--tensor-parallel-size", "2", "--max_num_seqs", "64"]
    assert main(["memory", "--gpu", "h100-80gb", *line]) == 0
    out = capsys.readouterr()
    assert "read as --model Qwen/Qwen3-8B" in out.err and "qwen3-8b on h100-80gb x2" in out.out
    assert main(["memory", "--gpu", "h100-80gb", "--model", "qwen3-8b", "-tp", "2", "--max-num-seqs", "64"]) == 0
    assert capsys.readouterr().out == out.out
    for bad in (["nonsense/Model"], ["--model", "qwen3-8b", "Qwen/Qwen3-14B"]):
        with pytest.raises(SystemExit):
            main(["memory", "--gpu", "h100-80gb", *bad])
        assert f"unrecognized arguments: {bad[-1]}" in capsys.readouterr().err
