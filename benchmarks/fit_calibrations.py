"""Fit the shipped latency calibrations from Vidur's public GPU profiles, and validate them.

    python benchmarks/fit_calibrations.py ../shared/profiles/vidur

For each GPU with profiles (A100-80GB, H100-80GB, A40) it fits the dense-op and all-reduce parameters
(kvsim/calibrate/fits.py), sets the attention constants from physics anchored on the same measurements (see
below), writes ``kvsim/latency/calibrations/<gpu>.json``, and writes the validation to
``reports/latency-validation/``: leave-one-model-out predicted/measured of the dense ops by token regime,
and held-out all-reduce sizes by message-size regime.

Attention: the profiles hold no attention-kernel timings, so its constants are physics, not fits:
- a small kernel's floor t_k = the median measured time of the element-wise kernels (norm, rope, add) at
  1-8 tokens on that GPU;
- decode: floor = 3 t_k (KV write, attention, split-KV merge kernels), ramp = 2 t_k, KV streamed at 0.9x
  the GEMM weight-streaming efficiency (paged blocks are smaller than weight tiles), at most 0.8;
- prefill: floor = 2 t_k (KV write, attention), tile iterations at 60% of peak FLOP/s (FlashAttention-2
  forward on A100, FlashAttention-3 on H100, published), 2 tiles of start-up per query tile.
"""

from __future__ import annotations

import glob
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvsim.hardware.gpus import GPU_PRESETS  # noqa: E402
from kvsim.latency.calibration import (
    SHIPPED,
    Calibration,
    DecodeAttentionParams,
    PrefillAttentionParams,  # noqa: E402
    save_calibration,
)
from kvsim.calibrate.fits import (
    dense_rows,
    fit_elementwise,
    fit_gemm,
    fit_links,
    holdout_links,  # noqa: E402
    leave_one_model_out,
    summarize_dense,
    tp_layers_with_all_reduce,
)

SKUS = {"a100": "a100-80gb", "h100": "h100-80gb", "a40": "a40"}
PREFILL_FLOPS_EFF = 0.6


def kernel_floor(rows) -> float:
    t = [t for _, name, op, tok, t, _ in rows if op.kind in ("norm", "rope", "add") and tok <= 8]
    return float(np.median(t))


def main(src: str) -> None:
    out_dir = ROOT / "reports" / "latency-validation"
    out_dir.mkdir(parents=True, exist_ok=True)
    report = [
        "# Latency model validation on Vidur's public profiles",
        "",
        "predicted / measured; median [p10, p90]. Dense: each model held out of the fit in turn "
        "(leave-one-model-out), pooled over models, tensor-parallel degrees and ops. All-reduce: every "
        "fifth message size held out.",
        "",
    ]
    summary = {}
    for sku, gname in SKUS.items():
        gpu = GPU_PRESETS[gname]
        files = sorted(glob.glob(f"{src}/compute__{sku}__*__mlp.csv"))
        rows = [r for f in files for r in dense_rows(pd.read_csv(f), f.split("__")[3])]
        base = Calibration(gname)
        calib = replace(base, gemm=fit_gemm(rows, gpu), elementwise={**base.elementwise, **fit_elementwise(rows, gpu)})
        tk = kernel_floor(rows)
        calib = replace(
            calib,
            decode_attention=DecodeAttentionParams(
                floor_s=3 * tk, ramp_s=2 * tk, bw_eff=min(0.8, 0.9 * calib.gemm.bw_eff), per_seq_s=0.0
            ),
            prefill_attention=PrefillAttentionParams(
                floor_s=2 * tk,
                flops_eff=PREFILL_FLOPS_EFF,
                cta_overhead_tiles=2.0,
                bw_eff=min(0.8, 0.9 * calib.gemm.bw_eff),
            ),
        )
        net = [(f, pd.read_csv(f)) for f in sorted(glob.glob(f"{src}/network__{sku}_*__all_reduce.csv"))]
        links = fit_links(net) if net else {}
        if not links:  # no all-reduce profiles for this GPU: borrow A100's pairwise NVLink fit, and say so
            links = fit_links(
                [(f, pd.read_csv(f)) for f in glob.glob(f"{src}/network__a100_pairwise_nvlink__all_reduce.csv")]
            )
            links = {"nvswitch": links.get("pairwise", {}), **links}
            link_src = "borrowed: A100 pairwise-NVLink all_reduce.csv (no all-reduce profile for this GPU)"
        else:
            if "nvswitch" not in links:
                links["nvswitch"] = links["pairwise"]
            link_src = "fitted: " + ", ".join(Path(f).name for f, _ in net)
        calib = replace(calib, all_reduce=links)
        lomo = leave_one_model_out(rows, gpu, base)
        held = holdout_links(net) if net else {}
        tp_layers = tp_layers_with_all_reduce(lomo["layers"], links, net) if net else {}
        calib = replace(
            calib,
            sources={
                "gemm": "fitted: " + ", ".join(Path(f).name for f in files),
                "elementwise": "fitted: the same files",
                "decode_attention": f"physics: floor 3 t_k, ramp 2 t_k (t_k = {tk * 1e6:.1f} us, median element-wise "
                "kernel at <= 8 tokens), KV streamed at 0.9 x the GEMM weight-streaming efficiency",
                "prefill_attention": f"physics: floor 2 t_k, tiles at {PREFILL_FLOPS_EFF:.0%} of peak (FlashAttention-2/3 "
                "published forward throughput), 2 tiles of start-up per query tile",
                "all_reduce": link_src,
                "data": "Vidur profiles (microsoft/vidur, MIT, data/profiling at 7d47513), via ../shared/profiles/vidur",
            },
            fit={
                "dense_in_sample": summarize_dense(rows, calib, gpu),
                "dense_leave_one_model_out": lomo["pooled"],
                "all_reduce_holdout": held,
                "tp_layer_with_all_reduce": tp_layers,
                "kernel_floor_s": tk,
            },
        )
        save_calibration(calib, SHIPPED / f"{gname}.json")
        summary[gname] = {
            "lomo": {k: v for k, v in lomo.items() if k != "layers"},
            "links": held,
            "tp_layers": tp_layers,
        }
        report += [f"## {gname}", "", "| ops | tokens 1-16 | 17-128 | 129-1024 | >=1025 |", "|---|---|---|---|---|"]
        for group in ("layer", "gemm", "elementwise"):
            d = lomo["pooled"][group]
            cells = [
                f"{d[k]['median']:.3f} [{d[k]['p10']:.2f}, {d[k]['p90']:.2f}]" if k in d else "-"
                for k in ("1-16", "17-128", "129-1024", ">=1025")
            ]
            label = {"layer": "whole dense layer", "gemm": "GEMMs", "elementwise": "element-wise"}[group]
            report.append(f"| {label} | " + " | ".join(cells) + " |")
        if tp_layers:
            cells = [
                f"{tp_layers[k]['median']:.3f} [{tp_layers[k]['p10']:.2f}, {tp_layers[k]['p90']:.2f}]"
                if k in tp_layers
                else "-"
                for k in ("1-16", "17-128", "129-1024", ">=1025")
            ]
            report.append("| dense layer + 2 all-reduces (TP 2-8) | " + " | ".join(cells) + " |")
        report += [
            "",
            "Per held-out model, whole dense layer (median):",
            "",
            "| model | 1-16 | 17-128 | 129-1024 | >=1025 |",
            "|---|---|---|---|---|",
        ]
        for m, d in lomo["per_model_median"].items():
            lay = d.get("layer", {})
            report.append(
                f"| {m} | "
                + " | ".join(f"{lay[k]:.3f}" if k in lay else "-" for k in ("1-16", "17-128", "129-1024", ">=1025"))
                + " |"
            )
        if held:
            report += [
                "",
                "All-reduce, held-out sizes:",
                "",
                "| group | < 64 KiB | 64 KiB-1 MiB | 1-16 MiB | >= 16 MiB |",
                "|---|---|---|---|---|",
            ]
            for k, d in held.items():
                cells = [
                    f"{d[r]['median']:.2f} [{d[r]['p10']:.2f}, {d[r]['p90']:.2f}]" if r in d else "-"
                    for r in ("0-65536", "65536-1048576", "1048576-16777216", ">=16777216")
                ]
                report.append(f"| {k} | " + " | ".join(cells) + " |")
        report.append("")
        print(f"{gname}: wrote {SHIPPED / (gname + '.json')}")
    (out_dir / "dense_and_allreduce.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    (out_dir / "dense_and_allreduce.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out_dir}/dense_and_allreduce.md")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT.parent / "shared" / "profiles" / "vidur"))
