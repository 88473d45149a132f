"""Fitting calibrations from measured kernels: a toolchain beside the simulator, never on its path.

- ``fits``: the least-squares fitter and the fits of Vidur-format profiles and kvsim's own kernel CSVs
  (``kvsim calibrate FILES``), with their held-out checks;
- ``aic``: NVIDIA AIConfigurator's performance tables (readers per table family, fits, validation;
  ``kvsim calibrate --aic``);
- ``ship``: the script that refits the shipped calibrations (``python -m kvsim.calibrate.ship``).

The simulator reads only what these write: calibration JSON, loaded by ``kvsim.latency.calibration``
(tests/test_structure.py checks that a simulation never imports this package).
"""
