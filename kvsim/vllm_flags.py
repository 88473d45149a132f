"""`vllm serve` and `vllm bench serve` flags on kvsim's command lines: a user pastes their serving command's and
their benchmark client's flags, and every command takes them. Flags kvsim models are options of its own (kvsim/option_table.py); the ones here change nothing kvsim models
(where the server listens, logging, tokenizer, tool parsing, LoRA, ...), or change it in one way kvsim applies
(:data:`APPLIED`). Each is accepted with its value and listed once on the terminal as not modelled, so that a
pasted command line runs and the user sees what it did not change.

Flag names and value kinds from vLLM's `vllm serve --help` (0.10-0.2x: EngineArgs, the OpenAI-compatible server's
FrontendArgs and the CLI's own) and `vllm bench serve` (0.14.0's vllm/benchmarks/serve.py and datasets.py: where it
sends, what it saves, sampling parameters; the workload's own flags, --dataset-name, --random-input-len,
--max-concurrency, ..., are kvsim options).
"""

from __future__ import annotations

from typing import Any, Callable

from kvsim.chat_template import backend_endpoint

# flag -> how its value is given: "switch" (none), "bool" (--x / --no-x, no value), "value" (one), "values" (any
# number up to the next flag)
_SWITCH = """trust-remote-code disable-log-stats disable-log-requests enable-log-requests enable-log-outputs
skip-tokenizer-init enable-prompt-embeds disable-sliding-window disable-cascade-attn disable-custom-all-reduce
enable-lora enable-lora-bias fully-sharded-loras enable-auto-tool-choice enable-prompt-tokens-details
enable-server-load-tracking enable-force-include-usage disable-fastapi-docs headless enable-eplb enable-dbo
ray-workers-use-nsight enable-sleep-mode calculate-kv-scales return-tokens-as-token-ids
disable-frontend-multiprocessing enable-request-id-headers enable-tokenizer-info-endpoint
disable-mm-preprocessor-cache use-tqdm-on-load kv-sharing-fast-prefill data-parallel-hybrid-lb
data-parallel-external-lb enable-multimodal-encoder-data-parallel disable-uvicorn-access-log enable-ssl-refresh
enable-mfu-metrics disable-chunked-mm-input enable-return-routed-experts""".split()
_VALUE = """host port api-key uvicorn-log-level served-model-name-single tokenizer tokenizer-mode tokenizer-revision
revision code-revision download-dir load-format config-format dtype seed chat-template chat-template-content-format
tool-call-parser tool-parser-plugin reasoning-parser generation-config override-generation-config max-logprobs
distributed-executor-backend compilation-config kv-transfer-config kv-events-config limit-mm-per-prompt
mm-processor-kwargs allowed-local-media-path allowed-media-domains hf-overrides hf-config-path hf-token root-path
ssl-keyfile ssl-certfile ssl-ca-certs ssl-cert-reqs max-loras max-lora-rank max-cpu-loras lora-dtype
data-parallel-address data-parallel-rpc-port data-parallel-size-local data-parallel-start-rank
data-parallel-backend eplb-config num-redundant-experts all2all-backend max-parallel-loading-workers worker-cls
worker-extension-cls model-impl logits-processor-pattern guided-decoding-backend structured-outputs-config
cpu-offload-gb num-lookahead-slots scheduler-delay-factor scheduler-cls
long-prefill-token-threshold max-num-partial-prefills max-long-partial-prefills max-seq-len-to-capture
max-cudagraph-capture-size mamba-ssm-cache-dtype mamba-cache-dtype prefix-caching-hash-algo otlp-traces-endpoint
collect-detailed-traces show-hidden-metrics-for-version pt-load-map-location model-loader-extra-config
safetensors-load-strategy override-attention-dtype response-role tool-server log-config-file max-log-len
attention-backend expert-placement-strategy decode-context-parallel-size
prefill-context-parallel-size ubatch-size kv-offloading-backend cpu-offload-params runner convert task
kv-cache-memory-bytes kv-cache-memory rope-scaling rope-theta max-num-batched-encoder-tokens
middleware-config dbo-decode-token-threshold dbo-prefill-token-threshold quantization-param-path profiler-config
mm-encoder-tp-mode mm-processor-cache-gb logprobs-mode pooler-config attention-config linear-backend
optimization-level enforce-eager-placeholder""".split()
# `vllm bench serve`: where it sends, what it records, sampling parameters (with --ignore-eos or kvsim's drawn
# lengths they change no token count), dataset loading that the random dataset does not use
_BENCH_SWITCH = """save-result save-detailed append-result disable-tqdm profile disable-shuffle no-oversample
skip-chat-template no-stream no-reranker insecure""".split()
_BENCH_VALUE = """base-url label result-dir result-filename ready-check-timeout-sec request-id-prefix
percentile-metrics metric-percentiles extra-body temperature top-p top-k min-p frequency-penalty presence-penalty
repetition-penalty logprobs dataset-path random-batch-size backend""".split()
_BENCH_VALUES = """header metadata goodput""".split()
_VALUES = """served-model-name lora-modules allowed-origins allowed-methods allowed-headers middleware ignore-patterns
logits-processors cuda-graph-sizes tool-parsers""".split()
_BOOL = """enforce-eager enable-chunked-prefill async-scheduling enable-prefix-caching enable-expert-parallel
enable-flashinfer-autotune""".split()

VLLM_FLAGS: dict[str, str] = {
    **{f"--{n}": "switch" for n in _SWITCH + _BENCH_SWITCH},
    **{f"--{n}": "value" for n in _VALUE + _BENCH_VALUE},
    **{f"--{n}": "values" for n in _VALUES + _BENCH_VALUES},
    **{f"--{n}": "bool" for n in _BOOL},
}
for _f in ("--served-model-name-single", "--enforce-eager-placeholder"):
    del VLLM_FLAGS[_f]
del _f


def _bytes(text: str) -> float:
    """vLLM's byte sizes: a number, or one with a k/m/g (1000s) or K/M/G (1024s) suffix (options.SIZE_UNITS)."""
    from kvsim.options import SIZE_UNITS

    t = text.strip()
    scale = SIZE_UNITS.get(t[-1:], 1)
    wrong = ValueError(f"{text!r} is not a size in bytes (e.g. 8589934592 or 8G)")
    try:
        value = float(t[:-1] if t[-1:] in SIZE_UNITS else t)
    except ValueError:
        raise wrong from None
    if not 0 < value < float("inf"):  # also NaN
        raise wrong
    return value * scale


def _count(text: str, what: str) -> int:
    """A flag's value as a whole number >= 0 (ValueError naming ``what`` otherwise)."""
    try:
        n = int(str(text).strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number ({what})") from None
    if n < 0:
        raise ValueError(f"{text!r} is negative ({what})")
    return n


def _listed_sizes(sizes) -> str:
    """A ``--cudagraph-capture-sizes`` value for these token counts ("none" for none)."""
    return ",".join(str(_count(s, "a CUDA-graph size in tokens")) for s in sizes) or "none"


def _graphs_up_to(top) -> str:
    """vLLM's ``--max-cudagraph-capture-size N`` (0.11.1+): its usual sizes up to N tokens."""
    from kvsim.latency.cuda_graphs import sizes_up_to

    return _listed_sizes(sizes_up_to(_count(top, "the largest CUDA-graph size in tokens")))


def _cuda_graph_sizes(text: str) -> str:
    """vLLM 0.10-0.11's ``--cuda-graph-sizes``: one value is the largest size (1, 2, 4 and every 8 up to it),
    several are the sizes themselves."""
    values = str(text).split()
    if len(values) == 1:
        top = _count(values[0], "the largest CUDA-graph size in tokens")
        return _listed_sizes([s for s in (1, 2, 4) if s <= top] + list(range(8, top + 1, 8)))
    return _listed_sizes(values)


def _optimization_level(text: str) -> str | None:
    """vLLM 0.13+'s ``-O`` / ``--optimization-level``: 0 compiles nothing and captures no graph (eager); 1-3
    capture graphs at the default sizes (kvsim does not tell piecewise from full graphs apart)."""
    level = _count(text, "an optimization level, 0-3")
    if level > 3:
        raise ValueError(f"{text!r} is not an optimization level (0-3)")
    return "none" if level == 0 else None


def _compilation_config(text: str) -> str | None:
    """What a ``--compilation-config`` JSON sets of the CUDA-graph sizes: ``cudagraph_mode`` NONE (eager),
    ``cudagraph_capture_sizes`` (a list) or ``max_cudagraph_capture_size``; None when it sets none of them (a
    compilation level, fusion passes: not modelled)."""
    import json

    try:
        cfg = json.loads(text)
    except ValueError:
        raise ValueError(f'{text!r} is not JSON (e.g. \'{{"cudagraph_mode": "NONE"}}\')') from None
    if not isinstance(cfg, dict):
        return None  # a bare compilation level (0.10-0.12's -O3)
    if str(cfg.get("cudagraph_mode", "")).upper() == "NONE":
        return "none"
    if cfg.get("cudagraph_capture_sizes") is not None:
        sizes = cfg["cudagraph_capture_sizes"]
        if not isinstance(sizes, list):
            raise ValueError(f"cudagraph_capture_sizes must be a list of token counts, got {sizes!r}")
        return _listed_sizes(sizes)
    if cfg.get("max_cudagraph_capture_size") is not None:
        return _graphs_up_to(cfg["max_cudagraph_capture_size"])
    return None


# flags kvsim applies through one of its own options, when the command has it: flag -> (option key, value
# function: the option's value, or None where this value changes nothing kvsim models; ValueError says what is
# wrong with the value)
APPLIED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "--enforce-eager": ("cudagraph_capture_sizes", lambda v: "none"),  # no CUDA graphs: every step runs eager
    "--optimization-level": ("cudagraph_capture_sizes", _optimization_level),
    "--compilation-config": ("cudagraph_capture_sizes", _compilation_config),
    "--max-cudagraph-capture-size": ("cudagraph_capture_sizes", _graphs_up_to),
    "--cuda-graph-sizes": ("cudagraph_capture_sizes", _cuda_graph_sizes),
    "--kv-cache-memory-bytes": ("kv_pool_gb", lambda v: _bytes(v) / (1 << 30)),  # a KV pool of this many bytes
    "--kv-cache-memory": ("kv_pool_gb", lambda v: _bytes(v) / (1 << 30)),
    "--backend": ("endpoint", backend_endpoint),  # vllm bench serve: the request its client sends
}


def take_vllm_flags(unknown: list[str], own: set[str]) -> tuple[list[str], list[tuple[str, str | None]]]:
    """Split the arguments a command did not know into (still unknown, vLLM flags taken as (flag, value)).
    ``own``: kvsim option flags (any command's) also taken when this command lacks them: a `vllm serve` flag
    kvsim models elsewhere (``--enable-chunked-prefill`` on ``kvsim memory``) changes nothing here."""
    rest: list[str] = []
    taken: list[tuple[str, str | None]] = []
    i = 0
    while i < len(unknown):
        tok = unknown[i]
        flag, eq, inline = tok.partition("=")
        base = "--" + flag[5:] if flag.startswith("--no-") else flag  # --no-x -> --x
        kind = VLLM_FLAGS.get(flag) or ("switch" if VLLM_FLAGS.get(base) in ("bool", "switch") else None)
        if kind is None and flag in own:
            kind = "own"
        if kind is None or not tok.startswith("--"):
            rest.append(tok)
            i += 1
            continue
        i += 1
        if eq:
            taken.append((flag, inline))
            continue
        if kind in ("value", "own") and i < len(unknown) and not _is_flag(unknown[i]):
            taken.append((flag, unknown[i]))
            i += 1
        elif kind == "values":
            vals = []
            while i < len(unknown) and not _is_flag(unknown[i]):
                vals.append(unknown[i])
                i += 1
            taken.append((flag, " ".join(vals)))
        elif kind == "value":
            rest.append(tok)  # a value flag without its value: left for the parser's error
        else:
            taken.append((flag, None))
    return rest, taken


def _is_flag(tok: str) -> bool:
    """An argument that starts another option (a negative number does not)."""
    if not tok.startswith("-") or tok == "-":
        return False
    try:
        float(tok)
        return False
    except ValueError:
        return True


def vllm_argv(args: list[str], negatable: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """A command line as vLLM's argument parser rewrites it before parsing (``FlexibleArgumentParser.parse_args``,
    0.10-0.34): ``--config FILE`` (a YAML file of options, :func:`config_file_args`) put before the other
    options so that the command line wins; underscores in option names read as dashes (``--max_num_seqs``, the
    part before a dot: ``--compilation_config.pass_config.x``); ``-cc`` / ``-ac`` as ``--compilation-config`` /
    ``--attention-config``, ``-O3`` / ``-O 3`` as ``--optimization-level 3``; JSON options given a field at a
    time (:func:`expand_dotted`). ``negatable``: boolean options a YAML ``false`` turns off as ``--no-x``.
    Raises ConfigError for an unreadable config file."""
    args = _pull_config(list(args), negatable)
    out: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        for short, long in (("-cc", "--compilation-config"), ("-ac", "--attention-config")):
            if tok == short or tok.startswith((short + ".", short + "=")):
                tok = long + tok[len(short) :]
        if tok.startswith("--"):
            key, eq, value = tok.partition("=")
            head, dot, tail = key.partition(".")
            tok = head.replace("_", "-") + dot + tail + eq + value
        elif tok.startswith("-O") and not tok.startswith("-O."):  # vLLM 0.13+: -O is --optimization-level
            level = tok[2:].removeprefix("=")
            if level:
                out += ["--optimization-level", level]
                continue
            if i < len(args) and args[i] in ("0", "1", "2", "3"):
                tok = "--optimization-level"
        out.append(tok)
    return expand_dotted(out)


def _pull_config(args: list[str], negatable: frozenset[str] | set[str]) -> list[str]:
    """``--config FILE`` (or ``--config=FILE``) replaced by the file's options, placed after the command's name
    and before its other options (vLLM's precedence: the command line over the file)."""
    from kvsim.errors import ConfigError

    where = [i for i, a in enumerate(args) if a == "--config" or a.startswith("--config=")]
    if not where:
        return args
    if len(where) > 1:
        raise ConfigError("--config: more than one config file given (vLLM takes one)")
    i = where[0]
    if args[i] == "--config":
        if i + 1 == len(args):
            raise ConfigError("--config: no file given (a YAML file of vLLM options, e.g. tensor-parallel-size: 4)")
        path, rest = args[i + 1], args[:i] + args[i + 2 :]
    else:
        path, rest = args[i].partition("=")[2], args[:i] + args[i + 1 :]
    start = next((k for k, a in enumerate(rest) if a.startswith("-")), len(rest))
    return rest[:start] + config_file_args(path, negatable) + rest[start:]


def config_file_args(path: str, negatable: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The options of a vLLM config file (``vllm serve --config FILE``): a YAML mapping of option names to values,
    read as vLLM reads it (``FlexibleArgumentParser.load_config_file``): ``true`` is the bare flag, ``false`` its
    ``--no-`` form where the option has one (else nothing), a list the flag followed by its items, a mapping
    JSON, anything else its text."""
    import json

    import yaml

    from kvsim.errors import ConfigError

    if not path.endswith((".yaml", ".yml")):
        raise ConfigError(f"--config {path}: vLLM's config file must be YAML (.yaml or .yml)")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path}: not valid YAML: {e}") from None
    except (RecursionError, ValueError) as e:
        raise ConfigError(f"--config {path}: not readable YAML ({e})") from None
    if doc is None:
        return []
    if not isinstance(doc, dict):
        raise ConfigError(f"--config {path}: expected a mapping of vLLM options (e.g. max-num-seqs: 256)")
    out: list[str] = []
    for key, value in doc.items():
        head, dot, tail = str(key).removeprefix("--").partition(".")
        flag = "--" + head.replace("_", "-") + dot + tail
        if isinstance(value, bool):
            off = f"--no-{flag[2:]}"
            if value:
                out.append(flag)
            elif off in negatable or VLLM_FLAGS.get(flag) == "bool":
                out.append(off)
        elif isinstance(value, list):
            if value:
                out += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        elif value is None:
            raise ConfigError(f"--config {path}: option {key!r} has no value")
        else:
            out += [flag, str(value)]
    return out


def expand_dotted(args: list[str]) -> list[str]:
    """vLLM's spelling of a JSON option one field at a time: ``--speculative-config.method mtp
    --speculative-config.num_speculative_tokens 1`` (or ``--x.key=value``; ``a.b`` nests; ``--x.key+ a,b`` a list)
    is ``--speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'``, each value JSON where it parses
    (numbers, true/false) and a string otherwise, put after the other arguments as vLLM puts it (so it wins over
    the same option given whole); ``-O.key`` (vLLM before 0.13) is ``--compilation-config.key``. Other arguments
    as given."""
    import json

    out: list[str] = []
    merged: dict[str, dict] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("-O."):
            tok = "--compilation-config" + tok[2:]
        name, eq, inline = tok.partition("=")
        base, _, path = name.partition(".")
        dotted = tok.startswith("--") and path and base[2:] and not base[2:].startswith("-")
        if not dotted or (not eq and i + 1 == len(args)):  # (a field without a value: left for the parser to name)
            out.append(tok)
            i += 1
            continue
        value, i = (inline, i + 1) if eq else (args[i + 1], i + 2)
        parsed: Any
        if path.endswith("+"):  # vLLM: a comma-separated list
            path, parsed = path[:-1], value.split(",")
        else:
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = value
        node = merged.setdefault(base, {})
        *parents, leaf = path.split(".")
        for k in parents:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        if isinstance(parsed, list) and isinstance(node.get(leaf), list):
            node[leaf] = node[leaf] + parsed  # vLLM extends a list given twice
        else:
            node[leaf] = parsed
    for base, fields in merged.items():
        out += [base, json.dumps(fields)]
    return out
