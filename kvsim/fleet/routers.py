"""Routers: which replica of a fleet serves each arriving request.

A router sees only what a real one sees, at the request's arrival: each replica's outstanding requests
and waiting queue (the engines' metrics), its KV usage, and, for cache-aware routers, either an exact
index of every replica's prefix cache (what vLLM's KV-cache events give llm-d's and Dynamo's routers) or
an approximate one built only from its own past decisions (SGLang's router). A replica that could never
hold a request (too long for its limits or its KV pool) is never chosen while another could.

Add a router: a subclass of :class:`Router` with ``name`` and :meth:`Router.pick`, listed in ``ROUTERS``.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from kvsim.engine.engine import Engine
from kvsim.errors import ConfigError
from kvsim.trace.request import Request


@dataclass(frozen=True)
class RouterOptions:
    """Settings of the routers that take any (seconds, weights)."""

    seed: int = 0  # random router
    approx_ttl_s: float = 120.0  # approximate prefix index: an entry older than this is forgotten
    prefix_weight: float = 2.0  # prefix+load: weight of the fraction of the prompt cached on the replica
    queue_weight: float = 1.0  # prefix+load: weight of a short waiting queue (min-max normalised)
    kv_weight: float = 1.0  # prefix+load: weight of free KV memory (1 - usage)

    def validate(self) -> "RouterOptions":
        import math

        for name in ("approx_ttl_s", "prefix_weight", "queue_weight", "kv_weight"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"router option {name} must be a finite number >= 0, got {v!r}")
        return self


class Router:
    """Picks a replica for each request; ``candidates`` are the indices of replicas that can hold it."""

    name = ""
    help = ""

    def __init__(self, engines: list[Engine], options: RouterOptions):
        self.engines = engines
        self.options = options

    def pick(self, request: Request, candidates: list[int], now: float) -> int:
        raise NotImplementedError

    def routed(self, request: Request, replica: int, now: float) -> None:
        """The request went to ``replica`` (routers that learn from their decisions override this)."""

    def _least_loaded(self, candidates: list[int]) -> int:
        """Fewest outstanding requests; ties to the lowest index."""
        eng = self.engines
        if len(candidates) == len(eng):  # every replica, in index order: one scan in C (asked for every request)
            loads = [e.outstanding for e in eng]
            return loads.index(min(loads))
        return min(candidates, key=lambda i: eng[i].outstanding)


class RoundRobin(Router):
    name = "round-robin"
    help = "each replica in turn"

    def __init__(self, engines, options):
        super().__init__(engines, options)
        self._next = 0

    def pick(self, request, candidates, now):
        n = len(self.engines)
        for k in range(n):
            i = (self._next + k) % n
            if i in candidates:
                self._next = i + 1
                return i
        return candidates[0]


class RandomRouter(Router):
    name = "random"
    help = "uniformly at random (seeded)"

    def __init__(self, engines, options):
        super().__init__(engines, options)
        self._rng = random.Random(options.seed)

    def pick(self, request, candidates, now):
        return candidates[self._rng.randrange(len(candidates))]


class LeastRequests(Router):
    name = "least-requests"
    help = "fewest outstanding (running + waiting) requests"

    def pick(self, request, candidates, now):
        return self._least_loaded(candidates)


class DataParallelBalancer(Router):
    name = "dp-lb"
    help = ("vLLM's balancer over data-parallel ranks: lowest 4 x waiting + running requests, ties to the lowest "
            "index (counts exact, where vLLM's refresh every 100 ms)")

    def pick(self, request, candidates, now):
        eng = self.engines
        return min(candidates, key=lambda i: 3 * eng[i].queue_len + eng[i].outstanding)  # outstanding = waiting + running


class LeastKV(Router):
    name = "least-kv"
    help = "lowest KV-cache usage, then fewest outstanding requests"

    def pick(self, request, candidates, now):
        eng = self.engines
        return min(candidates, key=lambda i: (eng[i].kv_usage, eng[i].outstanding))


class Session(Router):
    name = "session"
    help = "sticky by the trace's session field (first turn: fewest outstanding requests)"

    def __init__(self, engines, options):
        super().__init__(engines, options)
        self._home: dict[str, int] = {}

    def pick(self, request, candidates, now):
        s = request.session
        home = self._home.get(s) if s is not None else None
        if home is not None and home in candidates:
            return home
        i = self._least_loaded(candidates)
        if s is not None:
            self._home[s] = i
        return i


class ExactPrefix(Router):
    name = "prefix"
    help = "longest prefix cached on the replica (exact index, as from KV-cache events), then fewest outstanding"

    def pick(self, request, candidates, now):
        if not request.hash_ids:
            return self._least_loaded(candidates)
        eng = self.engines
        return max(candidates, key=lambda i: (eng[i].cached_prefix_tokens(request), -eng[i].outstanding, -i))


class ApproxPrefix(Router):
    name = "prefix-approx"
    help = ("longest prefix this router sent to the replica within --router-ttl seconds (learns only from its "
            "own decisions, as SGLang's router), then fewest outstanding")

    def __init__(self, engines, options):
        super().__init__(engines, options)
        self._seen: list[dict[int, float]] = [{} for _ in engines]  # per replica: hash id -> last routed
        self._expiry: deque[tuple[float, int, int]] = deque()  # (routed at, replica, hash id), oldest first

    def _expire(self, now: float) -> None:
        ttl, q = self.options.approx_ttl_s, self._expiry
        while q and q[0][0] < now - ttl:
            t, r, h = q.popleft()
            if self._seen[r].get(h) == t:
                del self._seen[r][h]

    def _matched(self, replica: int, ids: tuple[int, ...]) -> int:
        seen = self._seen[replica]
        n = 0
        for h in ids:
            if h not in seen:
                break
            n += 1
        return n

    def pick(self, request, candidates, now):
        if not request.hash_ids:
            return self._least_loaded(candidates)
        self._expire(now)
        eng, ids = self.engines, request.hash_ids
        return max(candidates, key=lambda i: (self._matched(i, ids), -eng[i].outstanding, -i))

    def routed(self, request, replica, now):
        if request.hash_ids:
            seen = self._seen[replica]
            for h in request.hash_ids:
                seen[h] = now
                self._expiry.append((now, replica, h))


class PrefixLoad(Router):
    name = "prefix+load"
    help = ("weighted score of the prompt fraction cached (exact index), a short waiting queue and free KV memory, "
            "as llm-d's scorers; weights --router-weights")

    def pick(self, request, candidates, now):
        o, eng = self.options, self.engines
        queues = [eng[i].queue_len for i in candidates]
        qmin, qmax = min(queues), max(queues)
        prompt = request.prompt_tokens
        best, best_score = candidates[0], None
        for i, q in zip(candidates, queues):
            e = eng[i]
            score = o.queue_weight * ((qmax - q) / (qmax - qmin) if qmax > qmin else 1.0) \
                + o.kv_weight * (1.0 - e.kv_usage)
            if request.hash_ids and o.prefix_weight:
                score += o.prefix_weight * e.cached_prefix_tokens(request) / prompt
            key = (score, -e.outstanding, -i)
            if best_score is None or key > best_score:
                best, best_score = i, key
        return best


ROUTERS: dict[str, type[Router]] = {r.name: r for r in (RoundRobin, RandomRouter, LeastRequests, LeastKV, Session,
                                                          ExactPrefix, ApproxPrefix, PrefixLoad, DataParallelBalancer)}


def router_names() -> list[str]:
    return list(ROUTERS)


def parse_routers(text: str, flag: str) -> list[str]:
    """Comma-separated router names, each checked (``flag`` names the option in errors)."""
    names = [r.strip() for r in text.split(",") if r.strip()]
    for r in names:
        if r not in ROUTERS:
            raise ConfigError(f"{flag}: unknown router {r!r}; choose from {', '.join(ROUTERS)}")
    if not names:
        raise ConfigError(f"{flag}: name at least one router")
    if len(set(names)) < len(names):
        raise ConfigError(f"{flag}: name each router once (got {', '.join(names)})")
    return names


def make_router(name: str, engines: list[Engine], options: RouterOptions) -> Router:
    cls = ROUTERS.get(name)
    if cls is None:
        raise ConfigError(f"unknown router {name!r}; choose from {', '.join(ROUTERS)}")
    return cls(engines, options)
