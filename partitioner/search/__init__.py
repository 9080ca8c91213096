"""Search: pipeline templates, replica choice over them (mix, solver), given placements and baselines.

Chain capture → cost_models → estimate → bounds → search → planner.py (partitioner/__init__.py):
imports capture, cost_models, estimate and bounds; only planner.py imports it within the partitioner."""
