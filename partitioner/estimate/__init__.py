"""Estimation: the saturation model of one pipeline (simulate), batches, per-kind tables and the split.

Chain capture → cost_models → estimate → bounds → search → planner.py (partitioner/__init__.py):
imports capture and cost_models only."""
