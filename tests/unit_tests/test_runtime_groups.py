"""Per-unit process groups (real gloo groups, real processes): each lane forms its own group
with the frontend; one unit's group is torn down and formed again as generation 2 with a new
worker process while the other unit's group keeps exchanging messages."""

import subprocess
import sys
import textwrap

import torch

from hetc.runtime.groups import form_group, group_ranks, units
from hetc.runtime.rendezvous import open_store
from hetc.runtime.topology import Lane, StageSpec
from hetc.runtime.transport import Kind, Message

TIMEOUT = 20.0


def _lanes() -> list[Lane]:
    def lane(i: int, rank: int) -> Lane:
        s = StageSpec(
            lane=i,
            index=0,
            n_stages=1,
            devices=(f"n:{i}",),
            ranks=(rank,),
            prev_rank=0,
            next_rank=0,
            backend="cpu",
            profile="p",
            node="n",
            units=(0, 0),
            layers=(0, 0),
            kv_budget=1.0,
            weight_bytes=1.0,
            predicted_ms=(1.0, 1.0),
        )
        return Lane(i, i, 0, 1, (s,))

    return [lane(0, 1), lane(1, 2)]


# a worker: join its unit's group, then answer each STEP with its payload + rank * 1000 until SHUTDOWN
WORKER = textwrap.dedent("""
    import sys, torch
    sys.path[:0] = [{path!r}]
    from test_runtime_groups import _lanes, TIMEOUT
    from hetc.runtime.groups import form_group, unit_of_lane
    from hetc.runtime.rendezvous import open_store
    from hetc.runtime.transport import Kind, Message
    rank, lane, gen, port = {rank}, {lane}, {gen}, {port}
    lanes = _lanes()
    store = open_store("127.0.0.1", port, False, TIMEOUT, False)
    tp = form_group(store, lanes, unit_of_lane(lanes)[lane], gen, rank, TIMEOUT)
    while True:
        m = tp.recv(0)
        if m.kind is Kind.SHUTDOWN:
            break
        tp.send(Message(Kind.RESULT, m.step_id, payload=m.payload + rank * 1000 + gen * 100), 0)
        tp.flush(0)
""")


def _worker(rank: int, lane: int, gen: int, port: int) -> subprocess.Popen:
    import os

    here = os.path.dirname(__file__)
    return subprocess.Popen([sys.executable, "-c", WORKER.format(path=here, rank=rank, lane=lane, gen=gen, port=port)])


def _echo(tp, rank: int, step: int) -> list[int]:
    tp.send(Message(Kind.STEP, step, payload=torch.arange(4, dtype=torch.long) + step), rank)
    got = tp.recv(rank)
    assert got.kind is Kind.RESULT and got.step_id == step
    return got.payload.reshape(-1).tolist()


def test_pools_are_units_of_their_own_joined_by_kv_links():
    import dataclasses

    from hetc.runtime.kvlinks import link_pairs, link_ranks

    pre, dec = _lanes()
    pre = dataclasses.replace(pre, phase="prefill", targets=(1,))
    dec = dataclasses.replace(dec, phase="decode")
    third = dataclasses.replace(_lanes()[0], id=2)
    lanes = [pre, dec, third]
    assert units(lanes) == [(0,), (1,), (2,)]
    assert group_ranks(lanes, 0) == [0, 1] and group_ranks(lanes, 1) == [0, 2]
    assert link_pairs(lanes) == [(0, 1)] and link_ranks(lanes, (0, 1)) == [1, 2]  # workers only, no frontend


def test_a_unit_reforms_alone_with_a_new_generation():
    import socket

    lanes = _lanes()
    assert units(lanes) == [(0,), (1,)] and group_ranks(lanes, 1) == [0, 2]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = open_store("127.0.0.1", port, True, TIMEOUT, False)
    procs = [_worker(1, 0, 1, port), _worker(2, 1, 1, port)]
    try:
        g0, g1 = (form_group(store, lanes, u, 1, 0, TIMEOUT) for u in (0, 1))
        assert _echo(g0, 1, 1) == [1 + 1100, 2 + 1100, 3 + 1100, 4 + 1100]
        assert _echo(g1, 2, 2) == [2 + 2100, 3 + 2100, 4 + 2100, 5 + 2100]
        procs[0].kill()  # unit 0's worker dies: its group is gone
        procs[0].wait()
        try:
            _echo(g0, 1, 3)
            raise AssertionError("a dead peer's group kept working")
        except RuntimeError:
            pass
        g0.close()
        procs[0] = _worker(1, 0, 2, port)  # a new process joins generation 2
        g0 = form_group(store, lanes, 0, 2, 0, TIMEOUT)
        assert _echo(g0, 1, 4) == [4 + 1200, 5 + 1200, 6 + 1200, 7 + 1200]
        assert _echo(g1, 2, 5) == [5 + 2100, 6 + 2100, 7 + 2100, 8 + 2100]  # unit 1 never noticed
        for tp, rank in ((g0, 1), (g1, 2)):
            tp.send(Message(Kind.SHUTDOWN), rank)
            tp.flush(rank)
        assert [p.wait(10) for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
