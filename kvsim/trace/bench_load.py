"""Benchmark clients' workloads: the requests and send times of `vllm bench serve --dataset-name random`,
GenAI-Perf's synthetic concurrency mode and SemiAnalysis InferenceMAX's client, generated as kvsim requests.

What each harness does (the sources are named in docs/traces.md, "Benchmark clients"):

- ``vllm-random``: current `vllm bench serve` (vllm/benchmarks/datasets.py ``RandomDataset``,
  vllm/benchmarks/serve.py ``get_request``). Prompt and output lengths are uniform integers in
  [floor(L (1 - r)), ceil(L (1 + r))] (r = ``--random-range-ratio`` in [0, 1), default 0: every request L
  tokens; outputs at least 1); ``--random-prefix-len`` tokens of one random prefix go before every prompt.
  Send times: ``--request-rate`` inf sends every request at 0; a finite rate draws N gamma gaps of shape
  ``--burstiness`` (1: Poisson) and mean 1/rate, sums them (the first request waits one gap too) and scales
  the sums so that the last request goes at N / rate. ``--burstiness`` inf: constant gaps of 1/rate.
  ``--ramp-up-strategy linear|exponential`` gives request i the rate start + (end - start) i / (N - 1), or
  start (end / start) ^ (i / (N - 1)), draws its gap at that rate and sums the gaps without rescaling.
- ``inferencemax``: InferenceMAX's benchmarks/benchmark_lib.sh runs its own copy of vLLM's older
  benchmark_serving.py (utils/bench_serving/) with ``--dataset-name random --random-range-ratio R
  --num-prompts 10 x C --max-concurrency C --request-rate inf --ignore-eos``. That copy (as vLLM before its
  pull request 16126, April 2025) draws lengths uniform in [int(L r), L] (R = 0.8 in its runs), and at a
  finite rate sends the first request at 0 and each next one a gamma gap later (no rescaling).
- ``genai-perf``: GenAI-Perf's synthetic prompts: lengths int(N(mean, stddev)), drawn again until positive
  (``--synthetic-input-tokens-mean`` default 550, stddev 0; ``--output-tokens-mean`` as kvsim's
  --random-output-len); ``--concurrency N`` is N clients from t = 0 (here --max-concurrency); a request rate
  sends at constant gaps of 1/rate (perf_analyzer's default request distribution), the first at 0. Its
  dataset holds 100 distinct prompts (its ``--num-prompts``, here ``--num-dataset-entries``), sent in turn
  (perf_analyzer's threads take prompts i, i + T, ... modulo the dataset: genai-perf inputs/config_defaults.py,
  perf_analyzer infer_context.cc), so past 100 requests every prompt comes again and a prefix cache holds it.
- ``aiperf``: NVIDIA AIPerf's synthetic concurrency mode, lengths as GenAI-Perf's (``--isl``/``--isl-stddev``,
  ``--osl``/``--osl-stddev``). Its dataset (``--num-dataset-entries``) is, from aiperf 0.9, as many distinct
  prompts as ``--request-count`` when that is given, else 100, taken in order (sequential sampling); aiperf
  0.3-0.8 held 100 and walked them in a fresh random order each pass (``--dataset-sampling-strategy shuffle``),
  0.1-0.2 drew them at random with replacement (``random``). Each prompt is a window of the Shakespeare corpus
  at its own random offset: distinct prompts share no prefix.

Draws use numpy's ``default_rng(seed)`` (vLLM's RandomDataset does too, but consumes the stream differently
and its send-time gaps come from numpy's global generator): the same arguments give the same requests bit for
bit, not vLLM's own draws. kvsim always generates each request's drawn output length, which is what a client
with ``--ignore-eos`` sees; without it a real model may stop earlier (:meth:`BenchLoad.notes` says so).
Prompts that share the prefix carry ``hash_ids`` (one id per ``hash_block_tokens`` tokens) so prefix caching
finds the shared blocks; the rest of each prompt gets ids of its own (vLLM's random prompts differ per request).
With a dataset of fewer distinct prompts than requests (``dataset_entries``), a request that sends a prompt again
carries that prompt's ids and length: the server's prefix cache finds it whole if it still holds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from kvsim.errors import ConfigError
from kvsim.trace.request import Request
from kvsim.validation import MAX_LEN, MAX_PROMPTS, POSITIVE_INT, SEED, Number, request_rate, require

HARNESSES = ("vllm-random", "genai-perf", "aiperf", "inferencemax")
NORMAL_LENGTHS = ("genai-perf", "aiperf")  # harnesses that draw lengths from normal distributions
SAMPLINGS = ("sequential", "shuffle", "random")  # how requests take prompts from a dataset (aiperf's names)
RANGE_RATIO_MODES = ("symmetric", "lower-bound")  # [L(1-r), L(1+r)] (vLLM since PR 16126); [int(L r), L] (before)
DATASETS = ("random",)
HASH_BLOCK_TOKENS = 16  # tokens per hash id (vLLM's default KV block)

# the options table keys that describe a generated benchmark workload (kvsim/option_table.py, group "load")
DATASET_KEYS = (
    "dataset_name",
    "bench",
    "num_prompts",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "random_range_ratio_mode",
    "random_prefix_len",
    "synthetic_input_tokens_stddev",
    "output_tokens_stddev",
    "burstiness",
    "ramp_up_strategy",
    "ramp_up_start_rps",
    "ramp_up_end_rps",
    "random_seed",
    "ignore_eos",
    "num_dataset_entries",
    "dataset_sampling_strategy",
    "warmup_request_count",
)

# each harness's own defaults (None: not this harness's flag; "10x": 10 x --max-concurrency)
_DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm-random": {
        "num_prompts": 1000,
        "input_len": 1024,
        "output_len": 128,
        "range_ratio": 0.0,
        "range_ratio_mode": "symmetric",
        "ignore_eos": False,
    },
    "inferencemax": {
        "num_prompts": "10x",
        "input_len": 1024,
        "output_len": 128,
        "range_ratio": 0.8,
        "range_ratio_mode": "lower-bound",
        "ignore_eos": True,
        "warmup": "2x",  # benchmark_lib.sh: --num-warmups 2 x CONC
    },
    "genai-perf": {
        "num_prompts": 100,
        "input_len": 550,
        "output_len": 128,
        "range_ratio": 0.0,
        "range_ratio_mode": "symmetric",
        "ignore_eos": False,
        "dataset_entries": 100,
    },
    "aiperf": {
        "num_prompts": 10,  # aiperf's default --request-count
        "input_len": 550,
        "output_len": 128,
        "range_ratio": 0.0,
        "range_ratio_mode": "symmetric",
        "ignore_eos": False,
        "dataset_entries": "requests",  # --request-count when given, else 100 (aiperf >= 0.9)
    },
}


@dataclass(frozen=True)
class BenchLoad:
    """One benchmark client's workload. Lengths in tokens, ``request_rate`` in requests/s (inf: all at once),
    ``max_concurrency`` in requests in flight (None: no limit; the simulator's client loop applies it)."""

    harness: str = "vllm-random"
    num_prompts: int = 1000
    input_len: int = 1024  # vllm-random, inferencemax: --random-input-len; genai-perf: the mean
    output_len: int = 128
    range_ratio: float = 0.0  # vllm-random, inferencemax
    range_ratio_mode: str = "symmetric"  # "symmetric": [L(1-r), L(1+r)]; "lower-bound": [int(L r), L]
    prefix_len: int = 0  # tokens of one shared prefix before every prompt
    input_stddev: float = 0.0  # genai-perf: tokens
    output_stddev: float = 0.0  # genai-perf: tokens
    request_rate: float = math.inf
    burstiness: float = 1.0  # gamma shape of the gaps (1: Poisson; inf: constant gaps)
    max_concurrency: int | None = None
    seed: int = 0
    ignore_eos: bool = False
    hash_block_tokens: int = HASH_BLOCK_TOKENS
    ramp_up_strategy: str | None = None  # vllm-random: "linear" or "exponential" (vllm bench serve's ramp-up)
    ramp_up_start_rps: int | None = None  # the first request's rate, requests/s
    ramp_up_end_rps: int | None = None  # the last request's rate
    dataset_entries: int | None = None  # distinct prompts the requests take in turn (None: each its own)
    sampling: str = "sequential"  # how requests take them: SAMPLINGS
    warmup: int = 0  # warm-up requests sent first and drained before the measured ones (a closed loop only)
    implied: bool = False  # the harness was not named: a closed loop given by its numbers alone (from_options)

    def __post_init__(self) -> None:
        if self.harness not in HARNESSES:
            raise ConfigError(f"--bench: '{self.harness}' is not one of {', '.join(HARNESSES)}")
        if self.range_ratio_mode not in RANGE_RATIO_MODES:
            raise ConfigError(
                f"--random-range-ratio-mode: '{self.range_ratio_mode}' is not one of {', '.join(RANGE_RATIO_MODES)}"
            )
        require(self.num_prompts, Number(integer=True, min=1, max=MAX_PROMPTS), "--num-prompts")
        require(self.input_len, Number(integer=True, min=1, max=MAX_LEN), "--random-input-len")
        require(self.output_len, Number(integer=True, min=1, max=MAX_LEN), "--random-output-len")
        require(self.prefix_len, Number(integer=True, min=0, max=MAX_LEN), "--random-prefix-len")
        # vLLM's symmetric window needs r < 1 (as its own check); the older window [int(L r), L] takes r = 1
        require(
            self.range_ratio,
            Number(min=0, max=1, max_open=self.range_ratio_mode == "symmetric"),
            "--random-range-ratio",
        )
        require(self.input_stddev, Number(min=0, max=MAX_LEN), "--synthetic-input-tokens-stddev")
        require(self.output_stddev, Number(min=0, max=MAX_LEN), "--output-tokens-stddev")
        require(self.request_rate, request_rate, "--request-rate")
        require(self.burstiness, burstiness_rule, "--burstiness")
        if self.max_concurrency is not None:
            require(self.max_concurrency, POSITIVE_INT, "--max-concurrency")
        self._check_ramp_up()
        require(self.seed, SEED, "--random-seed")
        require(self.hash_block_tokens, POSITIVE_INT, "hash_block_tokens")
        if self.sampling not in SAMPLINGS:
            raise ConfigError(f"--dataset-sampling-strategy: '{self.sampling}' is not one of {', '.join(SAMPLINGS)}")
        if self.dataset_entries is not None:
            require(self.dataset_entries, Number(integer=True, min=1, max=MAX_PROMPTS), "--num-dataset-entries")
            if self.harness not in NORMAL_LENGTHS:
                raise ConfigError(
                    f"--num-dataset-entries: a dataset of prompts sent again is GenAI-Perf's and AIPerf's "
                    f"(--bench genai-perf / aiperf); {self.harness} sends every request a prompt of its own"
                )
        require(self.warmup, Number(integer=True, min=0, max=MAX_PROMPTS), "--warmup-request-count")
        if self.warmup and (self.max_concurrency is None or self.request_rate != math.inf or self.ramp_up_strategy):
            raise ConfigError(
                "--warmup-request-count: warm-up requests drained before the measured ones need a closed loop "
                "(--max-concurrency, with --request-rate inf)"
            )
        if self.harness in NORMAL_LENGTHS and (self.range_ratio or self.range_ratio_mode != "symmetric"):
            raise ConfigError(
                f"--random-range-ratio: {self.harness} draws lengths from normal distributions; give "
                "--synthetic-input-tokens-stddev / --output-tokens-stddev instead"
            )
        if (
            self.harness not in NORMAL_LENGTHS
            and self.prefix_len + _low(self.input_len, self.range_ratio, self.range_ratio_mode, 0) < 1
        ):
            raise ConfigError(
                f"--random-input-len {self.input_len}: with --random-range-ratio {self.range_ratio:g} "
                "the shortest prompt would have 0 tokens; raise it or --random-prefix-len, or "
                "change the ratio (vLLM refuses the same)"
            )
        if self.harness not in NORMAL_LENGTHS and (self.input_stddev or self.output_stddev):
            raise ConfigError(
                f"--synthetic-input-tokens-stddev / --output-tokens-stddev: GenAI-Perf's and AIPerf's; "
                f"{self.harness} draws lengths with --random-range-ratio"
            )

    def _check_ramp_up(self) -> None:
        """vLLM's own checks of its ramp-up flags (vllm/benchmarks/serve.py), with its reasons."""
        given = (self.ramp_up_start_rps, self.ramp_up_end_rps)
        if self.ramp_up_strategy is None:
            if any(v is not None for v in given):
                raise ConfigError("--ramp-up-start-rps / --ramp-up-end-rps: with --ramp-up-strategy linear|exponential")
            return
        if self.ramp_up_strategy not in ("linear", "exponential"):
            raise ConfigError(f"--ramp-up-strategy: '{self.ramp_up_strategy}' is not one of linear, exponential")
        if self.harness != "vllm-random":
            raise ConfigError(f"--ramp-up-strategy: `vllm bench serve`'s (--bench vllm-random), not {self.harness}'s")
        if self.request_rate != math.inf:
            raise ConfigError(
                "--ramp-up-strategy with --request-rate: the ramp-up sets the rate (vLLM refuses both); drop --request-rate"
            )
        if any(v is None for v in given):
            raise ConfigError("--ramp-up-strategy: needs both --ramp-up-start-rps and --ramp-up-end-rps")
        for flag, v in zip(("--ramp-up-start-rps", "--ramp-up-end-rps"), given):
            require(v, Number(integer=True, min=1, max=10**9), flag)
        assert self.ramp_up_start_rps is not None and self.ramp_up_end_rps is not None
        if self.ramp_up_start_rps > self.ramp_up_end_rps:
            raise ConfigError(
                f"--ramp-up-start-rps {self.ramp_up_start_rps} > --ramp-up-end-rps {self.ramp_up_end_rps}: "
                "a ramp-up climbs (vLLM refuses the same)"
            )

    def rates(self) -> Any:
        """Each request's send rate, requests/s: vLLM's ``_get_current_request_rate`` by request index (the
        ramp-up's, or --request-rate for all)."""
        import numpy as np

        n = self.num_prompts
        if self.ramp_up_strategy is None:
            return np.full(n, self.request_rate)
        start, end = float(self.ramp_up_start_rps or 0), float(self.ramp_up_end_rps or 0)
        progress = np.arange(n) / max(n - 1, 1)
        if self.ramp_up_strategy == "linear":
            return start + (end - start) * progress
        return start * (end / start) ** progress

    @property
    def name(self) -> str:
        """A short name for output folders: ``random-1024-128`` (inferencemax / genai-perf name themselves)."""
        head = "random" if self.harness == "vllm-random" else self.harness
        return f"{head}-{self.input_len}-{self.output_len}"

    def length_bounds(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """((prompt low, high), (output low, high)) in tokens, both inclusive, the prefix included in the prompt;
        None for GenAI-Perf's and AIPerf's normal draws (unbounded above)."""
        if self.harness in NORMAL_LENGTHS:
            return None
        return (
            (
                self.prefix_len + _low(self.input_len, self.range_ratio, self.range_ratio_mode, 0),
                self.prefix_len + _high(self.input_len, self.range_ratio, self.range_ratio_mode),
            ),
            (
                _low(self.output_len, self.range_ratio, self.range_ratio_mode, 1),
                _high(self.output_len, self.range_ratio, self.range_ratio_mode),
            ),
        )

    def describe(self) -> str:
        """The client command this workload stands for, for reports."""
        rate = "inf" if self.request_rate == math.inf else f"{self.request_rate:g}"
        conc = f" --max-concurrency {self.max_concurrency}" if self.max_concurrency is not None else ""
        eos = " --ignore-eos" if self.ignore_eos else ""
        if self.harness in NORMAL_LENGTHS:
            head = (
                f"genai-perf --synthetic-input-tokens-mean {self.input_len} --synthetic-input-tokens-stddev "
                f"{self.input_stddev:g} --output-tokens-mean {self.output_len} --output-tokens-stddev "
                f"{self.output_stddev:g} --num-prompts {self.dataset_entries}"
                if self.harness == "genai-perf"
                else f"aiperf profile --isl {self.input_len} --isl-stddev {self.input_stddev:g} --osl "
                f"{self.output_len} --osl-stddev {self.output_stddev:g} --num-dataset-entries {self.dataset_entries} "
                f"--dataset-sampling-strategy {self.sampling}"
            )
            return (
                f"{head} --request-count {self.num_prompts}"
                + (f" --warmup-request-count {self.warmup}" if self.warmup else "")
                + (f" --concurrency {self.max_concurrency}" if self.max_concurrency is not None else "")
                + (f" --request-rate {rate}" if self.request_rate != math.inf else "")
                + f" --random-seed {self.seed}"
            )
        client = "vllm bench serve" if self.harness == "vllm-random" else "InferenceMAX benchmark_serving.py"
        return (
            f"{client} --dataset-name random --random-input-len {self.input_len} --random-output-len "
            f"{self.output_len} --random-range-ratio {self.range_ratio:g} --random-prefix-len {self.prefix_len} "
            f"--num-prompts {self.num_prompts} "
            + (
                f"--ramp-up-strategy {self.ramp_up_strategy} --ramp-up-start-rps {self.ramp_up_start_rps} "
                f"--ramp-up-end-rps {self.ramp_up_end_rps}"
                if self.ramp_up_strategy
                else f"--request-rate {rate}"
            )
            + f" --burstiness {self.burstiness:g}{conc}{eos} --seed {self.seed}"
            + (f" (and {self.warmup} warm-up requests)" if self.warmup else "")
        )

    def notes(self) -> list[str]:
        """What the user should know about how kvsim reads this workload."""
        out = []
        bounds = self.length_bounds()
        if bounds is not None:
            (pl, ph), (ol, oh) = bounds
            mode = "[L(1-r), L(1+r)]" if self.range_ratio_mode == "symmetric" else "[int(L r), L]"
            out.append(
                f"{self.name}: {self.num_prompts} requests, prompts uniform in [{pl}, {ph}] tokens, outputs "
                f"in [{ol}, {oh}] tokens (range ratio {self.range_ratio:g} as {mode}"
                + (f", {self.prefix_len} shared prefix tokens" if self.prefix_len else "")
                + ")"
            )
        if self.implied:
            out.append(
                f"{self.name}: no --bench: {self.max_concurrency} clients in a closed loop are run as InferenceMAX's "
                "client runs them (lengths uniform in [0.8 L, L], 10 x clients prompts, 2 x clients warm-ups, "
                "--ignore-eos), as public closed-loop benchmarks vary their lengths; `--bench vllm-random` (or "
                "`--random-range-ratio 0`) is vllm bench serve's defaults, whose identical lengths keep the clients "
                "in lock-step (docs/traces.md)"
            )
        if self.warmup:
            out.append(
                f"{self.name}: {self.warmup} warm-up requests first, drained before the {self.num_prompts} "
                "measured ones; the latencies and throughput are the measured ones' (the memory timeline and the "
                "cache counters span the warm-up too)"
            )
        if self.dataset_entries is not None and self.dataset_entries < self.num_prompts:
            out.append(
                f"{self.name}: {self.num_prompts} requests take {self.dataset_entries} distinct prompts "
                f"({self.sampling}): a prompt sent again finds its blocks in the prefix cache if it still holds them"
            )
        if not self.ignore_eos:
            out.append(
                f"note: {self.name}: without --ignore-eos a real model may stop before the drawn output "
                "length; kvsim generates every drawn length (as the client's --ignore-eos)"
            )
        return out

    def requests(self) -> list[Request]:
        """The workload's requests in send order, with their send times in seconds from 0 (before any
        --max-concurrency wait), the warm-up ones first (ids ``warmup-K``, :attr:`Request.warmup`; they take
        the dataset's first prompts, as the clients' warm-up shares their sampler). Deterministic in the
        fields, bit for bit."""
        if self.warmup:
            w = self.warmup
            reqs = replace(self, num_prompts=w + self.num_prompts, warmup=0).requests()
            return [
                replace(r, id=f"warmup-{i}", warmup=True, line=0)
                if i < w
                else replace(r, id=str(i - w), line=i - w + 1)
                for i, r in enumerate(reqs)
            ]
        import numpy as np

        rng = np.random.default_rng(self.seed)
        n = self.num_prompts
        if self.dataset_entries is not None and (self.dataset_entries < n or self.sampling == "random"):
            return self._dataset_requests(rng)  # prompts sent again
        if self.harness in NORMAL_LENGTHS:
            prompt = _positive_normal(rng, self.input_len, self.input_stddev, n)
            output = _positive_normal(rng, self.output_len, self.output_stddev, n)
        else:
            prompt = _uniform(rng, self.input_len, self.range_ratio, self.range_ratio_mode, 0, n)
            output = _uniform(rng, self.output_len, self.range_ratio, self.range_ratio_mode, 1, n)
        prompt = prompt + self.prefix_len
        times = self.send_times(rng)
        H = self.hash_block_tokens
        out: list[Request] = []
        if self.prefix_len:
            shared = self.prefix_len // H  # a block that mixes prefix and own tokens is the request's own
            next_id = shared
            for i in range(n):
                blocks = -(-int(prompt[i]) // H)
                ids = tuple(range(min(shared, blocks))) + tuple(range(next_id, next_id + blocks - min(shared, blocks)))
                next_id += blocks - min(shared, blocks)
                out.append(
                    Request(
                        str(i),
                        float(times[i]),
                        int(prompt[i]),
                        int(output[i]),
                        hash_ids=ids,
                        hash_block_tokens=H,
                        line=i + 1,
                    )
                )
        else:
            out = [Request(str(i), float(times[i]), int(prompt[i]), int(output[i]), line=i + 1) for i in range(n)]
        return out

    def _dataset_requests(self, rng) -> list[Request]:
        """The requests of a dataset of ``dataset_entries`` distinct prompts (lengths drawn per prompt, outputs per
        request), taken by ``sampling``: every request carries its prompt's block ids, the same each time it is
        sent."""
        import numpy as np

        n, m, H = self.num_prompts, self.dataset_entries or 1, self.hash_block_tokens
        entry_len = _positive_normal(rng, self.input_len, self.input_stddev, m) + self.prefix_len
        output = _positive_normal(rng, self.output_len, self.output_stddev, n)
        if self.sampling == "sequential":
            entry = np.arange(n) % m
        elif self.sampling == "shuffle":  # a fresh random order of every prompt for each pass
            entry = np.concatenate([rng.permutation(m) for _ in range(-(-n // m))])[:n]
        else:
            entry = rng.integers(0, m, size=n)
        times = self.send_times(rng)
        shared = self.prefix_len // H  # a block that mixes prefix and own tokens is the prompt's own
        ids, next_id = [], shared
        for j in range(m):
            blocks = -(-int(entry_len[j]) // H)
            own = blocks - min(shared, blocks)
            ids.append(tuple(range(min(shared, blocks))) + tuple(range(next_id, next_id + own)))
            next_id += own
        return [
            Request(
                str(i),
                float(times[i]),
                int(entry_len[entry[i]]),
                int(output[i]),
                hash_ids=ids[entry[i]],
                hash_block_tokens=H,
                line=i + 1,
            )
            for i in range(n)
        ]

    def send_times(self, rng) -> Any:  # a numpy array (numpy is imported late)
        """Each request's send time in seconds, as the harness schedules it."""
        import numpy as np

        n, rate = self.num_prompts, self.request_rate
        if self.ramp_up_strategy is not None:  # each gap at its request's rate, summed; no rescaling (as vLLM)
            r = self.rates()
            if self.burstiness == math.inf:
                return np.cumsum(1.0 / r)
            return np.cumsum(rng.gamma(self.burstiness, 1.0 / (r * self.burstiness)))
        if rate == math.inf:
            return np.zeros(n)
        if self.harness == "genai-perf" or self.burstiness == math.inf:
            gaps = np.full(n, 1.0 / rate)  # aiperf: Poisson gaps (its default arrival pattern), by --burstiness
        else:
            gaps = rng.gamma(self.burstiness, 1.0 / (rate * self.burstiness), size=n)
        if self.harness == "vllm-random":  # every request after a gap; the last at n / rate
            t = np.cumsum(gaps)
            return t * ((n / rate) / t[-1]) if t[-1] > 0 else t
        return np.concatenate(([0.0], np.cumsum(gaps[:-1])))  # the first at 0, each next a gap later


def burstiness_rule(v) -> str | None:
    """The gamma shape of a client's gaps: 0.001 to 1000 (beyond, gaps under- or overflow), or inf (constant)."""
    if isinstance(v, float) and v == math.inf:
        return None
    problem = Number(min=1e-3, max=1e3)(v)
    return f"{problem} (or inf: constant gaps)" if problem else None


def _low(L: int, r: float, mode: str, at_least: int) -> int:
    lo = math.floor(L * (1 - r)) if mode == "symmetric" else int(L * r)
    return max(lo, at_least)


def _high(L: int, r: float, mode: str) -> int:
    return max(math.ceil(L * (1 + r)) if mode == "symmetric" else L, 1)


def _uniform(rng, L: int, r: float, mode: str, at_least: int, n: int):
    """n integers uniform in the harness's window around L (both ends included)."""
    import numpy as np

    lo, hi = _low(L, r, mode, at_least), _high(L, r, mode)
    if hi < lo:  # a prompt window [0, 0] (no prefix) cannot happen: L >= 1 keeps hi >= 1
        hi = lo
    return rng.integers(lo, hi + 1, size=n, dtype=np.int64)


def _positive_normal(rng, mean: float, sd: float, n: int):
    """n integers int(N(mean, sd)), each drawn again until positive (GenAI-Perf's sampling)."""
    import numpy as np

    x = np.trunc(rng.normal(mean, sd, size=n)) if sd else np.full(n, float(int(mean)))
    for _ in range(10_000):
        bad = x <= 0
        if not bad.any():
            break
        x[bad] = np.trunc(rng.normal(mean, sd, size=int(bad.sum())))
    else:  # a mean far below 0 in stddevs: practically never positive
        raise ConfigError(f"lengths of mean {mean:g} and stddev {sd:g} tokens are almost never positive")
    return np.minimum(x, MAX_LEN).astype(np.int64)


def from_options(values: Mapping[str, Any]) -> BenchLoad | None:
    """The workload that checked option values describe (keys of kvsim/option_table.py; ``request_rate`` and
    ``max_concurrency`` included), or None when no dataset option is given (the run reads a --trace)."""
    if not any(values.get(k) is not None for k in DATASET_KEYS):
        return None
    # GenAI-Perf's own flags (its standard deviations) name its client when --bench does not
    genai_only = any(
        values.get(k) is not None
        for k in ("synthetic_input_tokens_stddev", "output_tokens_stddev", "num_dataset_entries")
    )
    implied = values.get("bench") is None and not genai_only and _closed_loop_numbers_only(values)
    harness = values.get("bench") or ("inferencemax" if implied else "genai-perf" if genai_only else "vllm-random")
    d = _DEFAULTS[harness]
    conc = values.get("max_concurrency")
    num = values.get("num_prompts")
    if num is None:
        num = d["num_prompts"]
        if num == "10x":
            if conc is None:
                raise ConfigError(
                    "--bench inferencemax: needs --max-concurrency (its client sends 10 x concurrency "
                    "prompts), or give --num-prompts"
                )
            num = 10 * conc

    def get(key: str, default):
        v = values.get(key)
        return default if v is None else v

    warmup = values.get("warmup_request_count")
    if warmup is None:
        warmup = d.get("warmup", 0)
        if warmup == "2x":
            warmup = 2 * conc if conc is not None and values.get("request_rate") in (None, math.inf) else 0
    entries = values.get("num_dataset_entries")
    if entries is None:
        entries = d.get("dataset_entries")
        if entries == "requests":
            entries = values.get("num_prompts") or 100
    rate = values.get("request_rate")
    return BenchLoad(
        harness=harness,
        num_prompts=num,
        input_len=get("random_input_len", d["input_len"]),
        output_len=get("random_output_len", d["output_len"]),
        range_ratio=get("random_range_ratio", d["range_ratio"]),
        range_ratio_mode=get("random_range_ratio_mode", d["range_ratio_mode"]),
        prefix_len=get("random_prefix_len", 0),
        input_stddev=get("synthetic_input_tokens_stddev", 0.0),
        output_stddev=get("output_tokens_stddev", 0.0),
        request_rate=math.inf if rate is None else rate,
        burstiness=get("burstiness", 1.0),
        ramp_up_strategy=values.get("ramp_up_strategy"),
        ramp_up_start_rps=values.get("ramp_up_start_rps"),
        ramp_up_end_rps=values.get("ramp_up_end_rps"),
        max_concurrency=conc,
        seed=get("random_seed", 0),
        ignore_eos=get("ignore_eos", d["ignore_eos"]),
        dataset_entries=entries,
        sampling=get("dataset_sampling_strategy", "sequential"),
        warmup=warmup,
        implied=implied,
    )


# vllm bench serve's own flags that shape lengths or send times: given, the run is that client's
_VLLM_SHAPE_KEYS = ("random_range_ratio", "random_range_ratio_mode", "ramp_up_strategy", "burstiness")


def _closed_loop_numbers_only(values: Mapping[str, Any]) -> bool:
    """True for a closed loop given by its numbers alone (--max-concurrency, lengths, prompts; no --request-rate
    and none of vllm bench serve's length or schedule flags). InferenceMAX's closed-loop grid draws lengths in a
    range; identical lengths (vllm bench serve's defaults) keep C clients in lock-step, every wave's prompts
    prefilled together: a property of that client's defaults, not the load a server of C users sees."""
    rate = values.get("request_rate")
    return (
        values.get("max_concurrency") is not None
        and (rate is None or rate == math.inf)
        and all(values.get(k) is None for k in _VLLM_SHAPE_KEYS)
    )
