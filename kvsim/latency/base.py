"""What a latency model is: the shape of one iteration -> seconds.

Pure-decode runs are the hot path: over k decode steps of a fixed batch of n sequences every context
grows by one token per step, so the shape is affine in the step index and models give the total time
of k steps in closed form instead of summing step by step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepShape:
    """The work of one iteration (whole model, before tensor parallelism).

    ``decode_seqs``/``decode_kv_tokens``: sequences computing one token and the KV tokens they attend to
    (their contexts, the new token included); ``prefill_chunks``: (new tokens, cached tokens) of every
    sequence computing more than one token. When the decode fields are left at -1 the shape counts as
    all-decode if ``new_tokens == num_seqs``, else as one prefill chunk per sequence.
    """

    new_tokens: int  # tokens computed this iteration, all sequences together
    num_seqs: int
    attn_pairs: int  # sum over new tokens of the key positions each attends to (incl. itself)
    kv_tokens: int  # sum over sequences of KV tokens read or written (context incl. new tokens)
    decode_seqs: int = -1
    decode_kv_tokens: int = -1
    prefill_chunks: tuple[tuple[int, int], ...] = ()
    # KV tokens the decodes read in each windowed kind of layer (LatencyModel.windows, in order): per
    # sequence min(context, W) (sliding) or its chunk's tokens (chunked); () when not counted
    window_reads: tuple[int, ...] = ()

    @staticmethod
    def decode(num_seqs: int, kv_tokens: int) -> "StepShape":
        """``num_seqs`` decodes attending to ``kv_tokens`` KV tokens in total."""
        return StepShape(num_seqs, num_seqs, kv_tokens, kv_tokens, num_seqs, kv_tokens, ())

    @staticmethod
    def of(
        chunks: list[tuple[int, int]],
        windows: tuple[tuple[str, int], ...] = (),
        decodes: int = 0,
        decode_kv: int = 0,
        decode_contexts=(),
    ) -> "StepShape":
        """The shape of sequences computing (new tokens, after cached tokens) each, plus ``decodes`` more
        one-token sequences attending to ``decode_kv`` KV tokens in all (the incremental scheduler's lazy
        decoders, counted, not listed); with ``windows`` (LatencyModel.windows), what every decode reads in
        each windowed kind of layer (the extra decodes' contexts: ``decode_contexts``)."""
        new = dn = decodes
        pairs = kv = dkv = decode_kv
        prefill = []
        contexts = []
        for n, cached in chunks:
            p, r = chunk_shape_terms(cached, n)
            new, pairs, kv = new + n, pairs + p, kv + r
            if n == 1:
                dn, dkv = dn + 1, dkv + r
                contexts.append(r)
            else:
                prefill.append((n, cached))
        if windows:
            import numpy as np

            reads = decode_window_reads(
                windows,
                np.concatenate((np.asarray(decode_contexts, dtype=np.int64), np.asarray(contexts, dtype=np.int64))),
            )
        else:
            reads = ()
        return StepShape(new, decodes + len(chunks), pairs, kv, dn, dkv, tuple(prefill), reads)

    @property
    def decodes(self) -> int:
        """Sequences computing one token (:meth:`split`'s first part, without building the prefill chunks)."""
        if self.decode_seqs >= 0:
            return self.decode_seqs
        return self.num_seqs if self.new_tokens == self.num_seqs else 0

    def split(self) -> tuple[int, int, tuple[tuple[int, int], ...]]:
        """(decode sequences, their KV tokens, prefill chunks), deriving them for shapes built without."""
        if self.decode_seqs >= 0:
            return self.decode_seqs, self.decode_kv_tokens, self.prefill_chunks
        if self.new_tokens == self.num_seqs:
            return self.num_seqs, self.kv_tokens, ()
        per = max(1, self.new_tokens // max(1, self.num_seqs))
        cached = max(0, (self.kv_tokens - self.new_tokens) // max(1, self.num_seqs))
        return 0, 0, tuple((per, cached) for _ in range(self.num_seqs))


def window_reads(kind: str, window: int, contexts):
    """KV tokens decodes at ``contexts`` (a numpy array of context lengths, each token itself included) read
    in a windowed layer of ``kind`` (a layer kind or its name, layer_kinds.py), summed along the last axis: the last
    ``window`` (sliding) or their own chunk's."""
    from kvsim.hardware.layer_kinds import KINDS

    spec = KINDS[kind] if isinstance(kind, str) else kind
    return (contexts - spec.first_attended(window, contexts - 1)).sum(axis=-1)


def decode_window_reads(windows: tuple[tuple[str, int], ...], contexts) -> tuple[int, ...]:
    """:func:`window_reads` of decodes at ``contexts`` (a list or array) for every (kind, window) in ``windows``."""
    import numpy as np

    c = np.asarray(contexts, dtype=np.int64)
    return tuple(int(window_reads(kind, w, c)) for kind, w in windows)


def chunk_shape_terms(computed: int, new: int) -> tuple[int, int]:
    """(attn_pairs, kv_tokens) of one sequence computing ``new`` tokens after ``computed`` cached ones."""
    return new * computed + new * (new + 1) // 2, computed + new


def sum_affine(a: float, b: float, lo: int, hi: int) -> float:
    """sum_{i=lo}^{hi-1} (a + b*i)."""
    n = hi - lo
    return n * a + b * n * (lo + hi - 1) / 2 if n > 0 else 0.0


def sum_max_of_two_affine(a1: float, b1: float, a2: float, b2: float, k: int) -> float:
    """sum_{i=0}^{k-1} max(a1 + b1*i, a2 + b2*i), exactly."""
    if k <= 0:
        return 0.0
    if b1 == b2:
        return sum_affine(max(a1, a2), b1, 0, k)
    # Where the lines cross, clamped to [-1, k + 1]: a tiny (even subnormal) slope difference can put
    # it at +-inf, and inf // 1 is NaN.
    x = min(max((a2 - a1) / (b1 - b2), -1.0), k + 1.0)
    if b1 > b2:  # line 1 on top for i >= x
        c = min(max(int(-(-x // 1)), 0), k)
        return sum_affine(a2, b2, 0, c) + sum_affine(a1, b1, c, k)
    c = min(max(int(x // 1) + 1, 0), k)  # line 1 on top for i <= x
    return sum_affine(a1, b1, 0, c) + sum_affine(a2, b2, c, k)


#: the parts of an iteration's time (:meth:`LatencyModel.breakdown`, `kvsim latency` columns), seconds each;
#: they add up to ``total_s``. ``graph_padding_s``: the dense layers and all-reduces run on the padding tokens
#: of a CUDA graph captured for a larger batch
PARTS = ("dense_s", "attention_s", "communication_s", "graph_padding_s", "cpu_s")
BREAKDOWN_COLUMNS = ("total_s", *PARTS)


class LatencyModel(ABC):
    """Seconds per iteration. Subclasses may override the decode-run methods with closed forms."""

    name: str = "latency"
    #: windowed kinds of layer, (kind, window tokens), whose decode reads the engine counts exactly
    #: (StepShape.window_reads, and the ``contexts`` of decode runs)
    windows: tuple[tuple[str, int], ...] = ()

    @abstractmethod
    def step_time(self, shape: StepShape) -> float: ...

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds of the iteration by part; the parts add up to ``total_s``. Models without parts report
        everything as dense compute."""
        t = self.step_time(shape)
        return dict(zip(BREAKDOWN_COLUMNS, (t, t, 0.0, 0.0, 0.0, 0.0)))

    def decode_run_time(self, n: int, s0: int, k: int, contexts=None) -> float:
        """Total seconds of k decode steps of n sequences; step i reads s0 + n*i KV tokens. ``contexts``
        (models with :attr:`windows`): the n sequences' contexts at the first step, a numpy array."""
        return sum(self.step_time(StepShape.decode(n, s0 + n * i)) for i in range(k))

    def decode_step_times(self, n: int, s0: int, k: int, contexts=None) -> list[float]:
        """Seconds of each of the k steps of a decode run (for weighting what changes within it)."""
        return [self.step_time(StepShape.decode(n, s0 + n * i)) for i in range(k)]

    def decode_steps_until(self, n: int, s0: int, budget_s: float, k_max: int, contexts=None) -> int:
        """Smallest k in [1, k_max] whose k steps take >= budget_s seconds, or k_max if none do."""
        if self.decode_run_time(n, s0, k_max, contexts) < budget_s:
            return k_max
        lo, hi = 0, k_max  # time(lo) < budget <= time(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.decode_run_time(n, s0, mid, contexts) >= budget_s:
                hi = mid
            else:
                lo = mid
        return max(hi, 1)
