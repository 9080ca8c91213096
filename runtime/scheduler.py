"""The runtime's scheduler is the serving policy of hetc/batching.py, which the capacity
simulator runs too; this module keeps the runtime's import path."""

from hetc.batching import BatchItem, MicroBatch, Rates, Scheduler, SchedulerConfig, StepOutput

__all__ = ["BatchItem", "MicroBatch", "Rates", "Scheduler", "SchedulerConfig", "StepOutput"]
