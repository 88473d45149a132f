"""The planner's questions the page and the service answer, each a kvsim command, and their inputs.

A question's inputs are its command's options, read from the command's own argparse parser (built from the
options table, kvsim/option_table.py, plus the command's flags), so the page, the API and the CLI take the
same names, defaults, choices and help. Inputs the service sets itself (where results go, how they are
shown, how work fans out) are not offered.
"""

from __future__ import annotations

import argparse
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

# set by the service, or work it does not allow: where results go, terminal layout, fan-out to other machines
SERVICE_SET = frozenset(
    {"out", "columns", "wide", "workers", "backend", "address", "record_batches", "help", "no_report"}
)
FILE_INPUTS = frozenset({"trace", "results"})  # inputs whose value is a file: an upload or an example


@dataclass(frozen=True)
class Question:
    """One page: ``command`` is the kvsim command that answers it."""

    name: str
    title: str
    ask: str  # the question, in the user's words
    command: tuple[str, ...]
    defaults: dict[str, Any]  # the page's first question (inputs beyond the options' own defaults)
    main: tuple[str, ...]  # inputs shown first; the rest under "more options"
    tables: tuple[str, ...]  # result tables (file stems), in the order the page shows them
    files: tuple[str, ...] = ()  # other result files the page shows as text
    barred: frozenset[str] = field(default_factory=frozenset)  # inputs of the command this page does not take
    out: str = "out"  # the command's --out: the job's results folder, or a file in it


QUESTIONS: dict[str, Question] = {
    q.name: q
    for q in (
        Question(
            "memory",
            "Memory",
            "How much of a GPU do the weights take, how large is the KV pool, and how many requests fit at once?",
            ("memory",),
            {"context": [4096]},
            (
                "model",
                "gpu",
                "tensor_parallel_size",
                "quantization",
                "kv_cache_dtype",
                "max_model_len",
                "gpu_memory_utilization",
                "context",
            ),
            ("memory", "memory_lines", "fits"),
        ),
        Question(
            "latency",
            "Iteration time",
            "How long does one engine iteration take for my batch and context, and where does the time go?",
            ("latency",),
            {"batch": 32, "context": 2048},
            ("model", "gpu", "tensor_parallel_size", "batch", "context", "new_tokens", "quantization", "vllm_version"),
            ("latency",),
            barred=frozenset({"shapes"}),
            out="out/latency.csv",
        ),
        Question(
            "compare",
            "Compare allocators",
            "On my traffic, how much throughput and latency does each KV-cache allocator give, and where does "
            "the KV memory go?",
            ("compare",),
            {"trace": "example:chat.jsonl"},
            (
                "trace",
                "model",
                "gpu",
                "tensor_parallel_size",
                "allocators",
                "max_num_seqs",
                "request_rate",
                "num_prompts",
            ),
            ("runs", "memory_timeline", "requests"),
            ("summary.md",),
        ),
        Question(
            "plan",
            "Plan a fleet",
            "Which layout of which GPUs serves my traffic at my SLOs for the least money, and how do I start it?",
            ("plan",),
            {
                "trace": "example:chat.jsonl",
                "slo": "ttft_p99=2s,tpot_p99=100ms",
                "gpus": "a100-40gb:2,h100-80gb:4.5",
                "target_rate": 10,
                "fleet_max_gpus": 2,
            },
            (
                "trace",
                "model",
                "slo",
                "gpus",
                "target_rate",
                "max_concurrency",
                "fleet_max_gpus",
                "fleet_routers",
                "fleet_tp",
            ),
            ("fleet_plan",),
            ("vllm_serve.sh", "summary.md"),
            frozenset({"study", "kernel_bench"}),
        ),
        Question(
            "autoscale",
            "Autoscale",
            "If an autoscaler sizes my fleet over the day, how many GPU-hours and dollars does it save against a "
            "fleet sized for the peak, and do the SLOs still hold?",
            ("plan",),
            {
                "trace": "example:chat.jsonl",
                "slo": "ttft_p99=2s,tpot_p99=100ms",
                "gpus": "a100-40gb:2,h100-80gb:4.5",
                "autoscaler": "sla:headroom=0.7",
                "plan_requests": 1000,
            },
            ("trace", "model", "slo", "gpus", "autoscaler", "plan_requests", "startup_load_gbs", "startup_fixed_s"),
            ("autoscale", "plan"),
            barred=frozenset({"study", "kernel_bench", "fleet_max_gpus", "target_rate"}),
        ),
        Question(
            "fleet",
            "Fleet and routers",
            "Behind which router do my replicas hit their prefix caches, and what TTFT does each replica see?",
            ("cluster",),
            {"trace": "example:mooncake_excerpt.jsonl", "replicas": 4, "routers": "round-robin,least-kv,prefix"},
            ("trace", "model", "gpu", "replicas", "routers", "allocator", "slo", "autoscaler"),
            ("fleet", "replicas", "requests"),
            ("summary.md",),
        ),
        Question(
            "validate",
            "Validate",
            "How close are kvsim's latencies to my measured `vllm bench serve` runs, request by request?",
            ("validate",),
            {"results": ["example:vllm_bench_result.json"], "model": "llama-3.1-8b", "gpu": "h100-80gb"},
            ("results", "model", "gpu", "tensor_parallel_size", "vllm_version"),
            ("validate", "requests"),
            ("summary.md",),
        ),
    )
}

_PARSER_LOCK = threading.Lock()


@lru_cache(maxsize=None)
def root_parser() -> argparse.ArgumentParser:
    """The CLI's parser of every command, built once (parsing leaves it as it was)."""
    from kvsim.commands.parser import make_parser

    with _PARSER_LOCK:
        return make_parser()


def command_parser(command: tuple[str, ...]) -> argparse.ArgumentParser:
    """The argparse parser of ``kvsim <command>`` (the CLI's own)."""
    p = root_parser()
    for name in command:
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[name]
    return p


def input_actions(q: Question) -> dict[str, argparse.Action]:
    """The inputs ``q`` takes, by key (the argparse dest, which is the options table's key)."""
    from kvsim.option_table import BY_KEY

    found: dict[str, argparse.Action] = {}
    for a in command_parser(q.command)._actions:
        if a.dest in SERVICE_SET or a.dest in q.barred or isinstance(a, argparse._HelpAction):
            continue
        o = BY_KEY.get(a.dest)
        if a.dest in found and o is not None and o.flag not in a.option_strings:
            continue  # a command's alias of an option (compare's --seed): the option's own flag stays
        found[a.dest] = a
    return found


def _kind(a: argparse.Action) -> str:
    if isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)):
        return "bool"
    from kvsim.option_table import BY_KEY

    o = BY_KEY.get(a.dest)
    if o is not None:
        return o.type.__name__
    name = getattr(a.type, "__name__", "str")
    return name if name in ("int", "float") else "str"


def _json_safe(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else str(v)
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return str(v)


def field_schema(q: Question) -> list[dict[str, Any]]:
    """Every input of ``q``: key, flag, help, group, kind, default, choices, required, many, file."""
    from kvsim.option_table import BY_KEY

    p = command_parser(q.command)
    group_of = {id(a): g.title for g in p._action_groups for a in g._group_actions}
    fields = []
    for key, a in input_actions(q).items():
        o = BY_KEY.get(key)
        flags = [f for f in a.option_strings if f.startswith("--")] or list(a.option_strings)
        default = o.default if o is not None else a.default
        choices = list(o.allowed() or ()) if o is not None else list(a.choices or ())
        help_text = (a.help or "").replace("%(default)s", str(default)).replace("%%", "%")
        fields.append(
            {
                "key": key,
                "flag": flags[0] if flags else key,
                "help": help_text,
                "group": group_of.get(id(a)) or "options",
                "kind": _kind(a),
                "default": _json_safe(default),
                "choices": choices or None,
                "required": bool(a.required) or not a.option_strings,
                "many": a.nargs in ("+", "*"),
                "negatable": isinstance(a, argparse.BooleanOptionalAction),
                "file": key in FILE_INPUTS,
                "main": key in q.main,
            }
        )
    order = {k: i for i, k in enumerate(q.main)}
    fields.sort(key=lambda f: order.get(f["key"], len(order)))
    return fields


def question_schema(q: Question) -> dict[str, Any]:
    return {
        "name": q.name,
        "title": q.title,
        "ask": q.ask,
        "command": "kvsim " + " ".join(q.command),
        "defaults": q.defaults,
        "tables": list(q.tables),
        "files": list(q.files),
        "fields": field_schema(q),
    }
