"""Synthetic workloads with prefix identity (hash_ids), the seed design's sharing scenarios.

Content is described by chained hash ids, one per ``hash_block_tokens`` (H) prompt tokens: a chunk
gets the same id as in another prompt only if everything from the prompt start through that chunk is
the same. A chunk that mixes shared and unique tokens gets a fresh id.

- ``system-prompt``: chat requests that all start with one shared system prompt.
- ``few-shot``: each request starts with one of K few-shot example blocks, then its own question.
- ``multi-turn``: conversations; each turn's prompt is the previous turn's prompt and answer plus a
  new user message, so it extends the previous context.
- ``doc-summary``: a shared summarisation instruction, then a long unique document.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvsim.errors import ConfigError
from kvsim.trace.generate import ArrivalSpec, LengthSpec, _lognormal, arrival_times
from kvsim.trace.request import Request
from kvsim.validation import NON_NEGATIVE, POSITIVE, POSITIVE_INT, RATE, Number, require

SCENARIOS = ("system-prompt", "few-shot", "multi-turn", "doc-summary")


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    shared_tokens: int = 1024  # system prompt / instruction / few-shot block length
    num_prefixes: int = 4  # few-shot: how many distinct example blocks
    turns_mean: float = 4.0  # multi-turn: mean turns per conversation (geometric)
    think_s: float = 20.0  # multi-turn: mean seconds between a turn and the next
    hash_block_tokens: int = 16
    # multi-turn: turns (requests) per second over the trace instead of conversations started per second: the
    # conversations start at this / turns_mean per second and the trace keeps the first n turns in time order,
    # a steady rate once the first conversations are under way (None: ``arrivals.rate`` conversations/s, the
    # first n turns in conversation order: a burst that thins out as later conversations are cut)
    turns_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.name not in SCENARIOS:
            raise ConfigError(f"unknown scenario '{self.name}' (known: {', '.join(SCENARIOS)})")
        require(self.shared_tokens, Number(integer=True, min=0), "shared_tokens")
        require(self.num_prefixes, POSITIVE_INT, "num_prefixes")
        require(self.turns_mean, POSITIVE, "turns_mean")
        require(self.think_s, NON_NEGATIVE, "think_s")
        require(self.hash_block_tokens, POSITIVE_INT, "hash_block_tokens")
        if self.turns_per_s is not None:
            require(self.turns_per_s, RATE, "turns_per_s")
            if self.name != "multi-turn":
                raise ConfigError("--turns-per-s: multi-turn conversations only")


class _Ids:
    def __init__(self):
        self.next = 0

    def fresh(self, n: int) -> list[int]:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out


def _prompt_ids(shared_ids: list[int], shared_tokens: int, prompt: int, H: int, ids: _Ids) -> list[int]:
    """Ids for a prompt whose first ``shared_tokens`` tokens are the content ``shared_ids`` describe."""
    full_shared = min(len(shared_ids), min(shared_tokens, prompt) // H)
    total = -(-prompt // H)
    return shared_ids[:full_shared] + ids.fresh(total - full_shared)


def generate_scenario(
    spec: ScenarioSpec,
    n: int,
    arrivals: ArrivalSpec,
    lengths: LengthSpec,
    seed: int = 0,
    notes: list[str] | None = None,
) -> list[Request]:
    """n requests of the scenario; ``notes``: gets what a length cap changed and, for multi-turn, the request
    rate the conversations made."""
    if n <= 0:
        raise ConfigError("--num-requests must be > 0")
    H = spec.hash_block_tokens
    rng = np.random.default_rng(seed)
    ids = _Ids()
    cap = lengths.max_total
    out: list[Request] = []
    clipped = [0, 0]  # prompts, outputs the cap shortened

    def add(t: float, prompt: int, output: int, hids: list[int], session: str | None = None) -> None:
        clipped[0] += prompt > cap - 1
        prompt = min(prompt, cap - 1)
        clipped[1] += output > cap - prompt
        output = max(1, min(output, cap - prompt))
        hids = hids[: -(-prompt // H)]
        out.append(
            Request(str(len(out)), float(t), prompt, output, hash_ids=tuple(hids), hash_block_tokens=H, session=session)
        )

    if spec.name == "multi-turn":
        steady = spec.turns_per_s is not None
        warm = 0.0
        count = n
        if steady:  # conversations already under way at t = 0: started over a warm-up long enough for most to end
            arrivals = ArrivalSpec(arrivals.process, spec.turns_per_s / max(spec.turns_mean, 1.0), arrivals.cv)
            warm = 5.0 * max(spec.turns_mean, 1.0) * spec.think_s
            count = n + int(min(warm * arrivals.rate, 10 * n)) + 1
        starts = arrival_times(arrivals, count, rng) - warm
        kept = 0
        for conv, t0 in enumerate(starts):
            if kept >= n and (not steady or t0 > _nth_time(out, n)):
                break  # steady: a later conversation can no longer put a turn among the first n
            turns = int(rng.geometric(1.0 / max(spec.turns_mean, 1.0)))
            # context: tokens of the conversation so far; only the previous prompt's full chunks keep
            # their ids (the chunk that the answer completes has new content, so a fresh id)
            context, context_ids, prev_prompt, t = 0, [], 0, float(t0)
            for _ in range(turns):
                if (kept >= n and not steady) or context >= cap - 2:
                    break
                user = int(_lognormal(rng, lengths.prompt_mean, lengths.prompt_sigma, 1)[0])
                answer = int(_lognormal(rng, lengths.output_mean, lengths.output_sigma, 1)[0])
                prompt = min(context + user, cap - 1)
                hids = _prompt_ids(context_ids, prev_prompt, prompt, H, ids)
                add(t, prompt, answer, hids, f"c{conv}")
                context_ids, prev_prompt = hids, out[-1].prompt_tokens
                context = min(prompt + out[-1].output_tokens, cap - 1)
                if t < 0:  # a turn of the warm-up: its context carries on, the turn itself is not in the trace
                    out.pop()
                else:
                    kept += 1
                t += float(rng.exponential(spec.think_s))
        if not all(np.isfinite(r.arrival_s) for r in out):
            raise ConfigError(f"think_s {spec.think_s:g} puts turns beyond float range")
        out.sort(key=lambda r: r.arrival_s)
        out = out[:n]
        if notes is not None:
            notes += _cap_notes(cap, clipped, n) + [_turn_rate_note(out, spec.turns_per_s or arrivals.rate, steady)]
        return [
            Request(
                str(i),
                r.arrival_s,
                r.prompt_tokens,
                r.output_tokens,
                hash_ids=r.hash_ids,
                hash_block_tokens=H,
                session=r.session,
            )
            for i, r in enumerate(out)
        ]

    t = arrival_times(arrivals, n, rng)
    user = _lognormal(rng, lengths.prompt_mean, lengths.prompt_sigma, n)
    answer = _lognormal(rng, lengths.output_mean, lengths.output_sigma, n)
    S = min(spec.shared_tokens, cap)  # prompts stop at cap - 1 tokens: sharing beyond it is never seen
    if spec.name in ("system-prompt", "doc-summary"):
        shared = ids.fresh(S // H)
        for i in range(n):
            add(t[i], S + int(user[i]), int(answer[i]), _prompt_ids(shared, S, S + int(user[i]), H, ids))
    else:  # few-shot
        k = min(spec.num_prefixes, n)  # more distinct prefixes than requests are never used
        prefixes = [ids.fresh(S // H) for _ in range(k)]
        pick = rng.integers(0, k, size=n)
        for i in range(n):
            add(t[i], S + int(user[i]), int(answer[i]), _prompt_ids(prefixes[pick[i]], S, S + int(user[i]), H, ids))
    if notes is not None:
        notes += _cap_notes(cap, clipped, n)
    return out


def _nth_time(out: list[Request], n: int) -> float:
    """The n-th earliest arrival among ``out`` (len(out) >= n)."""
    return float(np.partition(np.fromiter((r.arrival_s for r in out), float, len(out)), n - 1)[n - 1])


def _cap_notes(cap: int, clipped: list[int], n: int) -> list[str]:
    from kvsim.trace.generate import cap_note

    note = cap_note(cap, clipped[0], clipped[1], n)
    return [note] if note else []


def _turn_rate_note(out: list[Request], rate: float, steady: bool) -> str:
    """What the conversations made: the request rate over the trace and over its first and last tenths."""
    if len(out) < 2:
        return f"multi-turn: {len(out)} request"
    t = np.array([r.arrival_s for r in out])
    span = t[-1] - t[0]
    k = max(1, len(t) // 10)
    first = k / max(t[k] - t[0], 1e-9)
    last = k / max(t[-1] - t[-1 - k], 1e-9)
    start = f"--turns-per-s {rate:g}" if steady else f"{rate:g} conversations/s (--rate)"
    return (
        f"note: multi-turn: {start} made {len(out):,} requests over {span:,.1f} s, {len(out) / max(span, 1e-9):.2f} "
        f"req/s on average ({first:.2f} in the first tenth, {last:.2f} in the last)"
        + ("" if steady else "; --turns-per-s R asks for R requests/s instead")
    )
