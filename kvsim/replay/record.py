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
from kvsim.validation import is_finite, shown


class BatchRecorder:
    """A simulator observer that writes a batch record."""

    def __init__(self, path: str, cfg: SimConfig, pool: PoolPlan):
        m = cfg.model
        if m.is_hybrid or m.is_mla:
            raise ConfigError(
                f"--record-batches replays full-attention GQA kernels; {m.name} has "
                + ("MLA layers" if m.is_mla else "sliding, chunked or mamba layers")
                + ", which the kernels do not implement"
            )
        self.path, self.cfg, self.pool = path, cfg, pool
        self._fh = None
        self._last: dict[int, list[int]] = {}
        self.groups = 0

    def _open(self, alloc, any_sid: int) -> None:
        if alloc.block_table(any_sid) is None:
            raise ConfigError(f"--record-batches needs a paged allocator (block tables); '{alloc.name}' has none")
        m, tp = self.cfg.model, self.cfg.tp
        layout = alloc.describe()
        header = {
            "format": "kvsim-batch-record",
            "version": 1,
            "allocator": alloc.name,
            "block_size": layout["block_size"],
            "num_blocks": layout["num_blocks"],
            "model": {
                "name": m.name,
                "layers": m.layers,
                "q_heads": m.q_heads // tp,
                "kv_heads": m.kv_heads_per_gpu(tp),
                "head_dim": m.head_dim,
                "dtype": m.dtype,
            },
            "tp": tp,
            "gpu": self.cfg.gpu.name,
        }
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


_DIM = 1 << 16  # largest head count, head size or block size a record may name


def _whole(v, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def check_header(header, path: str) -> dict:
    """The header's fields, checked: errors name the field."""
    if not isinstance(header, dict) or header.get("format") != "kvsim-batch-record":
        got = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise ConfigError(f"{path}: not a kvsim batch record (format {got!r})")
    if header.get("version") != 1:
        raise ConfigError(f"{path}: batch record version {header.get('version')!r}; this kvsim reads version 1")
    for key, hi in (("block_size", _DIM), ("num_blocks", 1 << 40), ("tp", 4096)):
        if not _whole(header.get(key), 1, hi):
            raise ConfigError(
                f"{path}: header field '{key}' must be a whole number in [1, {hi:,}], got {header.get(key)!r}"
            )
    m = header.get("model")
    if not isinstance(m, dict):
        raise ConfigError(f"{path}: header field 'model' must be an object, got {m!r}")
    for key in ("layers", "q_heads", "kv_heads", "head_dim"):
        if not _whole(m.get(key), 1, _DIM):
            raise ConfigError(
                f"{path}: header field 'model.{key}' must be a whole number in [1, {_DIM:,}], got {m.get(key)!r}"
            )
    if m["q_heads"] % m["kv_heads"]:
        raise ConfigError(f"{path}: model.q_heads {m['q_heads']} is not a multiple of model.kv_heads {m['kv_heads']}")
    if not isinstance(m.get("dtype"), str):
        raise ConfigError(f"{path}: header field 'model.dtype' must be a name such as fp16, got {m.get('dtype')!r}")
    return header


def check_group(g, line: int, header: dict, path: str) -> dict:
    """One iteration group's fields, checked (tables resolved by the caller)."""
    where = f"{path}:{line}"
    if not isinstance(g, dict):
        raise ConfigError(f"{where}: an iteration group must be an object, got {type(g).__name__}")
    if not _whole(g.get("steps"), 1, 1 << 40):
        raise ConfigError(f"{where}: field 'steps' must be a whole number >= 1, got {g.get('steps')!r}")
    for key in ("t", "dt"):  # the simulated start and duration (seconds) the replay compares kernels with
        v = g.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_finite(v) or v < 0:
            raise ConfigError(f"{where}: field '{key}' must be a finite number of seconds >= 0, got {shown(v)}")
    seqs = g.get("seqs")
    if not isinstance(seqs, list) or not seqs:
        raise ConfigError(f"{where}: field 'seqs' must be a non-empty list of [seq_id, context, new_tokens]")
    for s in seqs:
        if not (
            isinstance(s, list)
            and len(s) == 3
            and _whole(s[0], 0, 1 << 62)
            and _whole(s[1], 1, 1 << 40)
            and _whole(s[2], 1, s[1])
        ):
            raise ConfigError(
                f"{where}: each of 'seqs' must be [seq_id, context >= 1, 1 <= new_tokens <= context], got {s!r}"
            )
    tables = g.get("tables", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{where}: field 'tables' must map sequence ids to block lists")
    n = header["num_blocks"]
    for sid, t in tables.items():
        if not isinstance(t, list) or not all(_whole(b, 0, n - 1) for b in t):
            raise ConfigError(f"{where}: the table of sequence {sid} must list block ids in [0, {n - 1}]")
    return g


def read_record(path: str):
    """(header, iterator over group dicts with `tables` resolved to the full current tables). Every field is
    checked as it is read: an error names the file, the line and the field."""
    try:
        fh = gzip.open(path, "rt", encoding="utf-8")
        header = json.loads(fh.readline())
    except (OSError, ValueError, RecursionError, EOFError) as e:  # ValueError: bad JSON, UTF-8 or a huge integer
        raise ConfigError(f"{path}: not a kvsim batch record ({e})") from None
    check_header(header, path)
    B = header["block_size"]

    def groups():
        current: dict[str, list[int]] = {}
        with fh:
            line = 1
            while True:
                try:
                    text = fh.readline()
                except (OSError, EOFError, UnicodeDecodeError) as e:
                    raise ConfigError(f"{path}:{line + 1}: unreadable ({e})") from None
                if not text:
                    return
                line += 1
                try:
                    g = json.loads(text)
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{path}:{line}: not JSON ({e.msg})") from None
                except (RecursionError, ValueError) as e:
                    raise ConfigError(f"{path}:{line}: not readable JSON ({e})") from None
                check_group(g, line, header, path)
                current.update(g.get("tables", {}))
                resolved = {}
                for sid, ctx, _ in g["seqs"]:
                    table = current.get(str(sid))
                    if table is None:
                        raise ConfigError(f"{path}:{line}: sequence {sid} has no block table yet")
                    if len(table) * B < ctx + g["steps"] - 1:
                        raise ConfigError(
                            f"{path}:{line}: sequence {sid}'s context {ctx + g['steps'] - 1} is longer "
                            f"than its table ({len(table)} blocks of {B})"
                        )
                    resolved[str(sid)] = table
                g["tables"] = resolved
                yield g

    return header, groups()
