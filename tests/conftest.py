import os
from pathlib import Path

# Tests name repository files (traces/, kernels/calibrations/) relative to the repository root.
os.chdir(Path(__file__).resolve().parents[1])

# Kernel tests run in Triton's interpreter unless a GPU is present; set before anything imports triton.
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import settings

# CI (the default) is derandomized and keeps no example database: the same code gives the same examples
# on every run, so a green change cannot turn red by chance. `--hypothesis-profile fuzz` (or
# HYPOTHESIS_PROFILE=fuzz) searches long and at random for local bug hunting.
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.register_profile("fuzz", max_examples=2000, deadline=None)
settings.register_profile("thorough", max_examples=600, deadline=None)
# native GPU runs compile a kernel per new shape: fewer examples keep benchmarks/gpu_check.sh short
settings.register_profile("gpu", max_examples=12, deadline=None, derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_report_header(config):
    mode = (
        "triton-interpreter-cpu (TRITON_INTERPRET=1)"
        if os.environ.get("TRITON_INTERPRET") == "1"
        else "triton-native-cuda"
    )
    return f"kvsim kernel tests run in: {mode}"
