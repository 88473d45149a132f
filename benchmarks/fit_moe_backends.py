"""Fit the fused-MoE layer of every shipped calibration once per kernel family (vLLM's --moe-backend), from the
same AIConfigurator tables the calibration's MoE was fitted on, and validate each on model shapes it never saw.

    python benchmarks/fit_moe_backends.py [../shared/profiles/aic installed]

A calibration's ``moe`` / ``moe_quant`` are fitted on every row of the experts' dtype (balanced and power-law
routing, each row priced with its own routing's distinct experts: kvsim.latency.routing), whichever
kernel the table timed; a table can hold several (the 0.24.0 H100 table times gpt-oss's MXFP4 experts with
OpenAI's Triton kernels and Kimi-K3's with Marlin, about 3x apart at thousands of tokens). A server that picks a
kernel (``--moe-backend marlin``, or before that flag ``VLLM_MXFP4_USE_MARLIN=1``) runs at that kernel's speed,
so each family (``kvsim.latency.calibration.moe_backend_of``) with at least 8 rows gets its own fit, written to the
calibration's ``moe_backends`` with its in-sample and held-out error (every 5th model shape held out when the
family has five or more) under ``fit.aic.moe_backends``; an earlier release's calibration keeps the newest's
fits of the kernels its own tables did not time (as its other parameters do). Nothing else changes.
Writes the shipped calibrations in place and reports/latency-validation/moe-backends.md.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from functools import lru_cache
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvsim.hardware.gpus import GPU_PRESETS  # noqa: E402
from kvsim.calibrate.aic import fit_moe_families, locate_table, system_dir, system_root  # noqa: E402
from kvsim.calibrate.ship import shipped_systems  # noqa: E402
from kvsim.latency.calibration import SHIPPED  # noqa: E402

# chip -> its AIConfigurator system, for every shipped calibration fitted on AIConfigurator's tables
SYSTEMS = {gpu: system for system, gpu in shipped_systems().items()}


def calibration_files() -> list[tuple[str, Path]]:
    """(chip, file) of every shipped calibration fitted on AIConfigurator's MoE tables."""
    out = []
    for chip in SYSTEMS:
        out.append((chip, SHIPPED / f"{chip}.json"))
        out += [(chip, p) for p in sorted((SHIPPED / "vllm").glob(f"{chip}-*.json"))]
    return out


@lru_cache(maxsize=None)  # calibrations of several releases can share one table: fitted once
def fit_table(chip: str, table: str, version: str) -> tuple[dict, dict]:
    """(moe_backends, their validation) fitted on one MoE table (kvsim.calibrate.aic.fit_moe_families)."""
    fitted, stats = fit_moe_families(Path(table), GPU_PRESETS[chip], validate=True)
    params = {q: {b: asdict(p) for b, p in by.items()} for q, by in fitted.items()}
    where = f"{SYSTEMS[chip]}/moe/vllm/{version}"
    for by in stats.values():
        for backend, e in by.items():  # the table after rows and shapes, as the calibrations record it
            by[backend] = {
                "rows": e["rows"],
                "shapes": e["shapes"],
                "table": where,
                **{k: v for k, v in e.items() if k not in ("rows", "shapes")},
            }
    return params, stats


def cell(s: dict | None) -> str:
    return f"{s['median']:.2f} [{s['p10']:.2f}, {s['p90']:.2f}]" if s and s.get("n") else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "aic",
        nargs="*",
        default=[str(ROOT.parent / "shared" / "profiles" / "aic"), "installed"],
        help="folders of AIConfigurator tables (or 'installed'); each system from the first that has it",
    )
    a = ap.parse_args()
    lines = [
        "# Fused-MoE kernels by backend (vLLM's --moe-backend)",
        "",
        "Each kernel family's rows of AIConfigurator's MoE tables (Apache-2.0; balanced and power-law routing, "
        "each row with its routing's distinct experts) fitted alone "
        "(`benchmarks/fit_moe_backends.py`). predicted / measured, median [p10, p90], all token counts; held out: "
        "every 5th model shape (hidden, expert width, experts, top-k) predicted by a fit without it.",
        "",
        "| calibration | experts | backend | rows | shapes | in sample | held out | tokens >=2049 held out | kernels |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    newest = {}
    for chip, path in calibration_files():  # a chip's newest calibration comes first
        d = json.loads(path.read_text())
        version = d["fit"].get("aic", {}).get("versions", {}).get("moe_perf")  # the MoE table it was fitted on
        params, stats = (
            ({}, {})
            if version is None
            else fit_table(
                chip,
                str(locate_table(system_dir(system_root(a.aic, SYSTEMS[chip]), SYSTEMS[chip]), "moe", version)[0]),
                version,
            )
        )
        if path.parent == SHIPPED:
            newest[chip] = params
        else:  # an earlier release keeps the newest's fits where its own tables did not time the kernels
            params = {
                q: {**newest[chip].get(q, {}), **params.get(q, {})} for q in dict.fromkeys([*newest[chip], *params])
            }
        d["moe_backends"] = params
        if stats:
            d["fit"].setdefault("aic", {})["moe_backends"] = stats
        else:
            d["fit"].get("aic", {}).pop("moe_backends", None)
        path.write_text(json.dumps(d, indent=1) + "\n")
        rel = path.relative_to(SHIPPED).as_posix()
        for dtype, by in stats.items():
            for backend, e in by.items():
                held = e.get("held_out", {})
                lines.append(
                    f"| {rel} | {dtype} | {backend} | {e['rows']} | {e['shapes']} | "
                    f"{cell(e['in_sample'].get('all'))} | {cell(held.get('all'))} | "
                    f"{cell(held.get('tokens >=2049'))} | {', '.join(e['kernels'])} |"
                )
        print(f"{rel}: " + ", ".join(f"{q}: {'/'.join(sorted(b))}" for q, b in params.items()), flush=True)
    out = ROOT / "reports" / "latency-validation" / "moe-backends.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
