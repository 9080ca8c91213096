"""Two `hetc serve --nnodes 2` invocations on localhost, separate process trees, serve one
plan (the 3-vendor plan of test_serve.py: node c on node rank 1, nodes a and b on rank 0);
greedy output equals Hugging Face generate; a worker killed on node rank 1 is started again
there (a new generation) and the plan serves again; killing node rank 1 turns /health to 503
and, once its beat stops, names the host. The
same with each host's `hetc serve` started by torchrun (its agent's store, its node ranks); and
SIGKILL of a torchrun agent alone stops that host's `hetc serve` and its workers. Slow: two more
servers per test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import pytest
from openai import OpenAI

from tests.fixtures.serving import KEY, NAME, PATIENT, REPO, free_port, wait_healthy

pytestmark = pytest.mark.slow
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def _serve_args(plan: Path) -> list[str]:
    return ["serve", str(plan), *PATIENT, "--emulate", "--served-model-name", NAME, "--api-key", KEY]


def _start(cmd: list[str]) -> subprocess.Popen:
    # a session of its own: a separate process tree, as on another host (no terminal signals)
    return subprocess.Popen(cmd, cwd=REPO, start_new_session=True)


def _tree(pid: int) -> list[int]:
    """`pid` and all its descendants (from /proc; torchrun starts its worker in a session of its
    own, so a process group is not the whole tree)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each host's first process, then SIGKILL whatever of its tree is left: no orphans."""
    trees = [_tree(p.pid) for p in procs]  # before the leaders exit and their children are re-parented
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p, tree in zip(procs, trees):
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            pass
        _kill(tree)
        p.wait(10)


def _check_two_hosts(model: Path, url: str, node0: subprocess.Popen, node1: subprocess.Popen) -> None:
    """Devices on their hosts, greedy tokens equal to HF generate, and /health 503 once node rank
    1's whole process tree is killed."""
    wait_healthy(url, [node0, node1])
    workers = httpx.get(f"{url}/health").json()["workers"]
    by_node = {w["device"]: w["node_rank"] for w in workers}
    assert by_node == {"a:0": 0, "b:0": 0, "c:0": 1}
    c = OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
    r = c.completions.create(model=NAME, prompt=[5, 6, 7, 8, 9], max_tokens=12, temperature=0, extra_body={"return_token_ids": True})
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    x = torch.tensor([[5, 6, 7, 8, 9]])
    want = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=12, do_sample=False)[0, 5:].tolist()
    assert r.choices[0].model_extra["token_ids"] == want
    # a worker on the other host dies: that host starts it again for the pipeline's next generation
    os.kill(next(w["pid"] for w in workers if w["device"] == "c:0"), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while httpx.get(f"{url}/health").status_code != 503:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    wait_healthy(url, [node0, node1], timeout=60)
    assert all(w["generation"] == 2 for w in httpx.get(f"{url}/health").json()["workers"])
    r = c.completions.create(model=NAME, prompt=[5, 6, 7, 8, 9], max_tokens=12, temperature=0, extra_body={"return_token_ids": True})
    assert r.choices[0].model_extra["token_ids"] == want
    _kill(_tree(node1.pid))  # the whole second "host"
    deadline = time.monotonic() + 20
    while httpx.get(f"{url}/health").status_code != 503:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert "c:0" in httpx.get(f"{url}/health").json()["reason"]
    # the host that went away is reported by name, and its pipeline is not restarted without it
    deadline = time.monotonic() + 20
    while (h := httpx.get(f"{url}/health").json())["units"][0]["state"] != "failed":
        assert time.monotonic() < deadline, h
        time.sleep(0.2)
    assert f"host {socket.gethostname()} (node rank 1) went away" in h["reason"]


def test_two_hosts_serve_one_plan(built):
    model, plan, doc = built
    mport, port = free_port(), free_port()
    common = [sys.executable, "-m", "hetc.cli", *_serve_args(plan), "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(mport)]
    n0 = _start([*common, "--node-rank", "0", "--port", str(port)])
    n1 = _start([*common, "--node-rank", "1"])
    try:
        _check_two_hosts(model, f"http://127.0.0.1:{port}", n0, n1)
    finally:
        _stop([n0, n1])


def test_two_hosts_serve_one_plan_under_torchrun(built):
    model, plan, doc = built
    mport, port = free_port(), free_port()
    # torchrun's agent on node rank 0 serves the store on mport; hetc's processes join it as clients
    common = [TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(mport)]
    n0 = _start([*common, "--node-rank", "0", "-m", "hetc.cli", *_serve_args(plan), "--port", str(port)])
    n1 = _start([*common, "--node-rank", "1", "-m", "hetc.cli", *_serve_args(plan)])
    try:
        _check_two_hosts(model, f"http://127.0.0.1:{port}", n0, n1)
    finally:
        _stop([n0, n1])


def _started(pid: int) -> int | None:
    """`pid`'s start time (clock ticks after boot); None when it is gone or a zombie (its exit
    only waits to be reaped by whoever adopted it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in "ZX" else int(fields[19])


def _left(procs: dict[int, int | None], timeout: float) -> list[int]:
    """Those of `procs` (pid: start time) still running after up to `timeout` seconds (a pid
    reused by a new process does not count)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid, t in procs.items() if t is not None and _started(pid) == t]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def test_killing_a_torchrun_agent_stops_its_hosts_server_and_workers(built):
    """torchrun starts `hetc serve` in a session of its own: SIGKILL of the agent alone (not its
    tree) leaves it orphaned, and it must stop with its workers — on node rank 1 (workers only)
    and node rank 0 (the HTTP frontend)."""
    model, plan, doc = built
    mport, port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    common = [TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(mport)]
    n0 = _start([*common, "--node-rank", "0", "-m", "hetc.cli", *_serve_args(plan), "--port", str(port)])
    n1 = _start([*common, "--node-rank", "1", "-m", "hetc.cli", *_serve_args(plan)])
    seen: dict[int, int | None] = {}  # every process of both trees: start time
    try:
        wait_healthy(url, [n0, n1])
        workers = httpx.get(f"{url}/health").json()["workers"]
        below = {}  # node rank: {pid: start time} of its `hetc serve` process and workers (not the agent)
        for node, agent in ((0, n0), (1, n1)):
            tree = {pid: _started(pid) for pid in _tree(agent.pid)}
            seen |= tree
            below[node] = {pid: t for pid, t in tree.items() if pid != agent.pid}
            mine = {w["pid"] for w in workers if w["node_rank"] == node}
            assert mine and mine < below[node].keys()  # the workers, and at least the server above them
        os.kill(n1.pid, signal.SIGKILL)  # node rank 1's agent only
        n1.wait(10)
        assert _left(below[1], 20) == []
        deadline = time.monotonic() + 20
        while httpx.get(f"{url}/health").status_code != 503:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        os.kill(n0.pid, signal.SIGKILL)  # node rank 0's agent only: the frontend and its workers stop
        n0.wait(10)
        assert _left(below[0], 30) == []
    finally:
        _stop([n0, n1])
        _kill(_left(seen, 0))  # whatever an agent's death left behind
