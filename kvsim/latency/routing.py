"""How a MoE router spreads a step's tokens over the experts, as the number of distinct experts they activate.

A fused-MoE layer reads the weights of every expert at least one of its tokens routes to, so its time at small
batches follows the distinct experts, not the tokens. How many that is depends on the router:

- ``uniform``: each token picks its top-k experts uniformly at random, independently of the other tokens:
  E x (1 - (1 - k/E)^T) of E experts for T tokens.
- ``balanced``: the tokens are spread as evenly as possible, min(E, T x k) (AIConfigurator's "balanced" rows,
  the most experts T tokens can touch).
- ``power-law-1.01`` / ``power-law-1.2``: expert popularity follows a power law, a few hot experts taking many
  tokens (AIConfigurator's "power_law_<alpha>" rows, its estimator's default being 1.2): the expected distinct
  experts of its generator, below.

AIConfigurator's power-law generator (its collector's ``power_law_logits_v3``; Apache-2.0) draws one load
x_i per expert from p(x) ~ x^-alpha on [1, 0.8 T] (when T x k > E, else on [0.01, 2]), scales the loads to sum
to T x k, rounds them, and tops the rounding deficit up one token at a time on the most loaded experts. Its
expected distinct experts, with the sum of the draws taken as E times their mean: the experts whose scaled
load rounds to at least one, E x P(x >= 0.5 / s) for the scale s = T k / (E mean), or, where rounding left a
deficit d of tokens, the d experts topped up if that is more. Against 400 draws of the generator this is
within 6% for T >= 2 (E = 32 to 896 experts, top-2 to 16; 10% at 3-4 tokens of 128 experts).
"""

from __future__ import annotations

import math
from functools import lru_cache

from kvsim.option_table import option_default

# routing name -> power-law exponent (None: not a power law)
ROUTINGS: dict[str, float | None] = {"uniform": None, "balanced": None, "power-law-1.01": 1.01, "power-law-1.2": 1.2}
DEFAULT_ROUTING: str = option_default("moe_routing")  # power-law-1.2 (docs/latency.md says why)
# AIConfigurator's name of each routing its MoE tables time
TABLE_ROUTINGS = {"balanced": "balanced", "power_law_1.01": "power-law-1.01", "power_law_1.2": "power-law-1.2"}


def active_experts(routing: str, tokens, experts, top_k):
    """Expected distinct experts (of ``experts``, each token routed to ``top_k``) that ``tokens`` tokens activate
    under ``routing`` (a name of :data:`ROUTINGS`); numbers or numpy arrays of equal shape."""
    if routing == "uniform":
        return experts * (1.0 - (1.0 - top_k / experts) ** tokens)
    import numpy as np

    if routing == "balanced":
        return np.minimum(experts, tokens * top_k)
    alpha = ROUTINGS[routing]
    if np.ndim(tokens) == 0 and np.ndim(experts) == 0 and np.ndim(top_k) == 0:
        return _power_law_active(float(tokens), float(experts), float(top_k), alpha)
    t, e, k = np.broadcast_arrays(np.asarray(tokens, float), np.asarray(experts, float), np.asarray(top_k, float))
    return np.array([_power_law_active(*key, alpha) for key in zip(t.ravel(), e.ravel(), k.ravel())]).reshape(t.shape)


@lru_cache(maxsize=1 << 16)  # shared by every layer, replica and table row asking for the same step size
def _power_law_active(tokens: float, experts: float, top_k: float, alpha: float) -> float:
    """Expected distinct experts of AIConfigurator's power-law generator (module docstring); top_k <= experts."""
    if tokens <= 0:
        return 0.0
    routed = tokens * top_k
    # (routed > experts needs tokens >= 2, as top_k <= experts: the range below is never empty)
    lo, hi = (1.0, 0.8 * tokens) if routed > experts else (0.01, 2.0)
    g = 1.0 - alpha
    span = hi**g - lo**g
    mean = (hi ** (2.0 - alpha) - lo ** (2.0 - alpha)) / (2.0 - alpha) / (span / g)
    scale = routed / (experts * mean)

    def above(y: float) -> float:  # P(x >= y)
        return 1.0 if y <= lo else 0.0 if y >= hi else (hi**g - y**g) / span

    rounded_up = experts * above(0.5 / scale)
    if rounded_up >= min(experts, routed):
        return min(experts, routed)
    import numpy as np

    # expected sum of the rounded loads: each expert counts j once its load reaches j - 0.5
    y = np.minimum((np.arange(1, math.ceil(hi * scale + 0.5) + 1) - 0.5) / scale, hi)
    total = experts * float(np.sum(np.where(y <= lo, 1.0, (hi**g - np.maximum(y, lo) ** g) / span)))
    deficit = routed - total
    active = max(rounded_up, min(experts, deficit)) if deficit > 0 else rounded_up
    return min(experts, routed, active)
