"""Batch records: what the simulator executed, in a form the kernels can replay.

File format (gzip-compressed JSON lines, `.jsonl.gz`):

- line 1, the header: ``{"format": "kvsim-batch-record", "version": 1, "allocator": "paged:16",
  "block_size": 16, "num_blocks": 2745, "model": {"name", "layers", "q_heads", "kv_heads", "head_dim",
  "dtype"}, "tp": 1, "gpu": "a100-40gb"}`` (heads are per GPU).
- then one line per executed iteration group:
  ``{"t": start_s, "dt": seconds, "steps": k, "seqs": [[seq_id, context, new_tokens], ...],
  "tables": {"seq_id": [block, ...]}, "copies": [["cow"|"swap_out"|"swap_in", src, dst], ...]}``.
  ``context`` is the sequence's length (tokens with KV) at the end of the group's first iteration,
  including that iteration's ``new_tokens``. A decode run has ``steps`` = k > 1 identical-shape
  iterations: in iteration i every context is ``context + i``, one new token each. ``tables`` lists
  only the sequences whose block table changed since they were last written (it stays valid until
  then); a table covers the sequence's context at the end of the group.
"""

from __future__ import annotations

import gzip
import json

from kvsim.config import PoolPlan, SimConfig
from kvsim.errors import ConfigError


class BatchRecorder:
    """A simulator observer that writes a batch record."""

    def __init__(self, path: str, cfg: SimConfig, pool: PoolPlan):
        m = cfg.model
        if m.is_hybrid or m.is_mla:
            raise ConfigError(f"--record-batches replays full-attention GQA kernels; {m.name} has "
                              + ("MLA layers" if m.is_mla else "sliding, chunked or mamba layers") +
                              ", which the kernels do not implement")
        self.path, self.cfg, self.pool = path, cfg, pool
        self._fh = None
        self._last: dict[int, list[int]] = {}
        self.groups = 0

    def _open(self, alloc, any_sid: int) -> None:
        if alloc.block_table(any_sid) is None:
            raise ConfigError(f"--record-batches needs a paged allocator (block tables); '{alloc.name}' has none")
        m, tp = self.cfg.model, self.cfg.tp
        layout = alloc.describe()
        header = {"format": "kvsim-batch-record", "version": 1, "allocator": alloc.name,
                  "block_size": layout["block_size"], "num_blocks": layout["num_blocks"],
                  "model": {"name": m.name, "layers": m.layers, "q_heads": m.q_heads // tp,
                            "kv_heads": m.kv_heads // tp, "head_dim": m.head_dim, "dtype": m.dtype},
                  "tp": tp, "gpu": self.cfg.gpu.name}
        import os

        self._tmp = f"{self.path}.{os.getpid()}.tmp"
        self._fh = gzip.open(self._tmp, "wt", encoding="utf-8")
        self._fh.write(json.dumps(header) + "\n")

    def __call__(self, t0: float, dt: float, batch: list, steps: int, copies: list, alloc) -> None:
        if self._fh is None:
            self._open(alloc, batch[0][0].sid)
        seqs, tables = [], {}
        for s, n in batch:
            seqs.append([s.sid, s.computed - (steps - 1) * n, n])
            table = alloc.block_table(s.sid)
            if self._last.get(s.sid) != table:
                self._last[s.sid] = table
                tables[str(s.sid)] = table
        rec = {"t": round(t0, 9), "dt": dt, "steps": steps, "seqs": seqs}
        if tables:
            rec["tables"] = tables
        if copies:
            rec["copies"] = [list(c) for c in copies]
        self._fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.groups += 1

    def close(self, keep: bool = True) -> None:
        """Finish the file (renamed into place only now, so a failed run leaves no partial record)."""
        import os

        if self._fh is not None:
            self._fh.close()
            self._fh = None
            if keep:
                os.replace(self._tmp, self.path)
            else:
                os.unlink(self._tmp)


def read_record(path: str):
    """(header, iterator over group dicts with `tables` resolved to the full current tables)."""
    try:
        fh = gzip.open(path, "rt", encoding="utf-8")
        header = json.loads(fh.readline())
    except (OSError, json.JSONDecodeError, EOFError) as e:
        raise ConfigError(f"{path}: not a kvsim batch record ({e})") from None
    if header.get("format") != "kvsim-batch-record":
        raise ConfigError(f"{path}: not a kvsim batch record (format {header.get('format')!r})")

    def groups():
        current: dict[str, list[int]] = {}
        with fh:
            for line in fh:
                g = json.loads(line)
                current.update(g.get("tables", {}))
                g["tables"] = {str(sid): current[str(sid)] for sid, _, _ in g["seqs"]}
                yield g

    return header, groups()
