"""`hetc serve`: the runtime that runs a plan.json.

Processes (one torch.distributed gloo job, ranks mapped from the plan — topology.py):
  rank 0, the frontend (launch.py): checks the plan against the model (graph_hash),
      starts the workers, runs the HTTP server (server.py, protocol.py, tokenizer.py,
      metrics.py) and, per pipeline replica ("lane"), a scheduler (scheduler.py,
      block_manager.py, sequence.py) with a sender and a receiver thread (engine.py);
  ranks 1.., one worker per plan device (worker.py): loads only its stage's tensors
      (weights.py; safetensors memory-mapped), runs the stage's units with the model's
      own transformers modules and paged-KV attention (model_runner.py, kv_cache.py),
      receives the residual stream from the previous stage and sends it on
      (transport.py); the last stage samples (sampler.py) and returns token ids.
  A tp stage is several workers: the leader talks to the pipeline and broadcasts each
  step to its group; all-reduce after o_proj/down_proj/embedding, all-gather of logits.

Not in this version, or limited (each refused at start with the reason, or noted here):
  - disaggregated plans (prefill/decode pools, KV blocks sent between them): refused;
    the planner does not make them yet either;
  - `--emulate` of a model too big for the host runs a width-shrunk copy (1/2^k of the heads,
    hidden and MLP; same layers, units, cuts; labelled in /v1/models) with --random-weights
    only: real weights cannot be shrunk, so that case is refused;
  - NCCL/RCCL/HCCL within a vendor: every group uses gloo on host tensors;
  - sliding-window attention, logit soft-capping, MoE under tp: refused;
  - prefix caching, logprobs, n > 1, penalties: refused with 400 (logprobs, n, penalties).
"""
