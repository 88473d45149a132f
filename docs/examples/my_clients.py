"""Client processes in one file of your own (docs/autoscaling.md): impatient chat users who think between
requests, give up on an answer after a timeout (the replica frees its KV) and ask again, against the same users
with all the patience in the world.

    python docs/examples/my_clients.py [users]
"""

import sys

import numpy as np

from kvsim.fleet.cluster import ReplicaGroup
from kvsim.options import config_from_options
from kvsim.sim import ClientBehaviour, Fleet, behaving_client


def user(fleet, rng, requests=8, think_s=4.0, timeout_s=None, retries=0):
    """One user written by hand: a conversation of ``requests`` turns, each answer awaited up to ``timeout_s``."""
    for _ in range(requests):
        prompt, output = int(rng.integers(200, 3000)), int(rng.integers(20, 700))
        for _ in range(retries + 1):
            call = fleet.send(prompt, output)
            if timeout_s is None:
                yield call.done
            else:
                yield call.done | fleet.env.timeout(timeout_s)  # the answer or the timeout, the first to come
                if not call.ended:
                    fleet.cancel(call)  # gives up: the request is aborted at its replica's next iteration
                    yield call.done
            if call.status == "finished":
                break
        yield fleet.env.timeout(float(rng.exponential(think_s)))  # reads, thinks, types


def main(users: str = "40") -> None:
    cfg = config_from_options({"model": "llama-2-7b", "gpu": "a100-40gb"})
    for name, timeout_s, retries in (("patient", None, 0), ("impatient", 30.0, 1)):
        fleet = Fleet([], [ReplicaGroup("a100", cfg, "paged:16+prefix", 1)], "least-requests")
        rng = np.random.default_rng(7)
        for _ in range(int(users)):
            fleet.client(user(fleet, rng, timeout_s=timeout_s, retries=retries))
        # the same behaviour from kvsim's own client, for users who just want the knobs
        work = iter([(1000, 200)] * 4)
        fleet.client(behaving_client(fleet, work, ClientBehaviour(think_s=4.0, timeout_s=timeout_s), rng))
        run = fleet.run()
        s = run.summary
        print(
            f"{name:9s} {s['requests']} sent, {s['finished']} finished, {s['cancelled']} cancelled, "
            f"TTFT p99 {s['ttft_p99_s']:.2f} s, {s['throughput_tok_s']:.0f} output tok/s"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
