"""`hetc serve`'s hosts from the command line or from torchrun's environment (rendezvous.py):
torchrun's variables map to nnodes, node rank, master address and port and the agent store;
more than one process per host, or a flag that disagrees with torchrun, is bad input; and the
workers' OpenMP wait policy."""

import pytest

from hetc.cli import main as hetc_main
from hetc.errors import BadInput
from hetc.runtime.rendezvous import Rendezvous, rendezvous

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "none",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "GROUP_WORLD_SIZE": "2",
    "WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "RANK": "1",
    "LOCAL_WORLD_SIZE": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}


@pytest.fixture
def torchrun(monkeypatch):
    for k, v in TORCHRUN.items():
        monkeypatch.setenv(k, v)
    return monkeypatch


def test_without_torchrun_the_flags_and_their_defaults(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert rendezvous(None, None, None, None) == Rendezvous(nnodes=1, node_rank=0, master_addr=None, master_port=None, agent_store=False)
    assert rendezvous(2, 1, "h0", 1234) == Rendezvous(nnodes=2, node_rank=1, master_addr="h0", master_port=1234, agent_store=False)
    with pytest.raises(BadInput, match="--master-addr"):
        rendezvous(2, 1, None, None)
    with pytest.raises(BadInput, match="--node-rank 2 is not in 0..1"):
        rendezvous(2, 2, "h0", 1234)


def test_under_torchrun_the_hosts_come_from_its_environment(torchrun):
    want = Rendezvous(nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29500, agent_store=True)
    assert rendezvous(None, None, None, None) == want
    assert rendezvous(2, 1, "10.0.0.1", 29500) == want  # the same values given again agree
    torchrun.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")  # rank 0 then serves the store itself
    assert not rendezvous(None, None, None, None).agent_store


def test_under_torchrun_one_process_per_host(torchrun):
    torchrun.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(BadInput, match="--nproc-per-node 1") as e:
        rendezvous(None, None, None, None)
    assert e.value.field == "--nproc-per-node" and e.value.exit_code == 2


@pytest.mark.parametrize(
    ("given", "flag"),
    [
        ((3, None, None, None), "--nnodes"),
        ((None, 0, None, None), "--node-rank"),
        ((None, None, "10.0.0.2", None), "--master-addr"),
        ((None, None, None, 29501), "--master-port"),
    ],
)
def test_under_torchrun_a_disagreeing_flag_is_bad_input(torchrun, given, flag):
    with pytest.raises(BadInput, match="disagrees with torchrun") as e:
        rendezvous(*given)
    assert e.value.field == flag


def test_serve_under_torchrun_with_a_disagreeing_flag_exits_2(torchrun, capsys):
    assert hetc_main(["serve", "no-plan.json", "--nnodes", "3"]) == 2
    err = capsys.readouterr().err
    assert "--nnodes 3 disagrees with torchrun's 2" in " ".join(err.split())


def test_workers_sleep_idle_openmp_threads_only_when_they_oversubscribe_the_host(monkeypatch):
    from hetc.runtime.launch import _wait_policy

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert _wait_policy(2) == {}  # 1 stage × 2 threads, or 2 × 1: OpenMP's default, as torch alone
    assert _wait_policy(4) == {"OMP_WAIT_POLICY": "PASSIVE"}  # 2 stages × 2 threads on 2 cores


def test_free_port_is_below_the_kernels_ephemeral_range_and_binds():
    """The port a server or the job's store will bind is one the kernel never hands out by itself (an
    outgoing connection's, a bind to port 0 such as gloo's pairs), so nothing but an explicit bind can
    take it before its owner does; it binds now, and successive picks differ."""
    import socket

    from hetc.host import _ephemeral_start, free_port

    ports = {free_port() for _ in range(8)}
    assert len(ports) > 1 and all(10000 <= p < _ephemeral_start() for p in ports)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
