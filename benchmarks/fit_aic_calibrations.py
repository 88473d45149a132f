"""Refit the shipped calibrations from measured vLLM kernels: now ``python -m kvsim.calibrate.ship`` (same
arguments; its docstring has the steps). Kept so that older notes' command lines still run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvsim.calibrate.ship import main  # noqa: E402

if __name__ == "__main__":
    main()
