"""Where a `hetc serve` job's processes meet: the hosts from the command line or from
torchrun's environment, and the job's store (each pipeline unit forms its own gloo group
under it: groups.py).

Under torchrun (TORCHELASTIC_RUN_ID set) each host runs one `hetc serve` process
(--nproc-per-node 1; hetc launches its own per-device workers): the number of hosts, this
host's rank and node rank 0's address come from torchrun, and ranks still come from the
plan. With torchrun's agent store (its default rendezvous) the agent on node rank 0 already
serves a TCPStore on MASTER_PORT, so every process of the job connects to it as a client;
otherwise the frontend serves it.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass

from hetc.errors import BadInput

__all__ = ["Rendezvous", "open_store", "rendezvous"]

STORE_PREFIX = "hetc/"  # our keys in torchrun's agent store, apart from the agent's own


@dataclass(frozen=True, slots=True)
class Rendezvous:
    """This host's place in the job (from the command line, or torchrun's environment)."""

    nnodes: int  # hosts serving the plan
    node_rank: int  # this host; 0 runs the frontend
    master_addr: str | None  # node rank 0's address (None: this host, one host only)
    master_port: int | None  # the job's store there (None: any free port, one host only)
    agent_store: bool  # torchrun's agent serves the store at master_addr:master_port


def _from_torchrun(env: Mapping[str, str]) -> Rendezvous:
    local = int(env.get("LOCAL_WORLD_SIZE", "1"))
    if local != 1:
        raise BadInput(
            f"torchrun started {local} processes on this host (LOCAL_WORLD_SIZE={local}), but `hetc serve` "
            "launches one worker per plan device itself and wants one process per host.",
            field="--nproc-per-node",
            fix="run torchrun with --nproc-per-node 1.",
        )
    return Rendezvous(
        nnodes=int(env.get("GROUP_WORLD_SIZE") or env["WORLD_SIZE"]),
        node_rank=int(env.get("GROUP_RANK") or env["RANK"]),
        master_addr=env["MASTER_ADDR"],
        master_port=int(env["MASTER_PORT"]),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
    )


def _check_agrees(flags: list[tuple[str, object, object]]) -> None:
    """Each (flag, the value given or None, torchrun's value)."""
    for flag, value, theirs in flags:
        if value is not None and value != theirs:
            raise BadInput(
                f"{flag} {value} disagrees with torchrun's {theirs}.",
                field=flag,
                fix=f"drop {flag} (under torchrun `hetc serve` takes it from torchrun), or give torchrun the same value.",
            )


def _check_hosts(r: Rendezvous) -> None:
    if r.nnodes > 1 and not (r.master_addr and r.master_port):
        raise BadInput(
            f"--nnodes {r.nnodes} needs --master-addr and --master-port (node rank 0's address and a free port there).",
            field="--master-addr",
            fix="pass the same both to every host.",
        )
    if not 0 <= r.node_rank < r.nnodes:
        raise BadInput(
            f"--node-rank {r.node_rank} is not in 0..{r.nnodes - 1}.", field="--node-rank", fix="number the hosts 0 to nnodes − 1; rank 0 serves HTTP."
        )


def rendezvous(nnodes: int | None, node_rank: int | None, master_addr: str | None, master_port: int | None, env: Mapping[str, str] = os.environ) -> Rendezvous:
    """This host's place in the job, from the command line or, under torchrun, from its environment.

    Args:
        nnodes: --nnodes (None: not given; 1, or torchrun's).
        node_rank: --node-rank (None: not given; 0, or torchrun's).
        master_addr: --master-addr (None: not given).
        master_port: --master-port (None: not given).
        env: the environment (torchrun's variables, when TORCHELASTIC_RUN_ID is set).

    Raises:
        BadInput: torchrun runs more than one process per host, a flag disagrees with
            torchrun, several hosts lack node rank 0's address, or the node rank is out of range.
    """
    if env.get("TORCHELASTIC_RUN_ID"):
        r = _from_torchrun(env)
        _check_agrees(
            [
                ("--nnodes", nnodes, r.nnodes),
                ("--node-rank", node_rank, r.node_rank),
                ("--master-addr", master_addr, r.master_addr),
                ("--master-port", master_port, r.master_port),
            ]
        )
    else:
        r = Rendezvous(nnodes=nnodes or 1, node_rank=node_rank or 0, master_addr=master_addr, master_port=master_port, agent_store=False)
    _check_hosts(r)
    return r


def open_store(addr: str, port: int, is_master: bool, timeout_s: float, agent_store: bool):
    """The job's key-value store, under which every pipeline unit forms its groups (groups.py).

    Args:
        addr: node rank 0's address.
        port: the store's port there.
        is_master: this process serves the store (the frontend, unless torchrun's agent does).
        timeout_s: how long a get or a group's formation waits, seconds.
        agent_store: torchrun's agent already serves the store at addr:port: connect to it as a
            client (our keys under "hetc/").
    """
    import torch.distributed as dist

    timeout = dt.timedelta(seconds=timeout_s)
    store = dist.TCPStore(addr, port, is_master=is_master and not agent_store, timeout=timeout, wait_for_workers=False)
    return dist.PrefixStore(STORE_PREFIX, store)
