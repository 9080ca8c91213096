"""Hardware profiles, links.yaml and cluster.yaml (hetc/cluster.py; docs/cluster.md,
docs/profile.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hetc.cluster import Cluster, Link, load_cluster, load_links, load_profile, profile_names
from hetc.errors import BadInput

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
H100_YAML = REPO / "hardware_profiles" / "h100-sxm.yaml"

PROFILES = ["h100-sxm", "h200-sxm", "b200", "a100-80g-sxm", "l40s", "l4", "t4", "mi300x", "mi325x", "mi355x", "mi250x", "gaudi2", "gaudi3", "max-1550", "cpu"]
LINKS = [
    "nvlink3",
    "nvlink4",
    "nvlink4-mesh4",
    "nvlink5",
    "infinity-fabric",
    "pcie3",
    "pcie4",
    "pcie5",
    "gaudi2-roce",
    "gaudi3-roce",
    "ethernet-10g",
    "ethernet-25g",
    "ethernet-100g",
    "roce-100g",
    "roce-200g",
    "roce-400g",
    "ib-hdr",
    "ib-ndr",
]


def _norm(text: str) -> str:
    """`nodes[0].count` and `nodes.0.count` name the same field."""
    return re.sub(r"\[(\d+)\]", r".\1", text)


def assert_names(err: BadInput, file: Path | str, field: str) -> None:
    """The message names the file and the field path (one paragraph: file, field, fix)."""
    msg = str(err)
    assert str(file) in msg, f"file {file} not named in: {msg}"
    assert _norm(field) in _norm(msg), f"field {field} not named in: {msg}"


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def bad(tmp_path: Path, text: str, name: str = "cluster.yaml") -> tuple[BadInput, Path]:
    p = write(tmp_path, text, name)
    with pytest.raises(BadInput) as ei:
        load_cluster(p)
    assert ei.value.exit_code == 2
    return ei.value, p


def profile_text(**changes: str | None) -> str:
    """h100-sxm.yaml with top-level fields replaced (value) or removed (None)."""
    lines = []
    for line in H100_YAML.read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in changes:
            if changes[key] is not None:
                lines.append(f"{key}: {changes[key]}")
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------- profiles


def test_catalog_lists_the_documented_profiles():
    names = profile_names()
    assert set(PROFILES) <= set(names)
    assert "links" not in names


@pytest.mark.parametrize("name", PROFILES)
def test_each_catalog_profile_loads_and_is_sane(name):
    p = load_profile(name)
    assert p.name == name  # the file's `name` matches its file name
    assert p.sources and all(isinstance(s, str) and s.strip() for s in p.sources)
    assert p.memory > p.reserved_memory > 0
    assert p.usable_memory == pytest.approx(p.memory - p.reserved_memory)
    assert "fp32" in p.peak_flops
    assert {"bf16", "fp16"} & set(p.peak_flops)
    assert all(v > 0 for v in p.peak_flops.values())
    assert p.memory_bandwidth > 0
    assert 0 < p.efficiency.matmul <= 1 and 0 < p.efficiency.memory <= 1
    assert p.power > 0 and p.price > 0
    # the host link is a known link name (or an inline link)
    assert isinstance(p.host_link, Link) or p.host_link in load_links()
    # vendor and backend agree
    assert (p.vendor, p.backend) in {("nvidia", "cuda"), ("amd", "rocm"), ("intel", "gaudi"), ("intel", "openvino"), ("cpu", "cpu")}


def test_every_listed_profile_loads():
    for name in profile_names():
        assert load_profile(name).name == name


def test_h100_values_are_in_base_units():
    p = load_profile("h100-sxm")
    assert p.memory == pytest.approx(80e9)
    assert p.reserved_memory == pytest.approx(6e9)
    assert p.memory_bandwidth == pytest.approx(3.35e12)
    assert p.peak_flops["bf16"] == pytest.approx(989e12)
    assert p.launch_overhead == pytest.approx(7.9e-6)
    assert p.power == pytest.approx(700)
    assert p.price == pytest.approx(2.95)


@pytest.mark.parametrize(("ref", "near"), [("h100", "h100-sxm"), ("h100-sxn", "h100-sxm"), ("mi300", "mi300x")])
def test_unknown_profile_name_suggests_the_nearest(ref, near):
    with pytest.raises(BadInput) as ei:
        load_profile(ref)
    assert repr(near) in str(ei.value)


def test_profile_file_with_a_bare_number_names_the_field(tmp_path):
    path = write(tmp_path, profile_text(memory="80"), "chip.yaml")
    with pytest.raises(BadInput) as ei:
        load_profile(str(path))
    assert_names(ei.value, path, "memory")
    assert "80 GB" in str(ei.value)


def test_profile_file_with_an_unknown_host_link_is_refused(tmp_path):
    path = write(tmp_path, profile_text(host_link="pcie9"), "chip.yaml")
    with pytest.raises(BadInput) as ei:
        load_profile(str(path))
    assert_names(ei.value, path, "host_link")


def test_profile_reserved_memory_must_be_below_memory(tmp_path):
    path = write(tmp_path, profile_text(reserved_memory="80 GB"), "chip.yaml")
    with pytest.raises(BadInput) as ei:
        load_profile(str(path))
    assert str(path) in str(ei.value)
    assert "reserved_memory" in str(ei.value)


def test_profile_names_only_the_peaks_its_device_has(tmp_path):
    """No dtype is required of every profile (issue 31): fp8 and fp32 alone load; bf16 weights then find no peak."""
    path = write(tmp_path, profile_text(peak_flops="{fp8: 1979 TFLOP/s, fp32: 67 TFLOP/s}"), "chip.yaml")
    p = load_profile(str(path))
    assert p.compute_dtype("fp8") == "fp8" and p.compute_dtype("fp32") == "fp32" and p.compute_dtype("bf16") is None
    path = write(tmp_path, profile_text(peak_flops="{}"), "none.yaml")
    with pytest.raises(BadInput) as ei:
        load_profile(str(path))
    assert_names(ei.value, path, "peak_flops")


def test_profile_with_an_unknown_field_is_refused(tmp_path):
    path = write(tmp_path, profile_text() + "memroy: 80 GB\n", "chip.yaml")
    with pytest.raises(BadInput) as ei:
        load_profile(str(path))
    assert_names(ei.value, path, "memroy")


# -------------------------------------------------------------------- links


def test_links_yaml_has_exactly_the_documented_links():
    links = load_links()
    assert sorted(links) == sorted(LINKS)
    for name, link in links.items():
        assert link.bandwidth > 0, name
        assert link.latency > 0, name
        assert link.name == name
        assert link.source, name


def test_link_values_and_scopes():
    links = load_links()
    assert links["nvlink4"].bandwidth == pytest.approx(450e9)
    assert links["nvlink4"].latency == pytest.approx(2e-6)
    assert links["nvlink4"].scope == "aggregate"
    assert links["roce-400g"].bandwidth == pytest.approx(50e9)  # 400 Gbit/s in bytes/s
    assert links["ethernet-100g"].bandwidth == pytest.approx(12.5e9)
    assert links["infinity-fabric"].scope == "per_peer"
    assert links["gaudi2-roce"].scope == "per_peer"


# -------------------------------------------------------------------- cluster.yaml: good files


def test_mixed_rack_devices_and_links():
    c = load_cluster(EXAMPLES / "mixed-rack.yaml")
    assert c.name == "mixed-rack"
    ids = [d.id for d in c.devices]
    assert ids == [f"{n}:{i}" for n in "abc" for i in range(8)]
    assert len(ids) == 24
    by_node = {d.node: d.profile.name for d in c.devices}
    assert by_node == {"a": "h100-sxm", "b": "mi300x", "c": "gaudi2"}
    assert c.network_per == "device"
    links = load_links()
    assert c.link_between("a", "a") == links["nvlink4"]
    assert c.link_between("b", "b") == links["infinity-fabric"]
    assert c.link_between("c", "c") == links["gaudi2-roce"]
    # the pair overrides the default, in either order; other pairs use the default
    assert c.link_between("a", "c") == links["ethernet-100g"]
    assert c.link_between("c", "a") == links["ethernet-100g"]
    assert c.link_between("a", "b") == links["roce-400g"]
    assert c.link_between("b", "c") == links["roce-400g"]


@pytest.mark.parametrize("name", ["mixed-rack", "small-mixed", "legacy-mix", "one-h100"])
def test_examples_load(name):
    c = load_cluster(EXAMPLES / f"{name}.yaml")
    assert c.devices
    assert len({d.id for d in c.devices}) == len(c.devices)


def test_single_device_node_needs_no_link_and_name_defaults_to_stem(tmp_path):
    p = write(tmp_path, "nodes:\n  - {name: a, device: t4, count: 1}\n", "my-box.yaml")
    c = load_cluster(p)
    assert c.name == "my-box"
    assert [d.id for d in c.devices] == ["a:0"]
    assert c.network is None
    with pytest.raises(ValueError):
        c.link_between("a", "a")


def test_inline_links(tmp_path):
    p = write(
        tmp_path,
        """
nodes:
  - {name: a, device: h100-sxm, count: 2, link: {bandwidth: 100 GB/s, latency: 3 us}}
  - {name: b, device: mi300x, count: 2, link: {bandwidth: 64 GB/s, latency: 2 us, scope: per_peer}}
network:
  default: {bandwidth: 400 Gbit/s, latency: 5 us}
  per: node
""",
    )
    c = load_cluster(p)
    la = c.link_between("a", "a")
    assert la.bandwidth == pytest.approx(100e9)
    assert la.latency == pytest.approx(3e-6)
    assert la.scope == "aggregate"
    assert c.link_between("b", "b").scope == "per_peer"
    net = c.link_between("a", "b")
    assert net.bandwidth == pytest.approx(50e9)
    assert net.latency == pytest.approx(5e-6)
    assert c.network_per == "node"


def _custom_profile(tmp_path: Path) -> None:
    write(tmp_path, profile_text(name="my-chip", memory="40 GB"), "cluster-dir/profiles/my-chip.yaml")


def test_profile_by_path_is_relative_to_the_cluster_file(tmp_path, monkeypatch):
    _custom_profile(tmp_path)
    p = write(tmp_path, "nodes:\n  - {name: a, device: profiles/my-chip.yaml, count: 2, link: pcie5}\n", "cluster-dir/cluster.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the cluster file's folder
    c = load_cluster(p)
    prof = c.nodes[0].profile
    assert prof.name == "my-chip"
    assert prof.memory == pytest.approx(40e9)
    assert [d.profile.name for d in c.devices] == ["my-chip", "my-chip"]


def test_profile_by_path_with_a_relative_cluster_path(tmp_path, monkeypatch):
    _custom_profile(tmp_path)
    write(tmp_path, "nodes:\n  - {name: a, device: profiles/my-chip.yaml, count: 1}\n", "cluster-dir/rel.yaml")
    monkeypatch.chdir(tmp_path)
    c = load_cluster("cluster-dir/rel.yaml")
    assert c.nodes[0].profile.name == "my-chip"


def test_profile_by_bare_file_name_next_to_the_cluster_file(tmp_path, monkeypatch):
    write(tmp_path, profile_text(name="side-chip", memory="24 GB"), "d/side-chip.yaml")
    p = write(tmp_path, "nodes:\n  - {name: a, device: side-chip.yaml, count: 1}\n", "d/c.yaml")
    monkeypatch.chdir(tmp_path)
    assert load_cluster(p).nodes[0].profile.memory == pytest.approx(24e9)


def test_price_override(tmp_path):
    p = write(
        tmp_path,
        """
nodes:
  - {name: a, device: h100-sxm, count: 1}
  - {name: b, device: mi300x, count: 1}
network: {default: roce-400g}
prices: {h100-sxm: 1.25 USD/h}
""",
    )
    c = load_cluster(p)
    assert c.price(load_profile("h100-sxm")) == pytest.approx(1.25)
    assert c.price(load_profile("mi300x")) == pytest.approx(load_profile("mi300x").price)  # not overridden
    # the profile itself is unchanged: the override belongs to this cluster
    assert load_profile("h100-sxm").price == pytest.approx(2.95)


# -------------------------------------------------------------------- plan.json round trip


def _roundtrip(c: Cluster) -> Cluster:
    doc = json.loads(json.dumps(c.to_json()))  # as it travels inside plan.json
    return Cluster.from_json(doc)


def _assert_same(a: Cluster, b: Cluster) -> None:
    assert b.name == a.name
    assert [d.id for d in b.devices] == [d.id for d in a.devices]
    assert [d.profile.name for d in b.devices] == [d.profile.name for d in a.devices]
    for da, db in zip(a.devices, b.devices):
        for f in ("memory", "reserved_memory", "memory_bandwidth", "launch_overhead", "power", "price"):
            assert getattr(db.profile, f) == pytest.approx(getattr(da.profile, f), rel=1e-5), f
        assert db.profile.peak_flops == pytest.approx(da.profile.peak_flops, rel=1e-5)
        assert db.profile.vendor == da.profile.vendor and db.profile.backend == da.profile.backend
    assert b.network_per == a.network_per
    nodes = [n.name for n in a.nodes]
    for x in nodes:
        for y in nodes:
            if x == y and a.node(x).link is None:
                assert b.node(x).link is None
                continue
            la, lb = a.link_between(x, y), b.link_between(x, y)
            assert lb.bandwidth == pytest.approx(la.bandwidth, rel=1e-5), (x, y)
            assert lb.latency == pytest.approx(la.latency, rel=1e-5), (x, y)
            assert lb.scope == la.scope, (x, y)
    for n in a.nodes:
        assert b.price(n.profile) == pytest.approx(a.price(n.profile))


@pytest.mark.parametrize("name", ["mixed-rack", "small-mixed", "legacy-mix", "one-h100"])
def test_to_json_from_json_round_trips_examples(name):
    c = load_cluster(EXAMPLES / f"{name}.yaml")
    _assert_same(c, _roundtrip(c))


def test_round_trip_keeps_custom_profile_inline_links_and_prices(tmp_path):
    _custom_profile(tmp_path)
    p = write(
        tmp_path,
        """
nodes:
  - {name: a, device: profiles/my-chip.yaml, count: 2, link: {bandwidth: 100 GB/s, latency: 3 us, scope: per_peer}}
  - {name: b, device: h100-sxm, count: 1}
network:
  default: {bandwidth: 400 Gbit/s, latency: 5 us}
  per: node
  pairs:
    - {nodes: [b, a], link: ethernet-25g}
prices: {my-chip: 0.75 USD/h, h100-sxm: 2 USD/h}
""",
        "cluster-dir/custom.yaml",
    )
    c = load_cluster(p)
    # the profile file is not needed to read the embedded copy back
    (tmp_path / "cluster-dir/profiles/my-chip.yaml").unlink()
    back = _roundtrip(c)
    _assert_same(c, back)
    assert back.nodes[0].profile.memory == pytest.approx(40e9)
    assert back.price(back.nodes[0].profile) == pytest.approx(0.75)
    assert back.link_between("a", "b").bandwidth == pytest.approx(25e9 / 8)
    # and a second trip gives the same document
    assert json.loads(json.dumps(back.to_json())) == json.loads(json.dumps(c.to_json()))


# -------------------------------------------------------------------- cluster.yaml: bad files

ONE = "nodes:\n  - {name: a, device: h100-sxm, count: 1}\n"


@pytest.mark.parametrize(("device", "near"), [("h100", "h100-sxm"), ("h100-sxn", "h100-sxm"), ("gaudi", "gaudi2"), ("mi300", "mi300x")])
def test_unknown_device_names_field_and_suggests(tmp_path, device, near):
    e, p = bad(tmp_path, f"nodes:\n  - {{name: a, device: {device}, count: 1}}\n")
    assert_names(e, p, "nodes[0].device")
    assert repr(near) in str(e)
    assert device in str(e)


def test_unknown_device_in_second_node_names_that_node(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 1}\n  - {name: b, device: h100-sxn, count: 1}\nnetwork: {default: roce-400g}\n")
    assert_names(e, p, "nodes[1].device")
    assert "'h100-sxm'" in str(e)


def test_unknown_node_link_suggests_the_nearest(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 2, link: nvlnk4}\n")
    assert_names(e, p, "nodes[0].link")
    assert "'nvlink4'" in str(e)


def test_unknown_network_link_suggests_the_nearest(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 1}\n  - {name: b, device: t4, count: 1}\nnetwork: {default: roce-400G}\n")
    assert_names(e, p, "network.default")
    assert "'roce-400g'" in str(e)


def test_unknown_pair_link_names_the_pair(tmp_path):
    e, p = bad(
        tmp_path,
        "nodes:\n  - {name: a, device: h100-sxm, count: 1}\n  - {name: b, device: t4, count: 1}\n"
        "network:\n  default: roce-400g\n  pairs:\n    - {nodes: [a, b], link: ethernet-100}\n",
    )
    assert_names(e, p, "network.pairs[0].link")
    assert "'ethernet-100g'" in str(e)


def test_pair_with_unknown_node(tmp_path):
    e, p = bad(
        tmp_path,
        "nodes:\n  - {name: a, device: h100-sxm, count: 1}\n  - {name: b, device: t4, count: 1}\n"
        "network:\n  default: roce-400g\n  pairs:\n    - {nodes: [a, x], link: roce-100g}\n",
    )
    assert_names(e, p, "network.pairs[0].nodes[1]")
    assert "'x'" in str(e)


@pytest.mark.parametrize("count", ["0", "-1", "'8'", "2.0", "true", "null"])
def test_count_must_be_a_positive_int(tmp_path, count):
    # strict: a quoted "8" or 2.0 or true is a typo, not a count
    e, p = bad(tmp_path, f"nodes:\n  - {{name: a, device: h100-sxm, count: {count}, link: nvlink4}}\n")
    assert_names(e, p, "nodes[0].count")


def test_missing_count_is_refused(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm}\n")
    assert_names(e, p, "nodes[0].count")
    assert "missing" in str(e)


def test_multi_device_node_without_link(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 8}\n")
    assert_names(e, p, "nodes[0].link")
    assert "nvlink4" in str(e)  # shows how to fix it


@pytest.mark.parametrize(
    ("link", "field"),
    [("{bandwidth: 100, latency: 3 us}", "bandwidth"), ("{bandwidth: 100 GB/s, latency: 3}", "latency"), ("{bandwidth: '100', latency: 3 us}", "bandwidth")],
)
def test_inline_link_with_a_bare_number(tmp_path, link, field):
    e, p = bad(tmp_path, f"nodes:\n  - {{name: a, device: h100-sxm, count: 2, link: {link}}}\n")
    assert_names(e, p, f"nodes[0].link.{field}")
    assert ('"5 us"' if field == "latency" else '"3.35 TB/s"') in str(e)  # shows the right form


def test_inline_network_with_a_bare_number(tmp_path):
    e, p = bad(
        tmp_path,
        "nodes:\n  - {name: a, device: h100-sxm, count: 1}\n  - {name: b, device: t4, count: 1}\nnetwork: {default: {bandwidth: 400, latency: 5 us}}\n",
    )
    assert_names(e, p, "network.default.bandwidth")


def test_inline_link_with_a_size_for_bandwidth(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 2, link: {bandwidth: 100 GB, latency: 3 us}}\n")
    assert_names(e, p, "nodes[0].link.bandwidth")
    assert "bandwidth" in str(e)


def test_inline_link_with_zero_bandwidth(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 2, link: {bandwidth: 0 GB/s, latency: 3 us}}\n")
    assert_names(e, p, "nodes[0].link")
    assert "bandwidth" in str(e)


def test_inline_link_with_a_misspelled_key(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 2, link: {bandwith: 1 GB/s, latency: 3 us}}\n")
    assert "bandwith" in str(e) or "bandwidth" in str(e)
    assert str(p) in str(e)


def test_link_given_as_a_number_names_the_link_field(tmp_path):
    # `link: 5` is neither a name nor {bandwidth, latency}: the field is nodes[0].link, and the
    # message should say both accepted forms (not a pydantic-internal path like `nodes.0.link.str`).
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 2, link: 5}\n")
    assert_names(e, p, "nodes[0].link")
    assert e.field is not None and _norm(e.field) == "nodes.0.link"
    assert "bandwidth" in str(e)


def test_duplicate_node_names(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 1}\n  - {name: a, device: t4, count: 1}\nnetwork: {default: roce-400g}\n")
    assert_names(e, p, "nodes[1].name")
    assert "duplicate" in str(e)


def test_node_name_with_a_colon(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: 'a:1', device: h100-sxm, count: 1}\n")
    assert_names(e, p, "nodes[0].name")


def test_yaml_syntax_error_names_the_line(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 1\n  - {name: b, device: t4, count: 1}\n")
    msg = str(e)
    assert str(p) in msg
    assert re.search(r"line \d+", msg)
    assert "YAML" in msg


def test_yaml_syntax_error_line_number_is_right(tmp_path):
    e, _ = bad(tmp_path, "name: x\nnodes:\n  - {name: a, device: h100-sxm, count: 1}\nnetwork: [\n  foo: : :\n")
    m = re.search(r"line (\d+)", str(e))
    assert m and 4 <= int(m.group(1)) <= 6


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_document_that_is_not_a_mapping(tmp_path, text):
    e, p = bad(tmp_path, text)
    assert str(p) in str(e)
    assert "nodes" in str(e)


def test_empty_node_list(tmp_path):
    e, p = bad(tmp_path, "nodes: []\n")
    assert_names(e, p, "nodes")


def test_missing_file():
    with pytest.raises(BadInput) as ei:
        load_cluster("/nonexistent/dir/cluster.yaml")
    assert "/nonexistent/dir/cluster.yaml" in str(ei.value)
    assert "not found" in str(ei.value)


def test_profile_path_missing_a_field(tmp_path):
    write(tmp_path, profile_text(name="half-chip", memory_bandwidth=None), "profiles/half-chip.yaml")
    e, _ = bad(tmp_path, "nodes:\n  - {name: a, device: profiles/half-chip.yaml, count: 1}\n")
    assert_names(e, tmp_path / "profiles/half-chip.yaml", "memory_bandwidth")
    assert "missing" in str(e)


@pytest.mark.parametrize(("device", "what"), [("profiles/nope.yaml", "does not exist"), ("./0", "does not exist"), ("/", "is not a file")])
def test_a_profile_path_that_names_no_file_is_the_cluster_files_error(tmp_path, device, what):
    """The node's `device` field is what is wrong (found by the input fuzzer): the cluster file and field named."""
    e, p = bad(tmp_path, f"nodes:\n  - {{name: a, device: {device}, count: 1}}\n")
    assert_names(e, p, "nodes[0].device")
    assert what in str(e) and "hetc devices" in str(e)


def test_profile_path_with_bare_number(tmp_path):
    write(tmp_path, profile_text(name="bare-chip", memory_bandwidth="3350"), "profiles/bare-chip.yaml")
    e, _ = bad(tmp_path, "nodes:\n  - {name: a, device: profiles/bare-chip.yaml, count: 1}\n")
    assert_names(e, tmp_path / "profiles/bare-chip.yaml", "memory_bandwidth")


@pytest.mark.parametrize("key", ["netwrok", "node", "price"])
def test_unknown_top_level_key(tmp_path, key):
    e, p = bad(tmp_path, ONE + f"{key}: {{default: roce-400g}}\n")
    assert_names(e, p, key)
    assert "unknown" in str(e)


def test_unknown_key_inside_a_node(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 1, cout: 2}\n")
    assert_names(e, p, "nodes[0].cout")


def test_multi_node_cluster_without_network(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 1}\n  - {name: b, device: t4, count: 1}\n")
    assert_names(e, p, "network")
    assert "roce-400g" in str(e) or "default" in str(e)  # says how to fix it


def test_bad_network_per(tmp_path):
    e, p = bad(tmp_path, "nodes:\n  - {name: a, device: h100-sxm, count: 1}\n  - {name: b, device: t4, count: 1}\nnetwork: {default: roce-400g, per: rack}\n")
    assert_names(e, p, "network.per")


@pytest.mark.parametrize("price", ["3", "'3'", "3 USD", "3 GB"])
def test_price_without_the_right_unit(tmp_path, price):
    e, p = bad(tmp_path, ONE + f"prices: {{h100-sxm: {price}}}\n")
    assert_names(e, p, "prices.h100-sxm")


def test_price_for_a_device_not_in_the_cluster(tmp_path):
    e, p = bad(tmp_path, ONE + "prices: {h100-sxn: 2 USD/h}\n")
    assert_names(e, p, "prices.h100-sxn")
    assert "'h100-sxm'" in str(e)


def test_bad_input_fields_are_set():
    # the CLI and other callers read e.file / e.field, not only the text
    e = BadInput("unknown device 'x'.", file="c.yaml", field="nodes[0].device", fix="use h100-sxm.")
    assert (e.file, e.field, e.fix) == ("c.yaml", "nodes[0].device", "use h100-sxm.")
    assert str(e) == "c.yaml: nodes[0].device: unknown device 'x'. Fix: use h100-sxm."
