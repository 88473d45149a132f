"""The engine's mutable state for one request."""

from __future__ import annotations

from enum import Enum

from kvsim.trace.request import Request


class Status(str, Enum):
    """Where a sequence (and, in results, a request) stands. Members compare equal to their values, so
    result tables hold plain strings."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REJECTED = "rejected"  # never admitted: too long, or larger than the KV pool
    UNFINISHED = "unfinished"  # requests only: not done when the simulation ended
    CANCELLED = "cancelled"  # its client gave up (kvsim.sim's client processes): aborted, its KV freed

    def __str__(self) -> str:
        return self.value


class Sequence:
    """Token accounting follows vLLM V1: ``computed`` tokens have KV in cache; ``known`` tokens are the
    prompt plus what has been generated. An iteration computes up to known - computed tokens; when it
    reaches ``known``, the model emits the next token."""

    __slots__ = (
        "sid",
        "req",
        "prompt",
        "target",
        "generated",
        "computed",
        "status",
        "reason",
        "admitted_s",
        "first_token_s",
        "finish_s",
        "preemptions",
        "last_scheduled_s",
        "cached_tokens",
        "last_cached_tokens",
        "swapped",
        "seats",
        "parent",
        "samples",
        "forked",
        "remote",
        "key",
        "loaded_s",
        "frontend_s",
        "api_server",
        "tokenized_s",
    )

    def __init__(self, sid: int, req: Request):
        self.sid = sid
        self.req = req
        self.prompt = req.prompt_tokens
        self.target = req.output_tokens
        self.generated = 0
        self.computed = 0
        self.status = Status.WAITING
        self.reason = ""
        # Engine clock: seconds after the run's first arrival (SimResult.t0); requests_frame reports absolute times.
        self.admitted_s: float | None = None
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.frontend_s = 0.0  # seconds the API server added to its TTFT: intake (queue, tokenization) + delivery
        self.api_server = 0  # the API server process that took it in (it streams the answer back)
        self.tokenized_s = 0.0  # when that server's tokenizer handed its prompt back (its hand-off then queued)
        self.preemptions = 0
        self.last_scheduled_s = 0.0
        self.cached_tokens = 0  # prompt tokens served from a prefix cache (summed over restarts)
        self.last_cached_tokens = 0  # of those, at the latest (re)start (<= prompt)
        self.swapped = False  # KV is in the CPU swap pool
        self.seats = req.n  # seats in the running batch: all samples until they fork, then one each
        self.parent: Sequence | None = None  # for a parallel sample: the sequence it forked from
        self.samples: list[Sequence] | tuple = ()  # for a request with n > 1: its other samples
        self.forked = req.n == 1
        # disaggregated decode: leading prompt tokens whose KV another engine computed and this one loads
        # over a link before the sequence runs (0: none)
        self.remote = 0
        self.loaded_s = 0.0  # a layer-by-layer load: when its last layer is in (the first prefill ends no earlier)
        self.key = -1  # position in the running batch: admission order, new at every admission

    @property
    def request_finished(self) -> bool:
        """A request's own sequence: it and every parallel sample of it have finished."""
        return self.status == Status.FINISHED and all(s.status == Status.FINISHED for s in self.samples)

    @property
    def known(self) -> int:
        return self.prompt + self.generated

    @property
    def to_compute(self) -> int:
        return self.prompt + self.generated - self.computed

    @property
    def final_tokens(self) -> int:
        return self.prompt + self.target
