"""`hetc serve`: the runtime that runs a plan.json.

Processes (ranks mapped from the plan — topology.py; each pipeline unit — a lane, or a
disaggregated plan's pools — is a gloo group of its own with the frontend: groups.py):
  rank 0, the frontend (launch.py): checks the plan against the model (graph_hash),
      starts the workers (workers.py), runs the HTTP server (server.py, protocol.py,
      tokenizer.py, metrics.py) and, per pipeline replica ("lane"), a scheduler (the serving policy
      of hetc/batching.py, hetc/kv_blocks.py, hetc/sequence.py) with a sender and a receiver thread (lane.py,
      inflight.py) behind one engine (engine.py); a watchdog restarts a unit whose worker
      died, with a new group generation (healer.py); SIGTERM drains (drain.py);
  ranks 1.., one worker per plan device (worker.py): loads only its stage's tensors
      (weights.py; safetensors memory-mapped), runs the stage's units with the model's
      own transformers modules (the decoder stage of backends/decoder.py) and paged-KV
      attention (model_runner.py, kv_cache.py); on a cuda device its decode steps replay from
      CUDA graphs (cuda_graphs.py),
      receives the residual stream from the previous stage and sends it on
      (transport.py); the last stage samples (sampler.py) and returns token ids.
  Lookahead (scheduler.py): a decoding sequence's next step is sent before its result is
  back, so each stage has the next micro-batch queued; the first stage takes that step's
  input token from the last stage directly (feedback.py), not through the frontend.
  A tp stage is several workers: the leader talks to the pipeline and broadcasts each
  step to its group; all-reduce after o_proj/down_proj/embedding and MoE blocks, all-gather of logits.
  `--nnodes N` splits the plan's cluster nodes over N hosts in order; node rank 0 holds the
  frontend, every host launches its own workers (emulate.py sizes an emulated host).
  Under `torchrun --nproc-per-node 1 -m hetc.cli serve plan.json` the hosts, node rank and
  master address come from torchrun, and the job joins its agent's store (rendezvous.py).

Not in this version, or limited (each refused at start with the reason, or noted here):
  - disaggregated plans: a prefill lane hands each prompt, after its first token, to a decode
    lane; its KV moves layer by layer between the workers holding the same layers (the pools
    may be cut differently), then the decode lane runs it; decode-pool preemption sends it
    back to a prefill lane. Pools of tp=1 stages only (the planner makes such plans with
    `hetc plan --disaggregate on|auto`);
  - `--emulate` of a model too big for the host runs a width-shrunk copy (1/2^k of the heads,
    hidden and MLP; same layers, units, cuts; labelled in /v1/models) with --random-weights
    only: real weights cannot be shrunk, so that case is refused;
  - NCCL/RCCL only for the collectives of tp stages of cuda/rocm devices (groups.py; untested on
    several GPUs); every other group, HCCL's included, is gloo on host tensors;
  - architectures served (eager stages; `--executor auto` runs their MoE, sliding-window and MLA
    stages eager): Llama-style decoders (llama, mistral, qwen2/3), mixtral, Qwen3-MoE, gpt-oss
    (alternating sliding-window and full layers, attention sinks), DeepSeek-V3 (MLA, its latent
    cached in the paged blocks; shared + routed experts with grouped top-k routing). A tp stage
    with MoE layers splits their experts over its workers (expert parallelism: each holds E/tp,
    every worker routes all tokens and runs those sent to its experts; the stage's all-reduce
    combines them). Sliding layers keep every block of a sequence (the window is a mask; blocks
    behind it are not freed yet); MLA decodes over the latents with kv_b_proj absorbed (prompt chunks up-project them);
    a disaggregated plan of an MLA model moves the latents (untested);
  - logit soft-capping: refused;
  - prefix caching, logprobs, n > 1, penalties: refused with 400 (logprobs, n, penalties).
"""
