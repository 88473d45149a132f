"""How long a new replica takes before it serves: its weights read from storage, then a fixed part (the process
and CUDA context, torch.compile, CUDA-graph capture, the KV-cache profile and warm-up).

    seconds = weight bytes of the replica / (load_gbs x 1e9) + fixed_s

The defaults (docs/autoscaling.md says where they come from) describe weights read from a node's local NVMe
or a warm page cache at 2 GB/s and 60 s for the rest; a replica whose weights come over the network from
object storage is slower (``load_gbs`` 0.5-1), one restarted from a warm cache with its compile cache faster.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.validation import NON_NEGATIVE, POSITIVE, require


@dataclass(frozen=True)
class Startup:
    load_gbs: float = 2.0  # GB/s the replica reads its weights at (all its GPUs together)
    fixed_s: float = 60.0  # seconds besides the weights: process, compile, CUDA graphs, profile, warm-up

    def __post_init__(self) -> None:
        require(self.load_gbs, POSITIVE, "startup load_gbs")
        require(self.fixed_s, NON_NEGATIVE, "startup fixed_s")

    def seconds(self, cfg) -> float:
        """Seconds from asking for a replica of ``cfg`` (a SimConfig) to its first request."""
        return replica_weight_bytes(cfg) / (self.load_gbs * 1e9) + self.fixed_s


def replica_weight_bytes(cfg) -> int:
    """Bytes of weights one replica holds on all its GPUs (what it reads when it starts): every GPU of every
    data-parallel rank."""
    stage = cfg.memory_model
    return int(stage.gpu_weight_bytes(cfg.tp, cfg.dp, cfg.gpu)) * cfg.gpus * cfg.dp
