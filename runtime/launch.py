"""`hetc serve plan.json`: check the plan against the model, launch one worker process per
plan device, join them in one torch.distributed job, and serve the OpenAI API.

Startup refuses (BadInput, exit 2) a plan that is malformed, of another schema, made for
another model (graph_hash), or that needs a device this host lacks (without --emulate).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from hetc.errors import BadInput, HetcError
from hetc.scheduling import MAX_WAITING, PREFILL_CHUNK

__all__ = ["ServeOptions", "serve"]


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
    drain_timeout: float = 60.0
    max_queue_wait: float = 30.0  # seconds: a request predicted to wait longer for its first token gets 429
    max_body_bytes: int = 1 << 20  # a larger request body gets 413
    idle_timeout: float = 5.0  # seconds an idle keep-alive connection is held open (uvicorn)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_policy(threads: int) -> dict[str, str]:
    """OpenMP's wait policy for the workers when the user sets none: when their threads together
    exceed the host's cores, idle threads sleep (PASSIVE) rather than spin on cores the other
    stages need; otherwise OpenMP's default (spin briefly, then sleep), as in a plain torch
    process. Sleeping costs a wake-up per parallel region: a fifth of a decode step on the
    2-core reference host (BENCHMARKS.md, Runtime)."""
    return {"OMP_WAIT_POLICY": "PASSIVE"} if threads > (os.cpu_count() or 1) else {}


def _resolve_model(plan, o: ServeOptions) -> tuple[str, str | None]:
    """(where the config comes from, the safetensors/tokenizer dir or None)."""
    from hetc.runtime.weights import has_weights

    if o.model_dir:
        d = Path(o.model_dir)
        if not (d / "config.json").is_file():
            raise BadInput(f"{d} has no config.json.", field="--model-dir", fix="point it at a Hugging Face model dir.")
        if not o.random_weights and not has_weights(d):
            raise BadInput(f"{d} has no *.safetensors weights.", field="--model-dir",
                           fix="save the model with safetensors, or pass --random-weights.")
        return str(d), str(d)
    ref = plan.model.ref
    if Path(ref).is_dir() and (has_weights(ref) or o.random_weights):
        return ref, ref
    if o.random_weights:
        return ref, None
    raise BadInput(f"the plan's model {ref!r} has no weights here.", field="--model-dir",
                   fix="pass --model-dir DIR with the model's safetensors, or --random-weights.")


def _check_hash(plan, model_ref: str, file: str) -> None:
    from hetc.partitioner.capture import capture

    got = capture(model_ref, dtype=plan.model.dtype, kv_dtype=plan.model.kv_dtype).graph_hash
    if got != plan.model.graph_hash:
        raise BadInput(f"model.graph_hash is {plan.model.graph_hash[:16]}…, but {model_ref} ({plan.model.dtype}, "
                       f"kv {plan.model.kv_dtype}) hashes to {got[:16]}…: the plan was made for another model, dtype "
                       "or unit table.", file=file, field="model.graph_hash",
                       fix=f"re-plan with `hetc plan {model_ref} --dtype {plan.model.dtype}`, or serve the model the "
                           "plan was made for.")


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
            raise BadInput(f"stage {s.index} of pipeline {pipeline} runs on {w.device} ({s.profile}, backend "
                           f"{s.backend}), which this host cannot provide: {e}", file=file,
                           field=f"pipelines.{pipeline}.stages.{s.index}",
                           fix="run on a host with that device, or pass --emulate to run every device of the "
                               "plan as a CPU process.") from None


class _Launch:
    """Everything the running server holds: plan, topology, workers, engine."""

    def __init__(self, o: ServeOptions):
        import torch

        from hetc.partitioner.capture import load_hf_config
        from hetc.plan import load_plan
        from hetc.scheduling import KV_BLOCK_TOKENS
        from hetc.runtime.emulate import cap_kv_blocks, fit_width
        from hetc.runtime.model_runner import TORCH_DTYPES, UnitRef, check_supported, check_tp, kv_layout
        from hetc.runtime.rendezvous import rendezvous
        from hetc.runtime.topology import build_topology, hosts_of_nodes, kv_blocks, workers

        self.o = o
        self.rdzv = rendezvous(o.nnodes, o.node_rank, o.master_addr, o.master_port)
        plan = self.plan = load_plan(o.plan)
        if not plan.units:
            raise BadInput("the plan has no unit table.", file=o.plan, field="units",
                           fix="regenerate it with this version of `hetc plan`.")
        self.lanes = build_topology(plan, o.plan)
        self.host_of = hosts_of_nodes(plan, self.rdzv.nnodes, o.plan)
        self.all_workers = workers(self.lanes)
        self.local = {w.rank for w in self.all_workers if self.host_of[w.stage.node] == self.rdzv.node_rank}
        self.model_ref, self.model_dir = _resolve_model(plan, o)
        _check_hash(plan, self.model_ref, o.plan)
        self.hf_cfg, _ = load_hf_config(self.model_ref)
        units = [UnitRef(u["index"], u["kind"], u["layer"]) for u in plan.units]
        check_supported(self.hf_cfg, units, o.plan)
        for lane in self.lanes:
            for s in lane.stages:
                check_tp(self.hf_cfg, units[s.units[0]: s.units[1] + 1], s.tp,
                         f"pipelines.{lane.pipeline}.stages.{s.index}.tp", o.plan)
        if not o.emulate:
            _check_devices(self.lanes, o.plan, self.local)
        self.width = 1
        if o.emulate:  # emulated devices share this host's memory
            mine = [w for w in self.all_workers if w.rank in self.local]
            self.width, self.hf_cfg = fit_width(plan, self.hf_cfg, mine, o.random_weights, o.plan)
        kvh, hd = kv_layout(self.hf_cfg)
        per_token_layer = 2 * kvh * hd * TORCH_DTYPES[plan.model.kv_dtype].itemsize
        self.blocks: dict[int, int] = {}
        self.max_seqs = o.max_num_seqs or max(max(l.batch for l in self.lanes),
                                               2 * max(len(l.stages) for l in self.lanes))
        # a pool larger than max_seqs full-length sequences is never used: cap it (the plan's budget
        # assumes a device of its own; emulated devices share this host's memory)
        max_len = int(getattr(self.hf_cfg, "max_position_embeddings", 0) or 0)
        useful = self.max_seqs * -(-max_len // KV_BLOCK_TOKENS) if max_len else None
        for lane in self.lanes:
            attn = {s.index: sum(1 for u in units[s.units[0]: s.units[1] + 1] if u.kind == "attention")
                    for s in lane.stages}
            n, caps = kv_blocks(lane, attn, per_token_layer, KV_BLOCK_TOKENS)
            if n < 1:
                s = lane.stages[caps.index(min(c for c in caps if c >= 0))]
                raise BadInput(f"stage {s.index} ({s.device}) has a KV budget of {s.kv_budget:.0f} bytes, less than "
                               f"one block of {KV_BLOCK_TOKENS} tokens.", file=o.plan,
                               field=f"pipelines.{lane.pipeline}.stages.{s.index}.memory_bytes.kv",
                               fix="re-plan with a larger --input-len/--output-len or more memory.")
            self.blocks[lane.id] = min(n, o.num_kv_blocks or n, useful or n)
        if o.emulate:
            self.blocks = cap_kv_blocks(plan, self.hf_cfg, units, mine, self.blocks)
        self.n_workers = len(self.all_workers)
        n_here = max(1, len(self.local))
        self.threads = o.threads or max(1, (os.cpu_count() or 1) // n_here if o.emulate else os.cpu_count() or 1)
        torch.set_num_threads(1)  # the frontend computes nothing
        self.procs: dict[int, subprocess.Popen] = {}
        self.workers: dict[int, dict] = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="hetc-serve-")

    # ---- workers ---------------------------------------------------------------------------
    def start_workers(self) -> None:
        import torch.distributed as dist

        from hetc.runtime.rendezvous import join_job
        from hetc.runtime.topology import tp_groups
        from hetc.runtime.transport import Kind, recv
        from hetc.runtime.worker import WorkerConfig

        o, r = self.o, self.rdzv
        addr, port = r.master_addr or "127.0.0.1", r.master_port or _free_port()
        cfg = WorkerConfig(plan=str(Path(o.plan).resolve()), model_ref=self.model_ref, model_dir=self.model_dir,
                           random_weights=o.random_weights, emulate=o.emulate, master_addr=addr, master_port=port,
                           agent_store=r.agent_store, world_size=self.n_workers + 1, timeout_s=o.timeout,
                           kv_blocks={str(k): v for k, v in self.blocks.items()}, threads=self.threads,
                           width=self.width)
        spec = os.path.join(self._tmp.name, "spec.json")
        cfg.save(spec)
        env = {**_wait_policy(self.threads * len(self.local)), **os.environ, "OMP_NUM_THREADS": str(self.threads),
               "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
        for w in self.all_workers:
            if w.rank in self.local:
                self.procs[w.rank] = subprocess.Popen(
                    [sys.executable, "-m", "hetc.runtime.worker", "--spec", spec, "--device", w.device], env=env)
        if r.node_rank != 0:
            return  # rank 0 (the frontend) lives on node rank 0
        err: list[BaseException] = []

        def join() -> None:
            try:
                join_job(addr, port, 0, self.n_workers + 1, o.timeout, r.agent_store)
            except BaseException as e:  # noqa: BLE001 — reported below
                err.append(e)

        t = threading.Thread(target=join, daemon=True)
        t.start()
        deadline = time.monotonic() + max(o.timeout, 120.0)
        while t.is_alive():
            t.join(0.2)
            self._raise_if_dead("starting")
            if time.monotonic() > deadline:
                raise HetcError("the workers did not join the torch.distributed job in time.")
        if err:
            raise HetcError(f"joining the workers failed: {err[0]}")
        for ranks in tp_groups(self.lanes):  # every rank creates every group, the frontend too
            dist.new_group(list(ranks), timeout=dt.timedelta(seconds=o.timeout))
        for w in self.all_workers:
            s = w.stage
            msg = recv(w.rank)
            if msg.kind is not Kind.READY:
                raise HetcError(f"worker {w.device} sent {msg.kind.name} before READY")
            pb, n_params, blocks, pid, kv_bytes = msg.payload.reshape(-1).tolist()
            self.workers[w.rank] = {"rank": w.rank, "device": w.device, "stage": f"{s.lane}.{s.index}",
                                    "tp_rank": w.tp_rank, "node_rank": self.host_of[s.node], "units": list(s.units),
                                    "pid": pid, "param_bytes": pb, "param_tensors": n_params, "kv_blocks": blocks,
                                    "kv_bytes": kv_bytes}

    def _raise_if_dead(self, when: str) -> None:
        for rank, p in self.procs.items():
            if p.poll() is not None:
                dev = next(w.device for w in self.all_workers if w.rank == rank)
                raise HetcError(f"the worker for {dev} (rank {rank}) exited with code {p.returncode} while {when}; "
                                "its message is above.")

    def watch(self, engine) -> None:
        """Fail the engine when a worker process exits unexpectedly."""

        def loop() -> None:
            while not engine.failed:
                time.sleep(0.2)
                if engine.draining and all(r.stopped.is_set() for r in engine.lanes):
                    return
                for rank, p in self.procs.items():
                    if p.poll() is not None:
                        w = self.workers.get(rank, {})
                        engine.fail(f"the worker for device {w.get('device')} (rank {rank}, stage {w.get('stage')}) "
                                    f"exited with code {p.returncode}")
                        return

        threading.Thread(target=loop, name="watchdog", daemon=True).start()

    def terminate(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()

    def stop_workers(self, grace: float = 5.0) -> None:
        deadline = time.monotonic() + grace
        for p in self.procs.values():
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(2.0)
            except subprocess.TimeoutExpired:
                p.kill()
        self._tmp.cleanup()


def _server_class():
    import uvicorn

    class _Server(uvicorn.Server):
        """uvicorn re-raises SIGTERM once its graceful shutdown is over, which would end the
        process before the workers are stopped; here the signal only asks the server to exit."""

        @contextlib.contextmanager
        def capture_signals(self):
            old = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, h in old.items():
                    signal.signal(s, h)

    return _Server


def _serve_workers_only(L: _Launch, log) -> int:
    """Node rank > 0: run this host's workers until they exit (the frontend on node rank 0 stops
    them) or SIGTERM/SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    L.start_workers()
    devices = [w.device for w in L.all_workers if w.rank in L.local]
    log(f"node rank {L.rdzv.node_rank}: running workers for {', '.join(devices) or 'no device'}; frontend at "
        f"{L.rdzv.master_addr}:{L.rdzv.master_port}")
    try:
        while not stop.wait(0.2):
            codes = [p.poll() for p in L.procs.values()]
            if any(c not in (None, 0) for c in codes):
                log("a worker failed; stopping this node's workers")
                return 1
            if all(c == 0 for c in codes):
                log("workers finished")
                return 0
        return 0
    finally:
        L.terminate()
        L.stop_workers(grace=0.0)


def serve(o: ServeOptions, log=print) -> int:
    """Run the server until SIGTERM/SIGINT; returns the exit code.

    Args:
        o: the command line's options.
        log: where progress lines go (stderr in the CLI).
    """
    import uvicorn

    from hetc.runtime.engine import Engine
    from hetc.runtime.metrics import Metrics
    from hetc.runtime.scheduler import SchedulerConfig
    from hetc.runtime.server import ServerState, create_app
    from hetc.runtime.tokenizer import load_tokenizer

    _Server = _server_class()
    L = _Launch(o)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun's agent gone (e.g. killed): stop as on SIGTERM
        from hetc.runtime.worker import watch_parent

        threading.Thread(target=watch_parent, args=(lambda: os.kill(os.getpid(), signal.SIGTERM),),
                         daemon=True).start()
    if L.rdzv.node_rank != 0:
        return _serve_workers_only(L, log)
    plan, cfg = L.plan, L.hf_cfg
    name = o.served_model_name or (Path(L.model_ref).name if Path(L.model_ref).is_dir() else L.model_ref)
    eos = getattr(cfg, "eos_token_id", None)
    eos_ids = frozenset(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    try:
        tokenizer = load_tokenizer(L.model_dir, cfg.vocab_size, next(iter(eos_ids), None))
    except ValueError as e:
        raise BadInput(f"{e}.", field="--model-dir", fix="serve a model dir with a tokenizer.") from None
    if tokenizer.eos_token_id is not None:
        eos_ids |= {tokenizer.eos_token_id}
    sched_cfg = SchedulerConfig(max_num_seqs=L.max_seqs, max_batched_tokens=o.max_batched_tokens,
                                max_waiting=o.max_waiting, max_queue_wait=o.max_queue_wait)
    metrics = Metrics(name)
    n_stages = [len(l.stages) for l in L.lanes]
    log(f"serving {plan.model.ref} ({plan.model.dtype}) as '{name}': {len(L.lanes)} lane(s) of {n_stages} stages, "
        f"{L.n_workers} workers{' (emulated on the host CPU)' if o.emulate else ''}"
        f"{f', a 1/{L.width}-width copy of the model' if L.width > 1 else ''}, KV blocks per lane "
        f"{list(L.blocks.values())} × 16 tokens")
    try:
        L.start_workers()
        engine = Engine(L.lanes, L.blocks, sched_cfg, metrics)
        for lane in L.lanes:
            metrics.register_lane(lane.id, L.blocks[lane.id])
            for s in lane.stages:
                metrics.register_stage(lane.id, s.index, s.device, s.predicted_ms)
                for rank, dev in zip(s.ranks, s.devices):
                    w = L.workers[rank]
                    metrics.register_worker(lane.id, s.index, dev, w["param_bytes"], s.weight_bytes, w["kv_bytes"])
        # one dead stage leaves the job unusable: stop the others now rather than at their receive timeout
        engine.on_fail = lambda reason: L.terminate()
        engine.start()
        L.watch(engine)
        max_len = min(int(getattr(cfg, "max_position_embeddings", 1 << 30)), engine.max_tokens_per_seq)
        info = {"root": plan.model.ref, "dtype": plan.model.dtype, "tokenizer": tokenizer.kind,
                "vocab_size": cfg.vocab_size, "emulated": o.emulate, "random_weights": o.random_weights,
                "lanes": len(L.lanes), "stages": n_stages}
        if plan.model.dtype == "fp8":
            info["note"] = "fp8 weights are computed in bf16 by this runtime"
        if L.width > 1:
            info["emulated_width"] = (f"1/{L.width}: a width-shrunk copy (heads, hidden and MLP), same layers, units "
                                      "and cuts; outputs are not the model's")

        def health() -> dict:
            # a worker on another host: alive as far as the transport knows (its death fails the engine)
            return {"workers": [{**w, "alive": L.procs[r].poll() is None if r in L.procs else not engine.failed}
                                for r, w in sorted(L.workers.items())],
                    "running": engine.num_running(), "waiting": engine.num_waiting()}

        st = ServerState(engine=engine, tokenizer=tokenizer, model_name=name, max_model_len=max_len,
                         eos_token_ids=eos_ids, metrics=metrics, api_key=o.api_key, model_info=info,
                         health_info=health, max_body_bytes=o.max_body_bytes)
        server = _Server(uvicorn.Config(create_app(st), host=o.host, port=o.port, log_level="warning",
                                               timeout_graceful_shutdown=o.drain_timeout, access_log=False,
                                               timeout_keep_alive=o.idle_timeout))
        where = ("this machine only; --host 0.0.0.0 accepts other machines" if o.host in ("127.0.0.1", "localhost", "::1")
                 else "reachable from other machines" + ("" if o.api_key else ", with no --api-key"))
        log(f"listening on http://{o.host}:{o.port}/v1 ({where}; max context {max_len} tokens)")
        server.run()  # returns after SIGTERM/SIGINT, once open requests have drained
        clean = engine.failed is None and engine.shutdown(timeout=o.drain_timeout)
        log("drained; workers stopped" if clean else f"stopped{': ' + engine.failed if engine.failed else ''}")
        return 0 if clean else 1
    finally:
        L.stop_workers()
