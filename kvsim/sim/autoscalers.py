"""Autoscalers as SimPy processes: each wakes every ``interval_s``, reads the fleet's last scrape (never the engines
themselves) and adds or removes replicas of one group. Write your own the same way: a generator that takes the
fleet, ``yield fleet.env.timeout(...)`` between looks, and calls ``fleet.add_replica`` / ``fleet.remove_replica``.

- :class:`ThresholdAutoscaler`: Kubernetes' HPA rule (KEDA drives the same HPA) on a per-replica metric, waiting
  requests or KV usage: desired = ceil(replicas x metric / target), no change within a tolerance of 10%,
  scale-up at once, scale-down to the highest desired count of the last ``down_window_s`` (HPA's stabilization
  window, 300 s);
- :class:`SlaPlanner`: sizes the group from predicted load, as NVIDIA Dynamo's SLA planner does: the arrival rate
  of the next interval predicted from the last ones, divided by what one replica sustains within the SLOs
  (``replica_rate``: from `kvsim plan`, which finds that rate); disaggregated pools get one each, the prefill
  pool's rate what one prefill replica serves within the TTFT SLO, the decode pool's within the TPOT SLO, both
  from the same predicted arrivals (Dynamo sizes its prefill and decode workers from one prediction);
- :class:`ScheduleAutoscaler`: a fixed schedule of replica counts (a time-of-day plan, or a fleet sized for the
  peak from the start).

A replica asked for serves only after its start-up (kvsim.sim.startup); one taken away drains first.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Generator

from kvsim.errors import ConfigError
from kvsim.validation import FRACTION, NON_NEGATIVE, POSITIVE, require


@dataclass
class Autoscaler:
    """What every built-in autoscaler shares: the group it sizes, its bounds and how often it looks; its
    decisions as (time, replicas asked for) in :attr:`decisions`."""

    group: str
    min_replicas: int = 1
    max_replicas: int = 64
    interval_s: float = 15.0
    decisions: list[tuple[float, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (1 <= self.min_replicas <= self.max_replicas):
            raise ConfigError(
                f"autoscaler bounds: need 1 <= min_replicas ({self.min_replicas}) <= max_replicas ({self.max_replicas})"
            )
        require(self.interval_s, POSITIVE, "autoscaler interval_s")

    def desired(self, fleet, current: int) -> int:
        """The replica count wanted now (before the bounds)."""
        raise NotImplementedError

    def run(self, fleet) -> Generator[Any, Any, None]:
        """The process: ``fleet.process(autoscaler.run(fleet))``."""
        fleet._group(self.group)  # a wrong name fails before the run
        while True:
            yield fleet.env.timeout(self.interval_s)
            current = fleet.count(self.group)
            want = max(self.min_replicas, min(self.max_replicas, self.desired(fleet, current)))
            if want != current:
                self.decisions.append((fleet.now, want))
            for _ in range(want - current):
                fleet.add_replica(self.group)
            for _ in range(current - want):
                fleet.remove_replica(self.group)


@dataclass
class ThresholdAutoscaler(Autoscaler):
    """HPA on a per-replica metric: ``metric`` "waiting" (requests waiting per replica, the router's held ones
    included; vLLM's ``num_requests_waiting``) or "kv" (KV usage, 0-1), kept near ``target``. In disaggregated
    pools each pool has its own: a decode replica's waiting requests are prompts waiting for its memory."""

    metric: str = "waiting"
    target: float = 8.0
    tolerance: float = 0.1  # HPA's default: no change while metric / target is within 10% of 1
    down_window_s: float = 300.0  # HPA's default scale-down stabilization window
    _recent: deque = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.metric not in ("waiting", "kv"):
            raise ConfigError(f"autoscaler metric: 'waiting' or 'kv', got {self.metric!r}")
        require(self.target, POSITIVE, "autoscaler target")
        require(self.tolerance, NON_NEGATIVE, "autoscaler tolerance")
        require(self.down_window_s, NON_NEGATIVE, "autoscaler down_window_s")

    def desired(self, fleet, current: int) -> int:
        m = fleet.scrape
        reps = [r for r in m.in_group(self.group) if r.state == "serving"]
        if self.metric == "waiting":  # the router's held requests wait for this group's pool too
            held = m.held_decode if getattr(fleet, "role", {}).get(self.group) == "decode" else m.held
            value = (sum(r.waiting for r in reps) + held) / max(1, len(reps))
        else:
            value = sum(r.kv_usage for r in reps) / len(reps) if reps else 0.0
        ratio = value / self.target
        want = current if abs(ratio - 1.0) <= self.tolerance else math.ceil(max(current, 1) * ratio - 1e-9)
        now = fleet.now
        self._recent.append((now, want))
        while self._recent and self._recent[0][0] < now - self.down_window_s:
            self._recent.popleft()
        if want < current:  # scale down only as far as every recommendation of the window allows
            want = min(current, max(w for _, w in self._recent))
        return want


@dataclass
class SlaPlanner(Autoscaler):
    """Replicas for the predicted arrival rate: ceil(predicted / ``replica_rate``) with ``headroom`` (the share
    of a replica's capacity to plan for). The prediction is the mean arrival rate over the last ``lookback``
    intervals (Dynamo's planner offers such a constant predictor besides ARIMA and Prophet); a rising load is
    met ``startup`` later, which is why headroom is kept."""

    replica_rate: float = 1.0  # requests/s one replica serves within the SLOs (`kvsim plan`'s max_rate_req_s)
    headroom: float = 0.8
    lookback: int = 4
    interval_s: float = 60.0
    down_window_s: float = 0.0  # scale down only to the highest count asked for over this many seconds (0: at once)
    _rates: deque = field(default_factory=deque, repr=False)
    _recent: deque = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.replica_rate, POSITIVE, "planner replica_rate")
        require(self.headroom, FRACTION, "planner headroom")
        require(self.down_window_s, NON_NEGATIVE, "planner down_window_s")
        if self.lookback < 1:
            raise ConfigError(f"planner lookback: must be >= 1, got {self.lookback}")

    def desired(self, fleet, current: int) -> int:
        self._rates.append(fleet.scrape.arrival_rate)
        while len(self._rates) > self.lookback:
            self._rates.popleft()
        predicted = sum(self._rates) / len(self._rates)
        want = math.ceil(predicted / (self.replica_rate * self.headroom) - 1e-9)
        if self.down_window_s > 0:  # HPA's stabilization: a dip shorter than the window keeps the replicas
            now = fleet.now
            self._recent.append((now, want))
            while self._recent and self._recent[0][0] < now - self.down_window_s:
                self._recent.popleft()
            if want < current:
                want = min(current, max(w for _, w in self._recent))
        return want


@dataclass
class ScheduleAutoscaler(Autoscaler):
    """Replica counts by time: ``schedule`` is [(from time s, replicas), ...]; before the first entry the fleet
    keeps what it started with."""

    schedule: list[tuple[float, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.schedule:
            raise ConfigError("a schedule autoscaler needs at least one (time, replicas) entry")
        self.schedule = sorted(self.schedule)
        for t, n in self.schedule:
            require(t, NON_NEGATIVE, "schedule time")
            if not isinstance(n, int) or n < 0:
                raise ConfigError(f"schedule replicas: must be a whole number >= 0, got {n!r}")

    def desired(self, fleet, current: int) -> int:
        want = current
        for t, n in self.schedule:
            if t <= fleet.now:
                want = n
        return want


AUTOSCALERS = ("threshold", "sla", "schedule")
_KEYS = {
    "threshold": {
        "metric": "metric",
        "target": "target",
        "tolerance": "tolerance",
        "down": "down_window_s",
        "min": "min_replicas",
        "max": "max_replicas",
        "interval": "interval_s",
    },
    "sla": {
        "rate": "replica_rate",
        "headroom": "headroom",
        "lookback": "lookback",
        "down": "down_window_s",
        "min": "min_replicas",
        "max": "max_replicas",
        "interval": "interval_s",
    },
}


def parse_pool_autoscalers(text: str, prefill: str, decode: str) -> list[Autoscaler]:
    """The autoscalers of disaggregated pools (groups ``prefill`` and ``decode``) from one spec:
    ``threshold[:...]`` (each pool its own HPA, same settings), ``sla:prefill_rate=A,decode_rate=B[,...]``
    (A: requests/s one prefill replica serves within the TTFT SLO, B: one decode replica within the TPOT SLO)
    or ``schedule:SECONDS=P/D,...`` (P prefill and D decode replicas from SECONDS on)."""
    kind, _, rest = text.strip().partition(":")
    if kind == "threshold":
        return [parse_autoscaler(text, prefill), parse_autoscaler(text, decode)]
    if kind == "schedule":
        per: dict[str, list[str]] = {prefill: [], decode: []}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            t, eq, counts = part.partition("=")
            p, slash, d = counts.partition("/")
            if not eq or not slash:
                raise ConfigError(f"--autoscaler {text!r}: pools take SECONDS=PREFILL/DECODE,... e.g. 0=1/2,3600=2/4")
            per[prefill].append(f"{t}={p}")
            per[decode].append(f"{t}={d}")
        return [parse_autoscaler("schedule:" + ",".join(v), g) for g, v in per.items()]
    if kind == "sla":
        rates: dict[str, str] = {}
        common = []
        for part in filter(None, (p.strip() for p in rest.split(","))):
            k, _, v = part.partition("=")
            if k.strip() in ("prefill_rate", "decode_rate"):
                rates[k.strip()] = v.strip()
            elif k.strip() == "rate":
                raise ConfigError(
                    "--autoscaler sla with --prefill/--decode pools: give prefill_rate=A,decode_rate=B, the "
                    "requests/s one prefill replica serves within the TTFT SLO and one decode replica within the "
                    "TPOT SLO"
                )
            else:
                common.append(part)
        if set(rates) != {"prefill_rate", "decode_rate"}:
            raise ConfigError(
                "--autoscaler sla with --prefill/--decode pools: needs prefill_rate=A and decode_rate=B "
                "(requests/s one replica of each pool serves within the SLOs)"
            )
        extra = "".join("," + c for c in common)
        return [
            parse_autoscaler(f"sla:rate={rates['prefill_rate']}{extra}", prefill),
            parse_autoscaler(f"sla:rate={rates['decode_rate']}{extra}", decode),
        ]
    return [parse_autoscaler(text, prefill)]  # (an unknown kind: its error)


def parse_autoscaler(text: str, group: str) -> Autoscaler:
    """``threshold[:metric=waiting,target=8,min=1,max=16,down=300,interval=15,tolerance=0.1]``,
    ``sla:rate=R[,headroom=0.8,lookback=4,interval=60,down=0,min=1,max=64]`` (R: requests/s one replica serves within
    the SLOs, as `kvsim plan` finds it) or ``schedule:T=N,T=N,...`` (N replicas from T seconds on)."""
    kind, _, rest = text.strip().partition(":")
    if kind not in AUTOSCALERS:
        raise ConfigError(f"--autoscaler {text!r}: expected {', '.join(AUTOSCALERS)}, e.g. threshold:target=8,max=16")
    pairs = []
    for part in filter(None, (p.strip() for p in rest.split(","))):
        k, eq, v = part.partition("=")
        if not eq or not k.strip() or not v.strip():
            raise ConfigError(f"--autoscaler {text!r}: expected KEY=VALUE, got {part!r}")
        pairs.append((k.strip(), v.strip()))
    if kind == "schedule":
        try:
            entries = [(float(t), int(n)) for t, n in pairs]
        except ValueError:
            raise ConfigError(f"--autoscaler {text!r}: a schedule is SECONDS=REPLICAS,... e.g. 0=2,3600=4") from None
        top = max((n for _, n in entries), default=1)
        return ScheduleAutoscaler(group, min_replicas=1, max_replicas=max(1, top), schedule=entries)
    keys = _KEYS[kind]
    args: dict[str, Any] = {}
    for k, v in pairs:
        if k not in keys:
            raise ConfigError(f"--autoscaler {kind}: unknown setting {k!r} (settings: {', '.join(keys)})")
        name = keys[k]
        if name == "metric":
            args[name] = v
            continue
        try:
            args[name] = int(v) if name in ("min_replicas", "max_replicas", "lookback") else float(v)
        except ValueError:
            raise ConfigError(f"--autoscaler {kind}: {k} must be a number, got {v!r}") from None
    if kind == "sla" and "replica_rate" not in args:
        raise ConfigError(
            "--autoscaler sla: needs rate=R, the requests/s one replica serves within the SLOs (kvsim plan)"
        )
    cls = ThresholdAutoscaler if kind == "threshold" else SlaPlanner
    return cls(group, **args)


def autoscalers_for(spec: str, groups: list[str]) -> list[Autoscaler]:
    """The autoscalers ``spec`` asks for: of one group (:func:`parse_autoscaler`), or of disaggregated pools
    [prefill group, decode group] (:func:`parse_pool_autoscalers`)."""
    if len(groups) == 2:
        return parse_pool_autoscalers(spec, groups[0], groups[1])
    return [parse_autoscaler(spec, groups[0])]
