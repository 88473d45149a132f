"""Small builders shared by tests."""

from kvsim.config import SchedulerConfig
from kvsim.latency.base import LatencyModel, StepShape
from kvsim.trace.request import Request


class FixedLatency(LatencyModel):
    """Every iteration takes `prefill_s` if it computes more than one token per sequence, else `decode_s`."""

    name = "fixed"

    def __init__(self, prefill_s: float = 0.1, decode_s: float = 0.01):
        self.prefill_s, self.decode_s = prefill_s, decode_s

    def step_time(self, shape: StepShape) -> float:
        return self.prefill_s if shape.new_tokens > shape.num_seqs else self.decode_s


def req(i, t, p, o, **kw) -> Request:
    return Request(str(i), float(t), p, o, **kw)


def sched(max_model_len=4096, **kw) -> SchedulerConfig:
    return SchedulerConfig(max_model_len=max_model_len, **kw).validate()


def gemma2_config(**over) -> dict:
    """Gemma-2-9B's Hugging Face config.json fields (google/gemma-2-9b), with ``over`` replacing or adding some."""
    return {
        "model_type": "gemma2",
        "num_hidden_layers": 42,
        "hidden_size": 3584,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "intermediate_size": 14336,
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16",
        "sliding_window": 4096,
        "tie_word_embeddings": True,
        **over,
    }


def assert_same_run(a, b) -> None:
    """Two runs (RunOutput or FleetOutput) gave the same requests and summary, bit for bit (wall time aside;
    NaN equals NaN)."""
    import math

    assert a.requests.equals(b.requests)
    sa = {k: v for k, v in a.summary.items() if k != "wall_s"}
    sb = {k: v for k, v in b.summary.items() if k != "wall_s"}
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k] == sb[k] or (isinstance(sa[k], float) and math.isnan(sa[k]) and math.isnan(sb[k])), k


def chat_head(folder, n: int):
    """The first ``n`` requests of traces/chat.jsonl as a trace file in ``folder`` (its path)."""
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[1] / "traces/chat.jsonl").read_text().splitlines()[:n]
    path = Path(folder) / f"chat-{n}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def chaos(fleet, events):
    """A process (kvsim.sim): at each (time s, "add" | "remove" | "fail", group) in time order, add a replica of
    the group, or take one away or fail one while the group keeps more than one."""
    for t, what, group in sorted(events):
        yield fleet.env.timeout(max(0.0, t - fleet.now))
        if what == "add":
            fleet.add_replica(group)
        elif what == "remove" and fleet.count(group) > 1:
            fleet.remove_replica(group)
        elif what == "fail" and fleet.count(group) > 1:
            fleet.fail_replica(group)


def send_then_cancel(fleet, calls, at, prompt, output, cancel_after, **fields):
    """A client process (kvsim.sim): at ``at`` s send one request (its Call appended to ``calls``), cancel it
    after ``cancel_after`` s unless it ended first (None: never), and wait for its end."""
    yield fleet.env.timeout(at)
    call = fleet.send(prompt, output, **fields)
    calls.append(call)
    if cancel_after is not None:
        yield call.done | fleet.env.timeout(cancel_after)
        fleet.cancel(call)
    yield call.done
