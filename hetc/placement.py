"""`--placement SPEC`: a placement written by hand, evaluated instead of searched.

    SPEC      := PIPELINE (";" PIPELINE)*
    PIPELINE  := STAGE ("|" STAGE)* [" x" N]       N replicas (default 1)
    STAGE     := NODE ":" FIRST ["-" LAST] ["@" L]  devices FIRST..LAST of one node: a tensor-parallel
                                                    group of LAST-FIRST+1 (1, 2, 4 or 8); L layers

Examples: `a:0-7`, `a:0|b:0|c:0`, `a:0-1@30|b:0@50 x2`. Replica j of a stage takes the devices
FIRST + j·tp onwards on the same node (as plan.json's replicas do). Either every stage of a
pipeline gives its layers (summing to the model's) or none does (the best split is then found).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hetc.cluster import TP_SIZES, Cluster
from hetc.errors import BadInput

__all__ = ["GivenPipeline", "GivenStage", "parse_placement"]

_STAGE = re.compile(r"^(?P<node>[A-Za-z0-9_-]+):(?P<first>\d+)(?:-(?P<last>\d+))?(?:@(?P<layers>\d+))?$")


@dataclass(frozen=True, slots=True)
class GivenStage:
    node: str
    first: int  # replica 0's first device on the node
    tp: int
    layers: int | None


@dataclass(frozen=True, slots=True)
class GivenPipeline:
    stages: tuple[GivenStage, ...]
    replicas: int


def _bad(token: str, why: str, fix: str) -> BadInput:
    return BadInput(f"{why} (in {token!r}).", field="--placement", fix=fix)


def parse_placement(spec: str, cluster: Cluster, num_layers: int) -> list[GivenPipeline]:
    """Parse and check SPEC against the cluster's nodes and the model's layers.

    Raises:
        BadInput: naming the token and the fix (unknown node, devices out of range or used twice,
            a tensor-parallel group of another size, layers that do not add up).
    """
    if not spec.strip():
        raise _bad(spec, "the placement is empty", "give e.g. 'a:0|b:0' (see `hetc plan --help`)")
    nodes = {n.name: n for n in cluster.nodes}
    used: dict[tuple[str, int], str] = {}
    out = []
    for text in spec.split(";"):
        text = text.strip()
        m = re.fullmatch(r"(?P<body>.*?)(?:\s+x(?P<n>\d+))?", text)
        assert m is not None  # the pattern matches any text
        body, reps = m.group("body").strip(), int(m.group("n") or 1)
        if reps < 1:
            raise _bad(text, "a pipeline needs at least one replica", "write x1 or more, or leave it out")
        stages = []
        for token in body.split("|"):
            token = token.strip()
            s = _STAGE.match(token)
            if s is None:
                raise _bad(token, "a stage is NODE:FIRST[-LAST][@LAYERS]", "write e.g. 'a:0', 'a:0-3' or 'b:2@40'")
            name = s.group("node")
            if name not in nodes:
                raise _bad(token, f"no node {name!r} in the cluster", f"nodes: {', '.join(nodes)}")
            first = int(s.group("first"))
            last = int(s.group("last")) if s.group("last") else first
            tp = last - first + 1
            if tp not in TP_SIZES:
                raise _bad(token, f"a tensor-parallel group of {tp} devices", "use 1, 2, 4 or 8 devices per stage")
            top = first + reps * tp
            if top > nodes[name].count:
                raise _bad(
                    token,
                    f"devices {first}..{top - 1} of node {name} are needed ({reps} replica(s) of {tp}); it has {nodes[name].count}",
                    "use fewer replicas or devices that exist",
                )
            for d in range(first, top):
                if (name, d) in used:
                    raise _bad(token, f"device {name}:{d} is already used by {used[(name, d)]!r}", "give every stage devices of its own")
                used[(name, d)] = token
            layers = int(s.group("layers")) if s.group("layers") else None
            stages.append(GivenStage(name, first, tp, layers))
        given = [st.layers for st in stages if st.layers is not None]
        if given:
            if len(given) < len(stages):
                raise _bad(text, "some stages give their layers and some do not", "give @L on every stage or none")
            if sum(given) != num_layers or 0 in given:
                raise _bad(
                    text, f"the stages' layers add up to {sum(given)}; the model has {num_layers}", f"make the @L values positive and sum to {num_layers}"
                )
        out.append(GivenPipeline(tuple(stages), reps))
    return out
