"""Bounds: upper bounds on a plan, and the pipelines that nearly attain them (aggregate → cells →
cell bound and its refinement, column generation and pricing, whole devices, the cost LP, the latency floor).

Chain capture → cost_models → estimate → bounds → search → planner.py (partitioner/__init__.py):
imports capture, cost_models and estimate only."""
