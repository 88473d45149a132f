"""Which vLLM release's kernels time a run (``--vllm-version``).

The shipped calibrations are fitted on kernel tables measured with several vLLM releases (NVIDIA
AIConfigurator's: vLLM 0.14-0.24 on A100, H100 and B200). ``<chip>.json`` holds the newest release's fit;
``vllm/<chip>-<release>.json`` the earlier ones, each fitted on that release's tables over the newest
calibration (whose values stay where a release has no table of its own). ``vllm-releases.json`` maps each
chip's releases to their calibration file; a release the data covers by reusing another's tables (the
data's own reuse notes) maps to that release's fit.

A release asked for that was not measured runs the kernels of the newest measured release before it
(kernels change when a release changes them; between measurements they are assumed not to).
"""

from __future__ import annotations

import re
from pathlib import Path

SHIPPED = Path(__file__).parent / "calibrations"
RELEASES_DIR = SHIPPED / "vllm"  # calibrations of earlier vLLM releases
RELEASES_INDEX = "vllm-releases.json"  # in SHIPPED: {"releases": {chip: {release: file relative to SHIPPED}}}
# major.minor[.patch[.post]] and a tag: 0.19, 0.10.1.1, 0.19.1rc1, 0.6.1.post1, 0.11.0+cu128
_RELEASE = re.compile(r"v?\d+\.\d+(?:\.\d+){0,2}(?:[.+-]?[A-Za-z][A-Za-z0-9.+-]*)?")


def release_key(v: str) -> tuple[int, ...]:
    """A release name's leading dotted numbers, padded to three: 0.19 = 0.19.0 = v0.19; 0.1.dev5 = 0.1."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", v.strip())
    nums = tuple(int(x) for x in m.group(1).split(".")) if m else ()
    return nums + (0,) * (3 - len(nums))


def vllm_version_rule(value) -> str | None:
    """What is wrong with a ``--vllm-version`` value, or None (the options table's check)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _RELEASE.fullmatch(value.strip()):
        return f"expected a vLLM release such as 0.19, 0.19.1 or v0.10.1.1, got {value!r}"
    return None


def vllm_releases() -> dict[str, dict[str, str]]:
    """{chip: {vLLM release: calibration file relative to the shipped folder}}: the releases whose kernel
    tables the shipped calibrations were fitted on."""
    from kvsim.files import read_json_object

    path = SHIPPED / RELEASES_INDEX
    return read_json_object(path, str(path)).get("releases", {}) if path.exists() else {}


def release_calibration(chip: str, vllm_version: str | None) -> tuple[Path | None, str]:
    """(calibration file, note) for the kernels of vLLM ``vllm_version`` on ``chip``: the newest release
    measured at or before it; the oldest measured, with a warning, when it is older than all; None (the
    chip's one calibration) when not asked, or when nothing per release was measured on the chip (the note
    then says so)."""
    if vllm_version is None:
        return None, ""
    known = vllm_releases().get(chip)
    if not known:
        return None, (f"warning: --vllm-version {vllm_version}: no per-release kernel tables for {chip}; its one "
                      "calibration is used")
    order = sorted(known, key=release_key)
    asked = release_key(vllm_version)
    at_or_before = [r for r in order if release_key(r) <= asked]
    if at_or_before:
        rel = at_or_before[-1]
        note = "" if release_key(rel) == asked else \
            f"--vllm-version {vllm_version}: kernels of vLLM {rel} on {chip}, the newest release measured before it"
    else:
        rel = order[0]
        note = (f"warning: --vllm-version {vllm_version}: no kernel tables of a release that old for {chip}; "
                f"vLLM {rel}'s, the oldest measured, are used")
    return SHIPPED / known[rel], note
