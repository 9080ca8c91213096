"""How a stage's devices share a mixture-of-experts model (docs/moe.md, "Expert parallelism").

A stage of g devices (plan.json's `tp`) runs its MoE layers in one of three layouts, the ones
vLLM, SGLang and TensorRT-LLM offer:

- `tp`: every expert split over the g devices like a dense MLP (vLLM's default under
  `--tensor-parallel-size`): each device multiplies 1/g of every touched expert.
- `ep`: the experts whole, E/g on each device (vLLM's `--enable-expert-parallel`, TensorRT-LLM's
  `moe_expert_parallel_size`, and `hetc serve`'s only way); attention stays tensor-parallel, so every
  device sees every token and the stage's all-reduce combines the experts' outputs. The busiest
  device sets the pace: its routed rows are `imbalance` × the mean.
- `dp-ep`: attention data-parallel (SGLang's `--enable-dp-attention`, vLLM's `--data-parallel-size`
  with expert parallelism, TensorRT-LLM's attention DP): each device holds the attention's weights
  whole and its own 1/g of the sequences with their K/V (an MLA latent no longer copied on every
  device), and the MoE layers dispatch each token to its experts' devices and combine the results
  (two all-to-alls per MoE layer in place of the all-reduces).

The layout is one per plan (`Plan.experts`): the planner solves each layout the cluster's engines
serve and keeps the best (`hetc plan --experts`).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ExpertLayout", "StepBudget", "DEFAULT_IMBALANCE", "IMBALANCE_SOURCE"]


class ExpertLayout(StrEnum):
    TP = "tp"
    EP = "ep"
    DP_EP = "dp-ep"

    @property
    def data_parallel(self) -> bool:
        """Attention and dense layers run data-parallel: each device its own sequences."""
        return self is ExpertLayout.DP_EP


class StepBudget(StrEnum):
    """Whose token budget a step of a data-parallel group (`dp-ep`) fills: the group's one budget split
    over its ranks (SGLang divides `--chunked-prefill-size` by the DP size), or each rank's own (vLLM's and
    TensorRT-LLM's data-parallel ranks each schedule their own steps). A pipeline's micro-step is then
    within `prefill_chunk` × the data-parallel ranks of its narrowest stage (Workload.ranked)."""

    SHARED = "shared"
    PER_RANK = "per-rank"


# The busiest device's routed rows over the mean under expert parallelism, without redundant experts.
DEFAULT_IMBALANCE = 1.2
IMBALANCE_SOURCE = (
    "assumed 1.2: SGLang's large-scale EP study of DeepSeek-V3 (lmsys.org/blog/2025-05-05-large-scale-ep, "
    "'Overall Throughput') measured prefill at 50,302 tok/s per node with the default expert distribution "
    "against 59,337 with a simulated perfect EPLB on EP32 (1.18× for the whole step, of which the MoE layers "
    "are a part: their own max/mean is at least that); the same study says imbalance grows with the EP size"
)
