"""Capacity planning: what a placement does under load, side by side, and what to buy.

Pure: imports `hetc/` and the partitioner's cost model and solver, never `runtime`.
"""
