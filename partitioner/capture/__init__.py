"""Capture: a model → an op graph → units (terms, op records, fusion, the capture cache).

First room of the chain capture → cost_models → estimate → bounds → search → planner.py
(partitioner/__init__.py): imports no other room of the partitioner."""
