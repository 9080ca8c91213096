"""A stage worker: one process per plan device, one rank of the torch.distributed job.

    python -m hetc.runtime.worker --spec SPEC.json --device NODE:INDEX [--generation G]

It finds its stage and rank from the plan by its device name, loads only its stage's
parameters (beating in the job's store meanwhile, then saying it loaded: loading.py), joins
its pipeline unit's process group of generation G when the frontend says so (groups.py; a
restarted worker joins a new generation), reports READY to the frontend, then loops: receive a message
from the previous rank, run it, send the result on. The last stage samples and sends
token ids back to the frontend.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["EXIT_PEER_LOST", "WorkerConfig", "main", "scrub_kv"]

EXIT_PEER_LOST = 4  # the worker stopped because a peer of its group died


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """What the frontend writes to SPEC.json for its workers."""

    plan: str  # plan.json path
    model_ref: str  # where the config comes from (model dir, or the plan's model.ref)
    model_dir: str | None  # safetensors dir; None with random weights
    random_weights: bool
    emulate: bool
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent serves the job's store (rendezvous.open_store)
    timeout_s: float
    kv_blocks: dict[str, int]  # lane id → blocks
    threads: int
    width: int = 1  # > 1: emulate a width-shrunk copy (1/width of heads, hidden, MLP)
    bind: str | None = None  # the address gloo listens on (None: gloo's default)
    executor: str = "torch"  # auto: each emulated stage through its vendor's CPU toolchain
    artifacts: str | None = None  # a `hetc compile` folder to load compiled stages from
    cuda_graphs: bool = True  # cuda stages (tp 1) replay decode steps from CUDA graphs
    max_seqs: int = 1  # the most sequences a lane's step holds (the largest graph)
    max_context: int = 0  # the model's longest sequence (0: as many blocks as the lane has)
    draft: bool = False  # the plan's draft model runs in each lane's first stage worker (runtime/drafter.py)

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({k: getattr(self, k) for k in self.__dataclass_fields__}, f)

    @staticmethod
    def load(path: str) -> "WorkerConfig":
        with open(path) as f:
            return WorkerConfig(**json.load(f))


def watch_parent(on_gone=lambda: os._exit(3)) -> None:
    """Call `on_gone` (default: exit) when the process that launched us is gone (no orphans)."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    on_gone()


def build_stage(cfg: WorkerConfig, plan, lanes, w):
    """(RunnableStage, backend) of worker `w` of the plan: its executor's stage built (eager modules
    with their weights, or the compiled artifact loaded), then made to run on its device by its backend.

    Args:
        plan: the plan (hetc.plan.Plan), loaded once by the worker.
        lanes: its topology (runtime.topology.build_topology).
        w: this worker (WorkerSpec).
    """
    from hetc.backends import get_backend
    from hetc.partitioner.capture.capture import load_hf_config
    from hetc.backends.decoder import eager_only
    from hetc.runtime.compiled_stage import build_compiled_stage, stage_executor
    from hetc.runtime.model_runner import TORCH_DTYPES, StageModel, shrink_config
    from hetc.scheduling import KV_BLOCK_TOKENS
    from hetc.weights import RandomWeights, stage_weights

    spec = w.stage
    backend = get_backend("cpu" if cfg.emulate else spec.backend)
    hf_cfg, _ = load_hf_config(cfg.model_ref)
    hf_cfg = shrink_config(hf_cfg, cfg.width)
    weights = stage_weights(hf_cfg, None if cfg.random_weights else cfg.model_dir)
    index = 0 if cfg.emulate else w.device_index
    dtype, kv_dtype = TORCH_DTYPES[plan.model.dtype], TORCH_DTYPES[plan.model.kv_dtype]
    num_blocks = cfg.kv_blocks[str(spec.lane)]
    eager = eager_only(hf_cfg, plan.units[spec.units[0] : spec.units[1] + 1])
    name = stage_executor(cfg.executor, spec.backend, emulate=cfg.emulate, tp=spec.tp, eager=eager)
    if name != "torch":
        lane = next(l for l in lanes if l.id == spec.lane)
        model: Any = build_compiled_stage(
            hf_cfg=hf_cfg,
            units=plan.units,
            first=spec.units[0],
            last=spec.units[1],
            dtype=dtype,
            kv_dtype=kv_dtype,
            num_blocks=num_blocks,
            weights=weights,
            name=name,
            graph_hash=plan.model.graph_hash,
            model_dir=cfg.model_dir,
            width=cfg.width,
            artifacts=cfg.artifacts,
            stem=f"p{lane.pipeline}s{spec.index}",
            threads=cfg.threads,
        )
    else:
        device = backend.torch_device(index)
        if device.type == "cuda":
            torch.cuda.set_device(device)  # what an NCCL group of the stage binds to
            if isinstance(weights, RandomWeights):
                weights.device = device  # drawn where they live: seconds, where the host takes minutes
        # one GEMM for q/k/v and one for gate/up where launches cost (GPUs); CPU stages keep theirs
        model = StageModel(
            hf_cfg,
            plan.units,
            spec.units[0],
            spec.units[1],
            dtype=dtype,
            kv_dtype=kv_dtype,
            num_blocks=num_blocks,
            weights=weights,
            device=device,
            tp_rank=w.tp_rank,
            tp_size=spec.tp,
            fuse=device.type == "cuda",
        )
    stage: Any = backend.prepare_stage(model, index, threads=cfg.threads)
    # a stage whose MoE experts pick their tokens on the host (a loop, or a part of them) runs eagerly
    if name == "torch" and stage.kv_device.type == "cuda" and cfg.cuda_graphs and spec.tp == 1 and stage.capturable:
        from hetc.runtime.cuda_graphs import DecodeGraphs, GraphedStage

        graphs = DecodeGraphs(
            stage, max_batch=cfg.max_seqs, hidden=hf_cfg.hidden_size, dtype=dtype, max_context=cfg.max_context or num_blocks * KV_BLOCK_TOKENS
        )
        graphs.capture()
        stage = GraphedStage(stage, graphs)
    return stage, backend


def move_kv(model, msg, owners: dict[int, dict[int, int]], sends: list, links) -> float:
    """A prompt's KV between pools: TRANSFER_OUT sends each attention layer this stage holds to
    the worker of the decode lane holding the same layer; TRANSFER_IN receives each of its
    layers from the prefill lane's worker. Both walk their layers in ascending order, so the
    messages of any pair of workers match. Returns the bytes sent (0 when receiving), or -1
    when the transfer failed: the pair's link is of another epoch than the transfer's, or broke
    (a member died) — the frontend then recomputes the sequence on a prefill lane.

    Args:
        owners: lane id → layer → rank holding that layer's attention.
        sends: outstanding isends (their buffers must live until done).
        links: this worker's kvlinks.LinkTable.
    """
    from hetc.scheduling import KV_BLOCK_TOKENS
    from hetc.runtime.transport import Kind

    other, epoch, n, *blocks = msg.meta.tolist()
    link = links.get(other, epoch)
    if link is None:
        return -1.0
    pos = torch.arange(n)
    slots = torch.tensor(blocks, dtype=torch.long)[pos // KV_BLOCK_TOKENS] * KV_BLOCK_TOKENS + pos % KV_BLOCK_TOKENS
    sent = 0
    try:
        for layer in sorted(model.kv.k):
            peer = owners[other][layer]
            if msg.kind is Kind.TRANSFER_OUT:
                buf = model.kv.read(layer, slots)  # [2 (K, V) or 1 (MLA's latent), n, KVH, Dh], whatever the pool's layout
                sends.append((link.isend_tensor(buf, peer), buf))
                sent += buf.numel() * buf.element_size()
            else:
                buf = torch.empty((model.kv.tensors, n, *model.kv.row_shape), dtype=model.kv.dtype)
                link.recv_tensor(buf, peer)
                model.kv.write(layer, slots, buf)
    except Exception:  # noqa: BLE001 — a peer of the link died: this pipeline goes on
        links.broken(other, epoch)
        return -1.0
    return float(sent)


def scrub_kv(kv, blocks: list[int]) -> None:
    """Zero `blocks` in every layer of this stage's KV pool (kv_cache.KVPool): a sequence whose
    logits were not finite held them, and a NaN left there would reach their next owner's
    attention through its masked slots."""
    kv.zero_blocks(blocks)


def copy_kv(kv, meta: torch.Tensor) -> None:
    """A COPY message's (src, dst) block pairs (meta: src0, dst0, src1, …) copied in this stage's
    pool before the step that writes dst (copy-on-write of a shared block)."""
    v = meta.tolist()
    kv.copy_blocks(list(zip(v[0::2], v[1::2])))


def serve_stage(
    w, model, backend, lane, transport, timeout_s: float, group=None, dev_index: int = 0, owners: dict | None = None, links=None, grammars=None, drafter=None
) -> None:
    """The worker loop; returns after forwarding SHUTDOWN.

    Args:
        w: this worker (WorkerSpec); its stage's leader receives and sends, the other
            members of a tp stage get each message by broadcast and only compute.
        lane: its lane (Lane): where sampled tokens go for looked-ahead steps.
        transport: its unit's group (GlooTransport).
        timeout_s: the longest wait for a looked-ahead step's token (the job's timeout).
        group: the stage's tensor-parallel control group (gloo; None when tp = 1): the leader broadcasts each message on it.
        owners: lane id → layer → rank holding its attention (KV moves between pools).
        links: the worker's kvlinks.LinkTable (pools only).
        grammars: EOS ids → the last stage's grammar state (grammar.stage_grammars), for constrained sequences.
        drafter: the lane's draft model (runtime/drafter.py), on its first stage's leader; None: none.
    """
    from hetc.runtime.feedback import SampledTokens, receive_tokens, tokens_message
    from hetc.runtime.sampling_state import SamplingStates, sample_rows, sample_step
    from hetc.runtime.speculate import result_payload, verify_items
    from hetc.runtime.transport import Inbox, Kind, Message, StepMeta, broadcast

    spec = w.stage
    first, last, leader = spec.index == 0, spec.index == spec.n_stages - 1, w.tp_rank == 0
    tp = transport
    # the leader receives (inbox) and fills in looked-ahead tokens (sampled); members get each message by broadcast
    inbox: Any = Inbox(tp, spec.prev_rank) if leader else None
    sends: list = []
    # the first stage fills in looked-ahead tokens: its own samples, or the last stage's sent directly
    sampled: Any = SampledTokens() if first and leader else None
    direct = lane.lookahead and spec.n_stages > 1 and leader
    feed_out = lane.stages[0].rank if direct and last else None  # where TOKENS go
    feed_in = receive_tokens(tp, lane.stages[-1].rank, sampled) if direct and first else None
    states: Any = SamplingStates(grammars) if last and leader else None  # per-sequence sampling state: penalties, bias, min_tokens, grammar
    while True:
        msg: Any = inbox.get() if leader else None
        meta: Any = None  # the step's StepMeta, decoded once the message is a STEP
        t0 = time.perf_counter()
        if leader and msg.kind is Kind.STEP:
            meta = StepMeta.decode(msg.meta, msg.samp)
            if first:  # before the broadcast: tp members embed the same tokens
                t0 += sampled.fill(meta, msg.meta, timeout_s)
                if drafter is not None:  # the proposals of the step's rounds (its time is the stage's)
                    drafter.step(meta, msg.meta)
        if spec.tp > 1:
            msg = broadcast(msg, 0, group)
        if not leader:  # a tp member: compute its share, the leader answers
            if msg.kind is Kind.STEP:
                meta = StepMeta.decode(msg.meta, msg.samp)
                attn = _step_meta(model, meta)
                x = torch.tensor(meta.token_ids, dtype=torch.long) if first else msg.payload
                model(backend.to_device(x, dev_index), attn)
            elif msg.kind is Kind.SCRUB:
                scrub_kv(model.kv, msg.meta.tolist())
            elif msg.kind is Kind.COPY:
                copy_kv(model.kv, msg.meta)
            elif msg.kind is Kind.SHUTDOWN:
                return
            continue
        if msg.kind is Kind.STEP:
            attn = _step_meta(model, meta)
            x = torch.tensor(meta.token_ids, dtype=torch.long) if first else msg.payload
            y = model(backend.to_device(x, dev_index), attn)
            if last:
                states.begin(meta)
                items, positions, picked, lp_meta, lp_samp = sample_step(y, meta, states, backend.to_host)
                # a speculative round yields its kept proposals and one token more (speculate.py)
                emitted = verify_items(y, meta, sample_rows(meta), items, picked, backend.to_host)
                ids = [meta.seq_ids[i] for i in items]
                if first:
                    sampled.put(ids, positions, picked)  # a round's sequence is never looked ahead: its entry goes unused
                elif feed_out is not None:  # before the result: the first stage may wait for it
                    tp.send(tokens_message(msg.step_id, ids, positions, picked), feed_out)
                tokens = result_payload(emitted, len(meta.starts), items)
                reply = Message(Kind.RESULT, msg.step_id, meta=lp_meta, samp=lp_samp, payload=tokens, times=msg.times)
            else:
                reply = Message(Kind.STEP, msg.step_id, meta=msg.meta, samp=msg.samp, payload=backend.to_host(y), times=msg.times)
            backend.synchronize(dev_index)
            msg.times[spec.index] = time.perf_counter() - t0
            if getattr(model, "replayed", False) and msg.times.numel() > spec.n_stages:
                msg.times[spec.n_stages + spec.index] = 1.0  # the step replayed a CUDA graph (metrics)
            tp.send(reply, spec.next_rank)
        elif msg.kind in (Kind.TRANSFER_OUT, Kind.TRANSFER_IN):
            msg.times[spec.index] = move_kv(model, msg, owners or {}, sends, links)
            sends[:] = [(wk, buf) for wk, buf in sends if not wk.is_completed()]
            tp.send(Message(msg.kind, msg.step_id, meta=msg.meta, times=msg.times), spec.next_rank)
        elif msg.kind in (Kind.SCRUB, Kind.COPY):
            for pool in (model.kv, *((drafter.model.kv,) if drafter is not None else ())):  # a drafter's blocks are the lane's too
                if msg.kind is Kind.SCRUB:
                    scrub_kv(pool, msg.meta.tolist())
                else:
                    copy_kv(pool, msg.meta)
            tp.send(Message(msg.kind, msg.step_id, meta=msg.meta, times=msg.times), spec.next_rank)
        elif msg.kind in (Kind.HEARTBEAT, Kind.SHUTDOWN):
            tp.send(Message(msg.kind, msg.step_id, times=msg.times), spec.next_rank)
            if msg.kind is Kind.SHUTDOWN:
                tp.flush(spec.next_rank)
                if feed_out is not None:  # the first stage's receiving thread stops
                    tp.send(Message(Kind.SHUTDOWN, msg.step_id), feed_out)
                    tp.flush(feed_out)
                if feed_in is not None:
                    feed_in.join(timeout_s)
                for wk, _ in sends:
                    try:
                        tp.wait(wk)
                    except Exception:  # noqa: BLE001 — its link's peer died: that transfer already failed
                        pass
                return
        else:
            raise RuntimeError(f"unexpected message {msg.kind.name} from rank {spec.prev_rank}")
        if feed_out is not None and msg.kind is not Kind.STEP:  # keeps the first stage's receive within its timeout
            tp.send(Message(Kind.HEARTBEAT, msg.step_id), feed_out)


def _step_meta(model, meta) -> Any:
    """The stage's attention metadata of a step; every row of the items computing prompt
    log-probabilities goes past the cut (eager stages only: the server refuses them otherwise)."""
    from hetc.runtime.sampling_state import keep_all_rows

    keep = keep_all_rows(meta)
    if keep is None:
        return model.step_meta(meta.starts, meta.n_new, meta.block_tables, meta.sample)
    return model.step_meta(meta.starts, meta.n_new, meta.block_tables, meta.sample, keep_all=keep)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hetc-worker")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--device", required=True, help="the plan device this worker runs (NODE:INDEX)")
    ap.add_argument("--generation", type=int, default=1, help="its unit's group generation (1 + restarts)")
    a = ap.parse_args(argv)
    threading.Thread(target=watch_parent, daemon=True).start()
    cfg = WorkerConfig.load(a.spec)
    tag = f"[hetc worker {a.device}]"
    loading = None
    try:
        from hetc.plan import load_plan
        from hetc.runtime.groups import FORM_TIMEOUT_S, form_group, stage_groups, unit_of_lane
        from hetc.runtime.loading import Loading, wait_to_form
        from hetc.runtime.rendezvous import open_store
        from hetc.runtime.topology import attention_owners, build_topology, worker_of_device
        from hetc.scheduling import Phase
        from hetc.runtime.transport import Kind, Message

        torch.set_num_threads(max(1, cfg.threads))
        plan = load_plan(cfg.plan)
        lanes = build_topology(plan, cfg.plan)
        w = worker_of_device(lanes, a.device)
        spec = w.stage
        tag = f"[hetc worker {a.device} rank {w.rank} stage {spec.lane}.{spec.index}]"
        store = open_store(cfg.master_addr, cfg.master_port, False, max(cfg.timeout_s, FORM_TIMEOUT_S), cfg.agent_store)
        unit = unit_of_lane(lanes)[spec.lane]
        # the frontend waits while this beats, however long loading takes (loading.py)
        loading = Loading(store, unit, a.generation, w.rank)
        model, backend = build_stage(cfg, plan, lanes, w)
        drafter = None
        phase = next(l for l in lanes if l.id == spec.lane).phase
        if cfg.draft and spec.index == 0 and w.tp_rank == 0 and phase != Phase.PREFILL:  # a prefill pool speculates nothing
            from hetc.runtime.drafter import build_drafter

            drafter = build_drafter(cfg, plan, model.kv.num_blocks, backend, 0 if cfg.emulate else w.device_index, model.kv_device)
        loading.loaded()
        wait_to_form(store, unit, a.generation)
        tp = form_group(store, lanes, unit, a.generation, w.rank, cfg.timeout_s, cfg.bind)
        kinds = [(str(u.kind), u.layer) for u in plan.units]
        control = None
        if spec.tp > 1:
            control, model.tp_group = stage_groups(store, unit, a.generation, spec, w.tp_rank, cfg.timeout_s, cfg.bind, cfg.emulate)
        from hetc.runtime.kvlinks import LinkTable
        from hetc.stage import EXECUTORS

        # before READY: epochs the frontend opens from then on are this worker's to join
        links = LinkTable(store, lanes, spec.lane, w.rank, cfg.timeout_s, cfg.bind)
        executor = EXECUTORS.index(model.executor)
        ready = torch.tensor([model.param_bytes, len(model.param_names), model.kv.num_blocks, os.getpid(), model.kv.nbytes, executor], dtype=torch.long)
        tp.send(Message(Kind.READY, w.rank, payload=ready), 0)
        tp.flush(0)
        owners = {lane.id: attention_owners(lane, kinds) for lane in lanes}
        lane = next(l for l in lanes if l.id == spec.lane)
        from hetc.runtime.grammar import stage_grammars

        grammars = stage_grammars(cfg.model_ref, cfg.model_dir)
        serve_stage(w, model, backend, lane, tp, cfg.timeout_s, control, 0 if cfg.emulate else w.device_index, owners, links, grammars, drafter)
        tp.close()
        return 0
    except Exception as e:  # the frontend sees the exit code (and, while loading, the reason); the log says why
        print(f"{tag} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if loading is not None and not loading.done.is_set():
            loading.failed(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if os.environ.get("HETC_DEBUG"):
            traceback.print_exc()
        return EXIT_PEER_LOST if _peer_lost(e) else 1


def _peer_lost(e: Exception) -> bool:
    """A receive or send failed because another process of the group died or timed out (not this
    worker's own fault): the healer then looks for the worker that died first."""
    return isinstance(e, dist.DistError) or "gloo" in str(e) or "tokens stopped coming" in str(e)


if __name__ == "__main__":
    sys.exit(main())
