"""catalog.yaml (`hetc buy`): what can be bought, how much of it, and at what price.

    devices:
      - {device: h100-sxm, max: 16, per_node: 8, link: nvlink4, price: 2.95 USD/h}
      - {device: l40s, max: 8, link: pcie4}     # per_node default 8; price default: the profile's
    network: {default: roce-400g}              # as in cluster.yaml

A purchase (devices of each entry) becomes a cluster.yaml document: each entry's devices
fill nodes of at most `per_node`, named after the entry, so `hetc plan` reads it as any
other cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from hetc.cluster import Cluster, _build_cluster, _NetworkSpec, _read_yaml, _Strict, _unknown, _validation_error, load_profile, profile_names
from hetc.errors import BadInput

__all__ = ["Catalog", "CatalogEntry", "load_catalog"]


class _EntrySpec(_Strict):
    device: str
    max: int = Field(gt=0, strict=True)
    per_node: int = Field(default=8, gt=0, strict=True)
    link: Any = None
    price: str | None = None


class _CatalogSpec(_Strict):
    name: str | None = None
    devices: list[_EntrySpec] = Field(min_length=1)
    network: _NetworkSpec | None = None


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    device: str  # a profile name, or an absolute path to a profile YAML
    profile: str  # the profile's own name (what cluster prices are keyed by)
    max: int
    per_node: int
    link: Any
    price: str | None


@dataclass(frozen=True, slots=True)
class Catalog:
    file: str
    name: str
    entries: tuple[CatalogEntry, ...]
    network: dict[str, Any] | None

    def fleet_doc(self, counts: dict[int, int], name: str | None = None, engine: str | None = None) -> dict[str, Any]:
        """The cluster.yaml document for `counts[i]` devices of entry i (entries at 0 left out), served
        by `engine` (None: the default, no field).

        Raises:
            ValueError: a count above the entry's `max`.
        """
        nodes, prices = [], {}
        for i, e in enumerate(self.entries):
            n = counts.get(i, 0)
            if n > e.max:
                raise ValueError(f"{n} × {e.device} asked, the catalog has {e.max}")
            for k, first in enumerate(range(0, n, e.per_node)):
                size = min(e.per_node, n - first)
                node = {"name": f"{e.profile}-{k + 1}", "device": e.device, "count": size}
                if size > 1:
                    node["link"] = e.link
                nodes.append(node)
            if n and e.price:
                prices[e.profile] = e.price
        doc: dict[str, Any] = {"name": name or self.name, "nodes": nodes}
        if engine is not None:  # the fleet's cluster.yaml says which engine its plan assumed
            doc["engine"] = engine
        if self.network is not None:
            doc["network"] = self.network
        if prices:
            doc["prices"] = prices
        return doc

    def cluster(self, counts: dict[int, int], name: str | None = None, engine: str | None = None) -> Cluster:
        """`fleet_doc` checked and resolved as a cluster (profiles, links and prices loaded), under `engine`."""
        return _build_cluster(self.fleet_doc(counts, name, engine), self.file, stem=name or self.name)

    def everything(self) -> dict[int, int]:
        """Every device the catalog offers."""
        return {i: e.max for i, e in enumerate(self.entries)}


def load_catalog(path: str | Path) -> Catalog:
    """Load and check a catalog.yaml: every entry resolves (profile, link, price) as a cluster would.

    Raises:
        BadInput: naming the file, the field and the fix.
    """
    path = Path(path)
    raw = _read_yaml(path)
    if not isinstance(raw, dict):
        raise BadInput(
            "a catalog must be a YAML mapping with `devices:`.",
            file=str(path),
            fix="see docs/capacity.md 'catalog.yaml': devices: [{device, max, per_node, link, price}].",
        )
    try:
        spec = _CatalogSpec.model_validate(raw)
    except ValidationError as e:
        raise _validation_error(e, str(path)) from None
    entries = []
    for i, item in enumerate(spec.devices):
        device = item.device
        if device.endswith((".yaml", ".yml")) and not Path(device).is_absolute():
            device = str((path.parent / device).resolve())  # a fleet.yaml written elsewhere must still find it
        if item.per_node > 1 and item.max > 1 and item.link is None:
            raise BadInput(
                f"{item.device} comes {item.per_node} to a node but has no `link` between them.",
                file=str(path),
                field=f"devices[{i}].link",
                fix="add e.g. `link: nvlink4`, or `per_node: 1`.",
            )
        try:
            profile = load_profile(device).name
        except BadInput as err:
            if err.file:  # the profile file itself is bad
                raise
            raise _unknown("device", item.device, profile_names(), str(path), f"devices[{i}].device") from None
        entries.append(CatalogEntry(device, profile, item.max, item.per_node, item.link, item.price))
    if len({e.profile for e in entries}) < len(entries):
        raise BadInput("a device is listed twice.", file=str(path), field="devices", fix="list each device once; `max` says how many can be bought.")
    cat = Catalog(str(path), spec.name or path.stem, tuple(entries), raw["network"] if spec.network is not None else None)
    try:
        cat.cluster(cat.everything())  # every entry resolves now, not halfway through a purchase
    except BadInput as bad:
        raise BadInput(bad.problem, file=str(path), field=_catalog_field(bad.field, cat), fix=bad.fix) from None
    return cat


def _catalog_field(cluster_field: str | None, cat: Catalog) -> str | None:
    """A field of the generated cluster (`nodes[3].link`) named as the catalog entry it came from."""
    if not cluster_field or not cluster_field.startswith("nodes["):
        return cluster_field
    idx, rest = int(cluster_field[6 : cluster_field.index("]")]), cluster_field[cluster_field.index("]") + 1 :]
    node = cat.fleet_doc(cat.everything())["nodes"][idx]
    entry = next(i for i, e in enumerate(cat.entries) if node["name"].startswith(e.profile + "-"))
    return f"devices[{entry}]{rest}"
