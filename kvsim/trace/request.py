"""One inference request as the simulator sees it."""

from __future__ import annotations

from dataclasses import dataclass

MAX_EXACT_INT = 1 << 53  # an integer arrival_s up to this converts to a float exactly


@dataclass(frozen=True, slots=True)
class Request:
    id: str
    arrival_s: float  # seconds from trace start
    prompt_tokens: int
    output_tokens: int  # tokens the request generates (its true output length)
    priority: int = 0  # lower value = more important (the `priority` victim and cache-eviction policies)
    hash_ids: tuple[int, ...] | None = None  # prefix identity, one id per `hash_block_tokens` prompt tokens
    hash_block_tokens: int | None = None
    n: int = 1  # parallel samples sharing the prompt
    line: int = 0  # 1-based line in the source file, for messages
    session: str | None = None  # conversation or user the request belongs to (sticky routing in a fleet)
    # a benchmark client's warm-up request: sent and drained before the measured ones, left out of the results
    warmup: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens
