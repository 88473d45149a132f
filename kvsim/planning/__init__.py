"""Capacity planning: SLOs, rate scaling, the capacity search, `kvsim plan`, sweeps and reports."""
