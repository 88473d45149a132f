"""Kernel measurements from NVIDIA AIConfigurator's performance tables, in kvsim's per-operation terms.

AIConfigurator (github.com/ai-dynamo/aiconfigurator, Apache-2.0) ships per-system tables measured with the
serving frameworks' own kernels. This module reads the vLLM ones from a folder in its layout::

    <root>/<system>/attention/vllm/<version>/generation_attention_perf.{parquet,csv,txt}
    <root>/<system>/attention/vllm/<version>/context_attention_perf.{parquet,csv,txt}
    <root>/<system>/comm/vllm/<version>/custom_allreduce_perf.{parquet,csv,txt}
    <root>/<system>/comm/nccl/<version>/nccl_perf.{parquet,csv,txt}
    <root>/<system>/gemm/vllm/<version>/gemm_perf.{parquet,csv,txt}
    <root>/<system>.yaml                      (optional: the system's datasheet numbers)

(``root`` may also be the ``<system>`` folder itself, or ``"installed"``: the ``systems/data`` folder of the
installed pip package ``aiconfigurator-core``), and returns them per layer and per GPU in SI units:

- decode attention: one attention layer's decode of ``batch_size`` sequences, each attending to
  ``isl + step`` cached tokens (the generation table's ``isl`` is the prompt, ``step`` the tokens decoded
  since; latency grows with isl + step at the KV-streaming rate);
- prefill attention: ``batch_size`` chunks of ``isl`` new tokens on an empty cache (causal; latency grows
  with isl^2 at a FlashAttention throughput);
- all-reduce among n GPUs of a bf16 message. AIConfigurator's ``message_size`` is an element count (its
  collectors build a tensor of that many elements; ``nccl_dtype``/``allreduce_dtype`` give the element
  size), so bytes = elements x 2 here. ``custom_allreduce_perf`` has vLLM's own
  ``tensor_model_parallel_all_reduce`` captured in a CUDA graph (``vllm_graph``: the custom all-reduce for
  small messages, NCCL past its size limit) and run eagerly (``vllm_eager``, which also times an input
  ``clone()`` per call, so it is not used); ``nccl_perf`` has nccl-tests' all_reduce. With the default
  ``all_reduce_backend="vllm"`` each (n, size) takes the CUDA-graph time where it is measured and no slower
  than NCCL's, NCCL's otherwise (vLLM's decode steps run in CUDA graphs; above its custom all-reduce limit
  vLLM calls NCCL, and the two tables then agree within a few percent).

- GEMMs (bf16) of m x k activations by k x n weights.

:func:`fit_aic` fits the per-operation model's decode and prefill attention parameters, the all-reduce
table (two lines per group size: custom all-reduce and NCCL) and, when read, the GEMM parameters from them; :func:`validate_aic` reports predicted / measured in-sample and held out
(head layouts the fit did not see; message sizes it did not see) by regime; :func:`evaluate_calibration`
the same ratios for any calibration (a shipped one, say).
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from kvsim.calibrate.fits import fit_bounded, fit_decode_params
from kvsim.errors import ConfigError
from kvsim.hardware import GpuSpec
from kvsim.hardware.gpus import GPU_PRESETS
from kvsim.releases import release_key
from kvsim.validation import MAX_GBS, MAX_GIB, MIN_GBS, Number, require
from kvsim.latency.calibration import (
    GEMM_QUANT,
    MOE_QUANT,
    Calibration,
    DecodeAttentionParams,
    GemmParams,
    LinkParams,
    MoeParams,
    PrefillAttentionParams,
)

# AIConfigurator system names -> kvsim GPU presets (each preset's aic_system)
SYSTEM_GPUS = {g.aic_system: g.name for g in GPU_PRESETS.values() if g.aic_system}
# a system kvsim has no preset for is described by the yaml next to its tables (mem_capacity, mem_bw,
# bfloat16_tc_flops, pcie_bw)
SMS_BY_SM_VERSION = {80: 108, 86: 84, 89: 142, 90: 132, 100: 148, 103: 148, 120: 188}

TABLES = {  # kind -> (framework folder, table name)
    "decode": ("attention/vllm", "generation_attention_perf"),
    "prefill": ("attention/vllm", "context_attention_perf"),
    "custom_allreduce": ("comm/vllm", "custom_allreduce_perf"),
    "nccl": ("comm/nccl", "nccl_perf"),
    "gemm": ("gemm/vllm", "gemm_perf"),
    "moe": ("moe/vllm", "moe_perf"),
    "mla_decode": ("mla/vllm", "mla_generation_module_perf"),
    "mla_prefill": ("mla/vllm", "mla_context_module_perf"),
}
_EXTS = (".parquet", ".csv", ".txt")
_ATTN_COLUMNS = (
    "batch_size",
    "isl",
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "kv_cache_dtype",
    "step",
    "latency",
)
_KV_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "fp16": 2,
    "bf16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "int8": 1,
    "float32": 4,
    "float": 4,
}
SIZE_BINS = ((0, 64 << 10), (64 << 10, 1 << 20), (1 << 20, 16 << 20), (16 << 20, 1 << 50))
SIZE_BIN_NAMES = ("<64KiB", "64KiB-1MiB", "1-16MiB", ">=16MiB")


# --- locating and reading tables ------------------------------------------------------------------
def _version_key(v: str):
    return release_key(v), v


# pip packages that carry the tables under <package>/systems/data (newest first: aiconfigurator-core is the
# home of the data from 0.11 on)
TABLE_PACKAGES = ("aiconfigurator_core", "aiconfigurator")
INSTALLED = "installed"  # ``--aic`` without a folder: the tables of the installed package


def installed_tables() -> Path:
    """The ``systems/data`` folder of an installed AIConfigurator package, found without importing it."""
    from importlib.util import find_spec

    for name in TABLE_PACKAGES:
        try:
            spec = find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            d = Path(loc) / "systems" / "data"
            if d.is_dir():
                return d
    raise ConfigError(
        "no AIConfigurator tables installed: `pip install aiconfigurator-core` (its systems/data "
        "folder holds them), or pass a folder in its layout with --aic DIR"
    )


def system_root(roots, system: str) -> Path:
    """The first of ``roots`` (folders in AIConfigurator's layout, or INSTALLED) that has ``system``."""
    tried = []
    for r in roots:
        r = installed_tables() if str(r) == INSTALLED else Path(r)
        if (r / system).is_dir():
            return r
        tried.append(str(r))
    raise ConfigError(f"no {system} folder of AIConfigurator tables in {', '.join(tried) or 'no folder'}")


def system_dir(root: str | Path, system: str | None = None) -> Path:
    """The ``<system>`` folder: ``root`` itself if it holds attention/ or comm/, else ``root/system`` (or the
    only system folder under root)."""
    root = installed_tables() if str(root) == INSTALLED else Path(root)
    if not root.is_dir():
        raise ConfigError(f"{root}: not a folder of AIConfigurator tables")
    if system is None and ((root / "attention").is_dir() or (root / "comm").is_dir()):
        return root
    if system is not None:
        d = root / system
        if not d.is_dir():
            raise ConfigError(
                f"{d}: no such AIConfigurator system folder (systems here: {', '.join(_systems(root)) or 'none'})"
            )
        return d
    found = _systems(root)
    if len(found) != 1:
        raise ConfigError(f"{root}: say which system to read (systems here: {', '.join(found) or 'none'})")
    return root / found[0]


def _systems(root: Path) -> list[str]:
    return sorted(
        p.name for p in root.iterdir() if p.is_dir() and ((p / "attention").is_dir() or (p / "comm").is_dir())
    )


def _table_file(folder: Path, table: str) -> Path | None:
    for ext in _EXTS:
        if (folder / (table + ext)).is_file():
            return folder / (table + ext)
    return None


def versions_present(sysdir: Path, kind: str) -> list[str]:
    """Versions (oldest first) whose folder holds the table of ``kind`` itself (not only a reuse note)."""
    sub, table = TABLES[kind]
    base = Path(sysdir) / sub
    if not base.is_dir():
        return []
    return sorted((p.name for p in base.iterdir() if p.is_dir() and _table_file(p, table)), key=_version_key)


def locate_table(sysdir: Path, kind: str, version: str | None = None) -> tuple[Path, str, str]:
    """(file, version, note) of the table of ``kind``: the newest version that has it, or ``version``'s; a
    version folder that only has a ``reuse.yaml`` naming another version's table is followed to it, and a
    version without the table (or without a folder) takes the newest earlier version's."""
    sub, table = TABLES[kind]
    base = Path(sysdir) / sub
    present = versions_present(sysdir, kind)
    if version is None:
        if not present:
            raise ConfigError(f"{base}: no {table} table (.parquet/.csv/.txt) in any version folder")
        v = present[-1]
        return _table_file(base / v, table), v, ""
    same = (
        [p.name for p in base.iterdir() if p.is_dir() and release_key(p.name) == release_key(version)]
        if base.is_dir()
        else []
    )
    if same:  # 0.19 names the folder 0.19.0
        version = sorted(same, key=_version_key)[-1]
    folder = base / version
    f = _table_file(folder, table)
    if f:
        return f, version, ""
    donor = _reuse_donor(folder / "reuse.yaml", table)
    if donor and _table_file(base / donor, table):
        return (
            _table_file(base / donor, table),
            donor,
            f"{table} {version}: reuses {donor}'s table ({folder / 'reuse.yaml'})",
        )
    # a release that was not measured again runs the kernels of the newest one before it that was
    earlier = [v for v in present if release_key(v) <= release_key(version)]
    if earlier:
        v = earlier[-1]
        return _table_file(base / v, table), v, f"{table} {version}: not measured; {v}'s table, the newest before it"
    raise ConfigError(
        f"{folder}: no {table} table (.parquet/.csv/.txt) at or before {version}; versions that have "
        f"one: {', '.join(present) or 'none'}"
    )


def _reuse_donor(path: Path, table: str) -> str | None:
    if not path.is_file():
        return None
    try:
        import yaml

        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for r in doc.get("reuse") or []:
            if r.get("table") == table and r.get("from_version"):
                return str(r["from_version"])
    except Exception:  # a malformed reuse note is no table: the caller reports the table missing
        return None
    return None


def read_table(path: Path, needed=()):
    """A table as a DataFrame (parquet, or CSV/AIConfigurator .txt with a header line); errors name the file."""
    import pandas as pd

    path = Path(path)
    try:
        if path.suffix == ".parquet":
            try:
                import pyarrow  # noqa: F401  (pandas needs it for parquet)
            except ImportError:
                raise ConfigError(f"{path}: reading parquet needs pyarrow (pip install 'kvsim[parquet]')") from None
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path, skipinitialspace=True)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"{path}: unreadable table ({type(e).__name__}: {e})") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}")
    for c in needed:
        if c in (
            "kv_cache_dtype",
            "backend",
            "op_name",
            "nccl_dtype",
            "allreduce_dtype",
            "gemm_dtype",
            "moe_dtype",
            "distribution",
            "model",
            "mla_dtype",
            "gemm_type",
        ):
            continue
        v = pd.to_numeric(df[c], errors="coerce")
        if v.isna().any():
            i = int(v.isna().to_numpy().nonzero()[0][0])
            raise ConfigError(f"{path}: row {i + 1}: column '{c}' is not a number ({df[c].iloc[i]!r})")
        df[c] = v
    return df


def gpu_for_system(system: str, sysdir: Path | None = None) -> GpuSpec:
    """The kvsim GPU preset of an AIConfigurator system, or, for a system kvsim has no preset for, a GPU
    described by the system's yaml."""
    name = system.lower()
    if name in SYSTEM_GPUS:
        return GPU_PRESETS[SYSTEM_GPUS[name]]
    yaml_gpu, path = _system_yaml(sysdir, name) if sysdir is not None else ({}, None)
    if not {"mem_bw", "bfloat16_tc_flops", "mem_capacity"} <= set(yaml_gpu):
        raise ConfigError(
            f"AIConfigurator system '{system}' has no kvsim GPU preset (known: "
            f"{', '.join(sorted(SYSTEM_GPUS))}) and no {system}.yaml with its peaks"
        )
    peaks = {
        key: _peak(yaml_gpu[key], rule, f"{path}: {where}")
        for key, (where, rule) in SYSTEM_PEAKS.items()
        if key in yaml_gpu
    }
    sm = int(peaks.get("sm_version", 0))
    g = GpuSpec(name.replace("_", "-"), 0, 0.0, 0.0, 32e9, SMS_BY_SM_VERSION.get(sm, 108), f"sm{sm or '?'}")
    over = {}
    for key, fld in (
        ("mem_capacity", "memory_bytes"),
        ("mem_bw", "hbm_bandwidth"),
        ("bfloat16_tc_flops", "bf16_flops"),
        ("pcie_bw", "pcie_bandwidth"),
    ):
        if key in peaks:
            over[fld] = type(getattr(g, fld))(peaks[key])
    return replace(g, **over)


# a system yaml's peaks: (where in the file, the rule); bounds that keep every time kvsim derives finite
SYSTEM_PEAKS = {
    "mem_capacity": ("gpu.mem_capacity", Number(min=1 << 20, max=MAX_GIB * (1 << 30))),  # bytes
    "mem_bw": ("gpu.mem_bw", Number(min=MIN_GBS * 1e9, max=MAX_GBS * 1e9)),  # bytes/s
    "bfloat16_tc_flops": ("gpu.bfloat16_tc_flops", Number(min=1e9, max=1e20)),  # FLOP/s
    "pcie_bw": ("node.pcie_bw", Number(min=MIN_GBS * 1e9, max=MAX_GBS * 1e9)),
    "sm_version": ("gpu.sm_version", Number(integer=True, min=0, max=10_000)),
}


def _peak(v, rule, name: str):
    """A system yaml's number (a numeric string too: YAML reads 1e12, without a dot, as text), or ConfigError naming
    the file and field."""
    if isinstance(v, str) and v.strip().isascii():
        try:
            v = float(v) if not v.strip().lstrip("+-").isdigit() else int(v)
        except ValueError:
            pass
    if isinstance(v, float) and rule.integer and v.is_integer():
        v = int(v)
    require(v, rule, name)
    return v


def _system_yaml(sysdir: Path, system: str) -> tuple[dict, Path | None]:
    """The system yaml's gpu section (with node.pcie_bw as pcie_bw), and the file ({} and None: none)."""
    # the shared folder keeps <system>.yaml beside <system>/, the pip package in systems/ above data/<system>/
    for p in (sysdir.parent / f"{system}.yaml", sysdir / f"{system}.yaml", sysdir.parent.parent / f"{system}.yaml"):
        if p.is_file():
            try:
                import yaml

                doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
            except Exception as e:
                raise ConfigError(f"{p}: unreadable system yaml ({type(e).__name__}: {reprlib.repr(str(e))})") from None
            if not isinstance(doc, dict):
                raise ConfigError(f"{p}: expected a mapping with the system's gpu: (and node:) numbers")
            gpu, node = doc.get("gpu"), doc.get("node")
            for key, v in (("gpu", gpu), ("node", node)):
                if v is not None and not isinstance(v, dict):
                    raise ConfigError(f"{p}: '{key}' must be a mapping of the system's numbers")
            out = dict(gpu or {})
            if (node or {}).get("pcie_bw"):
                out["pcie_bw"] = node["pcie_bw"]
            return out, p
    return {}, None


@dataclass(frozen=True)
class AicData:
    """Measurements of one system in per-operation form (seconds, bytes; per layer, per GPU).

    decode: num_seqs, context (tokens per sequence), kv_tokens (all sequences), q_heads, kv_heads,
    head_dim, kv_dtype_bytes, kv_bytes (one layer's KV read), seconds, kernel.
    prefill: num_chunks, new_tokens (per chunk), cached (0), q_heads, kv_heads, head_dim, kv_dtype_bytes,
    seconds, kernel.
    all_reduce: num_gpus, message_bytes, seconds, backend (the one chosen), graph_s, nccl_s, eager_s (NaN
    where not measured).
    gemm: m, n, k, seconds (bf16 only).
    """

    system: str
    gpu: GpuSpec
    root: str
    decode: object = None
    prefill: object = None
    all_reduce: object = None
    gemm: object = None  # m, n, k (bf16 GEMMs of m x k activations by k x n weights), seconds
    # tokens, hidden, inter (per rank), experts, topk, tp, ep, routing, seconds (bf16; every routing kvsim models)
    moe: object = None
    moe_quant: dict = field(default_factory=dict)  # expert dtype (MOE_QUANT) -> rows as ``moe``, of its kernels
    files: dict = field(default_factory=dict)  # table -> path read
    versions: dict = field(default_factory=dict)  # table -> version read
    notes: list = field(default_factory=list)
    mla_decode: object = None  # model (preset), heads (per GPU), tokens, context, seconds: one MLA layer's decode
    mla_prefill: object = None  # the same for prefill: ``tokens`` sequences of ``context`` new tokens each
    exchange: object = None  # num_gpus, message_bytes (the gathered buffer), seconds: NCCL all-gather + reduce-scatter
    gemm_quant: dict = field(default_factory=dict)  # weight scheme (GEMM_QUANT) -> rows as ``gemm``, of its kernels

    def describe(self) -> str:
        return "; ".join(f"{_rel(self, t)} ({v})" for t, v in self.versions.items())


def _attention_rows(df, path):
    """Full-attention, bf16-compute, beam-1 rows (sliding-window and other set-ups left out), their KV element
    bytes, and a note counting the rows skipped as unusable (an unknown KV dtype, a latency that is not
    positive), or ''."""
    keep = np.ones(len(df), dtype=bool)
    if "window_size" in df.columns:
        keep &= df["window_size"].to_numpy() == 0
    if "beam_width" in df.columns:
        keep &= df["beam_width"].to_numpy() == 1
    if "attn_dtype" in df.columns:
        keep &= df["attn_dtype"].astype(str).isin(["bfloat16", "float16"]).to_numpy()
    df = df[keep]
    dt = df["kv_cache_dtype"].astype(str).str.strip().str.lower()
    known = dt.isin(_KV_BYTES).to_numpy()
    lat = df["latency"].to_numpy(float)
    timed = np.isfinite(lat) & (lat > 0)
    good = known & timed
    reasons = (
        [f"{int((~known).sum())} with an unknown KV dtype ({', '.join(sorted(set(dt[~known])))})"]
        if not known.all()
        else []
    )
    reasons += [f"{int((known & ~timed).sum())} whose latency is not positive"] if (known & ~timed).any() else []
    note = f"{path}: skipped {'; '.join(reasons)}" if reasons else ""
    return df[good], dt[good].map(_KV_BYTES).to_numpy(int), note


def read_decode(path: Path):
    """(decode rows in per-layer form, a note on rows skipped or '')."""
    import pandas as pd

    df = read_table(path, _ATTN_COLUMNS)
    df, kvb, note = _attention_rows(df, path)
    ctx = (df["isl"] + df["step"]).to_numpy(np.int64)
    n = df["batch_size"].to_numpy(np.int64)
    kvh = df["num_key_value_heads"].to_numpy(np.int64)
    hd = df["head_dim"].to_numpy(np.int64)
    out = pd.DataFrame(
        {
            "num_seqs": n,
            "context": ctx,
            "kv_tokens": n * ctx,
            "q_heads": df["num_heads"].to_numpy(np.int64),
            "kv_heads": kvh,
            "head_dim": hd,
            "kv_dtype_bytes": kvb,
            "kv_bytes": (n * ctx * 2 * kvh * hd * kvb).astype(float),
            "seconds": df["latency"].to_numpy(float) * 1e-3,
            "kernel": df["kernel_source"].astype(str).to_numpy() if "kernel_source" in df.columns else "",
        }
    )
    if out.empty:
        raise ConfigError(f"{path}: no usable full-attention decode rows")
    return out.reset_index(drop=True), note


def read_prefill(path: Path):
    """(prefill rows in per-layer form, a note on rows skipped or '')."""
    import pandas as pd

    df = read_table(path, _ATTN_COLUMNS)
    df, kvb, note = _attention_rows(df, path)
    out = pd.DataFrame(
        {
            "num_chunks": df["batch_size"].to_numpy(np.int64),
            "new_tokens": df["isl"].to_numpy(np.int64),
            "cached": df["step"].to_numpy(np.int64),
            "q_heads": df["num_heads"].to_numpy(np.int64),
            "kv_heads": df["num_key_value_heads"].to_numpy(np.int64),
            "head_dim": df["head_dim"].to_numpy(np.int64),
            "kv_dtype_bytes": kvb,
            "seconds": df["latency"].to_numpy(float) * 1e-3,
            "kernel": df["kernel_source"].astype(str).to_numpy() if "kernel_source" in df.columns else "",
        }
    )
    if out.empty:
        raise ConfigError(f"{path}: no usable full-attention prefill rows")
    return out.reset_index(drop=True), note


def _elem_bytes(series, path) -> np.ndarray:
    s = series.astype(str).str.strip().str.lower()
    bad = sorted(set(s) - set(_KV_BYTES))
    if bad:
        raise ConfigError(f"{path}: unknown element dtype(s) {', '.join(bad)}")
    return s.map(_KV_BYTES).to_numpy(int)


def nccl_half_rows(nccl: Path):
    """An NCCL table's half-precision rows (nccl-tests' sizes are element counts), ``op_name`` stripped."""
    n = read_table(nccl, ("num_gpus", "message_size", "latency", "op_name"))
    if "nccl_dtype" in n.columns:
        n = n[n["nccl_dtype"].astype(str).str.strip().str.lower().isin(["half", "bfloat16", "float16"])]
    return n.assign(op_name=n["op_name"].astype(str).str.strip())


def read_all_reduce(custom: Path | None, nccl: Path | None, backend: str = "vllm", nccl_rows=None):
    """All-reduce rows (num_gpus, message_bytes, seconds, backend, graph_s, nccl_s, eager_s) from vLLM's
    custom_allreduce table and/or NCCL's all_reduce rows; ``backend``: "vllm" (the CUDA-graph time where
    measured and no slower than NCCL, else NCCL), "vllm_graph" (the CUDA-graph time as measured, NCCL only
    where it is missing) or "nccl". ``nccl_rows``: :func:`nccl_half_rows` of ``nccl``, if already read."""
    import pandas as pd

    if backend not in ("vllm", "vllm_graph", "nccl"):
        raise ConfigError(f"all-reduce backend must be vllm, vllm_graph or nccl, not {backend!r}")
    parts = []
    if custom is not None:
        c = read_table(custom, ("num_gpus", "message_size", "latency", "backend"))
        eb = _elem_bytes(c["allreduce_dtype"], custom) if "allreduce_dtype" in c.columns else np.full(len(c), 2)
        c = c.assign(
            message_bytes=c["message_size"].to_numpy(np.int64) * eb,
            which=c["backend"].astype(str).str.strip().map({"vllm_graph": "graph_s", "vllm_eager": "eager_s"}),
        )
        parts.append(c.dropna(subset=["which"]))
    if nccl is not None:
        n = nccl_half_rows(nccl) if nccl_rows is None else nccl_rows
        n = n[n["op_name"] == "all_reduce"]
        if n.empty:
            raise ConfigError(f"{nccl}: no half-precision all_reduce rows")
        parts.append(n.assign(message_bytes=n["message_size"].to_numpy(np.int64) * 2, which="nccl_s"))
    if not parts:
        raise ConfigError("no all-reduce tables to read")
    df = pd.concat([p[["num_gpus", "message_bytes", "latency", "which"]] for p in parts], ignore_index=True)
    df = df[np.isfinite(df["latency"].to_numpy(float)) & (df["latency"].to_numpy(float) > 0)]
    wide = (
        df.pivot_table(index=["num_gpus", "message_bytes"], columns="which", values="latency", aggfunc="median") * 1e-3
    )
    for col in ("graph_s", "nccl_s", "eager_s"):
        if col not in wide.columns:
            wide[col] = np.nan
    wide = wide.reset_index()
    g, nc = wide["graph_s"].to_numpy(float), wide["nccl_s"].to_numpy(float)
    if backend == "nccl":
        use_graph = np.zeros(len(wide), dtype=bool)
    elif backend == "vllm_graph":
        use_graph = np.isfinite(g)
    else:
        use_graph = np.isfinite(g) & ~(nc < g)
    sec = np.where(use_graph, g, nc)
    out = pd.DataFrame(
        {
            "num_gpus": wide["num_gpus"].to_numpy(np.int64),
            "message_bytes": wide["message_bytes"].to_numpy(np.int64),
            "seconds": sec,
            "backend": np.where(use_graph, "vllm_graph", "nccl"),
            "graph_s": g,
            "nccl_s": nc,
            "eager_s": wide["eager_s"].to_numpy(float),
        }
    )
    return out[np.isfinite(out["seconds"])].sort_values(["num_gpus", "message_bytes"]).reset_index(drop=True)


def read_exchange(rows):
    """A MoE layer's exchange among data-parallel ranks as NCCL measures its two halves: per (num_gpus, buffer
    bytes), the all-gather's plus the reduce-scatter's median seconds, from :func:`nccl_half_rows` (the sizes
    are the whole buffer's elements). None where the table has not both."""
    lat = rows["latency"].to_numpy(float)
    n = rows[rows["op_name"].isin(["all_gather", "reduce_scatter"]) & np.isfinite(lat) & (lat > 0)]
    if n.empty:
        return None
    wide = n.pivot_table(
        index=["num_gpus", "message_size"], columns="op_name", values="latency", aggfunc="median"
    ).dropna()
    if wide.empty or len(wide.columns) < 2:
        return None
    wide = wide.reset_index()
    import pandas as pd

    return pd.DataFrame(
        {
            "num_gpus": wide["num_gpus"].to_numpy(np.int64),
            "message_bytes": wide["message_size"].to_numpy(np.int64) * 2,
            "seconds": (wide["all_gather"] + wide["reduce_scatter"]).to_numpy(float) * 1e-3,
        }
    )


def read_aic(
    root: str | Path,
    system: str | None = None,
    version: str | None = None,
    nccl_version: str | None = None,
    kinds=("decode", "prefill", "all_reduce", "gemm", "moe", "mla_decode", "mla_prefill"),
    all_reduce_backend: str = "vllm",
    gpu: GpuSpec | None = None,
) -> AicData:
    """Read one system's vLLM attention and all-reduce tables (see the module docstring).

    ``version``: the vLLM version folder (default: the newest that has each table); ``nccl_version``: the
    NCCL folder (default: the newest with all_reduce rows); ``kinds``: which of decode / prefill / all_reduce
    / gemm to read (each one asked for must be there, except gemm: without its table the notes say so).
    All-reduce needs the custom_allreduce table or NCCL's. Rows skipped as unusable are counted in the notes.
    """
    sysdir = system_dir(root, system)
    name = sysdir.name
    gpu = gpu or gpu_for_system(name, sysdir)
    files, versions, notes, got = {}, {}, [], {}
    for kind, reader in (("decode", read_decode), ("prefill", read_prefill)):
        if kind in kinds:
            f, v, note = locate_table(sysdir, kind, version)
            got[kind], skipped = reader(f)
            files[TABLES[kind][1]], versions[TABLES[kind][1]] = str(f), v
            notes += [n for n in (note, skipped) if n]
    if "all_reduce" in kinds:
        custom = nccl = None
        try:
            custom, v, note = locate_table(sysdir, "custom_allreduce", version)
            files["custom_allreduce_perf"], versions["custom_allreduce_perf"] = str(custom), v
            notes += [note] if note else []
        except ConfigError as e:
            if all_reduce_backend != "nccl":
                notes.append(f"no vLLM custom all-reduce table ({e}); NCCL only")
        nccl, nv = _nccl_table(sysdir, nccl_version)
        if nccl is not None:
            files["nccl_perf"], versions["nccl_perf"] = str(nccl), nv
        if custom is None and nccl is None:
            raise ConfigError(
                f"{sysdir}: no all-reduce table (comm/vllm/<version>/custom_allreduce_perf or "
                "comm/nccl/<version>/nccl_perf with all_reduce rows)"
            )
        if all_reduce_backend == "nccl" and nccl is None:
            raise ConfigError(f"{sysdir / 'comm' / 'nccl'}: no nccl_perf table with all_reduce rows")
        rows = nccl_half_rows(nccl) if nccl is not None else None  # read once: all-reduce and exchange rows
        got["all_reduce"] = read_all_reduce(
            custom if all_reduce_backend != "nccl" else None, nccl, all_reduce_backend, rows
        )
        if rows is not None:
            got["exchange"] = read_exchange(rows)
            if got["exchange"] is None:
                notes.append(
                    f"{nccl}: no all_gather + reduce_scatter rows; the data-parallel MoE exchange is "
                    "priced on the NCCL all-reduce line"
                )
    # optional tables: without one, its parameters stay the base calibration's
    for kind, reader, what in (
        ("gemm", read_gemm, "GEMMs"),
        ("moe", read_moe, "MoE layers"),
        ("mla_decode", read_mla_modules, "MLA decode modules"),
        ("mla_prefill", read_mla_modules, "MLA prefill modules"),
    ):
        if kind not in kinds:
            continue
        try:
            f, v, note = locate_table(sysdir, kind, version)
        except ConfigError as e:
            notes.append(f"{e}; {what} not fitted")
        else:
            table = read_table(f, MOE_COLUMNS) if kind == "moe" else None  # read once for every experts' dtype
            got[kind], skipped = reader(f) if table is None else reader(f, table=table)
            files[TABLES[kind][1]], versions[TABLES[kind][1]] = str(f), v
            notes += [n for n in (note, skipped) if n]
            if kind == "gemm":  # quantized GEMMs: of this version, or the newest earlier one that is plausible
                quant, quant_notes = read_quant_gemms(sysdir, v)
                for q in (q for q in GEMM_QUANT if q in quant):  # in the table's order, whichever version served
                    rows, used, used_v = quant[q]
                    got[f"gemm:{q}"] = rows
                    files[f"gemm_perf:{q}"], versions[f"gemm_perf:{q}"] = str(used), used_v
                notes += quant_notes
            if kind == "moe":  # the same table's quantized experts, where it has them
                for quant, (table_dtype, *_) in MOE_QUANT.items():
                    try:
                        got[f"moe:{quant}"], skipped = read_moe(f, (table_dtype,), table)
                    except ConfigError:
                        continue
                    notes += [skipped] if skipped else []
    return AicData(
        name,
        gpu,
        str(sysdir),
        got.get("decode"),
        got.get("prefill"),
        got.get("all_reduce"),
        got.get("gemm"),
        got.get("moe"),
        {q: got[f"moe:{q}"] for q in MOE_QUANT if f"moe:{q}" in got},
        files,
        versions,
        notes,
        got.get("mla_decode"),
        got.get("mla_prefill"),
        got.get("exchange"),
        {q: got[f"gemm:{q}"] for q in GEMM_QUANT if f"gemm:{q}" in got},
    )


def read_gemm(path: Path, gemm_dtypes=("bfloat16", "float16"), table=None):
    """(GEMM rows of ``gemm_dtypes`` (default bf16): m, n, k, seconds; a note on rows skipped or '') of a
    gemm_perf table (``table``: the file as :func:`read_table` gave it, where the caller has read it)."""
    import pandas as pd

    what = "bf16" if "bfloat16" in gemm_dtypes else "/".join(gemm_dtypes)
    df = read_table(path, GEMM_COLUMNS) if table is None else table
    df = df[df["gemm_dtype"].astype(str).str.strip().str.lower().isin(list(gemm_dtypes))]
    t = df["latency"].to_numpy(float) * 1e-3
    ok = np.isfinite(t) & (t > 0)
    if not ok.any():
        raise ConfigError(f"{path}: no {what} GEMM rows with a positive latency")
    note = f"{path}: skipped {int((~ok).sum())} {what} row(s) whose latency is not positive" if not ok.all() else ""
    return pd.DataFrame(
        {
            "m": df["m"].to_numpy(np.int64)[ok],
            "n": df["n"].to_numpy(np.int64)[ok],
            "k": df["k"].to_numpy(np.int64)[ok],
            "seconds": t[ok],
        }
    ), note


GEMM_COLUMNS = ("m", "n", "k", "latency", "gemm_dtype")
# A quantized GEMM table whose small GEMMs (m <= 16, n and k >= 1024: weight-bound, where FP8 or FP4 weights
# halve the bytes or better) take more than this many times the same version's bf16 ones measured something
# besides the kernel (vLLM 0.22-0.24's fp8_block rows: flat 60-200 us floors up to thousands of rows)
QUANT_PLAUSIBLE_X = 2.0
QUANT_MIN_DIM = 256  # quantized GEMMs are fitted on weights of at least this many rows and columns


def quant_gemm_excess(quant_rows, bf16_rows) -> float:
    """Median time of small quantized GEMMs over the bf16 ones of the same shapes, both :func:`read_gemm` rows
    of one table (NaN: none to compare)."""

    def small(g):
        return g[(g["m"] <= 16) & (g["n"] >= 1024) & (g["k"] >= 1024)].groupby(["m", "n", "k"])["seconds"].median()

    both = small(quant_rows).to_frame("q").join(small(bf16_rows).to_frame("b"), how="inner")
    return float(np.median(both["q"] / both["b"])) if len(both) else float("nan")


def read_quant_gemms(sysdir: Path, version: str) -> tuple[dict, list[str]]:
    """({scheme: (rows as :func:`read_gemm`'s, of weights at least QUANT_MIN_DIM wide, the file, its version)},
    notes) of every GEMM_QUANT scheme: from the gemm table of ``version``, or, where its rows are implausible
    (QUANT_PLAUSIBLE_X), of the newest earlier version whose rows are not. Each table is read once."""
    got, notes = {}, []
    tried: dict[str, list[str]] = {q: [] for q in GEMM_QUANT if GEMM_QUANT[q][0]}
    for v in reversed([p for p in versions_present(sysdir, "gemm") if release_key(p) <= release_key(version)]):
        todo = [q for q in tried if q not in got]
        if not todo:
            break
        f, _, _ = locate_table(sysdir, "gemm", v)
        table = read_table(f, GEMM_COLUMNS)
        try:
            bf16, _ = read_gemm(f, table=table)
        except ConfigError:
            bf16 = None
        for q in todo:
            try:
                rows, skipped = read_gemm(f, (GEMM_QUANT[q][0],), table)
            except ConfigError:
                continue  # no such rows in this version
            excess = quant_gemm_excess(rows, bf16) if bf16 is not None else float("nan")
            if excess > QUANT_PLAUSIBLE_X:
                tried[q].append(f"{v} ({excess:.1f}x bf16)")
                continue
            # the projections of real models: the grid's 32-128-wide weights would pull a fit that prices none
            wide = rows[(rows["n"] >= QUANT_MIN_DIM) & (rows["k"] >= QUANT_MIN_DIM)].reset_index(drop=True)
            if len(wide) < 8:  # too few to fit (the RTX PRO 6000's fp8_block rows are all narrow): none
                notes.append(
                    f"{q} GEMMs of vLLM {v}: {len(wide)} rows of weights at least {QUANT_MIN_DIM} wide; not fitted"
                )
                del tried[q]  # an older table is not looked for either
                continue
            got[q] = (wide, f, v)
            if tried[q]:
                notes.append(
                    f"{q} GEMMs from vLLM {v}: the newer table(s) {', '.join(tried[q])} take more than "
                    f"{QUANT_PLAUSIBLE_X:g}x bf16's time on small GEMMs"
                )
            notes += [skipped] if skipped else []
    notes += [
        f"{q} GEMMs not fitted: every table ({', '.join(t)}) takes more than {QUANT_PLAUSIBLE_X:g}x bf16's "
        "time on small GEMMs"
        for q, t in tried.items()
        if t and q not in got
    ]
    return got, notes


MOE_COLUMNS = (
    "num_tokens",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
    "latency",
    "moe_dtype",
    "distribution",
)


def read_moe(path: Path, moe_dtypes=("bfloat16", "float16"), table=None):
    """(fused-MoE rows of ``moe_dtypes`` (default bf16) under every routing the table timed that kvsim models
    (balanced, power_law_1.01, power_law_1.2; kvsim.latency.routing): tokens, hidden, inter (one expert's width
    on a rank), experts, topk, tp, ep, routing (kvsim's name), seconds, kernel; a note on rows skipped, or '')
    of a moe_perf table (``table``: the file as :func:`read_table` gave it, where the caller has read it)."""
    import pandas as pd

    from kvsim.latency.routing import TABLE_ROUTINGS

    cols = MOE_COLUMNS
    label = "bf16" if "bfloat16" in moe_dtypes else "/".join(moe_dtypes)
    df = read_table(path, cols) if table is None else table
    kernel = df["kernel_source"].astype(str) if "kernel_source" in df.columns else pd.Series("", index=df.index)
    keep = df["moe_dtype"].astype(str).str.strip().str.lower().isin(moe_dtypes)
    df, kernel = df[keep], kernel[keep]
    # each row priced with its own routing's distinct experts (the formula's only routing-dependent term)
    routing = df["distribution"].astype(str).str.strip().map(TABLE_ROUTINGS)
    known = routing.notna()
    other = int((~known).sum())
    df, kernel, routing = df[known], kernel[known], routing[known]
    num = {c: df[c].to_numpy(float) for c in cols[:8]}  # read_table checked they are numbers
    t = num["latency"] * 1e-3
    ok = np.isfinite(t) & (t > 0)
    for c in cols[:7]:
        ok &= np.isfinite(num[c]) & (num[c] >= 1)
    ok &= num["topk"] <= num["num_experts"]
    if not ok.any():
        raise ConfigError(f"{path}: no usable {label} MoE rows (a routing kvsim models, positive sizes and latency)")
    notes = [f"{path}: skipped {other} {label} row(s) of another routing"] if other else []
    if not ok.all():
        notes.append(f"{path}: skipped {int((~ok).sum())} {label} row(s) with a bad size or latency")
    note = "; ".join(notes)
    g = {c: num[c][ok].astype(np.int64) for c in cols[:7]}
    return pd.DataFrame(
        {
            "tokens": g["num_tokens"],
            "hidden": g["hidden_size"],
            "inter": -(-g["inter_size"] // g["moe_tp_size"]),
            "experts": g["num_experts"],
            "topk": g["topk"],
            "tp": g["moe_tp_size"],
            "ep": g["moe_ep_size"],
            "routing": routing.to_numpy()[ok],
            "seconds": t[ok],
            "kernel": kernel.to_numpy()[ok],
        }
    ), note


def read_mla_modules(path: Path):
    """(rows of one whole MLA layer decoding (a generation table) or prefilling (a context table), bf16 weights and
    activations, a bf16 or FP8 KV cache: model (kvsim preset), heads (query heads on the GPU), tokens (sequences),
    context, kv_dtype_bytes, seconds; a note or ''). Where the table times several attention backends, the one
    vLLM picks by default on the GPU is kept (FlashMLA on Hopper)."""
    import pandas as pd

    from kvsim.hardware import get_model

    cols = ("model", "num_heads", "batch_size", "isl", "step", "latency", "mla_dtype", "kv_cache_dtype", "gemm_type")
    df = read_table(path, cols)
    bf16 = ["bfloat16", "float16"]
    df = df[df["mla_dtype"].isin(bf16) & df["kv_cache_dtype"].isin(bf16 + ["fp8"]) & df["gemm_type"].isin(bf16)]
    if "kernel_source" in df.columns:  # per KV dtype, FlashMLA where it was timed (vLLM's pick on Hopper)
        flash = df["kernel_source"] == "FLASHMLA"
        has = df.assign(f=flash).groupby("kv_cache_dtype")["f"].transform("any")
        df = df[flash | ~has]
    presets = {}
    for hf in df["model"].unique():
        try:
            presets[hf] = get_model(str(hf)).name
        except ConfigError:
            presets[hf] = None
    df = df[df["model"].map(presets).notna()]
    t = df["latency"].to_numpy(float) * 1e-3
    ok = np.isfinite(t) & (t > 0)
    if not ok.any():
        raise ConfigError(
            f"{path}: no usable MLA module rows (bf16 weights, a bf16 or FP8 KV cache) of a model kvsim has"
        )
    note = f"{path}: skipped {int((~ok).sum())} row(s) whose latency is not positive" if not ok.all() else ""
    df = df[ok]
    return pd.DataFrame(
        {
            "model": df["model"].map(presets).to_numpy(),
            "heads": df["num_heads"].to_numpy(np.int64),
            "tokens": df["batch_size"].to_numpy(np.int64),
            "context": (df["isl"] + df["step"]).to_numpy(np.int64),
            "kv_dtype_bytes": np.where(df["kv_cache_dtype"] == "fp8", 1, 2),
            "seconds": t[ok],
        }
    ), note


def _row_models(rows):
    """(preset, tensor-parallel size) of each row of an MLA module table: the size that leaves the preset the
    row's ``heads`` query heads per GPU."""
    from kvsim.hardware import get_model

    models: dict = {}  # one look-up per preset, not per row
    for name, heads in zip(rows["model"], rows["heads"]):
        m = models.get(name) or models.setdefault(name, get_model(name))
        yield m, max(1, m.q_heads // int(heads))


def _mla_projections_s(calib: Calibration, gpu: GpuSpec, m, tp: int, tokens: int) -> float:
    """An MLA layer's projections and element-wise kernels for ``tokens`` tokens, as PerOpModel prices them."""
    from kvsim.latency.perop import mla_ops

    return sum(op.seconds(calib, gpu, tokens, m.dtype_bytes) for op in mla_ops(m, tp))


def _mla_parts(rows, calib: Calibration, gpu: GpuSpec):
    """Per row: (the module's projections and element-wise kernels as PerOpModel prices them, KV tokens,
    one token's latent bytes, one token's absorbed-attention FLOPs) for a model whose GPU holds ``heads``
    query heads."""
    from kvsim.latency.perop import mla_decode_token_flops

    out = np.zeros((len(rows), 4))
    extra = calib.prefill_attention.tile_extra_dims
    kv_bytes = rows["kv_dtype_bytes"].to_numpy() if "kv_dtype_bytes" in rows else None
    cache: dict = {}
    for i, ((m, tp), tokens, context) in enumerate(zip(_row_models(rows), rows["tokens"], rows["context"])):
        key = (m.name, tp, int(tokens))
        if key not in cache:
            cache[key] = _mla_projections_s(calib, gpu, m, tp, int(tokens))
        latent = (m.kv_lora_rank + m.qk_rope_head_dim) * (m.kv_dtype_bytes if kv_bytes is None else kv_bytes[i])
        out[i] = (cache[key], tokens * context, latent, mla_decode_token_flops(m, max(1, m.q_heads // tp), extra))
    return out


def mla_seconds(p: DecodeAttentionParams | None, calib: Calibration, gpu: GpuSpec, rows, parts=None):
    """PerOpModel's MLA layer decode (projections + attention) over the rows of an MLA module table, with
    ``p`` as the calibration's mla_decode (None: as decode_attention prices it)."""
    proj, kv, token_bytes, flops = (parts if parts is not None else _mla_parts(rows, calib, gpu)).T
    p = p or calib.decode_attention
    n = rows["tokens"].to_numpy(float)
    kvb = rows["kv_dtype_bytes"].to_numpy() if "kv_dtype_bytes" in rows else np.full(len(rows), 2)
    token_s = np.maximum(
        token_bytes / (gpu.hbm_bandwidth * p.bw_for(kvb)),
        flops / (gpu.bf16_flops * (p.flops_eff or calib.prefill_attention.flops_eff)),
    )
    return proj + np.maximum(p.floor_s, p.stream_s(n, kv, token_s, kvb == 1))


def fit_mla_decode(rows, calib: Calibration, gpu: GpuSpec, parts=None) -> DecodeAttentionParams:
    """MLA decode attention's floor, ramp, bandwidth and FLOP efficiencies and per-sequence tokens, fitted on
    whole MLA layers with their projections priced by ``calib`` (bf16 KV rows), and an FP8 cache's own bandwidth
    efficiency and extra time on the FP8 rows, the rest kept (as fit_kv8 does for other attention). ``parts``:
    the rows' :func:`_mla_parts`, where the caller has them."""

    kv16 = (rows["kv_dtype_bytes"] == 2).to_numpy() if "kv_dtype_bytes" in rows else np.ones(len(rows), bool)
    if kv16.sum() < 8:
        raise ConfigError(f"need at least 8 bf16-KV MLA module rows to fit, have {int(kv16.sum())}")
    parts = _mla_parts(rows, calib, gpu) if parts is None else parts
    T = rows["seconds"].to_numpy(float)
    r16, p16, T16 = rows[kv16], parts[kv16], T[kv16]

    def params(x):  # microseconds, fractions, tokens
        return DecodeAttentionParams(x[0] * 1e-6, x[1] * 1e-6, x[2], 0.0, x[3], flops_eff=x[4])

    p = params(
        [
            float(v)
            for v in fit_bounded(
                lambda x: np.log(mla_seconds(params(x), calib, gpu, r16, p16) / T16),
                [20.0, 10.0, 0.7, 50.0, 0.3],
                [0.0, 0.0, 0.02, 0.0, 0.01],
                [1e4, 1e4, 1.0, 1e5, 1.0],
            )
        ]
    )
    if (~kv16).sum() < 8:
        return p
    r8, p8, T8 = rows[~kv16], parts[~kv16], T[~kv16]

    def with_kv8(x):
        return replace(p, kv8_bw_eff=x[0], kv8_ramp_s=x[1] * 1e-6)

    return with_kv8(
        [
            float(v)
            for v in fit_bounded(
                lambda x: np.log(mla_seconds(with_kv8(x), calib, gpu, r8, p8) / T8),
                [p.bw_eff, 1.0],
                [0.02, 0.0],
                [1.0, 1000.0],
            )
        ]
    )


def _mla_prefill_parts(rows, calib: Calibration, gpu: GpuSpec):
    """Per row: (projections and element-wise kernels of all the row's tokens, the model's head dim, its latent
    bytes per token) for a model whose GPU holds ``heads`` query heads."""
    out = np.zeros((len(rows), 3))
    for i, ((m, tp), seqs, new) in enumerate(zip(_row_models(rows), rows["tokens"], rows["context"])):
        out[i] = (_mla_projections_s(calib, gpu, m, tp, int(seqs * new)), m.head_dim, m.kv_bytes_per_token_layer(tp))
    return out


def mla_prefill_seconds(p: PrefillAttentionParams | None, calib: Calibration, gpu: GpuSpec, rows, parts=None):
    """PerOpModel's MLA layer prefill (projections + attention) over the rows of an MLA context module table, with
    ``p`` as the calibration's mla_prefill (None: as prefill_attention prices it)."""
    proj, head_dim, token_bytes = (parts if parts is not None else _mla_prefill_parts(rows, calib, gpu)).T
    new = rows["context"].to_numpy()
    return proj + prefill_seconds(
        p or calib.prefill_attention,
        gpu,
        rows["tokens"].to_numpy(float),
        new,
        np.zeros_like(new),
        rows["heads"].to_numpy(float),
        1.0,
        head_dim,
        2,
        token_bytes,
    )


def fit_mla_prefill(rows, calib: Calibration, gpu: GpuSpec, parts=None) -> PrefillAttentionParams:
    """MLA prefill attention's floor, tile efficiency and start-up tiles (tile sizes, the head-independent share and
    the KV bandwidth kept from ``calib``'s prefill attention), fitted on whole MLA layers (``parts``: the rows'
    :func:`_mla_prefill_parts`, where the caller has them)."""

    if len(rows) < 8:
        raise ConfigError(f"need at least 8 MLA module rows to fit, have {len(rows)}")
    parts = _mla_prefill_parts(rows, calib, gpu) if parts is None else parts
    T = rows["seconds"].to_numpy(float)
    base = calib.prefill_attention

    def params(x):
        return replace(base, floor_s=x[0] * 1e-6, flops_eff=x[1], cta_overhead_tiles=x[2])

    return params(
        [
            float(v)
            for v in fit_bounded(
                lambda x: np.log(mla_prefill_seconds(params(x), calib, gpu, rows, parts) / T),
                [50.0, 0.5, 2.0],
                [0.0, 0.01, 0.0],
                [1e5, 1.0, 64.0],
            )
        ]
    )


def mla_prefill_regimes(rows) -> np.ndarray:
    t = (rows["tokens"] * rows["context"]).to_numpy()
    return np.select([t <= 512, t <= 4096], ["tokens<=512", "tokens 513-4096"], "tokens>4096")


def validate_mla_prefill(rows, calib: Calibration, gpu: GpuSpec, folds: int = 4) -> dict:
    """As :func:`validate_mla_decode`, for prefill, by the tokens an iteration computes."""
    return _validate_by_heads(
        rows,
        calib,
        gpu,
        folds,
        _mla_prefill_parts(rows, calib, gpu),
        fit_mla_prefill,
        mla_prefill_seconds,
        mla_prefill_regimes(rows),
    )


def mla_regimes(rows) -> np.ndarray:
    """bf16-KV rows by batch and context; FP8-KV rows as one regime."""
    b = np.where(rows["tokens"].to_numpy() < 32, "batch<32", "batch>=32")
    c = np.where(rows["context"].to_numpy() < 4096, "ctx<4096", "ctx>=4096")
    reg = np.char.add(np.char.add(b.astype(str), " "), c.astype(str))
    if "kv_dtype_bytes" in rows:
        reg = np.where(rows["kv_dtype_bytes"].to_numpy() == 1, "fp8 KV", reg)
    return reg


def validate_mla_decode(rows, calib: Calibration, gpu: GpuSpec, folds: int = 4) -> dict:
    """predicted / measured of MLA layers in sample and held out by query heads per GPU (each fold of head counts
    predicted by a fit that never saw it), by batch and context; also the pricing without an MLA fit."""
    return _validate_by_heads(
        rows, calib, gpu, folds, _mla_parts(rows, calib, gpu), fit_mla_decode, mla_seconds, mla_regimes(rows)
    )


def _validate_by_heads(rows, calib, gpu, folds, parts, fit, seconds, regimes) -> dict:
    """{"in_sample", "held_out", "before"} of predicted / measured: ``fit`` on all rows; ``fit`` without each fold
    of head counts, ``seconds`` on that fold; ``seconds`` without a fit (None). ``parts``: the rows' parts, computed
    once for every fit."""
    T = rows["seconds"].to_numpy()
    heads = sorted(set(rows["heads"]))
    fold = np.array([heads.index(h) % folds for h in rows["heads"]])
    held = np.full(len(rows), np.nan)
    for f in range(folds):
        test = fold == f
        if test.any() and (~test).sum() >= 8:
            fitted = fit(rows[~test], calib, gpu, parts[~test])
            held[test] = seconds(fitted, calib, gpu, rows[test], parts[test]) / T[test]
    return {
        "in_sample": _by_regime(seconds(fit(rows, calib, gpu, parts), calib, gpu, rows, parts) / T, regimes),
        "held_out": _by_regime(held, regimes),
        "before": _by_regime(seconds(None, calib, gpu, rows, parts) / T, regimes),
    }


def _moe_table_seconds(calib: Calibration, gpu: GpuSpec, m, quant: str | None = None):
    """PerOpModel's MoE layer time of each row of a MoE table (bf16 activations; bf16 weights, or the experts'
    ``quant`` dtype)."""
    from kvsim.latency.perop import moe_formula

    f = {k: m[k].to_numpy(float) for k in ("tokens", "hidden", "inter", "experts", "topk", "ep")}
    wb = MOE_QUANT[quant][2] if quant else 2
    return moe_formula(
        calib,
        gpu,
        f["tokens"],
        f["hidden"],
        f["inter"],
        f["experts"],
        f["topk"],
        f["ep"],
        wb,
        2,
        quant=quant,
        distinct=_distinct(m),
    )


def _distinct(m):
    """The distinct experts (all ranks) the tokens of each row of a MoE table activate under the row's routing
    (uniform for a table without a routing column)."""
    from kvsim.latency.routing import active_experts

    if "routing" not in m:
        return None
    out = np.empty(len(m))
    routing = m["routing"].to_numpy()
    cols = [m[k].to_numpy(float) for k in ("tokens", "experts", "topk")]
    for r in np.unique(routing):
        sel = routing == r
        out[sel] = active_experts(str(r), *(c[sel] for c in cols))
    return out


def moe_seconds_table(p: MoeParams, gpu: GpuSpec, m, quant: str | None = None):
    """:func:`_moe_table_seconds` with the MoE parameters ``p`` (of ``quant`` experts)."""
    calib = Calibration(gpu=gpu.name, moe_quant={quant: p}) if quant else Calibration(gpu=gpu.name, moe=p)
    return _moe_table_seconds(calib, gpu, m, quant)


def fit_moe_table(m, gpu: GpuSpec, quant: str | None = None) -> MoeParams:
    """The fused-MoE parameters (:class:`MoeParams`) from measured MoE layers (of ``quant`` experts)."""

    if len(m) < 8:
        raise ConfigError(f"need at least 8 MoE rows to fit, have {len(m)}")
    T = m["seconds"].to_numpy(float)

    def params(x):
        return MoeParams(x[0] * 1e-6, x[1] * 1e-6, x[2] * 1e-9, x[3] * 1e-9, x[4], x[5], x[6], x[7] * 1e-6)

    return params(
        [
            float(v)
            for v in fit_bounded(
                lambda x: np.log(moe_seconds_table(params(x), gpu, m, quant) / T),
                [20.0, 0.5, 1.0, 1.0, 0.5, 0.7, 1.5, 0.0],
                [0.0, 0.0, 0.0, 0.0, 0.02, 0.02, 1.0, 0.0],
                [500.0, 50.0, 1000.0, 1000.0, 1.0, 1.0, 20.0, 500.0],
            )
        ]
    )


def preset_moe_shapes() -> set[tuple[int, int, int, int]]:
    """(hidden, one expert's full width, experts, experts per token) of every MoE model preset."""
    from kvsim.hardware.presets import MODEL_PRESETS

    return {
        (m.hidden_size, m.moe_intermediate_size, m.num_experts, m.experts_per_token)
        for m in MODEL_PRESETS.values()
        if m.is_moe
    }


def fit_moe_shapes(m, calib: Calibration, gpu: GpuSpec, quant: str | None = None, knots=None) -> dict:
    """The ``moe_shapes`` entry (kvsim/latency/moe_shapes.py) of ``quant`` experts (None: bf16) from measured MoE
    rows ``m`` (:func:`read_moe`): for each preset's shape, split and routing the table timed, measured / ``calib``'s
    fit at the token counts nearest :data:`~kvsim.latency.moe_shapes.KNOTS` (``knots``: a function choosing row
    indexes from the ascending token counts instead). Where the table times several kernels at one point, their
    geometric mean (the fit, too, is over every kernel of the dtype)."""
    from kvsim.latency.moe_shapes import knot_rows, shape_key

    pick = knots or knot_rows
    full = m["inter"] * m["tp"]
    presets = preset_moe_shapes()
    keep = np.array([s in presets for s in zip(m["hidden"], full, m["experts"], m["topk"])], dtype=bool)
    if not keep.any():
        return {}
    rows = m[keep].assign(full=full[keep], ratio=m["seconds"][keep] / _moe_table_seconds(calib, gpu, m[keep], quant))
    out: dict = {}
    cols = ["hidden", "full", "experts", "topk", "tp", "ep", "routing"]
    for (h, i, e, k, tp, ep, routing), g in rows.groupby(cols, sort=True):
        per = g.groupby("tokens")["ratio"].apply(lambda r: float(np.exp(np.log(r).mean()))).sort_index()
        ts = [int(t) for t in per.index]
        idx = pick(ts)
        key = shape_key(int(h), int(i), int(e), int(k), int(tp), int(ep))
        out.setdefault(key, {})[str(routing)] = [[ts[j] for j in idx], [round(float(per.iloc[j]), 4) for j in idx]]
    return out


def evaluate_moe(m, calib: Calibration, gpu: GpuSpec, quant: str | None = None):
    """predicted / measured of the MoE rows (of ``quant`` experts) by ``calib`` as the per-operation model prices
    them (its MoE parameters, or without them its GEMM and element-wise ones), by tokens."""
    return _by_regime(_moe_table_seconds(calib, gpu, m, quant) / m["seconds"].to_numpy(), moe_regimes(m))


def moe_regimes(m) -> np.ndarray:
    t = m["tokens"].to_numpy()
    return np.select(
        [t <= 16, t <= 256, t <= 2048], ["tokens 1-16", "tokens 17-256", "tokens 257-2048"], "tokens >=2049"
    )


def moe_shapes(m) -> list[tuple]:
    return list(zip(m["hidden"], m["inter"] * m["tp"], m["experts"], m["topk"]))


def validate_moe(m, gpu: GpuSpec, every: int = 5, quant: str | None = None) -> dict:
    """predicted / measured of MoE layers fitted on all rows (in sample) and without every ``every``-th model
    shape (hidden, expert width, experts, top-k), predicted on those (held out), by tokens; held out also
    by expert-parallel size (1 or more)."""
    fitted = fit_moe_table(m, gpu, quant)
    T = m["seconds"].to_numpy()
    ins = moe_seconds_table(fitted, gpu, m, quant) / T
    shapes = moe_shapes(m)
    kinds = sorted(set(shapes))
    test_shapes = {s for i, s in enumerate(kinds) if i % every == every // 2}
    test = np.array([s in test_shapes for s in shapes])
    held = np.full(len(m), np.nan)
    p = fit_moe_table(m[~test], gpu, quant)
    held[test] = moe_seconds_table(p, gpu, m[test], quant) / T[test]
    reg = moe_regimes(m)
    par = np.where(m["ep"].to_numpy() > 1, "EP>1", np.where(m["tp"].to_numpy() > 1, "TP>1", "one GPU"))
    return {
        "in_sample": _by_regime(ins, reg),
        "held_out": _by_regime(held, reg),
        "held_out_parallel": _by_regime(held, par),
        "shapes": len(kinds),
        "held_out_shapes": len(test_shapes),
    }


# the experts' dtype kvsim prices (bf16 or MOE_QUANT) -> the moe_perf rows that serve it; MXFP4 experts with
# MXFP8 activations are a backend of their own (flashinfer-trtllm-mxfp8)
MOE_FAMILY_DTYPES = {"bf16": ("bfloat16",), **{q: (t,) for q, (t, *_) in MOE_QUANT.items()}}
MOE_FAMILY_EXTRA = {"mxfp4": ("w4a8_mxfp4_mxfp8",)}
MOE_FAMILY_MIN_ROWS = 8


def fit_moe_families(path: Path, gpu: GpuSpec, validate: bool = False) -> tuple[dict, dict]:
    """(params, stats) of a moe_perf table fitted once per kernel family (vLLM's ``--moe-backend``;
    calibration.moe_backend_of) of each experts' dtype with at least MOE_FAMILY_MIN_ROWS rows: params as a
    calibration's ``moe_backends`` ({dtype: {backend: MoeParams}}); with ``validate``, stats per family (rows,
    shapes, kernels, in-sample ratios by tokens and, with five shapes or more, every 5th held out)."""
    from kvsim.latency.calibration import moe_backend_of

    table = read_table(path, MOE_COLUMNS)
    params, stats = {}, {}
    for dtype, table_dtypes in MOE_FAMILY_DTYPES.items():
        quant = None if dtype == "bf16" else dtype
        for td in table_dtypes + MOE_FAMILY_EXTRA.get(dtype, ()):
            try:
                rows, _ = read_moe(Path(path), (td,), table)
            except ConfigError:  # the table has no usable rows of that dtype
                continue
            rows = rows.assign(backend=[moe_backend_of(k, td) for k in rows["kernel"]])
            for backend, sub in rows.groupby("backend"):  # rows of unnamed kernels (backend None) are left out
                sub = sub.reset_index(drop=True)
                if len(sub) < MOE_FAMILY_MIN_ROWS:
                    continue
                p = fit_moe_table(sub, gpu, quant)
                params.setdefault(dtype, {})[backend] = p
                if not validate:
                    continue
                shapes = len(set(moe_shapes(sub)))
                ins = _by_regime(moe_seconds_table(p, gpu, sub, quant) / sub["seconds"].to_numpy(), moe_regimes(sub))
                entry = {"rows": len(sub), "shapes": shapes, "kernels": sorted(set(sub["kernel"])), "in_sample": ins}
                if shapes >= 5:
                    entry["held_out"] = validate_moe(sub, gpu, quant=quant)["held_out"]
                stats.setdefault(dtype, {})[backend] = entry
    return params, stats


def _nccl_table(sysdir: Path, version: str | None):
    """The NCCL table to use: ``version``'s, or the newest version folder whose table has all_reduce rows."""
    if version is not None:
        f, v, _ = locate_table(sysdir, "nccl", version)
        return f, v
    for v in reversed(versions_present(sysdir, "nccl")):
        f = _table_file(Path(sysdir) / TABLES["nccl"][0] / v, TABLES["nccl"][1])
        df = read_table(f, ("op_name",))
        if (df["op_name"].astype(str).str.strip() == "all_reduce").any():
            return f, v
    return None, None


# --- the per-operation formulas, vectorised (they equal PerOpModel's; see check_against_perop) ----------
def _decode_df(p: DecodeAttentionParams, gpu: GpuSpec, d):
    """PerOpModel.decode_attention_layer_s over the rows of a decode table."""
    kv = d["kv_dtype_bytes"].to_numpy()
    n, kv_tokens, token_bytes = d["num_seqs"].to_numpy(float), d["kv_tokens"].to_numpy(float), _token_bytes(d)
    token_s = token_bytes / (gpu.hbm_bandwidth * p.bw_for(kv))
    t = np.maximum(p.floor_s, p.stream_s(n, kv_tokens, token_s, kv == 1))
    u = p.unsplit()
    if u is None:
        return t
    walk_s = np.maximum(token_s, u.unsplit_token_s(token_bytes, n * d["kv_heads"].to_numpy(float), gpu.sms))
    return np.where(_one_query_head_per_kv_head(d), np.maximum(u.floor_s, u.stream_s(n, kv_tokens, walk_s, kv == 1)), t)


def _one_query_head_per_kv_head(d) -> np.ndarray:
    return (d["q_heads"] == d["kv_heads"]).to_numpy()


def _token_bytes(d) -> np.ndarray:
    return (2 * d["kv_heads"] * d["head_dim"] * d["kv_dtype_bytes"]).to_numpy(float)


def prefill_seconds(
    p: PrefillAttentionParams,
    gpu: GpuSpec,
    num_chunks,
    new,
    cached,
    q_heads,
    kv_heads,
    head_dim,
    kv_dtype_bytes,
    token_bytes=None,
):
    """PerOpModel.prefill_attention_layer_s over arrays of ``num_chunks`` identical (new, cached) chunks
    (``token_bytes``: one token's KV bytes when not 2 x kv_heads x head_dim x dtype bytes, e.g. MLA's latent)."""
    tq, tkv, ovh = p.tile_q, p.tile_kv, p.cta_overhead_tiles
    r = tq // tkv
    new, cached = np.asarray(new, np.int64), np.asarray(cached, np.int64)
    full, part = np.divmod(new, tq)
    tiles = full * -(-cached // tkv) + r * full * (full + 1) // 2 + np.where(part > 0, -(-(cached + new) // tkv), 0)
    q_tiles = full + (part > 0)
    work = num_chunks * q_heads * (tiles + ovh * q_tiles)
    longest = -(-(cached + new) // tkv) + ovh
    tile_s = 4.0 * tq * tkv * (head_dim + p.tile_extra_dims) / (gpu.bf16_flops / gpu.sms * p.flops_eff)
    compute = tile_s * np.maximum(work / gpu.sms, longest)
    if token_bytes is None:
        token_bytes = 2 * kv_heads * head_dim * kv_dtype_bytes
    memory = num_chunks * (cached + new) * token_bytes / (gpu.hbm_bandwidth * p.bw_eff)
    return p.floor_s + np.maximum(compute, memory)


def link_seconds(p: LinkParams, message_bytes):
    """LinkParams.seconds over an array of message sizes."""
    return np.array([p.seconds(float(s)) for s in message_bytes])


def predict(data: AicData, calib: Calibration, interconnect: str = "nvswitch") -> dict:
    """predicted seconds per row of each table of ``data`` with ``calib``'s parameters."""
    out = {}
    if data.decode is not None:
        d = data.decode
        out["decode"] = _decode_df(calib.decode_attention, data.gpu, d)
    if data.prefill is not None:
        out["prefill"] = _prefill_df(calib.prefill_attention, data.gpu, data.prefill)
    for kind, table, link in (
        ("all_reduce", calib.all_reduce, calib.link),
        ("exchange", calib.exchange, calib.exchange_link),
    ):
        a = getattr(data, kind)
        if a is None or not table:
            continue
        pred = np.full(len(a), np.nan)
        for n in np.unique(a["num_gpus"]):
            m = (a["num_gpus"] == n).to_numpy()
            pred[m] = link_seconds(link(int(n), interconnect), a["message_bytes"].to_numpy()[m])
        out[kind] = pred
    return out


def _prefill_df(p, gpu, d):
    return prefill_seconds(
        p,
        gpu,
        d["num_chunks"].to_numpy(float),
        d["new_tokens"].to_numpy(),
        d["cached"].to_numpy(),
        d["q_heads"].to_numpy(float),
        d["kv_heads"].to_numpy(float),
        d["head_dim"].to_numpy(float),
        d["kv_dtype_bytes"].to_numpy(float),
    )


def check_against_perop(data: AicData, calib: Calibration, rows: int = 40) -> float:
    """Largest relative difference between the vectorised formulas here and PerOpModel itself on ``rows``
    rows of each attention table (0 when they agree)."""
    from kvsim.hardware import ModelSpec
    from kvsim.latency.cpu import CPU_PRESETS
    from kvsim.latency.perop import PerOpModel

    worst = 0.0
    pred = predict(data, calib)
    for kind in ("decode", "prefill"):
        d = getattr(data, kind)
        if d is None:
            continue
        idx = np.linspace(0, len(d) - 1, min(rows, len(d))).astype(int)
        for i in idx:
            r = d.iloc[i]
            kvd = {1: "fp8", 2: "bf16", 4: "fp32"}[int(r["kv_dtype_bytes"])]
            m = ModelSpec(
                "aic", 1, int(r["q_heads"]), int(r["kv_heads"]), int(r["head_dim"]), 1e9, 1 << 30, "bf16", kv_dtype=kvd
            )
            pm = PerOpModel(m, data.gpu, calib, CPU_PRESETS["none"], 1)
            if kind == "decode":
                ref = pm.decode_attention_layer_s(int(r["num_seqs"]), int(r["kv_tokens"]))
            else:
                ref = pm.prefill_attention_layer_s([(int(r["new_tokens"]), int(r["cached"]))] * int(r["num_chunks"]))
            worst = max(worst, abs(pred[kind][i] / ref - 1.0))
    return worst


# --- fitting --------------------------------------------------------------------------------------
def _kv_filter(d, kv_dtype_bytes):
    return d if kv_dtype_bytes is None else d[d["kv_dtype_bytes"].isin(kv_dtype_bytes)]


def fit_decode(d, gpu: GpuSpec) -> DecodeAttentionParams:
    """floor, ramp, bandwidth efficiency and per-sequence cost (kvsim.calibrate.fits's decode fitter), and, where
    the table shows a kernel that does not split the KV of layouts with one query head per KV head (their
    small batches at long contexts take over UNSPLIT_SLOWDOWN times what the grouped layouts' fit predicts),
    those layouts' unsplit walk, fitted on their rows."""

    def fit(rows):
        return fit_decode_params(
            rows["num_seqs"].to_numpy(float),
            rows["kv_bytes"].to_numpy(float),
            rows["seconds"].to_numpy(float),
            gpu,
            _token_bytes(rows),
        )

    if len(d) < 5:
        raise ConfigError(f"need at least 5 decode attention rows to fit, have {len(d)}")
    one = _one_query_head_per_kv_head(d)
    if one.sum() >= 5 and (~one).sum() >= 5:
        grouped = fit(d[~one])
        probe = d[one & (d["num_seqs"] <= 4).to_numpy() & (d["context"] >= 4096).to_numpy()]
        if len(probe) >= 3 and np.median(probe["seconds"] / _decode_df(grouped, gpu, probe)) > UNSPLIT_SLOWDOWN:
            return fit_unsplit(d[one], gpu, grouped)
    return fit(d)


UNSPLIT_SLOWDOWN = 2.0


def fit_unsplit(rows, gpu: GpuSpec, p: DecodeAttentionParams) -> DecodeAttentionParams:
    """``p`` with the unsplit walk (floor, ramp, per-sequence tokens, one CTA's bandwidth) fitted on ``rows``,
    all with one query head per KV head."""

    T = rows["seconds"].to_numpy(float)

    def params(x):  # microseconds, tokens, GB/s
        return replace(
            p,
            unsplit_floor_s=x[0] * 1e-6,
            unsplit_ramp_s=x[1] * 1e-6,
            unsplit_per_seq_tokens=x[2],
            unsplit_cta_bw=x[3] * 1e9,
        )

    return params(
        [
            float(v)
            for v in fit_bounded(
                lambda x: np.log(_decode_df(params(x), gpu, rows) / T),
                [10.0, 2.0, 10.0, 20.0],
                [0.0, 0.0, 0.0, 0.1],
                [1e4, 1e4, 1e5, 1e4],
            )
        ]
    )


def fit_kv8(d, gpu: GpuSpec, p: DecodeAttentionParams) -> DecodeAttentionParams:
    """``p`` with an FP8 KV cache's bandwidth efficiency, extra time and per-sequence tokens fitted on the 1-byte
    rows of ``d`` (the rest kept). Its per-sequence cost is fitted apart: held to bf16's count of (half as long)
    FP8 tokens, the fit pays for the short contexts with a low bandwidth (H100, vLLM 0.19: 0.62, where its own
    batch-1 rows stream Llama-8B's FP8 KV at 0.77)."""

    rows = d[d["kv_dtype_bytes"] == 1]
    if len(rows) < 5:
        return p
    T = rows["seconds"].to_numpy(float)
    start = [p.bw_eff, 1.0, p.per_seq_tokens]

    def params(x):
        return replace(p, kv8_bw_eff=x[0], kv8_ramp_s=x[1] * 1e-6, kv8_per_seq_tokens=x[2])

    fitted = fit_bounded(
        lambda x: np.log(_decode_df(params(x), gpu, rows) / T), start, [0.02, 0.0, 0.0], [1.0, 1000.0, 5000.0]
    )
    return params([float(v) for v in fitted])


def fit_prefill(d, gpu: GpuSpec, base: PrefillAttentionParams) -> PrefillAttentionParams:
    """floor, tile efficiency, start-up tiles and the head-independent share of a tile iteration of the prefill
    tile model (as kvsim.calibrate.fits's prefill fitter, over batches of identical chunks, vectorised); tile sizes and
    bandwidth stay ``base``'s. The head-independent share is fitted only when the rows span head dims."""

    if len(d) < 4:
        raise ConfigError(f"need at least 4 prefill attention rows to fit, have {len(d)}")
    T = d["seconds"].to_numpy(float)

    span = d["head_dim"].nunique() > 1

    def params(x):
        extra = {"tile_extra_dims": x[3]} if span else {}
        return replace(base, floor_s=x[0] * 1e-6, flops_eff=x[1], cta_overhead_tiles=x[2], **extra)

    def res(x):
        return np.log(_prefill_df(params(x), gpu, d) / T)

    x0, lo, hi = [10.0, 0.5, 2.0], [0.0, 0.001, 0.0], [1e5, 1.0, 64.0]
    if span:
        x0, lo, hi = x0 + [32.0], lo + [0.0], hi + [1024.0]
    return params([float(v) for v in fit_bounded(res, x0, lo, hi)])


def fit_all_reduce(a) -> dict[str, LinkParams]:
    """Per group size, the faster of two lines (latency + bytes / bandwidth): vLLM's custom all-reduce for
    small messages, NCCL for large ones (for NCCL alone, as the exchange: its low-latency and its bandwidth
    protocols); both fitted at once on the time at each size, by least squares on log(predicted / measured)
    as kvsim.calibrate.fits does. Fewer than 8 sizes: one line. The measured times are kept as well
    (``LinkParams.points``, the median per size): between measured sizes they price a message, the lines
    outside them."""

    out = {}
    for n, g in a.groupby("num_gpus"):
        S, T = g["message_bytes"].to_numpy(float), g["seconds"].to_numpy(float)
        if len(S) < 4:
            continue
        per_size = g.groupby("message_bytes")["seconds"].median().sort_index()
        points = tuple((float(b), float(t)) for b, t in per_size.items() if b > 0 and t > 0)

        def line(lat_us, gb_s):
            return lat_us * 1e-6 + S / (gb_s * 1e9)

        if len(S) < 8:
            x = fit_bounded(lambda x: np.log(line(x[0], x[1]) / T), [10.0, 100.0], [0.0, 0.1], [1e4, 1e4])
            out[str(int(n))] = LinkParams(float(x[0]) * 1e-6, float(x[1]) * 1e9, points=points)
            continue
        # start from the two ends: the smallest sizes set the custom all-reduce's latency, the largest NCCL's
        # bandwidth; the second line's latency starts 5x the first so the two stay apart
        x = fit_bounded(
            lambda x: np.log(np.minimum(line(x[0], x[1]), line(x[2], x[3])) / T),
            [float(T.min()) * 1e6, 50.0, 5 * float(T.min()) * 1e6, 200.0],
            [0.0, 0.1, 0.0, 0.1],
            [1e4, 1e4, 200.0, 1e4],
        )  # NCCL's latency is tens of microseconds, not milliseconds
        small, large = (x[0], x[1]), (x[2], x[3])
        if small[0] > large[0]:
            small, large = large, small
        out[str(int(n))] = LinkParams(
            float(small[0]) * 1e-6,
            float(small[1]) * 1e9,
            float(large[0]) * 1e-6,
            float(large[1]) * 1e9,
            points,
        )
    return out


def gemm_seconds_table(p: GemmParams, gpu: GpuSpec, g, quant: str | None = None):
    """Predicted seconds of the rows of ``g`` (bf16 GEMMs, or ``quant`` weights: calibration.GEMM_QUANT)."""
    from kvsim.latency.perop import gemm_formula, quant_gemm_formula

    m, k, n = g["m"].to_numpy(float), g["k"].to_numpy(float), g["n"].to_numpy(float)
    return gemm_formula(p, gpu, m, k, n, 2) if quant is None else quant_gemm_formula(p, gpu, m, k, n, quant)


def fit_gemm_table(g, gpu: GpuSpec, quant: str | None = None, t0_s: float | None = None) -> GemmParams:
    """The soft-roofline GEMM parameters (kvsim.calibrate.fits.fit_gemm's form) from measured (m, n, k) GEMMs of
    bf16 or ``quant`` weights; ``t0_s``: the fixed time held at this value (seconds) instead of fitted."""

    if len(g) < 8:
        raise ConfigError(f"need at least 8 GEMM rows to fit, have {len(g)}")
    T = g["seconds"].to_numpy(float)

    def params(x):
        return GemmParams(x[0] * 1e-6, x[1], x[2], x[3]) if t0_s is None else GemmParams(t0_s, x[0], x[1], x[2])

    x0, lo, hi = [5.0, 0.7, 0.8, 1.5], [0.0, 0.05, 0.05, 1.0], [200.0, 1.0, 1.0, 20.0]
    if t0_s is not None:
        x0, lo, hi = x0[1:], lo[1:], hi[1:]
    x = fit_bounded(lambda x: np.log(gemm_seconds_table(params(x), gpu, g, quant) / T), x0, lo, hi)
    return params([float(v) for v in x])


def gemm_regimes(g) -> np.ndarray:
    m = g["m"].to_numpy()
    return np.select([m <= 16, m <= 128, m <= 1024], ["m 1-16", "m 17-128", "m 129-1024"], "m >=1025")


def validate_gemm(g, gpu: GpuSpec, every: int = 5, quant: str | None = None, t0_s: float | None = None) -> dict:
    """predicted / measured of GEMMs (bf16, or ``quant`` weights) fitted on all shapes (in sample) and without
    every ``every``-th (n, k) weight shape, predicted on those (held out), by activation rows m (``t0_s``: as
    :func:`fit_gemm_table`'s)."""
    fitted = fit_gemm_table(g, gpu, quant, t0_s)
    ins = gemm_seconds_table(fitted, gpu, g, quant) / g["seconds"].to_numpy()
    shapes = sorted(set(zip(g["n"], g["k"])))
    test_shapes = {s for i, s in enumerate(shapes) if i % every == every // 2}
    test = np.array([s in test_shapes for s in zip(g["n"], g["k"])])
    held = np.full(len(g), np.nan)
    p = fit_gemm_table(g[~test], gpu, quant, t0_s)
    held[test] = gemm_seconds_table(p, gpu, g[test], quant) / g["seconds"].to_numpy()[test]
    reg = gemm_regimes(g)
    return {"in_sample": _by_regime(ins, reg), "held_out": _by_regime(held, reg)}


# a calibration's statistics of its dense layers (kvsim.calibrate.fits, kvsim.calibrate.ship, benchmarks/fit_calibrations.py)
DENSE_STATS = ("dense_in_sample", "dense_leave_one_model_out", "tp_layer_with_all_reduce", "vidur_dense_layers")


@dataclass(frozen=True)
class AicFit:
    gpu: GpuSpec
    decode_attention: DecodeAttentionParams | None
    prefill_attention: PrefillAttentionParams | None
    all_reduce: dict  # {"nvswitch": {"2": LinkParams, ...}}
    sources: dict  # parameter group -> where its numbers come from
    gemm: GemmParams | None = None
    moe: MoeParams | None = None
    moe_quant: dict = field(default_factory=dict)  # expert dtype -> MoeParams
    mla_decode: DecodeAttentionParams | None = None
    mla_prefill: PrefillAttentionParams | None = None
    exchange: dict = field(default_factory=dict)  # as all_reduce, for all-gather + reduce-scatter
    gemm_quant: dict = field(default_factory=dict)  # weight scheme -> GemmParams

    def calibration(self, base: Calibration | None = None) -> Calibration:
        """``base`` (default: a calibration of kvsim's defaults) with the fitted groups replaced. New GEMMs
        drop the base's dense-layer statistics (they described its GEMMs) and say where the element-wise
        kernels, kept, come from."""
        base = base or Calibration(gpu=self.gpu.name)
        c = replace(base, gpu=self.gpu.name, derived_from="", sources={**base.sources, **self.sources})
        if self.decode_attention:
            c = replace(c, decode_attention=self.decode_attention)
        if self.prefill_attention:
            c = replace(c, prefill_attention=self.prefill_attention)
        if self.all_reduce:
            c = replace(c, all_reduce={**c.all_reduce, **self.all_reduce})
        if self.exchange:
            c = replace(c, exchange={**c.exchange, **self.exchange})
        if self.moe:
            c = replace(c, moe=self.moe)
        if self.moe_quant:
            c = replace(c, moe_quant={**c.moe_quant, **self.moe_quant})
        if self.gemm_quant:
            c = replace(c, gemm_quant={**c.gemm_quant, **self.gemm_quant})
        if self.mla_decode:
            c = replace(c, mla_decode=self.mla_decode)
        if self.mla_prefill:
            c = replace(c, mla_prefill=self.mla_prefill)
        if self.gemm:
            gemm_src = base.sources.get("gemm", "")
            was = (
                base.sources.get("elementwise", "")
                .replace("fitted: the same files", gemm_src)
                .replace("the same files", gemm_src)
            )
            if not was.startswith(("kept from the ", "borrowed")):  # a refit of a refit keeps one origin
                was = f"kept from the {base.derived_from or base.gpu} calibration ({was})"
            c = replace(
                c,
                gemm=self.gemm,
                fit={k: v for k, v in c.fit.items() if k not in DENSE_STATS},
                sources={**c.sources, "elementwise": was},
            )
        return c


def fit_aic(data: AicData, base: Calibration | None = None, kv_dtype_bytes=(2,), prefill_min_tokens: int = 1) -> AicFit:
    """Fit decode and prefill attention and the all-reduce table from ``data``; ``kv_dtype_bytes``: the KV
    element sizes fitted on (default bf16 only; None: all); ``prefill_min_tokens``: the shortest chunks fitted
    on. Prefill keeps ``base``'s tile sizes and reads KV at the fitted decode bandwidth efficiency."""
    base = base or Calibration(gpu=data.gpu.name)
    src, dec, pre, ar = {}, None, None, {}
    tag = "fitted: NVIDIA AIConfigurator (Apache-2.0) {}, vLLM {}{}"
    kvnote = (
        ""
        if kv_dtype_bytes is None
        else f", KV {'/'.join({1: 'fp8', 2: 'bf16', 4: 'fp32'}[b] for b in kv_dtype_bytes)}"
    )
    if data.decode is not None:
        dec = fit_decode(_kv_filter(data.decode, kv_dtype_bytes), data.gpu)
        src["decode_attention"] = tag.format(
            _rel(data, "generation_attention_perf"), data.versions["generation_attention_perf"], kvnote
        )
        if kv_dtype_bytes is not None and 1 not in kv_dtype_bytes and (data.decode["kv_dtype_bytes"] == 1).any():
            dec = fit_kv8(data.decode, data.gpu, dec)  # FP8 KV: its own bandwidth efficiency, the rest shared
            src["decode_attention"] += "; FP8 KV bandwidth from the fp8 rows"
    if data.prefill is not None:
        pbase = replace(base.prefill_attention, bw_eff=dec.bw_eff) if dec else base.prefill_attention
        rows = _kv_filter(data.prefill, kv_dtype_bytes)
        pre = fit_prefill(rows[rows["new_tokens"] >= prefill_min_tokens], data.gpu, pbase)
        src["prefill_attention"] = (
            tag.format(_rel(data, "context_attention_perf"), data.versions["context_attention_perf"], kvnote)
            + (f", chunks >= {prefill_min_tokens} tokens" if prefill_min_tokens > 1 else "")
            + (" (KV bandwidth: the decode fit's)" if dec else "")
        )
    if data.all_reduce is not None:
        ar = {"nvswitch": fit_all_reduce(data.all_reduce)}
        used = sorted(set(data.all_reduce["backend"]))
        files = [
            f"{_rel(data, t)} ({'vLLM ' if t.startswith('custom') else 'NCCL '}{data.versions[t]})"
            for t in ("custom_allreduce_perf", "nccl_perf")
            if t in data.files
        ]
        src["all_reduce"] = (
            "fitted: NVIDIA AIConfigurator (Apache-2.0) "
            + ", ".join(files)
            + f"; per size the faster of vLLM's CUDA-graph all-reduce and NCCL ({'/'.join(used)})"
        )
    exchange = {}
    if data.exchange is not None:
        exchange = {"nvswitch": fit_all_reduce(data.exchange)}
        src["exchange"] = (
            f"fitted: NVIDIA AIConfigurator (Apache-2.0) {_rel(data, 'nccl_perf')} (NCCL "
            f"{data.versions['nccl_perf']}), all_gather + reduce_scatter"
        )
    gemm = None
    if data.gemm is not None:
        gemm = fit_gemm_table(data.gemm, data.gpu)
        src["gemm"] = tag.format(_rel(data, "gemm_perf"), data.versions["gemm_perf"], ", bf16")
    gemm_quant = {q: fit_gemm_table(rows, data.gpu, q) for q, rows in data.gemm_quant.items() if len(rows) >= 8}
    if gemm_quant:
        src["gemm_quant"] = "fitted: NVIDIA AIConfigurator (Apache-2.0) " + "; ".join(
            f"{q} weights from {_rel(data, f'gemm_perf:{q}')} (vLLM {data.versions[f'gemm_perf:{q}']}, "
            f"{GEMM_QUANT[q][0]} rows)"
            for q in gemm_quant
        )
    moe = None
    if data.moe is not None:
        moe = fit_moe_table(data.moe, data.gpu)
        src["moe"] = tag.format(
            _rel(data, "moe_perf"), data.versions["moe_perf"], ", bf16, balanced and power-law routing"
        )
    moe_quant = {}
    for quant, rows in data.moe_quant.items():
        if len(rows) >= 8:
            moe_quant[quant] = fit_moe_table(rows, data.gpu, quant)
    if moe_quant:
        src["moe_quant"] = tag.format(
            _rel(data, "moe_perf"),
            data.versions["moe_perf"],
            ", "
            + ", ".join(f"{q} experts from its {MOE_QUANT[q][0]} rows" for q in moe_quant)
            + ", balanced and power-law routing",
        )
    mla = mla_pre = None
    # projections priced by the GEMMs fitted above, as the model will price them
    priced = replace(base, gemm=gemm or base.gemm, prefill_attention=pre or base.prefill_attention)
    if data.mla_decode is not None:
        mla = fit_mla_decode(data.mla_decode, priced, data.gpu)
        src["mla_decode"] = tag.format(
            _rel(data, "mla_generation_module_perf"),
            data.versions["mla_generation_module_perf"],
            ", bf16, whole MLA layers",
        )
    if data.mla_prefill is not None:
        mla_pre = fit_mla_prefill(data.mla_prefill, priced, data.gpu)
        src["mla_prefill"] = tag.format(
            _rel(data, "mla_context_module_perf"), data.versions["mla_context_module_perf"], ", bf16, whole MLA layers"
        )
    return AicFit(data.gpu, dec, pre, ar, src, gemm, moe, moe_quant, mla, mla_pre, exchange, gemm_quant)


def _rel(data: AicData, table: str) -> str:
    p, root = Path(data.files[table]), Path(data.root).parent
    try:
        return str(p.relative_to(root))
    except ValueError:
        return str(p)


# --- validation -----------------------------------------------------------------------------------
def _stats(r) -> dict:
    r = np.asarray(r, float)
    r = r[np.isfinite(r)]
    if not len(r):
        return {"n": 0}
    return {
        "n": int(len(r)),
        "median": float(np.median(r)),
        "p10": float(np.percentile(r, 10)),
        "p90": float(np.percentile(r, 90)),
    }


def decode_regimes(d) -> np.ndarray:
    b = np.where(d["num_seqs"].to_numpy() < 8, "batch<8", "batch>=8")
    c = np.where(d["context"].to_numpy() < 1024, "ctx<1024", "ctx>=1024")
    return np.char.add(np.char.add(b.astype(str), " "), c.astype(str))


def prefill_regimes(d) -> np.ndarray:
    return np.where(d["new_tokens"].to_numpy() < 512, "chunk<512", "chunk>=512")


def all_reduce_regimes(a) -> np.ndarray:
    s = a["message_bytes"].to_numpy()
    name = np.full(len(s), "", dtype=object)
    for (lo, hi), nm in zip(SIZE_BINS, SIZE_BIN_NAMES):
        name[(s >= lo) & (s < hi)] = nm
    return np.char.add(
        np.char.add("x", a["num_gpus"].astype(str).to_numpy().astype(str)), np.char.add(" ", name.astype(str))
    )


def _by_regime(ratio, regimes) -> dict:
    out = {"all": _stats(ratio)}
    for k in sorted(set(regimes)):
        out[k] = _stats(ratio[regimes == k])
    return out


MHA = "decode, one query head per KV head"  # the layouts a kernel may walk unsplit (fit_decode)


def evaluate_calibration(
    data: AicData, calib: Calibration, kv_dtype_bytes=(2,), interconnect: str = "nvswitch"
) -> dict:
    """predicted / measured of ``calib`` on ``data`` by regime: decode (batch x context), prefill (chunk size),
    all-reduce (GPUs x message size); with fp8-KV rows, "decode other KV dtypes" / "prefill other KV dtypes"
    as well; ``MHA``: the decode rows with one query head per KV head."""
    out = {}
    pred = predict(data, calib, interconnect)
    for kind, regimes in (("decode", decode_regimes), ("prefill", prefill_regimes)):
        d = getattr(data, kind)
        if d is None:
            continue
        r = pred[kind] / d["seconds"].to_numpy()
        sel = d["kv_dtype_bytes"].isin(kv_dtype_bytes).to_numpy() if kv_dtype_bytes else np.ones(len(d), bool)
        out[kind] = _by_regime(r[sel], regimes(d)[sel])
        if kind == "decode":
            one = sel & _one_query_head_per_kv_head(d)
            out[MHA] = _by_regime(r[one], regimes(d)[one])
        if (~sel).any():
            out[f"{kind} other KV dtypes"] = _by_regime(r[~sel], regimes(d)[~sel])
    for kind in ("all_reduce", "exchange"):
        if kind in pred:
            a = getattr(data, kind)
            out[kind] = _by_regime(pred[kind] / a["seconds"].to_numpy(), all_reduce_regimes(a))
    return out


def head_layout_folds(d, folds: int) -> np.ndarray:
    """Fold of each row: head layouts (q heads, KV heads, head dim) dealt round-robin over ``folds`` folds."""
    keys = list(zip(d["q_heads"], d["kv_heads"], d["head_dim"]))
    layouts = sorted(set(keys))
    fold_of = {k: i % folds for i, k in enumerate(layouts)}
    return np.array([fold_of[k] for k in keys])


def validate_aic(
    data: AicData,
    fit: AicFit | None = None,
    base: Calibration | None = None,
    folds: int = 5,
    every: int = 5,
    kv_dtype_bytes=(2,),
    prefill_min_tokens: int = 1,
) -> dict:
    """{"in_sample": ..., "held_out": ...}, each {table: {regime: {n, median, p10, p90}}} of predicted /
    measured. Held out: attention fitted without one of ``folds`` groups of head layouts and predicted on it
    (layouts dealt round-robin, so each fold spans head counts and head dims); all-reduce fitted without
    every ``every``-th message size of each group size and predicted on those."""
    base = base or Calibration(gpu=data.gpu.name)
    fit = fit or fit_aic(data, base, kv_dtype_bytes, prefill_min_tokens)
    out = {"in_sample": evaluate_calibration(data, fit.calibration(base), kv_dtype_bytes)}
    held: dict = {}
    for kind in ("decode", "prefill"):
        d = getattr(data, kind)
        if d is None:
            continue
        d = _kv_filter(d, kv_dtype_bytes).reset_index(drop=True)
        fold = head_layout_folds(d, folds)
        ratio = np.full(len(d), np.nan)
        for f in range(folds):
            train, test = d[fold != f], d[fold == f]
            if test.empty or len(train) < 5:
                continue
            if kind == "decode":
                p = fit_decode(train, data.gpu)
                ratio[fold == f] = _decode_df(p, data.gpu, test) / test["seconds"].to_numpy()
            else:
                bw = fit.decode_attention.bw_eff if fit.decode_attention else base.prefill_attention.bw_eff
                p = fit_prefill(
                    train[train["new_tokens"] >= prefill_min_tokens],
                    data.gpu,
                    replace(base.prefill_attention, bw_eff=bw),
                )
                ratio[fold == f] = _prefill_df(p, data.gpu, test) / test["seconds"].to_numpy()
        held[kind] = _by_regime(ratio, (decode_regimes if kind == "decode" else prefill_regimes)(d))
        if kind == "decode":
            one = _one_query_head_per_kv_head(d)
            held[MHA] = _by_regime(ratio[one], decode_regimes(d)[one])
    for kind in ("all_reduce", "exchange"):
        a = getattr(data, kind)
        if a is None:
            continue
        a = a.reset_index(drop=True)
        ratio = np.full(len(a), np.nan)
        for n, g in a.groupby("num_gpus"):
            g = g.sort_values("message_bytes")
            test = np.arange(len(g)) % every == every // 2
            links = fit_all_reduce(g[~test])
            if str(int(n)) in links:
                ratio[g.index[test]] = (
                    link_seconds(links[str(int(n))], g["message_bytes"].to_numpy()[test])
                    / g["seconds"].to_numpy()[test]
                )
        held[kind] = _by_regime(ratio, all_reduce_regimes(a))
    out["held_out"] = held
    return out
