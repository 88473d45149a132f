"""Refit the shipped calibrations' attention and all-reduce from measured kernels of current vLLM releases
(NVIDIA AIConfigurator's tables, Apache-2.0), add B200, and validate on held-out data.

    python benchmarks/fit_calibrations.py ../shared/profiles/vidur          # dense ops (Vidur), first
    pip install aiconfigurator-core==0.12.0        # H200's tables (not in ../shared)
    python -m kvsim.calibrate.ship ../shared/profiles/aic installed [--vidur ../shared/profiles/vidur]
        [--before-commit REV]
    # earlier releases of the chips the package holds only 0.24 of (H200, GB200, GB300, B300, L40S, RTX PRO 6000):
    # the AIConfigurator repository keeps them; its tables at 095f58a, `git archive`d to a folder, then the
    # folder's path replaced by github.com/ai-dynamo/aiconfigurator@095f58a:... in the files written
    python -m kvsim.calibrate.ship ../shared/profiles/aic AIC/aic-core/src/aiconfigurator_core/systems/data \
        --releases-only
    # the measured all-reduce times, kept beside the lines fitted on them (nothing else changes):
    python -m kvsim.calibrate.ship ../shared/profiles/aic PIP/aiconfigurator_core/systems/data \
        AIC/aic-core/src/aiconfigurator_core/systems/data --link-points

Each system's tables come from the first folder that has them (``installed``: the pip package's systems/data).
The GPUs refitted: every preset with an AIConfigurator system (``GpuSpec.aic_system``) whose shipped
calibration was fitted on AIConfigurator's tables (its ``fit.aic``), in preset order, each after its donor.

- a100-80gb: the A100 tables (vLLM 0.14.0, the only version there); the others (h100-80gb, h200-141gb, b200,
  gb200, b300, gb300, l40s, rtx-pro-6000): the tables of the newest vLLM. Attention, NVSwitch all-reduce and GEMMs come from
  them; element-wise kernels and the pairwise-NVLink all-reduce stay the Vidur fits (AIConfigurator has
  neither); a chip Vidur did not measure borrows its family's (DONORS: H100's for H200 and B200, B200's for
  the other Blackwells, A40's for L40S, the L40S's for the RTX PRO 6000), and whatever its own tables cannot
  refit.
- Cross-check (--vidur): the new GEMMs with the element-wise fits predict Vidur's measured whole dense layers
  (another team, an older PyTorch and cuBLAS), by token regime.

Writes kvsim/latency/calibrations/<gpu>.json and reports/latency-validation/aic.md (+ .json): predicted /
measured by regime, in sample and held out (attention: 5 folds of head layouts, each predicted by a fit
without it; all-reduce: every 5th message size; GEMMs: every 5th weight shape), and, with --before-commit,
the calibration shipped at that commit on the same data.
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from kvsim.calibrate.aic import (
    MHA,
    QUANT_MIN_DIM,
    _by_regime,
    evaluate_calibration,
    evaluate_moe,
    fit_aic,
    gemm_regimes,
    gemm_seconds_table,
    installed_tables,
    read_aic,
    system_dir,
    system_root,
    validate_aic,
    validate_gemm,
    validate_mla_decode,
    validate_mla_prefill,
    validate_moe,
)
from kvsim.calibrate.fits import dense_rows, summarize_dense
from kvsim.hardware.gpus import GPU_PRESETS
from kvsim.latency.calibration import (
    GEMM_QUANT,
    MOE_QUANT,
    RELEASES_DIR,
    RELEASES_INDEX,
    SHIPPED,
    Calibration,
    load_calibration,
    save_calibration,
    shipped_calibration_files,
)
from kvsim.releases import release_key

ROOT = Path(__file__).resolve().parents[2]  # the repository: reports/ and ../shared beside it

# chips without element-wise measurements -> the calibration they start from, whose element-wise kernels (and
# whatever their own tables cannot refit) they keep: the nearest measured chip of their family
DONORS = {
    "b200": "h100-80gb",
    "h200-141gb": "h100-80gb",
    "gb200": "b200",
    "b300": "b200",
    "gb300": "b200",
    "l40s": "a40",
    "rtx-pro-6000": "l40s",
}  # the RTX PRO 6000: a graphics-class die on GDDR, as Ada's
# the calibration kvsim priced a chip with before it had its own (same architecture, the chip's own peaks)
DERIVED_BEFORE = {"h200-141gb": "h100-80gb", "l40s": "a40"}


def shipped_systems() -> dict[str, str]:
    """AIConfigurator system -> GPU preset of every shipped calibration fitted on AIConfigurator's tables (a preset
    with an ``aic_system`` whose calibration file records an AIConfigurator fit), in preset order, each GPU after
    the donor it starts from (DONORS)."""
    fitted = [
        g
        for g in GPU_PRESETS.values()
        if g.aic_system
        and (SHIPPED / f"{g.name}.json").exists()
        and "aic" in json.loads((SHIPPED / f"{g.name}.json").read_text(encoding="utf-8")).get("fit", {})
    ]
    names = {g.name for g in fitted}
    order: list[str] = []

    def add(name: str) -> None:
        if name in order:
            return
        if DONORS.get(name) in names:
            add(DONORS[name])
        order.append(name)

    for g in fitted:
        add(g.name)
    return {GPU_PRESETS[n].aic_system: n for n in order}


AIC_DATA = "NVIDIA AIConfigurator tables (Apache-2.0)"


def data_source(root: Path) -> str:
    """How a calibration names the tables it was fitted on (``root``: a folder system_root returned)."""
    if root.resolve() == (ROOT.parent / "shared" / "profiles" / "aic").resolve():
        return f"{AIC_DATA}, via ../shared/profiles/aic"
    try:
        from importlib.metadata import version

        if root.resolve() == installed_tables().resolve():
            return f"{AIC_DATA}, via the pip package aiconfigurator-core {version('aiconfigurator-core')}"
    except Exception:  # no package installed: name the folder
        pass
    return f"{AIC_DATA}, via {root}"


ROWS = {
    "decode": ["batch<8 ctx<1024", "batch<8 ctx>=1024", "batch>=8 ctx<1024", "batch>=8 ctx>=1024"],
    "prefill": ["chunk<512", "chunk>=512"],
    "all_reduce": [f"x{n} {s}" for n in (2, 4, 8) for s in ("<64KiB", "64KiB-1MiB", "1-16MiB", ">=16MiB")],
    "exchange": [f"x{n} {s}" for n in (2, 4, 8) for s in ("<64KiB", "64KiB-1MiB", "1-16MiB", ">=16MiB")],
    "gemm": ["m 1-16", "m 17-128", "m 129-1024", "m >=1025"],
    "moe": ["tokens 1-16", "tokens 17-256", "tokens 257-2048", "tokens >=2049"],
    "mla": ["batch<32 ctx<4096", "batch<32 ctx>=4096", "batch>=32 ctx<4096", "batch>=32 ctx>=4096", "fp8 KV"],
    "mla_prefill": ["tokens<=512", "tokens 513-4096", "tokens>4096"],
}


def cell(s: dict | None) -> str:
    return f"{s['median']:.2f} [{s['p10']:.2f}, {s['p90']:.2f}]" if s and s.get("n") else "-"


def table_rows(op: str, regimes: list[str], in_sample: dict, held_out: dict, was: dict | None) -> list[str]:
    """The report's rows of one op, a regime each: in sample, held out, and (``was`` given) the comparison column."""
    return [
        f"| {op} | {reg} | {cell(in_sample.get(reg))} | {cell(held_out.get(reg))} |"
        + (f" {cell(was.get(reg))} |" if was is not None else "")
        for reg in regimes
    ]


def mla_fitted(key: str, p) -> str:
    """The report's sentence on an MLA fit (``key``: mla_decode or mla_prefill) and its parameters ``p``."""
    if key == "mla_decode":
        return (
            f"MLA decode (whole DeepSeek-V3 layers: projections priced by the GEMMs above, attention fitted; held "
            f"out by query heads per GPU in 4 folds; the last column: priced without an MLA fit): floor "
            f"{p.floor_s * 1e6:.1f} us, ramp {p.ramp_s * 1e6:.1f} us, latent at {p.bw_eff:.2f} of peak bandwidth, "
            f"absorbed attention at {p.flops_eff:.2f} of peak FLOP/s, {p.per_seq_tokens:.0f} tokens per sequence."
        )
    return (
        f"MLA prefill (whole layers, as for decode): floor {p.floor_s * 1e6:.1f} us, tiles at {p.flops_eff:.2f} of "
        f"peak, {p.cta_overhead_tiles:.1f} start-up tiles."
    )


def calibration_at(rev: str, gpu: str) -> Calibration | None:
    try:
        text = subprocess.run(
            ["git", "show", f"{rev}:kvsim/latency/calibrations/{gpu}.json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except subprocess.CalledProcessError:
        return None
    return Calibration.from_json(json.loads(text), f"{rev}:{gpu}.json")


def evaluate_gemm(data, calib: Calibration) -> dict:
    ratio = gemm_seconds_table(calib.gemm, data.gpu, data.gemm) / data.gemm["seconds"].to_numpy()
    return _by_regime(ratio, gemm_regimes(data.gemm))


def releases(aic, system: str) -> list[str]:
    """The vLLM releases the data covers for ``system``: its attention version folders (measured, or a
    reuse note naming the release whose kernels it runs), oldest first."""
    base = system_dir(aic, system) / "attention" / "vllm"
    return sorted((p.name for p in base.iterdir() if p.is_dir()), key=release_key)


def fit_releases(roots: list[str]) -> None:
    """A calibration per earlier vLLM release (``--vllm-version``): each release's own tables (or the newest
    earlier measured one's, as the data's reuse notes and gaps say) fitted over the newest calibration, whose
    values stay where the release has no table (element-wise kernels, pairwise NVLink; MLA before 0.19)."""
    index: dict[str, dict[str, str]] = {}
    RELEASES_DIR.mkdir(exist_ok=True)
    for old in RELEASES_DIR.glob("*.json"):
        old.unlink()
    systems = shipped_systems()
    for system, gname in systems.items():
        aic = system_root(roots, system)
        newest = load_calibration(SHIPPED / f"{gname}.json")
        newest_versions = newest.fit["aic"]["versions"]
        index[gname] = {}
        rels = releases(aic, system)
        for rel in rels:
            data = read_aic(aic, system, rel)
            # the release runs the newest measured kernels, or is the newest measured (its other tables may be
            # newer: GB300's all-reduce of vLLM 0.27 beside attention of 0.24; the newest calibration has them)
            if data.versions == newest_versions or rel == rels[-1]:
                index[gname][rel] = f"{gname}.json"
                continue
            fitted = fit_aic(data, newest)
            calib = fitted.calibration(newest)
            fit = {
                "aic": {
                    "release": rel,
                    "versions": data.versions,
                    "notes": data.notes,
                    **validate_aic(data, fitted, newest),
                    "gemm": validate_gemm(data.gemm, GPU_PRESETS[gname]),
                }
            }
            # groups without a table of this release keep the newest calibration's values and their sources
            sources = {
                **calib.sources,
                "release": f"vLLM {rel}: its own tables where measured, else the newest "
                "earlier release's (the data's reuse notes); groups named with another version are the newest "
                "calibration's",
            }
            calib = replace(calib, sources=sources, fit=fit, derived_from="")
            name = f"{gname}-{rel}.json"
            save_calibration(calib, RELEASES_DIR / name)
            index[gname][rel] = f"{RELEASES_DIR.name}/{name}"
            print(
                f"{gname} vLLM {rel}: wrote {RELEASES_DIR / name} ({', '.join(f'{t} {v}' for t, v in data.versions.items())})"
            )
    doc = {
        "format": "kvsim-vllm-releases",
        "data": "; ".join(f"{s}: {data_source(system_root(roots, s))}" for s in systems),
        "releases": index,
    }
    (SHIPPED / RELEASES_INDEX).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {SHIPPED / RELEASES_INDEX}")


def refit_arguments(doc: str, many: bool = False) -> argparse.Namespace:
    """The command line of a script that refits part of the shipped calibrations (its docstring ``doc``):
    AIConfigurator's systems/data folder (``many``: folders, in order of preference) and --dry-run."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if many:
        ap.add_argument("data", nargs="+", help="AIConfigurator systems/data folders, in order of preference")
    else:
        ap.add_argument("data", help="AIConfigurator's systems/data folder")
    ap.add_argument("--dry-run", action="store_true", help="report, write nothing")
    return ap.parse_args()


def refit_shipped(refit, dry_run: bool = False) -> None:
    """Call ``refit(path, calibration)`` on every shipped calibration file and write back the calibration it
    returns (None: the file is left as it is); ``dry_run``: write nothing."""
    for path in shipped_calibration_files():
        new = refit(path, load_calibration(path))
        if new is not None and not dry_run:
            save_calibration(new, path)


def fit_shapes(roots: list[str]) -> None:
    """Add to every shipped calibration fitted on AIConfigurator's tables (the newest and each release's) the
    measured / fitted MoE times of the MoE presets' shapes (kvsim/latency/moe_shapes.py), from the MoE table of
    the release its MoE parameters were fitted on; nothing else in the files changes. Between the kept token
    counts the ratios are interpolated: the table's other token counts check that (``fit.moe_shapes``)."""
    refit_shipped(lambda path, calib: _with_moe_shapes(path, calib, roots))


def _with_moe_shapes(path: Path, calib: Calibration, roots: list[str]) -> Calibration | None:
    """``calib`` (the file at ``path``) with its MoE shapes fitted (fit_shapes), or None: not fitted on
    AIConfigurator's MoE tables."""
    from kvsim.calibrate.aic import fit_moe_shapes
    from kvsim.latency.moe_shapes import shape_factor

    aic = calib.fit.get("aic", {})
    version = aic.get("versions", {}).get("moe_perf")
    gpu = GPU_PRESETS.get(calib.gpu)
    if not version or gpu is None or not gpu.aic_system:
        return None
    root = system_root(roots, gpu.aic_system)
    data = read_aic(root, gpu.aic_system, version, kinds=("moe",), gpu=gpu)
    parts = [("bf16", data.moe, None)] if data.moe is not None and calib.moe is not None else []
    parts += [(q, rows, q) for q, rows in data.moe_quant.items() if q in calib.moe_quant and len(rows) >= 8]
    shapes, errors = {}, []
    for dtype, rows, quant in parts:
        table = fit_moe_shapes(rows, calib, gpu, quant)
        if not table:
            continue
        shapes[dtype] = table
        every = fit_moe_shapes(rows, calib, gpu, quant, knots=lambda ts: list(range(len(ts))))
        for key, by_routing in every.items():
            for routing, (ts, rs) in by_routing.items():
                kept = set(table[key][routing][0])
                errors += [shape_factor(table, key, routing, t) / r for t, r in zip(ts, rs) if t not in kept]
    stats: dict = {"shapes": sum(len(t) for t in shapes.values())}
    if errors:
        e = np.array(errors)
        stats["between_knots"] = {
            "n": int(len(e)),
            "median": float(np.median(e)),
            "p10": float(np.percentile(e, 10)),
            "p90": float(np.percentile(e, 90)),
        }
    src = (
        f"measured / fitted MoE layer times of the MoE presets' shapes, from {gpu.aic_system}/moe/vllm/"
        f"{data.versions['moe_perf']}/moe_perf ({data_source(root)}), at up to 8 token counts"
    )
    calib = replace(
        calib,
        moe_shapes=shapes,
        sources={**calib.sources, "moe_shapes": src},
        fit={**calib.fit, "moe_shapes": stats},
    )
    between = stats.get("between_knots")
    print(
        f"{path.name}: {stats['shapes']} shapes"
        + (
            f"; between kept token counts {between['median']:.3f} [{between['p10']:.3f}, {between['p90']:.3f}]"
            if between
            else ""
        )
    )
    return calib


def fit_link_points(roots: list[str]) -> None:
    """Keep in every shipped calibration fitted on AIConfigurator's tables the measured all-reduce (and
    data-parallel exchange) times its lines were fitted on (``LinkParams.points``), read from the tables of
    the versions it records; the lines must refit as shipped (the same rows: within the optimizer's last
    digits, and the shipped lines are kept), and nothing else changes."""
    refit_shipped(lambda path, calib: _with_link_points(path, calib, roots))


def _with_link_points(path: Path, calib: Calibration, roots: list[str]) -> Calibration | None:
    """``calib`` (the file at ``path``) with its NVSwitch all-reduce and exchange points (fit_link_points), or
    None: not fitted on AIConfigurator's all-reduce tables."""
    from kvsim.calibrate.aic import fit_all_reduce

    versions = calib.fit.get("aic", {}).get("versions", {})
    gpu = GPU_PRESETS.get(calib.gpu)
    if "custom_allreduce_perf" not in versions or gpu is None or not gpu.aic_system:
        return None
    root = system_root(roots, gpu.aic_system)
    data = read_aic(
        root,
        gpu.aic_system,
        versions["custom_allreduce_perf"],
        versions.get("nccl_perf"),
        kinds=("all_reduce",),
        gpu=gpu,
    )
    lines = ("latency_s", "bandwidth", "large_latency_s", "large_bandwidth")
    out: dict[str, dict] = {}
    for kind, rows in (("all_reduce", data.all_reduce), ("exchange", data.exchange)):
        shipped = getattr(calib, kind).get("nvswitch")
        if not shipped or rows is None:
            continue
        fitted = fit_all_reduce(rows)
        for n, old in shipped.items():
            new = fitted.get(n)
            if new is None or any(
                abs(getattr(new, f) - getattr(old, f)) > 1e-6 * max(abs(getattr(old, f)), 1e-30) for f in lines
            ):
                raise SystemExit(f"{path.name}: {kind} x{n} refits to other lines than shipped; refit it whole")
        out[kind] = {
            **getattr(calib, kind),
            "nvswitch": {n: replace(old, points=fitted[n].points) for n, old in shipped.items()},
        }
        print(f"{path.name}: {kind} " + ", ".join(f"x{n} {len(fitted[n].points)} sizes" for n in shipped))
    if not out:
        return None
    return replace(
        calib, all_reduce=out.get("all_reduce", calib.all_reduce), exchange=out.get("exchange", calib.exchange)
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "aic",
        nargs="*",
        default=[str(ROOT.parent / "shared" / "profiles" / "aic"), "installed"],
        help="folders of AIConfigurator tables (or 'installed'); each system from the first that has it",
    )
    ap.add_argument("--vidur", help="Vidur profiles folder, for the dense-layer cross-check")
    ap.add_argument("--before-commit", help="git revision whose shipped calibrations to compare with")
    ap.add_argument(
        "--releases-only",
        action="store_true",
        help="only (re)fit the calibrations of earlier vLLM releases over the shipped newest ones",
    )
    ap.add_argument(
        "--moe-shapes",
        action="store_true",
        help="only add the MoE presets' measured shapes to every shipped calibration (moe_shapes)",
    )
    ap.add_argument(
        "--link-points",
        action="store_true",
        help="only keep the measured all-reduce times in every shipped calibration (LinkParams.points)",
    )
    a = ap.parse_args()
    if a.link_points:
        fit_link_points(a.aic)
        return
    if a.moe_shapes:
        fit_shapes(a.aic)
        return
    if a.releases_only:
        fit_releases(a.aic)
        return
    out_dir = ROOT / "reports" / "latency-validation"
    report = [
        "# Attention, all-reduce, GEMM and MoE calibrations from measured vLLM kernels",
        "",
        "Data: NVIDIA AIConfigurator performance tables (github.com/ai-dynamo/aiconfigurator, Apache-2.0), "
        "measured with vLLM's own kernels under CUDA graphs. predicted / measured, median [p10, p90]; bf16 KV. "
        "Held out: attention in 5 folds of head layouts (q heads, KV heads, head dim), each predicted by a "
        "fit that never saw it; all-reduce every 5th message size; GEMMs every 5th weight shape (n, k); MoE "
        "every 5th model shape (hidden, expert width, experts, top-k).",
        "",
    ]
    summary = {}
    for system, gname in shipped_systems().items():
        gpu = GPU_PRESETS[gname]
        donor = DONORS.get(gname)
        base = (
            load_calibration(SHIPPED / f"{gname}.json")
            if donor is None
            else replace(load_calibration(SHIPPED / f"{donor}.json"), gpu=gname)
        )
        root = system_root(a.aic, system)
        data = read_aic(root, system)
        fitted = fit_aic(data, base)
        calib = fitted.calibration(base)  # drops the dense statistics of the base's GEMMs
        sources = dict(calib.sources)
        if not gpu.nvlink:  # a PCIe card: its tables' all-reduce is the only one (no NVLink pairs)
            calib = replace(calib, all_reduce={"nvswitch": calib.all_reduce["nvswitch"]})
            sources["all_reduce"] += f" (over PCIe: {gname} has no NVLink; every --interconnect takes it)"
        kept = [q for q in calib.gemm_quant if f"{q} weights" not in sources.get("gemm_quant", "")]
        if kept and donor:  # the base's fit stays where no table of this GPU is usable
            sources["gemm_quant"] = "; ".join(
                [s for s in [sources.get("gemm_quant")] if s]
                + [f"{q} weights: {donor}'s fit ({gname} has no usable {q} table)" for q in kept]
            )
        if donor:
            chip = "RTX PRO 6000" if gname == "rtx-pro-6000" else gname.split("-")[0].upper()
            sources["elementwise"] = (
                f"borrowed: {donor}'s fit on Vidur profiles (no {chip} element-wise measurements)"
                if donor in ("h100-80gb", "a40")
                else f"borrowed from {donor} (no {chip} element-wise measurements): "
                + base.sources.get("elementwise", "physics defaults")
            )
            sources["data"] = data_source(root)
        else:  # the Vidur fit's sources, then this one's (the base may be this script's own earlier output)
            sources["data"] = (
                sources["data"].split("; attention, NVSwitch")[0]
                + "; attention, NVSwitch all-reduce and GEMMs: "
                + data_source(root)
            )
        val = validate_aic(data, fitted, base)
        fit = dict(calib.fit)
        fit["aic"] = {"versions": data.versions, **val, "gemm": validate_gemm(data.gemm, gpu)}
        if data.moe is not None:
            fit["aic"]["moe"] = validate_moe(data.moe, gpu)
        for q, rows in data.moe_quant.items():
            fit["aic"].setdefault("moe_quant", {})[q] = validate_moe(rows, gpu, quant=q)
        for q, rows in data.gemm_quant.items():
            fit["aic"].setdefault("gemm_quant", {})[q] = validate_gemm(rows, gpu, quant=q)
        if data.mla_decode is not None:
            fit["aic"]["mla_decode"] = validate_mla_decode(data.mla_decode, calib, gpu)
        if data.mla_prefill is not None:
            fit["aic"]["mla_prefill"] = validate_mla_prefill(data.mla_prefill, calib, gpu)
        sku = gname.split("-")[0]
        files = sorted(glob.glob(f"{a.vidur}/compute__{sku}__*__mlp.csv")) if a.vidur else []
        if files:
            rows = [r for f in files for r in dense_rows(pd.read_csv(f), f.split("__")[3])]
            fit["vidur_dense_layers"] = summarize_dense(rows, calib, gpu)["layer"]
        calib = replace(calib, sources=sources, fit=fit, derived_from="")
        save_calibration(calib, SHIPPED / f"{gname}.json")
        before = calibration_at(a.before_commit, gname) if a.before_commit else None
        if a.before_commit and before is None and gname in DERIVED_BEFORE:  # derived from its chip's then
            before = calibration_at(a.before_commit, DERIVED_BEFORE[gname])
            before = before and replace(before, gpu=gname, derived_from=DERIVED_BEFORE[gname])
        prev = evaluate_calibration(data, before) if before else {}
        summary[gname] = {"versions": data.versions, **val, "before": prev}
        report += [
            f"## {gname} ({system}: " + ", ".join(f"{t} {v}" for t, v in data.versions.items()) + ")",
            "",
            "| op | regime | in sample | held out |" + (f" shipped at {a.before_commit} |" if before else ""),
            "|---|---|---|---|" + ("---|" if before else ""),
        ]
        for tab in ("decode", "prefill", "all_reduce", "exchange"):
            if tab in val["in_sample"]:
                report += table_rows(
                    tab, ROWS[tab], val["in_sample"][tab], val["held_out"][tab], prev.get(tab, {}) if before else None
                )
        g = fit["aic"]["gemm"]
        report += table_rows(
            "gemm", ROWS["gemm"], g["in_sample"], g["held_out"], evaluate_gemm(data, before) if before else None
        )
        report += table_rows(
            "decode, MHA",
            ROWS["decode"],
            val["in_sample"][MHA],
            val["held_out"][MHA],
            prev.get(MHA, {}) if before else None,
        )
        fp8 = val["in_sample"].get("decode other KV dtypes")
        if fp8:
            old = (prev or {}).get("decode other KV dtypes", {})
            report.append(
                f"| decode FP8 KV | all | {cell(fp8.get('all'))} | - |"
                + (f" {cell(old.get('all'))} |" if before else "")
            )
        if "moe" in fit["aic"]:
            mv = fit["aic"]["moe"]
            # before: the same layers priced by the GEMM and element-wise parameters (kvsim without an MoE fit)
            gemm_only = evaluate_moe(data.moe, replace(calib, moe=None), gpu)
            report += table_rows("moe", ROWS["moe"], mv["in_sample"], mv["held_out"], gemm_only if before else None)
            report += [
                "",
                f"MoE (bf16 fused MoE, {mv['shapes']} model shapes, {mv['held_out_shapes']} held out): held "
                "out by parallelism "
                + "; ".join(f"{k}: {cell(v)}" for k, v in mv["held_out_parallel"].items() if k != "all")
                + ". The last column for MoE is the same layers priced without an MoE fit (GEMM and "
                "element-wise parameters, as kvsim did before). Rows of balanced and power-law routing, "
                "each priced with its routing's distinct experts (kvsim.latency.routing).",
            ]
        for q, mv in fit["aic"].get("moe_quant", {}).items():
            # before: the bf16 MoE parameters with the quantized weights' bytes (kvsim without a quantized fit)
            bf16 = evaluate_moe(data.moe_quant[q], replace(calib, moe_quant={}), gpu, q)
            report += table_rows(
                f"moe {q} experts ({MOE_QUANT[q][0]})",
                ROWS["moe"],
                mv["in_sample"],
                mv["held_out"],
                bf16 if before else None,
            )
            report += [
                "",
                f"MoE with {q} experts ({mv['shapes']} model shapes, {mv['held_out_shapes']} held out; the "
                "last column: the bf16 fit with the quantized weights' bytes, as kvsim priced them before).",
            ]
        for q, g in fit["aic"].get("gemm_quant", {}).items():
            # before: the bf16 GEMM fit on the same shapes (kvsim priced a quantized checkpoint's GEMMs as bf16)
            rows = data.gemm_quant[q]
            as_bf16 = _by_regime(
                gemm_seconds_table(calib.gemm, gpu, rows) / rows["seconds"].to_numpy(), gemm_regimes(rows)
            )
            report += table_rows(
                f"gemm {q} weights ({GEMM_QUANT[q][0]})",
                ROWS["gemm"],
                g["in_sample"],
                g["held_out"],
                as_bf16 if before else None,
            )
            report += [
                "",
                f"GEMMs of {q} weights ({len(rows)} measured shapes with n, k >= {QUANT_MIN_DIM}, vLLM "
                f"{data.versions[f'gemm_perf:{q}']}; the last column: the bf16 fit on the same shapes, as kvsim "
                "priced a quantized checkpoint's GEMMs before).",
            ]
        for key, label, regimes in (
            ("mla_decode", "MLA decode layer", ROWS["mla"]),
            ("mla_prefill", "MLA prefill layer", ROWS["mla_prefill"]),
        ):
            if key in fit["aic"]:
                mv = fit["aic"][key]
                report += table_rows(label, regimes, mv["in_sample"], mv["held_out"], mv["before"] if before else None)
                report += ["", mla_fitted(key, getattr(calib, key))]
        if "vidur_dense_layers" in fit:
            v = fit["vidur_dense_layers"]
            report += [
                "",
                "Cross-check on Vidur's measured whole dense layers (GEMMs above + element-wise fits), "
                "by tokens: " + "; ".join(f"{k}: {cell(v.get(k))}" for k in ("1-16", "17-128", "129-1024", ">=1025")),
            ]
        p = calib.decode_attention
        report += [
            "",
            f"Fitted: decode floor {p.floor_s * 1e6:.1f} µs, ramp {p.ramp_s * 1e6:.1f} µs, KV at "
            f"{p.bw_eff:.2f} of peak bandwidth, {p.per_seq_tokens:.0f} tokens of KV per sequence"
            + (
                f" (one query head per KV head: unsplit, one CTA per sequence and head at "
                f"{p.unsplit_cta_bw / 1e9:.1f} GB/s, at most one per SM; floor {p.unsplit_floor_s * 1e6:.1f} µs, "
                f"ramp {p.unsplit_ramp_s * 1e6:.1f} µs, {p.unsplit_per_seq_tokens:.0f} tokens per sequence)"
                if p.unsplit_cta_bw
                else ""
            )
            + "; prefill "
            f"floor {calib.prefill_attention.floor_s * 1e6:.1f} µs, tiles at {calib.prefill_attention.flops_eff:.2f} "
            f"of peak, {calib.prefill_attention.cta_overhead_tiles:.1f} start-up tiles; all-reduce "
            + "; ".join(
                f"x{n}: {l.latency_s * 1e6:.1f} µs + B/{l.bandwidth / 1e9:.0f} GB/s"
                + (
                    f", NCCL {l.large_latency_s * 1e6:.1f} µs + B/{l.large_bandwidth / 1e9:.0f} GB/s"
                    if l.large_bandwidth
                    else ""
                )
                for n, l in calib.all_reduce["nvswitch"].items()
            )
            + "."
            + (
                ""
                if not calib.exchange
                else " Data-parallel MoE exchange (NCCL all-gather + reduce-scatter of "
                "the gathered buffer, the `exchange` rows; the last column is blank: kvsim had no such "
                "operation before): "
                + "; ".join(
                    f"x{n}: {l.latency_s * 1e6:.1f} µs + B/{l.bandwidth / 1e9:.0f} GB/s"
                    + (
                        f", {l.large_latency_s * 1e6:.1f} µs + B/{l.large_bandwidth / 1e9:.0f} GB/s"
                        if l.large_bandwidth
                        else ""
                    )
                    for n, l in calib.exchange["nvswitch"].items()
                )
                + "."
            ),
            "",
        ]
        print(f"{gname}: wrote {SHIPPED / (gname + '.json')}")
    (out_dir / "aic.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    (out_dir / "aic.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out_dir}/aic.md")
    fit_releases(a.aic)


if __name__ == "__main__":
    main()
