"""Link cost: α–β time per transfer, host-staged where devices share no fabric; a tensor-parallel
all-reduce at the collective library's measured time where one is published for the link."""

from __future__ import annotations

from hetc.cluster import Cluster, Link, Node, resolve_link
from hetc.partitioner.cost_models.collectives import MEASURED_ALLREDUCE

__all__ = ["hops", "transfer_time", "path_name", "allreduce_time", "alltoall_time"]


def hops(cluster: Cluster, a: Node, b: Node) -> list[Link]:
    """The links a tensor crosses from a device of node `a` to one of node `b`.

    Same node: the node's fabric. Same vendor across nodes: the network (devices with their
    own NICs, as in GPU servers). Across vendors: device → host (PCIe) → network → host → device,
    since no collective library spans vendors.
    """
    if a.name == b.name:
        return [a.link] if a.link else []
    net = cluster.link_between(a.name, b.name)
    if a.profile.vendor == b.profile.vendor:
        return [net]
    host_a = resolve_link(a.profile.host_link, a.profile.name, "host_link")
    host_b = resolve_link(b.profile.host_link, b.profile.name, "host_link")
    return [host_a, net, host_b]


def transfer_time(nbytes: float, path: list[Link]) -> float:
    """Seconds to move `nbytes` along `path`: the sum of each hop's latency + bytes/bandwidth."""
    return sum(link.latency + nbytes / link.bandwidth for link in path)


def path_name(path: list[Link]) -> str:
    return " → ".join(link.name or "inline" for link in path) or "local"


def allreduce_time(nbytes: float, tp: int, link: Link | None, graphs: bool = False) -> float:
    """Seconds for one all-reduce of `nbytes` across a tensor-parallel group of `tp` devices.

    Where collectives.py holds the library's measurement for the named link, that time (at
    the measured group size; another size adds the α–β difference its link count makes).
    Otherwise α–β: a ring over a shared (aggregate) fabric moves 2·(tp−1)/tp of the data
    through each device in 2·(tp−1) steps; a full mesh of per-peer links (Infinity Fabric,
    Gaudi RoCE) reduce-scatters and all-gathers to every peer at once, in 2 steps.

    Args:
        graphs: the collective is replayed inside a recorded graph (the step's backend replays it).
    """
    if tp <= 1:
        return 0.0
    if link is None:
        raise ValueError("a tensor-parallel group needs an intra-node link")
    measured = MEASURED_ALLREDUCE.get(link.name) if link.name else None
    if measured is not None:
        return measured.time(nbytes, graphs) + _alpha_beta(nbytes, tp, link) - _alpha_beta(nbytes, measured.ranks, link)
    return _alpha_beta(nbytes, tp, link)


def _alpha_beta(nbytes: float, tp: int, link: Link) -> float:
    share = 2 * (tp - 1) / tp * nbytes
    if link.scope == "per_peer":
        return share / (link.bandwidth * (tp - 1)) + 2 * link.latency
    return share / link.bandwidth + 2 * (tp - 1) * link.latency


def alltoall_time(nbytes: float, ways: int, link: Link | None) -> float:
    """Seconds for one all-to-all over a group of `ways` devices in which each sends `nbytes` spread
    evenly over the group (its own share stays): an MoE layer's dispatch or combine under expert
    parallelism. α–β, the sends to every peer at once: a shared fabric carries (ways−1)/ways of the
    bytes at the device's bandwidth, a mesh of per-peer links each peer's share on its own link."""
    if ways <= 1:
        return 0.0
    if link is None:
        raise ValueError("an expert-parallel group needs an intra-node link")
    out = nbytes * (ways - 1) / ways
    per_peer = link.scope == "per_peer"
    return out / (link.bandwidth * (ways - 1) if per_peer else link.bandwidth) + link.latency
