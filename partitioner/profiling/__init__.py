"""Profiling: timing on the local device and fitting profiles to it — what `hetc profile` uses
(calibrate, fidelity and their workers, microbenchmarks, fits, step probes).

Beside the chain capture → cost_models → estimate → bounds → search → planner.py
(partitioner/__init__.py): imports capture and cost_models only, and no other room imports it."""
