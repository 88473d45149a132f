"""What the chat endpoint's template costs vLLM's API server per request, by release.

A request to ``/v1/chat/completions`` is rendered through the model's chat template before it is tokenized. The
render itself is cheap (the compiled template is cached; tens of microseconds, part of the front end's
per-request time, kvsim/frontend.py), but two ranges of releases parsed the whole Jinja template again for every
request, in the API server's one event loop, where requests wait for each other:

- **0.6.4 to 0.9.1**: ``_detect_content_format`` (added by vLLM PR #9919) parsed the template's AST on every
  request to tell whether it iterates over message content as a list. PR #20065 cached it (first in 0.9.2): it
  had measured the parse at 6-8 s over a burst of 1,000 requests to a Llama model, 6-8 ms a request.
- **0.11.0**: ``resolve_chat_template_kwargs`` built a sandboxed Jinja environment and parsed the template on
  every request to find the variables it reads; 0.11.1 cached it (``_cached_resolve_chat_template_kwargs``).

Read from the releases' ``vllm/entrypoints/chat_utils.py`` (0.8.5 to 0.14.0; 0.9.2-0.10.2 and 0.11.1 on have
neither). Timed on this project's machine (an AMD EPYC VM, jinja2 3.1) with those functions on the Qwen3 and
Llama-3.1 templates (4-5 KB): 3.6 and 3.4 ms for 0.8.5's step, 7.9 and 6.7 ms for 0.11.0's. PR #20065's 6-8 ms
for the first step on a serving host is 2.06 x this machine's, so 0.11.0's is priced 15 ms and the earlier one 7
ms (its PR's own figure). Nothing was fitted to a serving run.

Models whose chat endpoint vLLM renders without a Hugging Face template (``ModelSpec.chat_renderer``: gpt-oss's
presets and any config.json of model_type gpt_oss, OpenAI's Harmony renderer) pay neither; the completions endpoint pays neither (``vllm bench serve``'s default backend, ``vllm``, sends
``/v1/completions``; ``--backend openai-chat`` the chat endpoint).
"""

from __future__ import annotations

from kvsim.releases import at_least

ENDPOINTS = ("completions", "chat")  # the endpoint a benchmark client sends to (vllm bench serve --endpoint)
# the same, as the URL path `vllm bench serve --endpoint` takes
ENDPOINT_PATHS = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
# `vllm bench serve --backend`: the request it sends (vllm/benchmarks/lib/endpoint_request_func.py, 0.11-0.14;
# "vllm" and "openai" both send completions); its audio, embedding and rerank backends generate no text
BENCH_BACKENDS = {"vllm": "completions", "openai": "completions", "openai-chat": "chat"}


def backend_endpoint(backend: str) -> str:
    """The endpoint (one of :data:`ENDPOINTS`) a `vllm bench serve --backend` sends to; ValueError naming the
    backends kvsim takes for any other (audio, embeddings, rerank: no generated tokens to simulate)."""
    try:
        return BENCH_BACKENDS[backend]
    except KeyError:
        raise ValueError(
            f"{backend!r} is not a backend kvsim simulates; it takes {', '.join(BENCH_BACKENDS)} (text generation)"
        ) from None


# (first release, first release that cached it, seconds per request on a serving host)
UNCACHED_PARSES = (
    ("0.6.4", "0.9.2", 7.0e-3),  # _detect_content_format (PR #9919; cached by PR #20065)
    ("0.11.0", "0.11.1", 15.0e-3),  # resolve_chat_template_kwargs
)


def chat_template_s(vllm_version: str | None, renderer: str, endpoint: str) -> float:
    """Seconds the API server of vLLM ``vllm_version`` (None: a current release) spends per request parsing
    the chat template again, beyond the render every release does, for a model whose chat endpoint renders with
    ``renderer`` (ModelSpec.chat_renderer: only "jinja" templates are parsed); 0 for the completions endpoint."""
    if endpoint != "chat" or renderer != "jinja":
        return 0.0
    for first, cached, seconds in UNCACHED_PARSES:
        if at_least(vllm_version, first) and not at_least(vllm_version, cached):
            return seconds
    return 0.0
