"""The partitioner: capture a model, cost it on devices, and search placements for a cluster.

Rooms, each importing only the rooms before it in this chain (tests/unit_tests/test_layers.py
checks it, function-level imports included):

    capture → cost_models → estimate → bounds → search → planner.py
                          ↘ profiling (only `hetc profile` and its tools)

- capture/      model → op graph → units (terms, op records, fusion, the capture cache)
- cost_models/  the analytic model: seconds of units on a device, links, collectives, memory, the bound's envelope
- estimate/     saturation model of one pipeline (simulate), batches, per-kind tables, the split
- bounds/       upper bounds on a plan and the pipelines near them (cells, colgen, latency floor, cost LP)
- search/       templates evaluated at every batch, CP-SAT over their replicas (mix, solver), given placements, baselines
- profiling/    timing on the local device and fitting profiles to it (`hetc profile`); beside the chain:
                it imports capture and cost_models, and nothing in the partitioner imports it
- planner.py    a PlanRequest → a plan.json: the one entry point the CLI uses for `hetc plan`

The partitioner never imports `hetc.runtime` or `hetc.capacity` (they import it).
"""
