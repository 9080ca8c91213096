"""`hetc serve plan.json`: check the plan against the model (`validate`), size each lane's KV
pool (`size_kv`), launch one worker process per plan device and form each pipeline unit's
process group (`start_workers`; a restart reuses its steps for one unit), and serve the
OpenAI API until SIGTERM, which drains.

Startup refuses (BadInput, exit 2) a plan that is malformed, of another schema, made for
another model (graph_hash), or that needs a device this host lacks (without --emulate).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetc.host import free_port
from hetc.errors import BadInput
from hetc.plan import PlanUnit, UnitKind
from hetc.scheduling import MAX_WAITING, PREFILL_CHUNK
from hetc.runtime.tool_parsers import ToolParser

__all__ = ["Checked", "ServeOptions", "serve", "size_kv", "start_workers", "validate"]


@dataclass(kw_only=True)
class ServeOptions:
    plan: str
    model_dir: str | None = None
    random_weights: bool = False
    emulate: bool = False
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    served_model_name: str | None = None
    nnodes: int | None = None  # None: 1, or torchrun's (rendezvous.py)
    node_rank: int | None = None  # None: 0, or torchrun's
    master_addr: str | None = None
    master_port: int | None = None
    max_num_seqs: int | None = None  # default: the plan's batch (at least 2 per stage)
    max_batched_tokens: int = PREFILL_CHUNK  # the prefill chunk (the planner assumes the same)
    max_waiting: int = MAX_WAITING
    num_kv_blocks: int | None = None  # cap on each lane's KV blocks (to exercise preemption)
    threads: int | None = None  # per worker; default: host cores shared out when emulating
    timeout: float = 60.0  # transport receive timeout, seconds
    drain_timeout: float = 30.0  # SIGTERM: how long in-flight requests may take to finish
    max_queue_wait: float = 30.0  # seconds: a request predicted to wait longer for its first token gets 429
    prefix_caching: bool = True  # reuse the KV of prompt prefixes earlier requests computed (hetc/kv_blocks.py)
    max_body_bytes: int = 1 << 20  # a larger request body gets 413
    idle_timeout: float = 5.0  # seconds an idle keep-alive connection is held open (uvicorn)
    max_restarts: int = 3  # restart attempts of a failed pipeline unit before it stays down
    executor: str = "auto"  # auto: emulated stages through their vendor's CPU toolchain; torch: eager everywhere
    artifacts: str | None = None  # a `hetc compile` folder to load the compiled stages from
    cuda_graphs: bool = True  # cuda stages replay decode steps from CUDA graphs (runtime/cuda_graphs.py)
    speculation: bool = True  # False: --no-speculation
    speculate: str | None = None  # --speculate ngram (a plan without a speculation section)
    num_speculative_tokens: int | None = None  # K (default: the plan's)
    enable_auto_tool_choice: bool = False  # chat's tool_choice "auto" (vLLM's flag): needs tool_call_parser
    tool_call_parser: str | None = None  # the model's tool-call format (runtime/tool_parsers.py)

    def __post_init__(self) -> None:
        parsers = ", ".join(p.value for p in ToolParser)
        if self.enable_auto_tool_choice and self.tool_call_parser is None:
            raise BadInput(
                "--enable-auto-tool-choice needs the model's tool-call format.", field="--tool-call-parser", fix=f"add --tool-call-parser: {parsers}."
            )
        if self.tool_call_parser is not None and self.tool_call_parser not in {p.value for p in ToolParser}:
            raise BadInput(f"unknown tool-call parser {self.tool_call_parser!r}.", field="--tool-call-parser", fix=f"use one of {parsers}.")
        if self.tool_call_parser is not None and not self.enable_auto_tool_choice:
            raise BadInput('--tool-call-parser is used by tool_choice "auto" only.', field="--tool-call-parser", fix="add --enable-auto-tool-choice (as vLLM).")
        if self.executor not in ("auto", "torch"):
            raise BadInput(f"unknown executor {self.executor!r}.", field="--executor", fix="use auto or torch.")
        if self.artifacts and not (Path(self.artifacts) / "manifest.json").is_file():
            raise BadInput(f"{self.artifacts} has no manifest.json.", field="--artifacts", fix="give the folder `hetc compile plan.json -o DIR` wrote.")
        if self.max_restarts < 0:
            raise BadInput(f"--max-restarts is {self.max_restarts}.", field="--max-restarts", fix="pass 0 (never restart) or more.")
        if self.drain_timeout < 0:
            raise BadInput(f"--drain-timeout is {self.drain_timeout}.", field="--drain-timeout", fix="pass 0 or more seconds.")


def _wait_policy(threads: int) -> dict[str, str]:
    """OpenMP's wait policy for the workers when the user sets none: when their threads together
    exceed the host's cores, idle threads sleep (PASSIVE) rather than spin on cores the other
    stages need; otherwise OpenMP's default (spin briefly, then sleep), as in a plain torch
    process. Sleeping costs a wake-up per parallel region: a fifth of a decode step on the
    2-core reference host (BENCHMARKS.md, Runtime)."""
    return {"OMP_WAIT_POLICY": "PASSIVE"} if threads > (os.cpu_count() or 1) else {}


def resolve_model(plan, model_dir: str | None, random_weights: bool) -> tuple[str, str | None]:
    """(where the config comes from, the safetensors/tokenizer dir or None)."""
    from hetc.weights import has_weights

    if model_dir:
        d = Path(model_dir)
        if not (d / "config.json").is_file():
            raise BadInput(f"{d} has no config.json.", field="--model-dir", fix="point it at a Hugging Face model dir.")
        if not random_weights and not has_weights(d):
            raise BadInput(f"{d} has no *.safetensors weights.", field="--model-dir", fix="save the model with safetensors, or pass --random-weights.")
        return str(d), str(d)
    ref = plan.model.ref
    if Path(ref).is_dir() and (has_weights(ref) or random_weights):
        return ref, ref
    if random_weights:
        return ref, None
    raise BadInput(
        f"the plan's model {ref!r} has no weights here.", field="--model-dir", fix="pass --model-dir DIR with the model's safetensors, or --random-weights."
    )


def check_hash(plan, model_ref: str, file: str) -> None:
    from hetc.partitioner.capture.capture import capture

    got = capture(model_ref, dtype=plan.model.dtype, kv_dtype=plan.model.kv_dtype).graph_hash
    if got != plan.model.graph_hash:
        raise BadInput(
            f"model.graph_hash is {plan.model.graph_hash[:16]}…, but {model_ref} ({plan.model.dtype}, "
            f"kv {plan.model.kv_dtype}) hashes to {got[:16]}…: the plan was made for another model, dtype "
            "or unit table.",
            file=file,
            field="model.graph_hash",
            fix=f"re-plan with `hetc plan {model_ref} --dtype {plan.model.dtype}`, or serve the model the plan was made for.",
        )


def _check_devices(lanes, file: str, local: set[int]) -> None:
    from hetc.backends import BackendUnavailable, get_backend
    from hetc.runtime.topology import workers

    for w in workers(lanes):
        s = w.stage
        if w.rank not in local:
            continue
        try:
            get_backend(s.backend).device_info(w.device_index)
        except BackendUnavailable as e:
            pipeline = lanes[s.lane].pipeline
            raise BadInput(
                f"stage {s.index} of pipeline {pipeline} runs on {w.device} ({s.profile}, backend {s.backend}), which this host cannot provide: {e}",
                file=file,
                field=f"pipelines.{pipeline}.stages.{s.index}",
                fix="run on a host with that device, or pass --emulate to run every device of the plan as a CPU process.",
            ) from None


@dataclass(kw_only=True)
class Checked:
    """A plan checked against the model and this host (validate's result)."""

    o: ServeOptions
    rdzv: Any  # rendezvous.Rendezvous
    plan: Any  # hetc.plan.Plan
    lanes: list  # topology.Lane
    host_of: dict[str, int]  # plan node → node rank
    local: frozenset[int]  # ranks this host runs
    model_ref: str
    model_dir: str | None
    hf_cfg: Any
    units: list[PlanUnit]  # the plan's unit table
    width: int = 1  # > 1: emulating a width-shrunk copy
    threads: int = 1  # per worker
    max_seqs: int = 0
    max_context: int = 0  # the model's longest sequence (0: unknown)
    blocks: dict[int, int] = field(default_factory=dict)  # lane id → KV blocks (size_kv)
    spec: Any = None  # hetc.spec_rounds.SpecConfig: the speculation served (None: none)

    @property
    def mine(self) -> list:
        from hetc.runtime.topology import workers

        return [w for w in workers(self.lanes) if w.rank in self.local]


def validate(o: ServeOptions) -> Checked:
    """Check the plan against the model, the runtime's support and this host's devices.

    Args:
        o: the command line's options.

    Raises:
        BadInput: the plan or model cannot be served here (exit 2, with file, field and fix).
    """
    from hetc.partitioner.capture.capture import load_hf_config
    from hetc.plan import load_plan
    from hetc.runtime.emulate import fit_width
    from hetc.runtime.model_runner import check_layout, check_supported, check_tp
    from hetc.runtime.rendezvous import rendezvous
    from hetc.runtime.topology import build_topology, hosts_of_nodes, workers
    from hetc.spec_rounds import serve_speculation

    rdzv = rendezvous(o.nnodes, o.node_rank, o.master_addr, o.master_port)
    plan = load_plan(o.plan)
    if not plan.units:
        raise BadInput("the plan has no unit table.", file=o.plan, field="units", fix="regenerate it with this version of `hetc plan`.")
    lanes = build_topology(plan, o.plan)
    host_of = hosts_of_nodes(plan, rdzv.nnodes, o.plan)
    local = frozenset(w.rank for w in workers(lanes) if host_of[w.stage.node] == rdzv.node_rank)
    model_ref, model_dir = resolve_model(plan, o.model_dir, o.random_weights)
    check_hash(plan, model_ref, o.plan)
    hf_cfg, _ = load_hf_config(model_ref)
    units = plan.units
    check_supported(hf_cfg, units, o.plan, variants=True)  # the eager stages; a compiled one checks its own
    check_layout(plan, o.plan)
    for lane in lanes:
        for s in lane.stages:
            check_tp(hf_cfg, units[s.units[0] : s.units[1] + 1], s.tp, f"pipelines.{lane.pipeline}.stages.{s.index}.tp", o.plan)
    if not o.emulate:
        _check_devices(lanes, o.plan, local)  # type: ignore[arg-type]
    c = Checked(o=o, rdzv=rdzv, plan=plan, lanes=lanes, host_of=host_of, local=local, model_ref=model_ref, model_dir=model_dir, hf_cfg=hf_cfg, units=units)
    if o.emulate:  # emulated devices share this host's memory
        c.width, c.hf_cfg = fit_width(plan, hf_cfg, c.mine, o.random_weights, o.plan)
    c.spec = serve_speculation(plan.speculation, o.speculation, o.speculate, o.num_speculative_tokens, o.plan)
    if c.spec is not None and o.emulate and o.executor == "auto":
        raise BadInput(
            "speculative rounds need every row of a round's logits, and the emulated stages' compiled lowerings return each sequence's last row only.",
            field="--executor",
            fix="serve with --executor torch, or --no-speculation.",
        )
    if c.spec is not None and plan.speculation is not None and plan.speculation.drafter is not None and c.spec.method == "draft":
        _check_drafter(plan.speculation.drafter, hf_cfg, o.plan)
    n_here = max(1, len(local))
    c.threads = o.threads or max(1, (os.cpu_count() or 1) // n_here if o.emulate else os.cpu_count() or 1)
    return c


def _check_drafter(drafter, hf_cfg, file: str) -> None:
    """The plan's draft model loads and shares the target's vocabulary (its proposals are the target's ids)."""
    from hetc.partitioner.capture.capture import load_hf_config

    field_ = "speculation.drafter.model.ref"
    try:
        dcfg, _ = load_hf_config(drafter.model.ref)
    except Exception as e:  # noqa: BLE001 — any failure to read it is the same fix
        raise BadInput(f"the draft model {drafter.model.ref!r} cannot be loaded: {e}.", file=file, field=field_, fix="point it at a model directory.") from None
    if dcfg.vocab_size != hf_cfg.vocab_size:
        raise BadInput(
            f"the draft model's vocabulary has {dcfg.vocab_size} tokens, the target's {hf_cfg.vocab_size}.",
            file=file,
            field=field_,
            fix="draft with a model that uses the target's tokenizer, or serve with --no-speculation.",
        )
    if len(drafter.units) == 0:
        raise BadInput("the drafter has no unit table.", file=file, field="speculation.drafter.units", fix="re-plan with `hetc plan --draft`.")


def size_kv(c: Checked) -> None:
    """Each lane's KV blocks (`c.blocks`) and the sequences a lane runs at once (`c.max_seqs`).

    Raises:
        BadInput: a stage's KV budget holds less than one block.
    """
    from hetc.runtime.emulate import cap_kv_blocks
    from hetc.backends.decoder import is_mla, kv_tensors
    from hetc.runtime.model_runner import TORCH_DTYPES, kv_layout
    from hetc.kv_blocks import PADDING_BLOCKS, lane_blocks, stage_blocks
    from hetc.scheduling import KV_BLOCK_TOKENS

    o, lanes = c.o, c.lanes
    kvh, hd = kv_layout(c.hf_cfg)
    per_token_layer = kv_tensors(c.hf_cfg) * kvh * hd * TORCH_DTYPES[c.plan.model.kv_dtype].itemsize
    c.max_seqs = o.max_num_seqs or max(max(l.batch for l in lanes), 2 * max(len(l.stages) for l in lanes))
    # a pool larger than max_seqs full-length sequences is never used: cap it (the plan's budget
    # assumes a device of its own; emulated devices share this host's memory)
    max_len = int(getattr(c.hf_cfg, "max_position_embeddings", 0) or 0)
    c.max_context = max_len
    useful = c.max_seqs * -(-max_len // KV_BLOCK_TOKENS) + PADDING_BLOCKS if max_len else None
    for lane in lanes:
        attn = {s.index: sum(1 for u in c.units[s.units[0] : s.units[1] + 1] if u.kind == UnitKind.ATTENTION) for s in lane.stages}
        # each rank keeps 1/tp of the K/V heads, but MLA's latent whole (model_runner.py)
        caps = [stage_blocks(s.kv_budget, 1 if is_mla(c.hf_cfg) else s.tp, attn[s.index] * per_token_layer) for s in lane.stages]
        n = lane_blocks(caps)  # the padding block on top of the plan's budget
        if n < 1:
            s = lane.stages[caps.index(min(x for x in caps if x is not None))]
            raise BadInput(
                f"stage {s.index} ({s.device}) has a KV budget of {s.kv_budget:.0f} bytes, less than one block of {KV_BLOCK_TOKENS} tokens.",
                file=o.plan,
                field=f"pipelines.{lane.pipeline}.stages.{s.index}.memory_bytes.kv",
                fix="re-plan with a larger --input-len/--output-len or more memory.",
            )
        c.blocks[lane.id] = min(n, o.num_kv_blocks or n, useful or n)
    if o.emulate:
        c.blocks = cap_kv_blocks(c.plan, c.hf_cfg, c.units, c.mine, c.blocks)


def start_workers(c: Checked, tmp: str, log=print):
    """Open the job's store, start this host's workers of every unit (generation 1) and, on node
    rank 0, form every unit's group once its workers loaded (however long that takes while they
    live; progress goes to `log`). Returns (WorkerPool, store, lane id → transport).

    Args:
        c: validated and sized (`validate`, `size_kv`).
        tmp: a directory for the workers' spec file.
        log: progress lines.
    """
    from hetc.runtime.groups import FORM_TIMEOUT_S
    from hetc.runtime.rendezvous import open_store
    from hetc.runtime.worker import WorkerConfig
    from hetc.runtime.workers import WorkerPool, WorkerSetup

    o, r = c.o, c.rdzv
    addr, port = r.master_addr or "127.0.0.1", r.master_port or free_port()
    store = open_store(addr, port, r.node_rank == 0, max(o.timeout, FORM_TIMEOUT_S), r.agent_store)
    # gloo listens on loopback on one host, on --master-addr on node rank 0 of several (the store
    # itself listens on every interface: a torch TCPStore limit, README "Running it in production")
    bind = "127.0.0.1" if r.nnodes == 1 else addr if r.node_rank == 0 else None
    cfg = WorkerConfig(
        plan=str(Path(o.plan).resolve()),
        model_ref=c.model_ref,
        model_dir=c.model_dir,
        random_weights=o.random_weights,
        emulate=o.emulate,
        master_addr=addr,
        master_port=port,
        agent_store=r.agent_store,
        timeout_s=o.timeout,
        kv_blocks={str(k): v for k, v in c.blocks.items()},
        threads=c.threads,
        width=c.width,
        bind=bind,
        executor=o.executor,
        artifacts=str(Path(o.artifacts).resolve()) if o.artifacts else None,
        cuda_graphs=o.cuda_graphs,
        max_seqs=c.max_seqs,
        max_context=c.max_context,
        draft=c.spec is not None and c.spec.method == "draft",
    )
    spec = os.path.join(tmp, "spec.json")
    cfg.save(spec)
    env = {
        **_wait_policy(c.threads * len(c.local)),
        **os.environ,
        "OMP_NUM_THREADS": str(c.threads),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    pool = WorkerPool(c.lanes, c.host_of, WorkerSetup(spec=spec, env=env, local=c.local, timeout_s=o.timeout, bind=bind), log=log)
    for u in range(len(pool.units)):
        pool.spawn(u, 1)
    transports: dict = {}
    if r.node_rank == 0:  # the frontend lives on node rank 0
        try:
            for u in range(len(pool.units)):
                transports.update(pool.join(store, u, 1))
        except BaseException:
            pool.stop_all(grace=0.0)
            raise
    return pool, store, transports


def _serve_workers_only(c: Checked, tmp: str, log) -> int:
    """Node rank > 0: this host's workers, until the frontend stops them (healer.run_worker_host)."""
    from hetc.runtime.healer import run_worker_host

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    pool, store, _ = start_workers(c, tmp, log)
    log(
        f"node rank {c.rdzv.node_rank}: running workers for {', '.join(w.device for w in c.mine) or 'no device'}; "
        f"frontend at {c.rdzv.master_addr}:{c.rdzv.master_port}"
    )
    return run_worker_host(pool, store, c.rdzv.node_rank, stop, log)


def serve(o: ServeOptions, log=print) -> int:
    """Run the server until SIGTERM/SIGINT, which drains; returns the exit code.

    Args:
        o: the command line's options.
        log: where progress lines go (stderr in the CLI).
    """
    import torch
    import uvicorn

    from hetc.runtime.drain import DrainingServer
    from hetc.runtime.engine import Engine
    from hetc.runtime.groups import units
    from hetc.runtime.healer import Healer
    from hetc.runtime.kvlinks import KvLinks, link_pairs
    from hetc.runtime.metrics import Metrics
    from hetc.batching import SchedulerConfig
    from hetc.runtime.server import ServerState, create_app
    from hetc.runtime.tokenizer import load_tokenizer

    c = validate(o)
    size_kv(c)
    from hetc.backends.decoder import eager_only
    from hetc.runtime.compiled_stage import prebuild_stages
    from hetc.scheduling import KV_BLOCK_TOKENS

    prebuild_stages(c, log)  # compile what the workers will load, before their groups' formation clocks start
    torch.set_num_threads(1)  # the frontend computes nothing
    tmp = tempfile.TemporaryDirectory(prefix="hetc-serve-")
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun's agent gone (e.g. killed): stop as on SIGTERM
        from hetc.runtime.worker import watch_parent

        threading.Thread(target=watch_parent, args=(lambda: os.kill(os.getpid(), signal.SIGTERM),), daemon=True).start()
    if c.rdzv.node_rank != 0:
        with tmp:
            return _serve_workers_only(c, tmp.name, log)
    plan, cfg = c.plan, c.hf_cfg
    name = o.served_model_name or (Path(c.model_ref).name if Path(c.model_ref).is_dir() else c.model_ref)
    eos = getattr(cfg, "eos_token_id", None)
    eos_ids = frozenset(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    try:
        tokenizer = load_tokenizer(c.model_dir, cfg.vocab_size, next(iter(eos_ids), None))
    except ValueError as e:
        raise BadInput(f"{e}.", field="--model-dir", fix="serve a model dir with a tokenizer.") from None
    if tokenizer.eos_token_id is not None:
        eos_ids |= {tokenizer.eos_token_id}
    sched_cfg = SchedulerConfig(
        max_num_seqs=c.max_seqs,
        max_batched_tokens=o.max_batched_tokens,
        max_waiting=o.max_waiting,
        max_queue_wait=o.max_queue_wait,
        prefix_caching=o.prefix_caching,
        speculation=c.spec,
    )
    metrics = Metrics(name)
    n_stages = [len(l.stages) for l in c.lanes]
    n_workers = sum(s.tp for l in c.lanes for s in l.stages)
    log(
        f"serving {plan.model.ref} ({plan.model.dtype}) as '{name}': {len(c.lanes)} lane(s) of {n_stages} stages, "
        f"{n_workers} workers{' (emulated on the host CPU)' if o.emulate else ''}"
        f"{f', a 1/{c.width}-width copy of the model' if c.width > 1 else ''}, KV blocks per lane "
        f"{list(c.blocks.values())} × {KV_BLOCK_TOKENS} tokens"
    )
    pool = None
    try:
        pool, store, transports = start_workers(c, tmp.name, log)
        links = KvLinks(store, c.lanes, on_ready=lambda pair: None, log=log) if link_pairs(c.lanes) else None
        engine = Engine(c.lanes, c.blocks, sched_cfg, metrics, transports=transports, units=units(c.lanes), links=links)
        healer = Healer(pool, store, engine, max_restarts=o.max_restarts, log=log, other_hosts=tuple(range(1, c.rdzv.nnodes)))
        for lane in c.lanes:
            metrics.register_lane(lane.id, c.blocks[lane.id])
            for s in lane.stages:
                metrics.register_stage(lane.id, s.index, s.device, s.predicted_ms)
                for rank, dev in zip(s.ranks, s.devices):
                    w = pool.info[rank]
                    metrics.register_worker(lane.id, s.index, dev, w["param_bytes"], s.weight_bytes, w["kv_bytes"], w["executor"])
        engine.start()
        healer.start()
        max_len = min(int(getattr(cfg, "max_position_embeddings", 1 << 30)), engine.max_tokens_per_seq)
        info = {
            "root": plan.model.ref,
            "dtype": plan.model.dtype,
            "tokenizer": tokenizer.kind,
            "vocab_size": cfg.vocab_size,
            "emulated": o.emulate,
            "random_weights": o.random_weights,
            "lanes": len(c.lanes),
            "stages": n_stages,
            "executors": [
                {"stage": f"{lane.id}.{s.index}", "backend": s.backend, "devices": list(s.devices), "executor": pool.info[s.ranks[0]]["executor"]}
                for lane in c.lanes
                for s in lane.stages
            ],
        }
        if o.executor == "auto" and any(s.tp > 1 for lane in c.lanes for s in lane.stages):
            info["executor_note"] = "tensor-parallel stages run torch eager (no sharded lowering yet)"
        if o.executor == "auto" and any(eager_only(c.hf_cfg, c.units[s.units[0] : s.units[1] + 1]) for lane in c.lanes for s in lane.stages):
            info["executor_note"] = "stages with MoE layers, sliding-window attention or MLA run torch eager (no compiled lowering of those yet)"
        if o.executor == "auto" and not o.emulate:
            info["executor_note"] = "on real devices every stage runs torch eager on its device in this version"
        if c.spec is not None:
            info["speculation"] = {"method": c.spec.method.value, "num_speculative_tokens": c.spec.k}
        if plan.model.dtype == "fp8":
            info["note"] = "fp8 weights are computed in bf16 by this runtime"
        if c.width > 1:
            info["emulated_width"] = f"1/{c.width}: a width-shrunk copy (heads, hidden and MLP), same layers, units and cuts; outputs are not the model's"

        def health() -> dict:
            # a worker on another host: alive as far as its unit's transport knows
            down = {u: why for u, why in engine.down.items()}
            workers = []
            for r, w in sorted(pool.info.items()):
                p = pool.procs.get(r)
                unit = engine.unit_of[int(w["stage"].split(".")[0])]
                workers.append({**w, "alive": p.poll() is None if p is not None else unit not in down})
            out = {"workers": workers, "units": healer.health(), "running": engine.num_running(), "waiting": engine.num_waiting()}
            if engine.draining:
                out["down"] = "the server is draining (SIGTERM) and takes no new requests"
            elif down:
                out["down"] = "; ".join(f"pipeline unit {u}: {why}" for u, why in sorted(down.items()))
            return out

        st = ServerState(
            engine=engine,
            tokenizer=tokenizer,
            model_name=name,
            max_model_len=max_len,
            eos_token_ids=eos_ids,
            metrics=metrics,
            api_key=o.api_key,
            model_info=info,
            health_info=health,
            max_body_bytes=o.max_body_bytes,
            tool_parser=ToolParser(o.tool_call_parser) if o.enable_auto_tool_choice and o.tool_call_parser else None,
        )
        server = DrainingServer(
            uvicorn.Config(
                create_app(st),
                host=o.host,
                port=o.port,
                log_level="warning",
                timeout_graceful_shutdown=5,
                access_log=False,
                timeout_keep_alive=o.idle_timeout,  # type: ignore[arg-type]
            ),
            engine=engine,
            drain_timeout=o.drain_timeout,
            log=log,
        )
        where = (
            "this machine only; --host 0.0.0.0 accepts other machines"
            if o.host in ("127.0.0.1", "localhost", "::1")
            else "reachable from other machines" + ("" if o.api_key else ", with no --api-key")
        )
        log(f"listening on http://{o.host}:{o.port}/v1 ({where}; max context {max_len} tokens)")
        server.run()  # returns once the drain (SIGTERM/SIGINT) is over, or on a second signal
        healer.stop()
        stopped = engine.shutdown(timeout=10.0)
        log("workers stopped" if stopped else "some workers did not stop in time; ending them")
    finally:
        if pool is not None:
            pool.stop_all()
        tmp.cleanup()
    if pool.forming():
        # a restart cut short by the drain left its group's formation waiting in gloo (C++), which
        # would abort the interpreter's exit: leave without it (everything is stopped and flushed)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
