"""Fit a calibration from measured profiles, and say how well it predicts what it was not fitted on.

Inputs (recognised by their columns):

- Vidur-format ``mlp.csv``: per-layer times of the dense ops by (num_tokens, tensor parallelism) for a
  model shape (n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size, use_gated_mlp); milliseconds.
- Vidur-format ``attention.csv``: attn_decode / attn_prefill / attn_kv_cache_save by batch size, KV cache
  size and prefill chunk size; milliseconds.
- Vidur-format ``all_reduce.csv`` / ``send_recv.csv``: NCCL collective times by message size.
- kvsim's own ``kvsim kernels bench`` / ``replay`` CSVs: decode (and prefill) attention kernel times.

Each parameter group is fitted by least squares on log(predicted / measured) with a soft-L1 loss, so
small and large times count alike and a few noisy rows do not pull the fit. Groups without data keep
the base calibration's values, and the calibration's ``sources`` say which is which.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from kvsim.errors import ConfigError
from kvsim.hardware import GpuSpec, ModelSpec
from kvsim.hardware.gpus import GPU_PRESETS
from kvsim.latency.calibration import (
    ELEMENTWISE_KINDS,
    V1_KINDS,
    Calibration,
    DecodeAttentionParams,
    ElementwiseParams,
    GemmParams,
    LinkParams,
    PrefillAttentionParams,
)
from kvsim.latency.perop import Op, layer_ops

# Vidur's device names -> kvsim GPU presets; its network SKUs -> interconnects
VIDUR_GPUS = {"a100": "a100-80gb", "h100": "h100-80gb", "a40": "a40"}
VIDUR_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
    "emb",
)
TOKEN_REGIMES = ((1, 16), (17, 128), (129, 1024), (1025, 1 << 30))
SIZE_REGIMES = ((0, 1 << 16), (1 << 16, 1 << 20), (1 << 20, 1 << 24), (1 << 24, 1 << 40))


def _scipy():
    try:
        from scipy.optimize import least_squares
    except ImportError:
        raise ConfigError("fitting a calibration needs SciPy: pip install 'kvsim[calibrate]'") from None
    return least_squares


# --- reading -------------------------------------------------------------------------------------
def kind_of(df) -> str:
    cols = set(df.columns)
    if "time_stats.attn_pre_proj.median" in cols:
        return "mlp"
    if "time_stats.attn_decode.median" in cols or "time_stats.attn_prefill.median" in cols:
        return "attention"
    if "time_stats.all_reduce.median" in cols:
        return "all_reduce"
    if "time_stats.send_recv.median" in cols:
        return "send_recv"
    if {"kind", "num_seqs", "kv_bytes", "time_s"} <= cols:
        return "kernel"
    raise ConfigError(
        "unrecognised measurement file: expected Vidur mlp/attention/all_reduce/send_recv CSVs "
        "or `kvsim kernels bench/replay` output"
    )


def gpu_from_path(path: str) -> str | None:
    """The GPU a Vidur profile was measured on, from its path (compute/<gpu>/... or network/<gpu>_...)."""
    parts = re.split(r"[/\\]|__", str(path).lower())
    for p in parts:
        sku = p.split("_")[0]
        if sku in VIDUR_GPUS:
            return VIDUR_GPUS[sku]
    return None


def interconnect_from_path(path: str) -> str:
    return "pairwise" if "pairwise" in str(path).lower() else "nvswitch"


# What each kind of measurement file must hold: shape columns (whole numbers >= their minimum; a bad one
# is an error naming file, line and column) and the measured columns (a value that is not a finite positive
# number is dropped, and counted).
_SHAPES = {
    "mlp": {
        "n_head": 1,
        "n_kv_head": 1,
        "n_embd": 1,
        "n_expanded_embd": 1,
        "vocab_size": 1,
        "num_tensor_parallel_workers": 1,
        "num_tokens": 1,
    },
    "attention": {
        "n_q_head": 1,
        "n_kv_head": 1,
        "n_embd": 1,
        "num_tensor_parallel_workers": 1,
        "batch_size": 1,
        "prefill_chunk_size": 0,
        "kv_cache_size": 0,
    },
    "all_reduce": {"num_workers": 1, "size": 1},
    "send_recv": {"size": 1},
    "kernel": {"num_seqs": 1},
}
_OPTIONAL_SHAPES = {
    "devices_per_node": 1,
    "q_heads": 1,
    "kv_heads": 1,
    "head_dim": 1,
    "new_tokens": 1,
    "total_context": 1,
}
_MAX_SHAPE = 1 << 40


def clean_measurements(df, kind: str, path: str):
    """``df`` with its shape columns checked and whole, its measured values finite and positive (others
    dropped: NaN in an mlp.csv, whose ops are fitted one by one; the row elsewhere); also the count dropped."""
    import pandas as pd

    need = _SHAPES[kind]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)} of a {kind} measurement file")
    df = df.copy()
    for col, lo in [*need.items(), *((c, v) for c, v in _OPTIONAL_SHAPES.items() if c in df.columns)]:
        v = pd.to_numeric(df[col], errors="coerce")
        bad = ~(v.notna() & (v >= lo) & (v <= _MAX_SHAPE) & (v == v.round()))
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise ConfigError(f"{path}:{i + 2}: column '{col}' must be a whole number >= {lo}, got {df[col].iloc[i]!r}")
        df[col] = v.astype("int64")
    if "use_gated_mlp" in df.columns:
        text = df["use_gated_mlp"].astype(str).str.strip().str.lower()
        ok = text.isin(["true", "false", "1", "0", "1.0", "0.0"])
        if not ok.all():
            i = int((~ok).to_numpy().nonzero()[0][0])
            raise ConfigError(
                f"{path}:{i + 2}: column 'use_gated_mlp' must be true or false, got {df['use_gated_mlp'].iloc[i]!r}"
            )
        df["use_gated_mlp"] = text.isin(["true", "1", "1.0"])
    elif kind == "mlp":
        raise ConfigError(f"{path}: missing column use_gated_mlp of an mlp measurement file")
    if kind == "kernel" and "kind" in df.columns and (df["kind"].astype(str) == "prefill").any():
        gone = [c for c in ("q_heads", "kv_heads", "head_dim", "new_tokens", "total_context") if c not in df.columns]
        if gone:
            raise ConfigError(
                f"{path}: prefill rows need column(s) {', '.join(gone)} (as `kvsim kernels bench` writes them)"
            )
    measured = [c for c in df.columns if c.startswith("time_stats.") or c in ("time_s", "kv_bytes")]
    dropped = 0
    for col in measured:
        v = pd.to_numeric(df[col], errors="coerce")
        good = v.notna() & np.isfinite(v) & ((v >= 0) if col == "kv_bytes" else (v > 0))
        dropped += int((~good & df[col].notna()).sum())
        df[col] = v.where(good)
    used = {
        "all_reduce": ["time_stats.all_reduce.median"],
        "send_recv": ["time_stats.send_recv.median"],
        "kernel": ["time_s", "kv_bytes"],
    }.get(kind, [])
    if kind == "attention":
        dec = df["prefill_chunk_size"] == 0
        keep = pd.Series(True, index=df.index)
        for col, rows in (("time_stats.attn_decode.median", dec), ("time_stats.attn_prefill.median", ~dec)):
            keep &= ~rows | (df[col].notna() if col in df.columns else False)
        df = df[keep]
    elif used:
        df = df.dropna(subset=[c for c in used if c in df.columns])
    return df, dropped


def read_measurements(paths: list[str]) -> dict[str, list[tuple[str, object]]]:
    """{kind: [(path, DataFrame), ...]}, each checked (:func:`clean_measurements`); values dropped are said
    on stderr."""
    import sys

    import pandas as pd

    out: dict[str, list] = {}
    for p in paths:
        try:
            df = pd.read_csv(p)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise ConfigError(f"{p}: cannot read measurements ({e})") from None
        try:
            k = kind_of(df)
        except ConfigError as e:
            raise ConfigError(f"{p}: {e}") from None
        df, dropped = clean_measurements(df, k, str(p))
        if dropped:
            print(f"{p}: skipped {dropped} measured value(s) that are not finite positive numbers", file=sys.stderr)
        out.setdefault(k, []).append((str(p), df))
    return out


def vidur_model(row) -> ModelSpec:
    """The shape of a Vidur mlp.csv row as a (one-layer) ModelSpec; Vidur profiles in fp16."""
    h, q = int(row["n_embd"]), int(row["n_head"])
    return ModelSpec(
        "profiled",
        1,
        q,
        int(row["n_kv_head"]),
        h // q,
        1.0,
        4096,
        "fp16",
        h,
        int(row["n_expanded_embd"]),
        int(row["vocab_size"]),
        bool(row["use_gated_mlp"]),
    )


def dense_rows(df, model_name: str = "") -> list[tuple[str, str, Op, int, float, int]]:
    """(model, op name, Op, tokens, measured seconds, tp) for every measured op of a Vidur mlp.csv."""
    rows = []
    shape_cols = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp"]
    for key, g in df.groupby(shape_cols + ["num_tensor_parallel_workers"]):
        first = g.iloc[0]
        m = vidur_model(first)
        tp = int(first["num_tensor_parallel_workers"])
        ops = {op.name: op for op in layer_ops(m, tp)}
        ops["emb"] = Op("emb", kind="emb", row=m.hidden_size, bytes_per_token=2 * m.hidden_size * 2)
        name = model_name or f"h{m.hidden_size}-f{m.intermediate_size}-q{m.q_heads}-kv{m.kv_heads}"
        for op_name in VIDUR_OPS:
            col = f"time_stats.{op_name}.median"
            if col not in g.columns:
                continue
            for tok, t in zip(g["num_tokens"].to_numpy(), g[col].to_numpy()):
                if t == t and t > 0:
                    rows.append((name, op_name, ops[op_name], int(tok), float(t) * 1e-3, tp))
    return rows


# --- fitting -------------------------------------------------------------------------------------
def fit_bounded(residual, x0, lo, hi):
    """The parameters (from ``x0``, within ``lo``..``hi``) that minimise ``residual`` (log predicted/measured per
    row) by least squares with a soft-L1 loss: the one fitter every parameter group of a calibration uses."""
    least_squares = _scipy()
    # a starting point taken from the data (say 5x the fastest all-reduce of a 16-GPU NVLink domain) may lie
    # past a bound; the bounds hold
    x0 = np.clip(np.asarray(x0, dtype=float), lo, hi)
    with np.errstate(all="ignore"):  # the residual's own overflow is what the check below reports
        start = np.asarray(residual(np.asarray(x0, dtype=float)), dtype=float)
    if not np.isfinite(start).all():
        raise ConfigError(
            "the measurements cannot be fitted: some predicted/measured ratios are not finite (a "
            "time or size far outside what a GPU kernel takes or moves, e.g. a time below 1e-300 s)"
        )
    r = least_squares(residual, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    return r.x


def fit_gemm(rows, gpu: GpuSpec) -> GemmParams:
    from kvsim.latency.perop import gemm_formula

    g = [(op.k, op.n, tok, t) for _, _, op, tok, t, _ in rows if not op.kind]
    if len(g) < 8:
        raise ConfigError(f"need at least 8 GEMM measurements to fit, have {len(g)}")
    K, N, M, T = (np.array(c, dtype=float) for c in zip(*g))

    def params(x):  # fitted in microseconds: well-scaled parameters
        return GemmParams(x[0] * 1e-6, x[1], x[2], x[3])

    def res(x):
        return np.log(gemm_formula(params(x), gpu, M, K, N, 2) / T)

    return params(
        [float(v) for v in fit_bounded(res, [5.0, 0.7, 0.8, 1.5], [0.0, 0.05, 0.05, 1.0], [200.0, 1.0, 1.0, 20.0])]
    )


def fit_elementwise(rows, gpu: GpuSpec) -> dict[str, ElementwiseParams]:
    from kvsim.latency.perop import elementwise_formula

    out = {}
    for kind in ELEMENTWISE_KINDS:
        e = [(op.row, op.bytes_per_token, tok, t) for _, _, op, tok, t, _ in rows if op.kind == kind]
        if len(e) < 8:
            continue
        R, B, M, T = (np.array(c, dtype=float) for c in zip(*e))

        def params(x):  # microseconds and picoseconds per element: well-scaled parameters
            return ElementwiseParams(x[0] * 1e-6, x[1], x[2] * 1e-12)

        def res(x):
            return np.log(elementwise_formula(params(x), gpu, M, R, B) / T)

        out[kind] = params([float(v) for v in fit_bounded(res, [3.0, 0.5, 100.0], [0.0, 0.01, 0.0], [100.0, 1.0, 1e4])])
    return out


# vLLM V1's element-wise kernels (custom CUDA ops, or Inductor's Triton kernels under torch.compile) by the shape
# of the measured kernel that prices them: RMSNorm (the residual add fused in) reduces over each row first;
# SiLU-and-mul, rotary and an add are one pass
V1_SHAPES = {kind: "reduce" if kind == "norm" else "pointwise" for kind in V1_KINDS}


def fit_row_kernels(m, k, static_s, dynamic_s, gpu: GpuSpec) -> dict[str, ElementwiseParams]:
    """The element-wise kernels of vLLM V1 (:data:`V1_SHAPES`), fitted on measured FP8 activation quant
    kernels over ``m`` rows of ``k`` elements (arrays; seconds): ``static_s`` a static-scale quant (one pass:
    reads 2 bytes and writes 1 per element), ``dynamic_s`` a per-token dynamic one (a reduction over each row,
    then the same pass), the shapes of a point-wise kernel and of RMSNorm. Each moves 3 bytes per element."""
    from kvsim.latency.perop import elementwise_formula

    M, K = np.asarray(m, dtype=float), np.asarray(k, dtype=float)
    fitted = {}
    for shape, times in (("pointwise", static_s), ("reduce", dynamic_s)):
        T = np.asarray(times, dtype=float)

        def params(x):  # microseconds and picoseconds per element: well-scaled parameters
            return ElementwiseParams(x[0] * 1e-6, x[1], x[2] * 1e-12)

        def res(x, T=T):
            return np.log(elementwise_formula(params(x), gpu, M, K, 3 * K) / T)

        fitted[shape] = params(
            [float(v) for v in fit_bounded(res, [2.0, 0.8, 50.0], [0.0, 0.01, 0.0], [100.0, 1.0, 1e4])]
        )
    return {kind: fitted[shape] for kind, shape in V1_SHAPES.items()}


def fit_links(frames) -> dict[str, dict[str, LinkParams]]:
    """All-reduce latency and bandwidth per (interconnect, GPUs in the group) from Vidur all_reduce.csv."""
    out: dict[str, dict[str, LinkParams]] = {}
    for path, df in frames:
        ic = interconnect_from_path(path)
        if "devices_per_node" in df.columns:
            df = df[df["devices_per_node"] == df["num_workers"]]  # one node, the group on its own
        for n, g in df.groupby("num_workers"):
            S = g["size"].to_numpy(dtype=float)
            T = g["time_stats.all_reduce.median"].to_numpy(dtype=float) * 1e-3
            keep = T > 0
            S, T = S[keep], T[keep]
            if len(S) < 4:
                continue

            def res(x):  # microseconds and GB/s
                return np.log((x[0] * 1e-6 + S / (x[1] * 1e9)) / T)

            x = fit_bounded(res, [30.0, 100.0], [0.0, 0.1], [1e4, 1e4])
            out.setdefault(ic, {})[str(int(n))] = LinkParams(float(x[0]) * 1e-6, float(x[1]) * 1e9)
    return out


def fit_decode_attention_kernel(frames, gpu: GpuSpec) -> DecodeAttentionParams | None:
    """From `kvsim kernels bench/replay` decode rows (one layer's KV): floor, ramp, bandwidth, per-sequence."""
    import pandas as pd

    df = pd.concat([f for _, f in frames], ignore_index=True)
    df = df[(df["kind"] == "decode") & (df["time_s"] > 0)]
    if len(df) < 5:
        return None
    n = df["num_seqs"].to_numpy(float)
    b = df["kv_bytes"].to_numpy(float)
    T = df["time_s"].to_numpy(float)

    return fit_decode_params(n, b, T, gpu)


def fit_decode_params(n, b, T, gpu: GpuSpec, token_bytes=None) -> DecodeAttentionParams:
    """floor, ramp, bandwidth and per-sequence cost of decode attention from (sequences, KV bytes, seconds).
    With ``token_bytes`` (one token's KV bytes per row, for rows of several head layouts) the per-sequence
    cost is fitted in tokens of the sequence's KV (``per_seq_tokens``), else in seconds (``per_seq_s``)."""

    def params(x):  # microseconds; nanoseconds or tokens per sequence
        if token_bytes is None:
            return DecodeAttentionParams(x[0] * 1e-6, x[1] * 1e-6, x[2], x[3] * 1e-9)
        return DecodeAttentionParams(x[0] * 1e-6, x[1] * 1e-6, x[2], 0.0, x[3])

    extra = 0.0 if token_bytes is None else n * token_bytes

    def res(x):  # DecodeAttentionParams.stream_s in bytes (rows of several KV widths), floor below it
        p = params(x)
        stream = p.ramp_s + p.per_seq_s * n + (b + p.per_seq_tokens * extra) / (gpu.hbm_bandwidth * p.bw_eff)
        return np.log(np.maximum(p.floor_s, stream) / T)

    return params(
        [float(v) for v in fit_bounded(res, [10.0, 2.0, 0.7, 10.0], [0.0, 0.0, 0.01, 0.0], [1e4, 1e4, 1.0, 1e5])]
    )


def fit_prefill_attention_kernel(frames, gpu: GpuSpec, base: Calibration) -> PrefillAttentionParams | None:
    """From `kvsim kernels bench` prefill rows (one sequence, one layer): floor, tile efficiency, start-up."""
    import pandas as pd

    df = pd.concat([f for _, f in frames], ignore_index=True)
    df = df[(df["kind"] == "prefill") & (df["time_s"] > 0)]
    if len(df) < 4:
        return None
    rows = [
        (
            int(r.q_heads),
            int(r.kv_heads),
            int(r.head_dim),
            int(r.new_tokens),
            int(r.total_context) - int(r.new_tokens),
            float(r.time_s),
        )
        for r in df.itertuples()
    ]
    return _fit_prefill(
        [
            (ModelSpec("kernel", 1, hq, hkv, hd, 1.0, 1 << 30, "fp16"), 1, chunk, cached, t)
            for hq, hkv, hd, chunk, cached, t in rows
        ],
        gpu,
        base,
    )


def _fit_prefill(rows, gpu: GpuSpec, base: Calibration) -> PrefillAttentionParams:
    """floor, tile efficiency and start-up tiles of the prefill tile model from (model, tp, chunk, cached, s)."""
    from kvsim.latency.cpu import CPU_PRESETS
    from kvsim.latency.perop import PerOpModel

    T = np.array([r[-1] for r in rows])

    def params(x):
        return replace(base.prefill_attention, floor_s=x[0] * 1e-6, flops_eff=x[1], cta_overhead_tiles=x[2])

    def res(x):
        c = replace(base, prefill_attention=params(x))
        pred = [
            PerOpModel(m, gpu, c, CPU_PRESETS["none"], tp).prefill_attention_layer_s([(chunk, cached)])
            for m, tp, chunk, cached, _ in rows
        ]
        return np.log(np.array(pred) / T)

    return params([float(v) for v in fit_bounded(res, [10.0, 0.5, 2.0], [0.0, 0.001, 0.0], [1e5, 1.0, 64.0])])


def fit_attention_csv(
    frames, gpu: GpuSpec, base: Calibration
) -> tuple[DecodeAttentionParams | None, PrefillAttentionParams | None]:
    """From Vidur-format attention.csv: decode (attn_decode + kv-cache save) and prefill efficiency."""
    import pandas as pd

    df = pd.concat([f for _, f in frames], ignore_index=True)
    save = df.get("time_stats.attn_kv_cache_save.median", pd.Series(0.0, index=df.index)).fillna(0.0)
    kvh = (df["n_kv_head"] / df["num_tensor_parallel_workers"]).clip(lower=1)
    hd = df["n_embd"] / df["n_q_head"]
    bytes_per_token = 2 * kvh * hd * 2
    dec = df[df["prefill_chunk_size"] == 0]
    decode = None
    if len(dec) >= 5:
        n = dec["batch_size"].to_numpy(float)
        b = (dec["batch_size"] * dec["kv_cache_size"] * bytes_per_token[dec.index]).to_numpy(float)
        T = ((dec["time_stats.attn_decode.median"] + save[dec.index]) * 1e-3).to_numpy(float)
        decode = fit_decode_params(n, b, T, gpu)
    pre = df[df["prefill_chunk_size"] > 0]
    prefill = None
    if len(pre) >= 5:
        rows = []
        for _, r in pre.iterrows():
            m = ModelSpec(
                "profiled",
                1,
                int(r["n_q_head"]),
                int(r["n_kv_head"]),
                int(r["n_embd"] // r["n_q_head"]),
                1.0,
                1 << 30,
                "fp16",
                int(r["n_embd"]),
                4 * int(r["n_embd"]),
                32000,
            )
            rows.append(
                (
                    m,
                    int(r["num_tensor_parallel_workers"]),
                    int(r["prefill_chunk_size"]),
                    int(r["kv_cache_size"]),
                    (float(r["time_stats.attn_prefill.median"]) + float(save[r.name])) * 1e-3,
                )
            )
        prefill = _fit_prefill(rows, gpu, base)
    return decode, prefill


def fit_calibration(
    paths: list[str], gpu_name: str | None = None, base: Calibration | None = None, data: dict | None = None
) -> Calibration:
    """A calibration for one GPU from measurement files; groups without data keep ``base``'s values.
    ``data``: the files as :func:`read_measurements` already read them."""
    from kvsim.latency.calibration import shipped_calibration

    data = read_measurements(paths) if data is None else data
    gpus = {
        g
        for k in ("mlp", "attention", "all_reduce", "send_recv")
        for p, _ in data.get(k, [])
        if (g := gpu_from_path(p))
    }
    if gpu_name is None:
        if len(gpus) != 1:
            raise ConfigError(
                "say which GPU the measurements are from: --gpu NAME"
                + (f" (the files name {', '.join(sorted(gpus))})" if gpus else "")
            )
        gpu_name = gpus.pop()
    if gpu_name not in GPU_PRESETS:
        raise ConfigError(f"unknown GPU '{gpu_name}' (presets: {', '.join(GPU_PRESETS)})")
    gpu = GPU_PRESETS[gpu_name]
    if base is None:
        base, _ = shipped_calibration(gpu)
    calib = replace(base, gpu=gpu.name, derived_from="", sources=dict(base.sources), fit={})
    kernel_frames = data.get("kernel", [])
    measured_on = "gpu"
    if kernel_frames:
        import pandas as pd

        devs = set(pd.concat([f for _, f in kernel_frames]).get("device", pd.Series(["cuda"])).astype(str))
        if devs - {"cuda"}:
            measured_on = "cpu-interpreter"
    calib = replace(calib, measured_on=measured_on)
    if "mlp" in data:
        rows = [r for p, df in data["mlp"] for r in dense_rows(df)]
        calib = replace(
            calib, gemm=fit_gemm(rows, gpu), elementwise={**calib.elementwise, **fit_elementwise(rows, gpu)}
        )
        src = ", ".join(Path(p).name for p, _ in data["mlp"])
        calib.sources["gemm"] = calib.sources["elementwise"] = f"fitted: {src}"
        calib.fit["dense_in_sample"] = summarize_dense(rows, calib, gpu)
    if "all_reduce" in data:
        links = fit_links(data["all_reduce"])
        merged = {ic: {**calib.all_reduce.get(ic, {}), **t} for ic, t in links.items()}
        calib = replace(calib, all_reduce={**calib.all_reduce, **merged})
        calib.sources["all_reduce"] = "fitted: " + ", ".join(Path(p).name for p, _ in data["all_reduce"])
    if "attention" in data:
        dec, pre = fit_attention_csv(data["attention"], gpu, calib)
        if dec:
            calib = replace(calib, decode_attention=dec)
            calib.sources["decode_attention"] = "fitted: attention.csv"
        if pre:
            calib = replace(calib, prefill_attention=pre)
            calib.sources["prefill_attention"] = "fitted: attention.csv"
    if kernel_frames:
        dec = fit_decode_attention_kernel(kernel_frames, gpu)
        if dec:
            calib = replace(calib, decode_attention=dec)
            calib.sources["decode_attention"] = f"fitted: kvsim kernels bench/replay ({measured_on})"
        pre = fit_prefill_attention_kernel(kernel_frames, gpu, calib)
        if pre:
            calib = replace(calib, prefill_attention=pre)
            calib.sources["prefill_attention"] = f"fitted: kvsim kernels bench ({measured_on})"
    calib.fit["inputs"] = [str(p) for p in paths]
    return calib


# --- validation ----------------------------------------------------------------------------------
def _regime(x: float, regimes) -> str:
    for lo, hi in regimes:
        if lo <= x <= hi:
            return f"{lo}-{hi}" if hi < (1 << 30) else f">={lo}"
    return "?"


def _stats(r: np.ndarray) -> dict:
    return {
        "n": int(len(r)),
        "median": float(np.median(r)),
        "p10": float(np.percentile(r, 10)),
        "p90": float(np.percentile(r, 90)),
    }


def summarize_dense(rows, calib: Calibration, gpu: GpuSpec) -> dict:
    """predicted / measured of GEMMs, element-wise ops and whole dense layers, by token regime."""
    out: dict = {}
    by_key: dict[tuple, list[float]] = {}
    for model, op_name, op, tok, t, tp in rows:
        pred = op.seconds(calib, gpu, tok, 2)
        group = "gemm" if not op.kind else "elementwise"
        out.setdefault(group, {}).setdefault(_regime(tok, TOKEN_REGIMES), []).append(pred / t)
        if op_name != "emb":
            acc = by_key.setdefault((model, tp, tok), [0.0, 0.0, 0])
            acc[0] += pred
            acc[1] += t
            acc[2] += 1
    for (model, tp, tok), (p, m, cnt) in by_key.items():
        if cnt >= 8:  # every op of the layer measured
            out.setdefault("layer", {}).setdefault(_regime(tok, TOKEN_REGIMES), []).append(p / m)
    return {g: {k: _stats(np.array(v)) for k, v in sorted(d.items())} for g, d in out.items()}


def leave_one_model_out(rows, gpu: GpuSpec, base: Calibration) -> dict:
    """Fit without each model in turn and predict it: predicted / measured by op group and token regime."""
    models = sorted({r[0] for r in rows})
    collected: dict[str, dict[str, list[float]]] = {}
    per_model = {}
    layers_out = []  # (model, tp, tokens, hidden size, predicted s, measured s) of complete held-out layers
    for m in models:
        train = [r for r in rows if r[0] != m]
        test = [r for r in rows if r[0] == m]
        c = replace(base, gemm=fit_gemm(train, gpu), elementwise={**base.elementwise, **fit_elementwise(train, gpu)})
        s = summarize_dense(test, c, gpu)
        per_model[m] = {g: {k: v["median"] for k, v in d.items()} for g, d in s.items()}
        for model, op_name, op, tok, t, tp in test:
            g = "gemm" if not op.kind else "elementwise"
            collected.setdefault(g, {}).setdefault(_regime(tok, TOKEN_REGIMES), []).append(
                op.seconds(c, gpu, tok, 2) / t
            )
        layer: dict[tuple, list[float]] = {}
        for model, op_name, op, tok, t, tp in test:
            if op_name == "emb":
                continue
            acc = layer.setdefault((tp, tok), [0.0, 0.0, 0, 0])
            acc[0] += op.seconds(c, gpu, tok, 2)
            acc[1] += t
            acc[2] += 1
            if op_name == "input_layernorm":
                acc[3] = op.row
        for (tp, tok), (p, meas, cnt, hidden) in layer.items():
            if cnt >= 8:
                collected.setdefault("layer", {}).setdefault(_regime(tok, TOKEN_REGIMES), []).append(p / meas)
                layers_out.append((m, tp, tok, hidden, p, meas))
    return {
        "pooled": {g: {k: _stats(np.array(v)) for k, v in sorted(d.items())} for g, d in collected.items()},
        "per_model_median": per_model,
        "layers": layers_out,
    }


def tp_layers_with_all_reduce(layers, links: dict, frames) -> dict:
    """Held-out dense layers of tensor-parallel rows plus their two all-reduces (tokens x hidden x 2 bytes),
    predicted (fitted links) against measured (the measured all-reduce of the nearest message size)."""
    measured: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    for path, df in frames:
        ic = interconnect_from_path(path)
        if "devices_per_node" in df.columns:
            df = df[df["devices_per_node"] == df["num_workers"]]
        for n, g in df.groupby("num_workers"):
            med = g.groupby("size")["time_stats.all_reduce.median"].median()
            measured[(ic, int(n))] = (med.index.to_numpy(float), med.to_numpy(float) * 1e-3)
    out: dict[str, list[float]] = {}
    for model, tp, tok, hidden, pred, meas in layers:
        if tp < 2:
            continue
        ic = "nvswitch" if ("nvswitch", tp) in measured else "pairwise"
        if (ic, tp) not in measured or str(tp) not in links.get(ic, {}):
            continue
        sizes, times = measured[(ic, tp)]
        size = tok * hidden * 2
        i = int(np.argmin(np.abs(np.log(sizes) - np.log(size))))
        link = links[ic][str(tp)]
        p = pred + 2 * link.seconds(size)
        out.setdefault(_regime(tok, TOKEN_REGIMES), []).append(p / (meas + 2 * times[i]))
    return {k: _stats(np.array(v)) for k, v in sorted(out.items())}


def holdout_links(frames, every: int = 5) -> dict:
    """Fit all-reduce on 4 of every 5 message sizes, predict the fifth: predicted / measured by size."""
    out: dict = {}
    for path, df in frames:
        ic = interconnect_from_path(path)
        if "devices_per_node" in df.columns:
            df = df[df["devices_per_node"] == df["num_workers"]]
        for n, g in df.groupby("num_workers"):
            g = g.sort_values("size").reset_index(drop=True)
            test = g.index % every == 0
            fitted = fit_links([(path, g[~test])])
            if ic not in fitted or str(int(n)) not in fitted[ic]:
                continue
            p = fitted[ic][str(int(n))]
            t = g[test]
            ratio = (p.latency_s + t["size"].to_numpy(float) / p.bandwidth) / (
                t["time_stats.all_reduce.median"].to_numpy(float) * 1e-3
            )
            for s, r in zip(t["size"].to_numpy(), ratio):
                out.setdefault(f"{ic} x{int(n)}", {}).setdefault(_regime(s, SIZE_REGIMES), []).append(r)
    return {k: {r: _stats(np.array(v)) for r, v in sorted(d.items())} for k, d in out.items()}
