"""Cost models: time of units on a device, of bytes over links, memory of a placement, and the
profiles as the bound costs them (envelope).

Chain capture → cost_models → estimate → bounds → search → planner.py (partitioner/__init__.py):
imports only capture. The tools that measure and fit profiles are in profiling/."""
