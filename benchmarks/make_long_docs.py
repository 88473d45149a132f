"""Write traces/long_docs.jsonl: a synthetic long-document trace for the hybrid-model comparison.

200 requests, Poisson arrivals at 1 req/s (more than one GPU serves: the queue grows, memory decides), prompts uniform in [32,768, 126,976] tokens (documents of
32k-124k tokens), outputs lognormal (mean 400, sigma 0.6) capped so that prompt + output <= 131,072 (the
context of Gemma 3 and gpt-oss). Seeded: the same file every time.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path


def main(out: str = "traces/long_docs.jsonl", n: int = 200, rate: float = 1.0, seed: int = 0) -> None:
    rng = random.Random(seed)
    t = 0.0
    mu = math.log(400) - 0.6**2 / 2
    lines = []
    for i in range(n):
        prompt = rng.randint(32768, 126976)
        output = max(1, min(131072 - prompt, round(rng.lognormvariate(mu, 0.6))))
        lines.append(
            json.dumps({"id": str(i), "arrival_s": round(t, 6), "prompt_tokens": prompt, "output_tokens": output})
        )
        t += rng.expovariate(rate)
    Path(out).write_text("\n".join(lines) + "\n")
    print(f"wrote {n} requests to {out}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
