"""Fit the attention-time model from kernel measurements, and a latency model that uses it.

Model form, per layer, for a decode iteration of n sequences whose K and V total ``kv_bytes`` bytes:

    t_attn = c0 + c_seq * n + c_byte * kv_bytes          (seconds)

fitted by least squares on relative error (rows weighted by 1 / time) on the decode rows of one or more measurement CSVs (`kvsim kernels bench`,
`kvsim kernels replay`); every fifth row is held out and the fit error on those rows is reported.
A coefficient that comes out negative is dropped and the fit redone without it.

The calibrated latency model replaces the roofline's KV-read term by ``layers x t_attn``:

    step = max(dense FLOPs / FLOP/s, weight bytes / bandwidth) + layers x t_attn + prefill attention FLOPs / FLOP/s + overhead

(prefill attention stays from the roofline: decode measurements do not cover it.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kvsim.config import RooflineParams
from kvsim.engine.latency import LatencyModel, StepShape, sum_affine
from kvsim.errors import ConfigError
from kvsim.hardware import GpuSpec, ModelSpec

TERMS = ("c0", "c_seq", "c_byte")


def _design(df) -> np.ndarray:
    return np.column_stack([np.ones(len(df)), df["num_seqs"].to_numpy(float), df["kv_bytes"].to_numpy(float)])


def fit_attention_model(frames: list) -> dict:
    import pandas as pd

    df = pd.concat(frames, ignore_index=True)
    missing = {"kind", "num_seqs", "kv_bytes", "time_s"} - set(df.columns)
    if missing:
        raise ConfigError(f"measurements lack column(s) {', '.join(sorted(missing))}")
    df = df[(df["kind"] == "decode") & (df["time_s"] > 0)].reset_index(drop=True)
    if len(df) < 5:
        raise ConfigError(f"need at least 5 decode measurements to fit, have {len(df)}")
    hold = df.index % 5 == 0
    train, test = df[~hold], df[hold]
    keep = list(range(len(TERMS)))
    y = train["time_s"].to_numpy()
    while True:
        # weighted by 1/time: minimise relative error, so small and large batches count alike
        X = _design(train)[:, keep] / y[:, None]
        coef, *_ = np.linalg.lstsq(X, np.ones_like(y), rcond=None)
        if (coef >= 0).all() or len(keep) == 1:
            break
        keep = [k for k, c in zip(keep, coef) if c >= 0] or [0]
    full = np.zeros(len(TERMS))
    full[keep] = np.maximum(coef, 0)

    def errors(part):
        pred = _design(part) @ full
        rel = np.abs(pred - part["time_s"].to_numpy()) / part["time_s"].to_numpy()
        return float(rel.mean()), float(rel.max())

    train_mape, _ = errors(train)
    test_mape, test_max = errors(test)
    devices = sorted(set(df.get("device", pd.Series(["?"])).astype(str)))
    impls = sorted(set(df.get("impl", pd.Series(["?"])).astype(str)))
    return {
        "form": "t_attn_per_layer = c0 + c_seq * num_seqs + c_byte * kv_bytes (seconds)",
        "coef": dict(zip(TERMS, map(float, full))),
        "measured_on": {"device": devices, "impl": impls},
        "fit": {"train_points": int(len(train)), "holdout_points": int(len(test)),
                "train_mape": train_mape, "holdout_mape": test_mape, "holdout_max_rel_err": test_max},
    }


def calibrate_files(paths: list[str], out: str) -> dict:
    import pandas as pd

    frames = []
    for p in paths:
        try:
            frames.append(pd.read_csv(p))
        except (OSError, pd.errors.ParserError) as e:
            raise ConfigError(f"{p}: cannot read measurements ({e})") from None
    calib = fit_attention_model(frames)
    calib["sources"] = [str(p) for p in paths]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(calib, indent=2) + "\n", encoding="utf-8")
    return calib


class CalibratedModel(LatencyModel):
    """Roofline for the dense layers, measured kernel time for decode attention."""

    name = "calibrated"

    def __init__(self, calib: dict, model: ModelSpec, gpu: GpuSpec, params: RooflineParams = RooflineParams(),
                 tp: int = 1, source: str = ""):
        c = calib["coef"]
        self.c0, self.c_seq, self.c_byte = c["c0"], c["c_seq"], c["c_byte"]
        self.layers = model.layers
        self.kv_bytes_per_token_layer = model.kv_bytes_per_token / tp / model.layers
        self.flops_per_token = 2 * model.params / tp
        self.flops_per_pair = model.attn_flops_per_pair / tp
        self.weight_bytes = model.weight_bytes / tp
        self.flops_rate = gpu.bf16_flops * params.flops_efficiency
        self.byte_rate = gpu.hbm_bandwidth * params.bandwidth_efficiency
        self.overhead = params.step_overhead_s
        self.source = source

    def _dense(self, new_tokens: int) -> float:
        return max(self.flops_per_token * new_tokens / self.flops_rate, self.weight_bytes / self.byte_rate)

    def _attn(self, num_seqs: int, kv_tokens: float) -> float:
        return self.layers * (self.c0 + self.c_seq * num_seqs + self.c_byte * kv_tokens * self.kv_bytes_per_token_layer)

    def step_time(self, shape: StepShape) -> float:
        # a decode query attends to each key it reads once; what prefill chunks attend beyond that is compute
        prefill_pairs = max(0, shape.attn_pairs - shape.kv_tokens)
        return (self._dense(shape.new_tokens) + self._attn(shape.num_seqs, shape.kv_tokens)
                + self.flops_per_pair * prefill_pairs / self.flops_rate + self.overhead)

    def decode_run_time(self, n: int, s0: int, k: int) -> float:
        a = self._dense(n) + self.overhead + self._attn(n, s0)
        b = self.layers * self.c_byte * n * self.kv_bytes_per_token_layer
        return sum_affine(a, b, 0, k)


def load_calibrated_model(path: str, model: ModelSpec, gpu: GpuSpec, params: RooflineParams, tp: int) -> CalibratedModel:
    try:
        calib = json.loads(Path(path).read_text(encoding="utf-8"))
        calib["coef"]["c_byte"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"--latency {path}: not a calibration file from `kvsim calibrate` ({e})") from None
    return CalibratedModel(calib, model, gpu, params, tp, source=path)
