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
mm-encoder-tp-mode mm-processor-cache-gb logprobs-mode pooler-config
enforce-eager-placeholder""".split()
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
_BOOL = """enforce-eager enable-chunked-prefill async-scheduling enable-prefix-caching enable-expert-parallel""".split()

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


# flags kvsim applies through one of its own options, when the command has it: flag -> (option key, value
# function; ValueError says what is wrong with the value)
APPLIED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "--enforce-eager": ("cudagraph_capture_sizes", lambda v: "none"),  # no CUDA graphs: every step runs eager
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


def expand_dotted(args: list[str]) -> list[str]:
    """vLLM's spelling of a JSON option one field at a time: ``--speculative-config.method mtp
    --speculative-config.num_speculative_tokens 1`` (or ``--x.key=value``; ``a.b`` nests) is
    ``--speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'``, each value JSON where it parses
    (numbers, true/false) and a string otherwise, as vLLM's argument parser reads them; vLLM's ``-O`` is
    ``--compilation-config`` (``-O3``, ``-O.level 3``). Other arguments as given."""
    import json

    out: list[str] = []
    merged: dict[str, dict] = {}
    at: dict[str, int] = {}  # where each flag's JSON goes (the place of its first field)
    i = 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("-O") and not tok.startswith("--"):  # vLLM's -O: --compilation-config (-O3, -O.level 3)
            if not tok.startswith("-O."):  # the whole config, attached (-O3) or next (-O 3)
                out += ["--compilation-config", *([tok[2:]] if tok[2:] else [])]
                i += 1
                continue
            tok = "--compilation-config" + tok[2:]
        name, eq, inline = tok.partition("=")
        base, _, path = name.partition(".")
        dotted = tok.startswith("--") and path and base[2:] and not base[2:].startswith("-")
        if not dotted or (not eq and i + 1 == len(args)):  # (a field without a value: left for the parser to name)
            out.append(tok)
            i += 1
            continue
        value, i = (inline, i + 1) if eq else (args[i + 1], i + 2)
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        node = merged.setdefault(base, {})
        *parents, leaf = path.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = parsed
        if base not in at:
            at[base] = len(out)
            out += [base, ""]
    for base, pos in at.items():
        out[pos + 1] = json.dumps(merged[base])
    return out
