"""The serving front end: what happens to a request outside the engine, between the client and the scheduler.

A benchmark client (``vllm bench serve``, GenAI-Perf) times a request from sending it over HTTP to
receiving each streamed token, so its TTFT includes work the engine never sees:

- **intake** (client -> engine): the API server parses the HTTP request, renders the chat template,
  tokenizes the prompt and hands the request to the engine core (V1: over ZMQ to another process). An API
  server process is Python with one event loop (``--api-server-count`` runs several). Its handler of a
  request runs on the loop (``request_s`` + ``template_s``), passes the prompt to a tokenizer thread (one
  prompt at a time, ``token_s`` a token) and, once that returns, hands the request on; the loop runs what
  is ready in the order it became ready, so that hand-off waits for the handlers of every request sent before
  the prompt came back (:class:`Intake`). One request at a time passes in ``request_s + template_s +
  prompt_tokens x token_s``; a burst reaches the engine together once the loop is through all its handlers.
  Requests reach the engine in the order they were sent.
- **delivery** (engine -> client): each output leaves the engine core, is detokenized, serialized as an
  SSE chunk and sent by the same event loop; the client sees a token ``deliver_s`` after the iteration that
  made it, or, while the loop still runs handlers of requests sent before the token, that long after them.

TPOT is unchanged but for tokens made during a burst's intake; TTFT and end-to-end latency grow; a
closed-loop client sends its next request only once it has the last token.

Presets (``--frontend``):

- ``vllm``: vLLM's OpenAI-compatible API server in front of the V1 engine. 1.5 ms per request on the event loop
  (HTTP, request validation, chat template, engine hand-off) and 2.5 us per prompt token on the tokenizer
  thread (one prompt at a time), and 8 ms from the engine's output to the client. The last two are fitted
  (``benchmarks/fit_v1_frontend.py``) on half of SemiAnalysis InferenceMAX's 300 vLLM V1 runs of gpt-oss-120b
  on H100/H200/B200 (4-128 clients, 1k-8k-token prompts; every other configuration), with the engine priced
  from measured kernels: without them kvsim's median TTFT was 0.74 of measured on the other half (|error|
  26%), with them 0.94 (6%); the gap is about 10-20 ms at 4 clients on every GPU and tensor parallelism and
  grows with prompt length. What takes that time is not identified (the API server, its inter-process hops
  to the engine core, the client); it is modelled as a delay, not as API server work, so it caps no
  throughput (it was fitted before the tokenizer ran on a thread and bursts went together: InferenceMAX's TTFT
  moved by under 1% at the median, 0.95 -> 0.97 in the mean). NVIDIA AIConfigurator's estimator, fitted on its own vLLM serving runs, likewise adds tens of
  milliseconds to TTFT beyond its kernels (0.8 ms per layer, its vllm_backend.py). The 1.5 ms: a C++ server's
  chat template + encode of 131 tokens took
  1.3-2.8 ms (tenstorrent/tt-inference-server#2173, 2026-02); vLLM's own profile of v0.5 on Llama-3-8B /
  H100 found the HTTP API server 33% of the time (vLLM blog, 2024-09-05), which moved it out of the
  engine's process in V1 (vLLM blog, 2025-01-27); vLLM PR #43469 (2026) pushed 807 requests/s of 32 in
  / 512 out tokens through the Python front end of a 4-rank data-parallel server with no GPU work at all
  (1.2 ms per request if one process took them all, 5 ms if four did). Streaming holds the same loop: each
  iteration's tokens, as it ends, 6 us a token (output processing, detokenizing) and 34 us a chunk (the
  response objects, their JSON, the SSE write), one chunk a token, or one every ``--stream-interval`` tokens,
  timed on vLLM 0.11.0's own code behind uvicorn with a mock engine (44-50 us a token at one a chunk, 8.7 at
  ten); vLLM PR #12287's one API server streaming 14,309 tokens/s bounds it at 70 us. A loop that falls behind
  merges each stream's waiting tokens into one chunk, as vLLM does, so it catches up; meanwhile new requests'
  handlers and hand-offs, and their first tokens, wait behind it. It matters from about 20,000 streamed
  tokens/s per API server (small models, hundreds of clients); below that the loop keeps up.
- ``--endpoint chat`` adds, on the releases that parsed the chat template again for every request (0.6.4-0.9.1,
  0.11.0), that parse to each request's intake (kvsim/chat_template.py).
- ``none``: the engine alone, as kernel-level measurements and offline runs (``LLM.generate``) see it.
- ``auto`` (default): ``vllm`` with the per-operation latency model (a vLLM engine's times), ``none``
  with the uncalibrated roofline or ``--cpu-overhead none`` (GPU time only).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from kvsim.errors import ConfigError


@dataclass(frozen=True)
class FrontEnd:
    """An API server's costs (seconds), and how many server processes share the intake."""

    name: str = "none"
    request_s: float = 0.0  # per request: HTTP, validation, chat template, hand-off to the engine
    # per request on the chat endpoint of releases that parsed the chat template again for every request
    # (kvsim/chat_template.py); 0 elsewhere
    template_s: float = 0.0
    token_s: float = 0.0  # per prompt token: tokenization
    deliver_s: float = 0.0  # from the engine's output to the client, per streamed token
    # per streamed token on the event loop: output processing (detokenizing, the request's output) and, per SSE
    # chunk (one a token while the loop keeps up), building, serializing and writing it
    stream_token_s: float = 0.0
    stream_chunk_s: float = 0.0
    servers: int = 1  # API server processes (vLLM's --api-server-count)
    # requests taken in back to back reach the engine together, when the last is in (the engine's loop shares
    # the API server's event loop and runs only once the burst is handled)
    batched: bool = False

    @property
    def active(self) -> bool:
        return self.request_s > 0 or self.template_s > 0 or self.token_s > 0 or self.deliver_s > 0

    @property
    def streams_on_loop(self) -> bool:
        """Does streaming the outputs take the event loop's time (the V1 API server, :attr:`loop_s` > 0)?"""
        return self.loop_s > 0 and (self.stream_token_s > 0 or self.stream_chunk_s > 0)

    def intake_s(self, prompt_tokens: int) -> float:
        """Seconds one API server works on a request of ``prompt_tokens`` before the engine has it."""
        return self.request_s + self.template_s + prompt_tokens * self.token_s

    @property
    def loop_s(self) -> float:
        """Seconds of a request's intake that hold the API server's event loop (HTTP, validation, the chat
        template; tokenization runs on a thread), during which it streams nothing to any client. 0 in front of
        the V0 engine, whose burst reaches the engine together (``batched``): the engine itself waits for it."""
        return 0.0 if self.batched else self.request_s + self.template_s


NO_FRONTEND = FrontEnd()
V0_REQUEST_S = 4.0e-3  # seconds per request (benchmarks/fit_v0_engine.py: 3.5-5.0 fit about as well)
V1_TOKEN_S = 2.5e-6  # seconds per prompt token (benchmarks/fit_v1_frontend.py: 2.5 and 4 fit about as well)
V1_DELIVER_S = 8.0e-3  # seconds from the engine's output to the client (the same fit)
# event-loop seconds per streamed token and per SSE chunk: vLLM 0.11.0's own output processor, detokenizer,
# protocol models and serialization behind uvicorn, timed on a 2-vCPU EPYC VM against a mock engine (44-50 us a
# token at one token a chunk, 128-256 streams; 17 us a token at four a chunk, 8.7 at ten); vLLM PR #12287's one
# API server streaming 14,309 tokens/s of Llama-3.2-1B on an A100 bounds it at 70 us. 6 + 34 / N us a token at N
# a chunk gives 40, 14.5 and 9.4 against the VM's 44-50, 17 and 8.7 (a server core is faster than the VM's)
V1_STREAM_TOKEN_S = 6.0e-6
V1_STREAM_CHUNK_S = 34.0e-6
FRONTEND_PRESETS: dict[str, FrontEnd] = {
    f.name: f
    for f in [
        NO_FRONTEND,
        # V1's API server; token_s and deliver_s fitted: benchmarks/fit_v1_frontend.py
        FrontEnd(
            "vllm",
            request_s=1.5e-3,
            token_s=V1_TOKEN_S,
            deliver_s=V1_DELIVER_S,
            stream_token_s=V1_STREAM_TOKEN_S,
            stream_chunk_s=V1_STREAM_CHUNK_S,
        ),
        # the V0 engine's API server (vLLM <= 0.10): the engine loop shares its event loop, so a burst of requests
        # reaches the engine together once the last is in; per-request time fitted on LambdaLabsML/vllm-benchmark's
        # A100 load sweep (benchmarks/fit_v0_engine.py: half the runs fitted, the other half held out)
        FrontEnd("vllm-v0", request_s=V0_REQUEST_S, token_s=1.0e-6, deliver_s=0.5e-3, batched=True),
    ]
}
FRONTEND_CHOICES = ("auto", *FRONTEND_PRESETS)


def get_frontend(
    name: str,
    servers: int = 1,
    engine_only: bool = False,
    v0: bool = False,
    template_s: float = 0.0,
    stream_interval: int = 1,
) -> FrontEnd:
    """The preset ``name`` with ``servers`` API server processes; ``auto`` is ``none`` when the latency model
    prices the GPU alone (``engine_only``), else ``vllm`` (``vllm-v0`` in front of the V0 engine). A server
    (not ``none``) also spends ``template_s`` seconds per request re-parsing the chat template
    (kvsim/chat_template.py), and builds a streamed chunk every ``stream_interval`` tokens."""
    if name == "auto":
        name = "none" if engine_only else "vllm-v0" if v0 else "vllm"
    try:
        base = FRONTEND_PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown front end '{name}' (known: {', '.join(FRONTEND_CHOICES)})") from None
    if servers < 1:
        raise ConfigError(f"api_server_count must be at least 1, got {servers}")
    if not base.active:
        template_s = 0.0  # no API server: nothing parses a template
    if stream_interval < 1:
        raise ConfigError(f"stream_interval must be at least 1, got {stream_interval}")
    # vLLM sends a request's first token at once and then every stream_interval tokens (and its last)
    chunk_s = base.stream_chunk_s / stream_interval
    return replace(base, servers=servers, template_s=template_s, stream_chunk_s=chunk_s)


class Intake:
    """One engine's API servers taking requests in the order they were sent: each request goes to the server
    free first, and reaches the engine once that server is done with it and no earlier request is still
    on its way (the engine core reads its input queue in order).

    In front of the V0 engine (``batched``) a server does a request's whole intake before the next. In
    front of V1 each server is one Python process with one event loop, in which a request's handler does the
    part of its intake that holds the loop (:attr:`FrontEnd.loop_s`: HTTP, validation, the chat template), hands
    the prompt to a tokenizer thread (one at a time, ``token_s`` a token) and, once that returns, sends it to the
    engine core. The loop runs what is ready in the order it became ready, so that hand-off waits behind the
    handlers of every request sent before the prompt was tokenized: a burst of requests reaches the engine
    together, after the loop has done all their handlers' work, while one request at a time passes at once.
    The same loop streams the outputs of the requests it took in, so a token made while it still works through
    requests sent before the token reaches its client only once that work is done (:meth:`delivered`); and
    streaming is work on that loop (:meth:`streamed`): each iteration's tokens, as it ends, before any handler
    or hand-off that becomes ready later.
    ree2raz/inference-bench, vLLM 0.8.5 on an L4, 64 chat clients of equal lengths: every wave of 64 requests
    stays in lock-step, its first tokens all arriving 600 ms after it was sent (64 handlers of 8.5 ms and one
    prefill of them all), where handing each on as its own intake ended gave 140 ms and waves that drift
    apart."""

    def __init__(self, frontend: FrontEnd):
        self.frontend = frontend
        self._free = [0.0] * frontend.servers  # V0: when each server is next free, seconds
        self._last = 0.0  # when the latest request reached the engine
        self.last_server = 0  # the server that took in the latest request
        self._loop_s = frontend.loop_s
        # V1, per server: when its tokenizer is free, and (sent, loop done with its handler) of the requests it took
        # in, oldest first: enough of them to answer for any time at or after the engine's current iteration (the
        # newest always kept: when the loop is done with every handler so far)
        self.loop_bound = self._loop_s > 0
        self._tok_free = [0.0] * frontend.servers
        self._loops: list[deque[tuple[float, float]]] = [deque() for _ in range(frontend.servers)]
        self.busy_s = 0.0  # event-loop seconds of work over every API server (handlers, streaming)
        # one server's streaming seconds per token the engine makes (its share of them)
        self._stream_token_s = frontend.stream_token_s / frontend.servers
        self._stream_chunk_s = frontend.stream_chunk_s / frontend.servers
        self.last_tokenized = 0.0  # when the latest request's prompt came back from the tokenizer
        self.last_handled = 0.0  # when the event loop was done with the latest request's handler

    def busy_at(self, sent_s: float) -> bool:
        """Is every API server still taking in earlier requests when one is sent at ``sent_s``?"""
        return min(self._free) > sent_s

    def ready(self, prompt_tokens: int, sent_s: float, now: float = 0.0, delay: float = 0.0) -> float:
        """When a request of ``prompt_tokens`` sent at ``sent_s`` reaches the engine (never before one sent
        earlier), as far as the requests sent so far decide it (V1: one sent before its prompt is tokenized
        delays it, :meth:`Engine.receive`). ``now``: the start of the engine's iteration in flight (no token is
        asked about before it); ``delay``: seconds after ``sent_s`` before the request reaches the server."""
        fe = self.frontend
        if not self.loop_bound:  # the whole intake of one request, then the next
            free = self._free
            k = free.index(min(free)) if len(free) > 1 else 0  # the server free first
            done = max(sent_s + delay, free[k]) + fe.intake_s(prompt_tokens)
            free[k] = done
        else:
            loops = self._loops
            k = 0
            if len(loops) > 1:  # the server whose loop is free first
                k = min(range(len(loops)), key=lambda j: loops[j][-1][1] if loops[j] else 0.0)
            loop = loops[k]
            while len(loop) > 1 and loop[1][0] < now:  # no token made from now on is behind the oldest
                loop.popleft()
            arrives = sent_s + delay  # when the handler's work becomes ready on the loop
            handled = max(arrives, loop[-1][1] if loop else 0.0) + self._loop_s
            self.busy_s += self._loop_s
            loop.append((arrives, handled))
            done = max(handled, self._tok_free[k]) + prompt_tokens * fe.token_s
            self._tok_free[k] = done
            self.last_handled, self.last_tokenized = handled, done
        self.last_server = k
        if done > self._last:
            self._last = done
        return self._last

    def streamed(
        self, tokens: int, start: float, end: float, steps: int = 1, step_weights: list[float] | None = None
    ) -> list[float]:
        """The engine made ``tokens`` tokens in each of ``steps`` iterations from ``start`` to ``end`` (a decode run;
        its steps' durations in proportion to ``step_weights``, equal without); each API server's event loop
        streams its share as each iteration ends, behind what it was doing. A stream whose last chunk the loop
        has not sent yet takes the next token into that chunk (vLLM merges a request's outputs while its handler
        is behind), so a loop ``b`` seconds behind at the end of a step of ``dt`` seconds spends
        ``stream_chunk_s x dt / (dt + b)`` a token on chunks: a loop that cannot keep up settles where its work
        per step is the step. The same as streaming each step on its own. Returns, per server, when its loop is
        done with the last iteration's tokens."""
        tok, chunk = tokens * self._stream_token_s, tokens * self._stream_chunk_s  # one server's share
        if step_weights is None or steps == 1:
            scale = 0.0
            shortest = first = (end - start) / steps
        else:
            scale = (end - start) / sum(step_weights)
            shortest, first = min(step_weights) * scale, step_weights[0] * scale
        first_end = start + first
        done = []
        for loop in self._loops:
            while len(loop) > 1 and loop[1][0] < start:
                loop.popleft()
            prev = loop[-1][1] if loop else 0.0
            if prev <= first_end and tok + chunk <= shortest:  # keeps up: each step's tokens before the next's
                free = end + tok + chunk
                self.busy_s += steps * (tok + chunk)
            else:  # step by step
                free, step_end = prev, start
                dts = [w * scale for w in step_weights] if step_weights and scale else [first] * steps
                for dt in dts:
                    step_end += dt
                    behind = free - step_end if free > step_end else 0.0
                    work = tok + (chunk * dt / (dt + behind) if behind > 0 else chunk)
                    free = max(free, step_end) + work
                    self.busy_s += work
            loop.append((end, free))
            done.append(free)
        return done

    def delivered(self, server: int, t: float) -> float:
        """When the event loop of API server ``server`` can stream a token the engine made at ``t``: at once,
        or once it has done the work that became ready before ``t`` (the handlers of requests sent to it, the
        tokens of earlier iterations)."""
        for sent, handled in reversed(self._loops[server]):
            if sent < t:
                return handled if handled > t else t
        return t
