"""Routers: which replica of a fleet serves each arriving request.

A router sees only what a real one sees, at the request's arrival: each replica's outstanding requests
and waiting queue (the engines' metrics), its KV usage, and, for cache-aware routers, either an exact
index of every replica's prefix cache (what vLLM's KV-cache events give llm-d's and Dynamo's routers) or
an approximate one built only from its own past decisions (SGLang's router). A replica that could never
hold a request (too long for its limits or its KV pool) is never chosen while another could.

Add a router: a subclass of :class:`Router` with ``name`` and :meth:`Router.pick`, listed in ``ROUTERS``, that
says what it promises about load (:meth:`Router.balance`) or why it promises nothing (``balance_excuse``):
tests/test_routers_real.py checks every router in ``ROUTERS`` against its promise.

Sources of the two routers modelled on real code (docs/fleets.md has the details):

- ``sglang-cache-aware``: SGLang's router (sgl-model-gateway), ``policies/cache_aware.rs`` (sgl-project/sglang
  b93974f1), its radix tree ``policies/tree.rs`` (24ce7f6c) and the defaults its command line ships
  (``src/main.rs`` f47e04e0: cache threshold 0.3, balance thresholds 64 and 1.5, eviction every 120 s, trees of
  at most 2**26 characters).
- ``llm-d``: llm-d's inference scheduler (llm-d/llm-d-inference-scheduler 520af478): the default profile
  (``pkg/epp/config/loader/defaults.go``: queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3,
  max-score picker), the approximate prefix index
  (``pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix``).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, fields

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
    # SGLang's cache-aware policy (sglang-cache-aware; the balance guard also of prefix-approx), as its command
    # line ships them (sgl-model-gateway src/main.rs): --cache-threshold, --balance-abs-threshold,
    # --balance-rel-threshold, --eviction-interval, --max-tree-size (characters; 4 to a token here)
    cache_threshold: float = 0.3
    balance_abs_threshold: float = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_s: float = 120.0
    max_tree_size: float = 2**26
    cache_miss: str = "least-load"  # a miss goes to: least-load (sgl-model-gateway) or smallest-tree (sgl-router)
    # llm-d's default scheduling profile (pkg/epp/config/loader/defaults.go) and approximate prefix index
    llmd_prefix_weight: float = 3.0
    llmd_queue_weight: float = 2.0
    llmd_kv_weight: float = 2.0
    llmd_max_prefix_blocks: float = 256  # blocks of a prompt looked up (defaultMaxPrefixBlocks)
    llmd_lru_blocks: float = 0  # blocks indexed per replica; 0: the replica's KV pool in blocks (autoTune)

    def validate(self) -> "RouterOptions":
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("seed", "cache_miss"):
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"router option {f.name} must be a finite number >= 0, got {v!r}")
        if self.cache_miss not in ("least-load", "smallest-tree"):
            raise ConfigError(f"router option cache_miss must be least-load or smallest-tree, got {self.cache_miss!r}")
        if self.balance_rel_threshold < 1:
            raise ConfigError(f"router option balance_rel_threshold must be >= 1, got {self.balance_rel_threshold!r}")
        if self.cache_threshold > 1:
            raise ConfigError(f"router option cache_threshold must be in [0, 1], got {self.cache_threshold!r}")
        if self.llmd_max_prefix_blocks < 1 or self.llmd_max_prefix_blocks != int(self.llmd_max_prefix_blocks):
            raise ConfigError(
                f"router option llmd_max_prefix_blocks must be a whole number >= 1, got {self.llmd_max_prefix_blocks!r}"
            )
        return self


# the names --router-params takes (those without a flag of their own: --seed, --router-ttl, --router-weights)
ROUTER_PARAMS = tuple(
    f.name
    for f in fields(RouterOptions)
    if f.name not in ("seed", "approx_ttl_s", "prefix_weight", "queue_weight", "kv_weight")
)

# routers that route by prompt prefixes (hash_ids): the cluster command warns when a trace has none
PREFIX_ROUTERS = ("prefix", "prefix-approx", "prefix+load", "sglang-cache-aware", "llm-d")


def parse_router_params(text: str | None, flag: str = "--router-params") -> dict:
    """``key=value,...`` of :class:`RouterOptions` (numbers, cache_miss a name), each key once."""
    out: dict = {}
    if not text:
        return out
    for part in text.split(","):
        key, sep, val = part.partition("=")
        key, val = key.strip().replace("-", "_"), val.strip()
        if not sep or key not in ROUTER_PARAMS:
            raise ConfigError(
                f"{flag}: expected KEY=VALUE with KEY one of {', '.join(ROUTER_PARAMS)}, got {part.strip()[:80]!r}"
            )
        if key in out:
            raise ConfigError(f"{flag}: {key} given twice")
        if key == "cache_miss":
            out[key] = val
            continue
        try:
            out[key] = float(val)
        except ValueError:
            raise ConfigError(f"{flag}: {key} must be a number, got {val[:40]!r}") from None
    return out


@dataclass(frozen=True)
class Balance:
    """What a router promises about load at every decision: the replica it picks carries at most ``rel`` x, or
    at most ``abs`` more than, the ``measure`` of the least-loaded replica that could take the request
    (``measure``: ``outstanding`` requests or ``kv_usage``); or, with ``idle_first``, it passes over a replica
    with nothing outstanding only for one it scores a strictly larger cached-prefix fraction
    (:meth:`Router.affinity`)."""

    measure: str = "outstanding"
    abs: float = 0.0
    rel: float = 1.0
    idle_first: bool = False

    def text(self) -> str:
        if self.idle_first:
            return "an idle replica loses only to one with a larger cached-prefix score"
        if self.abs == 0 and self.rel == 1:
            return f"always the least {self.measure}"
        return f"{self.measure} <= {self.rel:g} x the least, or <= the least + {self.abs:g}"

    def holds(self, picked: float, least: float) -> bool:
        return picked <= least + self.abs or picked <= self.rel * least


def sglang_imbalanced(loads: list[int], abs_threshold: float, rel_threshold: float) -> bool:
    """SGLang's test (policies/cache_aware.rs): max - min > abs threshold AND max > rel threshold x min."""
    hi, lo = max(loads), min(loads)
    return hi - lo > abs_threshold and hi > lo * rel_threshold


class Router:
    """Picks a replica for each request; ``candidates`` are the indices of replicas that can hold it."""

    name = ""
    help = ""
    balance_excuse = ""  # why the router promises nothing about load (then balance() is None)

    def __init__(self, engines: list[Engine], options: RouterOptions):
        self.engines = engines
        self.options = options

    def balance(self) -> Balance | None:
        """The router's promise about load, or None (then ``balance_excuse`` says why)."""
        return None

    def affinity(self, request: Request, replica: int) -> float:
        """The fraction of ``request``'s prompt the router thinks ``replica`` has cached (idle_first routers)."""
        return 0.0

    def pick(self, request: Request, candidates: list[int], now: float) -> int:
        raise NotImplementedError

    def routed(self, request: Request, replica: int, now: float) -> None:
        """The request went to ``replica`` (routers that learn from their decisions override this)."""

    def grow(self) -> None:
        """A replica joined the fleet as the last of :attr:`engines` (routers with per-replica state add its
        entry; kvsim.sim's autoscalers add replicas while the fleet runs)."""

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
    balance_excuse = (
        "load-blind by design (as every real round-robin): it balances request counts, each replica "
        "gets one of every N requests, never their load"
    )

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
    balance_excuse = "load-blind by design: each replica gets 1/N of the requests in expectation"

    def __init__(self, engines, options):
        super().__init__(engines, options)
        self._rng = random.Random(options.seed)

    def pick(self, request, candidates, now):
        return candidates[self._rng.randrange(len(candidates))]


class LeastRequests(Router):
    name = "least-requests"
    help = "fewest outstanding (running + waiting) requests"

    def balance(self):
        return Balance("outstanding")

    def pick(self, request, candidates, now):
        return self._least_loaded(candidates)


class DataParallelBalancer(Router):
    name = "dp-lb"
    help = (
        "vLLM's balancer over data-parallel ranks: lowest 4 x waiting + running requests, ties to the lowest "
        "index (counts exact, where vLLM's refresh every 100 ms)"
    )

    def balance(self):
        # running + 4 x waiting of the pick <= that of the fewest-outstanding replica m <= 4 x outstanding of m
        return Balance("outstanding", 0.0, 4.0)

    def pick(self, request, candidates, now):
        eng = self.engines
        return min(
            candidates, key=lambda i: 3 * eng[i].queue_len + eng[i].outstanding
        )  # outstanding = waiting + running


class LeastKV(Router):
    name = "least-kv"
    help = "lowest KV-cache usage, then fewest outstanding requests"

    def balance(self):
        return Balance("kv_usage")

    def pick(self, request, candidates, now):
        eng = self.engines
        return min(candidates, key=lambda i: (eng[i].kv_usage, eng[i].outstanding))


class Session(Router):
    name = "session"
    help = "sticky by the trace's session field (first turn: fewest outstanding requests)"
    balance_excuse = (
        "sticky by design: a session's later turns follow its first whatever the load (session "
        "affinity in real routers has no load guard either); first turns go to the least loaded"
    )

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
    help = (
        "longest prefix cached on the replica (exact index, as from KV-cache events), then fewest outstanding; "
        "SGLang's balance guard as prefix-approx"
    )

    def balance(self):
        return Balance("outstanding", self.options.balance_abs_threshold, self.options.balance_rel_threshold)

    def pick(self, request, candidates, now):
        eng, o = self.engines, self.options
        if not request.hash_ids or sglang_imbalanced(
            [eng[i].outstanding for i in candidates], o.balance_abs_threshold, o.balance_rel_threshold
        ):
            return self._least_loaded(candidates)
        return max(candidates, key=lambda i: (eng[i].cached_prefix_tokens(request), -eng[i].outstanding, -i))


class ApproxPrefix(Router):
    name = "prefix-approx"
    help = (
        "longest prefix this router sent to the replica within --router-ttl seconds (learns only from its "
        "own decisions, as SGLang's router), then fewest outstanding; SGLang's balance guard: when the most "
        "loaded replica has > 64 and > 1.5 x the outstanding requests of the least, the least loaded"
    )

    def __init__(self, engines, options):
        super().__init__(engines, options)
        self._seen: list[dict[int, float]] = [{} for _ in engines]  # per replica: hash id -> last routed
        self._expiry: deque[tuple[float, int, int]] = deque()  # (routed at, replica, hash id), oldest first

    def grow(self):
        self._seen.append({})

    def balance(self):
        return Balance("outstanding", self.options.balance_abs_threshold, self.options.balance_rel_threshold)

    def _expire(self, now: float) -> None:
        ttl, q = self.options.approx_ttl_s, self._expiry
        while q and q[0][0] < now - ttl:
            t, r, h = q.popleft()
            if self._seen[r].get(h) == t:
                del self._seen[r][h]

    def _matched(self, replica: int, ids: tuple[int, ...]) -> int:
        return leading_in(ids, self._seen[replica])

    def pick(self, request, candidates, now):
        o, eng = self.options, self.engines
        if sglang_imbalanced(
            [eng[i].outstanding for i in candidates], o.balance_abs_threshold, o.balance_rel_threshold
        ):
            return self._least_loaded(candidates)
        if not request.hash_ids:
            return self._least_loaded(candidates)
        self._expire(now)
        ids = request.hash_ids
        return max(candidates, key=lambda i: (self._matched(i, ids), -eng[i].outstanding, -i))

    def routed(self, request, replica, now):
        if request.hash_ids:
            seen = self._seen[replica]
            for h in request.hash_ids:
                seen[h] = now
                self._expiry.append((now, replica, h))


class PrefixLoad(Router):
    name = "prefix+load"
    help = (
        "weighted score of the prompt fraction cached (exact index), a short waiting queue and free KV memory, "
        "as llm-d's scorers; weights --router-weights"
    )

    def balance(self):
        return Balance(idle_first=True)

    def affinity(self, request, replica):
        if not request.hash_ids or not self.options.prefix_weight:
            return 0.0
        return self.engines[replica].cached_prefix_tokens(request) / request.prompt_tokens

    def pick(self, request, candidates, now):
        o, eng = self.options, self.engines
        queues = [eng[i].queue_len for i in candidates]
        qmin, qmax = min(queues), max(queues)
        prompt = request.prompt_tokens
        best, best_score = candidates[0], None
        for i, q in zip(candidates, queues):
            e = eng[i]
            score = o.queue_weight * ((qmax - q) / (qmax - qmin) if qmax > qmin else 1.0) + o.kv_weight * (
                1.0 - e.kv_usage
            )
            if request.hash_ids and o.prefix_weight:
                score += o.prefix_weight * e.cached_prefix_tokens(request) / prompt
            key = (score, -e.outstanding, -i)
            if best_score is None or key > best_score:
                best, best_score = i, key
        return best


CHARS_PER_TOKEN = 4  # SGLang's tree counts characters, llm-d hashes 4 characters a token (averageCharactersPerToken)


class SGLangCacheAware(Router):
    """SGLang's cache-aware policy as policies/cache_aware.rs decides, over a radix tree of the prompts it routed.

    Load is what SGLang's router counts, requests it sent and not yet answered (``outstanding``). If the load
    is imbalanced (max - min > ``balance_abs_threshold`` and max > ``balance_rel_threshold`` x min) the request
    goes to the least loaded replica. Otherwise the longest prefix any replica's tree holds decides: if it covers
    more than ``cache_threshold`` of the prompt (strictly, as the code's ``match_rate > cache_threshold``) the
    request goes to a replica holding it (the real tree's "first tenant" of the deepest node, a fixed but
    arbitrary order: here the lowest index); if not, to the least loaded replica (sgl-model-gateway) or, with
    ``cache_miss=smallest-tree``, to the replica whose tree is smallest (sgl-router before the gateway). Either way
    the prompt is inserted into the chosen replica's tree. Every ``eviction_interval_s`` each tree over
    ``max_tree_size`` characters loses least-recently-used leaves until it fits.

    The tree holds the trace's prefix blocks (``hash_ids``) in place of text: a match counts whole blocks (the
    real tree matches character by character, into a block too), its size in tokens at 4 characters a token.
    Ties on load go to the lowest index (the real ``min_by_key`` takes the first worker in its list)."""

    name = "sglang-cache-aware"
    help = (
        "SGLang's router (cache_aware policy): least loaded when loads are imbalanced (max - min > 64 and max > "
        "1.5 x min), else the replica whose radix tree holds more than 0.3 of the prompt, else the least "
        "loaded; --router-params cache_threshold=,balance_abs_threshold=,balance_rel_threshold=,"
        "eviction_interval_s=,max_tree_size=,cache_miss="
    )

    def __init__(self, engines, options):
        super().__init__(engines, options)
        # per replica: block id -> [last access, depth, tokens]; depth orders a tree's leaves before their parents
        self._tree: list[dict[int, list]] = [{} for _ in engines]
        self._size: list[int] = [0] * len(engines)  # tokens each tree holds
        self._next_eviction = options.eviction_interval_s if options.eviction_interval_s > 0 else math.inf

    def grow(self):
        self._tree.append({})
        self._size.append(0)

    def balance(self):
        return Balance("outstanding", self.options.balance_abs_threshold, self.options.balance_rel_threshold)

    def _matched(self, replica: int, ids) -> int:
        return leading_in(ids, self._tree[replica])

    def _matched_tokens(self, request: Request, blocks: int) -> int:
        return min(blocks * (request.hash_block_tokens or 1), request.prompt_tokens)

    def affinity(self, request, replica):
        if not request.hash_ids or not request.prompt_tokens:
            return 0.0
        return self._matched_tokens(request, self._matched(replica, request.hash_ids)) / request.prompt_tokens

    def _evict(self, now: float) -> None:
        cap = self.options.max_tree_size / CHARS_PER_TOKEN
        if now >= self._next_eviction:
            every = self.options.eviction_interval_s
            self._next_eviction = (math.floor(now / every) + 1) * every
            for r, tree in enumerate(self._tree):
                if self._size[r] <= cap:
                    continue
                # a node is accessed with every ancestor, so least recent first, deepest first, are leaves first
                for h, (_, _, tokens) in sorted(tree.items(), key=lambda kv: (kv[1][0], -kv[1][1])):
                    if self._size[r] <= cap:
                        break
                    del tree[h]
                    self._size[r] -= tokens

    def pick(self, request, candidates, now):
        o, eng = self.options, self.engines
        self._evict(now)
        if sglang_imbalanced(
            [eng[i].outstanding for i in candidates], o.balance_abs_threshold, o.balance_rel_threshold
        ):
            return self._least_loaded(candidates)
        ids = request.hash_ids or ()
        best, best_n = candidates[0], -1
        for i in candidates:
            n = self._matched(i, ids)
            if n > best_n:
                best, best_n = i, n
        rate = self._matched_tokens(request, best_n) / request.prompt_tokens if ids and request.prompt_tokens else 0.0
        if rate > o.cache_threshold:
            tree = self._tree[best]
            for h in ids[:best_n]:  # prefix_match refreshes the matched path's access time
                tree[h][0] = now
            return best
        if o.cache_miss == "smallest-tree":
            return min(candidates, key=lambda i: (self._size[i], i))
        return self._least_loaded(candidates)

    def routed(self, request, replica, now):
        ids = request.hash_ids
        if not ids:
            return
        tree, H, prompt = self._tree[replica], request.hash_block_tokens or 1, request.prompt_tokens
        for depth, h in enumerate(ids):
            node = tree.get(h)
            if node is None:
                tokens = max(0, min(H, prompt - depth * H))
                tree[h] = [now, depth, tokens]
                self._size[replica] += tokens
            else:
                node[0] = now


class LlmD(Router):
    """llm-d's inference scheduler with its default profile: a weighted sum of the queue scorer (waiting queue,
    min-max normalised over the candidates: (max - q) / (max - min), 1 when all equal), the KV-cache utilisation
    scorer (1 - KV usage) and the prefix-cache scorer (matched blocks / prompt blocks from the approximate index),
    weights 2, 2 and 3; the max-score picker takes the highest sum, ties at random (seeded here).

    The approximate index learns only where the scheduler sent each prompt: per replica an LRU of block hashes
    as large as the replica's KV pool in blocks (autoTune from vLLM's metrics; ``llmd_lru_blocks`` to fix it),
    a prompt's first 256 blocks looked up. A block counts for every replica holding it, block after block,
    until no replica holds one (matchLongestPrefix). The trace's ``hash_ids`` are its blocks.

    Not modelled: flow control and the saturation detector (admission), which decide when, not where."""

    name = "llm-d"
    help = (
        "llm-d's scheduler, default profile: max of 2 x queue score (short waiting queue, min-max normalised) + "
        "2 x (1 - KV usage) + 3 x cached block fraction from its approximate per-replica LRU index; "
        "--router-params llmd_prefix_weight=,llmd_queue_weight=,llmd_kv_weight=,llmd_lru_blocks="
    )

    DEFAULT_LRU_BLOCKS = 31250  # defaultLRUCapacityPerServer, when a replica's pool is unknown

    def __init__(self, engines, options):
        super().__init__(engines, options)
        self._rng = random.Random(options.seed)
        self._lru: list[OrderedDict[int, None] | None] = [None] * len(engines)
        self._pods: dict[int, set[int]] = {}  # block hash -> replicas whose LRU holds it
        self._cap: dict[int, int] = {}  # per replica: blocks its LRU holds, set when it is first routed to

    def grow(self):
        self._lru.append(None)

    def balance(self):
        return Balance(idle_first=True)

    def _blocks(self, request: Request) -> tuple[int, ...]:
        return (request.hash_ids or ())[: int(self.options.llmd_max_prefix_blocks)]

    def _matches(self, blocks) -> dict[int, int]:
        res: dict[int, int] = {}
        for h in blocks:
            pods = self._pods.get(h)
            if not pods:
                break
            for p in pods:
                res[p] = res.get(p, 0) + 1
        return res

    def affinity(self, request, replica):
        blocks = self._blocks(request)
        return self._matches(blocks).get(replica, 0) / len(blocks) if blocks else 0.0

    def pick(self, request, candidates, now):
        o, eng = self.options, self.engines
        blocks = self._blocks(request)
        match = self._matches(blocks) if blocks else {}
        queues = [eng[i].queue_len for i in candidates]
        qmin, qmax = min(queues), max(queues)
        scores = []
        for i, q in zip(candidates, queues):
            score = o.llmd_queue_weight * ((qmax - q) / (qmax - qmin) if qmax > qmin else 1.0) + o.llmd_kv_weight * (
                1.0 - min(max(eng[i].kv_usage, 0.0), 1.0)
            )
            if blocks:
                score += o.llmd_prefix_weight * match.get(i, 0) / len(blocks)
            scores.append(score)
        top = max(scores)
        best = [i for i, sc in zip(candidates, scores) if sc == top]
        return best[0] if len(best) == 1 else best[self._rng.randrange(len(best))]

    def _capacity(self, replica: int, request: Request) -> int:
        if self.options.llmd_lru_blocks:
            return int(self.options.llmd_lru_blocks)
        alloc = getattr(self.engines[replica], "alloc", None)
        pool = getattr(alloc, "pool_tokens", 0)
        H = request.hash_block_tokens or 16
        return max(1, pool // H) if pool else self.DEFAULT_LRU_BLOCKS

    def routed(self, request, replica, now):
        blocks = self._blocks(request)
        if not blocks:
            return
        lru = self._lru[replica]
        if lru is None:
            lru = self._lru[replica] = OrderedDict()
            self._cap[replica] = self._capacity(replica, request)
        cap = self._cap[replica]
        for h in blocks:
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
                self._pods.setdefault(h, set()).add(replica)
                if len(lru) > cap:
                    old, _ = lru.popitem(last=False)
                    pods = self._pods[old]
                    pods.discard(replica)
                    if not pods:
                        del self._pods[old]


ROUTERS: dict[str, type[Router]] = {
    r.name: r
    for r in (
        RoundRobin,
        RandomRouter,
        LeastRequests,
        LeastKV,
        Session,
        ExactPrefix,
        ApproxPrefix,
        PrefixLoad,
        DataParallelBalancer,
        SGLangCacheAware,
        LlmD,
    )
}


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


def leading_in(ids, held) -> int:
    """How many of ``ids``, from the first, ``held`` holds (a prefix match: the first miss ends it)."""
    n = 0
    for h in ids:
        if h not in held:
            break
        n += 1
    return n
