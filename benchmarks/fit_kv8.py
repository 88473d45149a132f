"""Refit each shipped calibration's FP8 KV cache decode terms (bandwidth efficiency, extra time, per-sequence
tokens: kvsim.calibrate.aic.fit_kv8) on the fp8 rows of the decode table its source names, leaving every other
parameter as it is.

    # AIConfigurator's tables (Apache-2.0): the shared profiles, the installed package's, its repository at 095f58a
    git -C AIC archive 095f58a aic-core/src/aiconfigurator_core/systems/data | tar -x -C /tmp/aic-tables
    python benchmarks/fit_kv8.py ../shared/profiles/aic INSTALLED/aiconfigurator_core/systems/data \\
        /tmp/aic-tables/aic-core/src/aiconfigurator_core/systems/data

Each table comes from the first folder that has it, as `python -m kvsim.calibrate.ship` takes them. Why: with
the per-sequence cost held to bf16's count of FP8 tokens (half the time), the fit paid for short contexts with a
low bandwidth on long ones: H100's FP8 decode slope came out 3.2e-5 ms per context token of Llama-3.1-8B, where
vLLM's blog measured 2.4e-5 in serving (v0.19.1, FlashAttention-3) and the table's own batch-1 rows give 2.7e-5.
Prints, per file, the fp8 rows' median |log error| before and after.
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOURCE = re.compile(r"\(Apache-2\.0\) (\S+/generation_attention_perf\.parquet)")


def main() -> None:
    from kvsim.calibrate.ship import refit_arguments, refit_shipped

    a = refit_arguments(__doc__, many=True)
    refit_shipped(lambda path, calib: refit_kv8(path, calib, a.data), a.dry_run)


def refit_kv8(path: Path, calib, folders: list[str]):
    """``calib`` (the file at ``path``) with its FP8 KV terms refitted and the change reported, or None: its decode
    attention was not fitted on an FP8-bearing table."""
    import numpy as np

    from kvsim.calibrate.aic import _decode_df, fit_kv8, read_decode
    from kvsim.hardware import get_gpu

    src = calib.sources.get("decode_attention", "")
    found = SOURCE.search(src)
    if "FP8 KV bandwidth" not in src or not found:
        return None
    table = next((Path(d) / found.group(1) for d in folders if (Path(d) / found.group(1)).exists()), None)
    if table is None:
        raise SystemExit(f"{path.name}: {found.group(1)} is in none of {folders}")
    rows = read_decode(table)[0]
    fp8 = rows[rows["kv_dtype_bytes"] == 1]
    gpu = get_gpu(calib.gpu)
    old = calib.decode_attention
    new = fit_kv8(rows, gpu, old)

    def err(p):
        return float(np.median(abs(np.log(_decode_df(p, gpu, fp8) / fp8["seconds"].to_numpy(float)))))

    print(
        f"{path.name}: FP8 KV bandwidth {old.kv8_bw_eff:.3f} -> {new.kv8_bw_eff:.3f}, per-sequence tokens "
        f"{new.kv8_per_seq_tokens:.0f} (bf16 {old.per_seq_tokens:.0f}); fp8 rows' median |log error| "
        f"{err(old):.3f} -> {err(new):.3f}",
        flush=True,
    )
    return replace(calib, decode_attention=new)


if __name__ == "__main__":
    main()
