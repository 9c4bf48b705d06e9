"""docs/scheduling.md read as a test plan, without any peer: its grammar (a block without an
expectation, or an expectation without a block, is an error), the fleet it names, and the pieces
of the scheduling test that need no API server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixturegen import NODES_DIR

from . import dra
from .fleet import fleet_spec
from .guide import GUIDE, LANDS, PENDING, PUBLISHES, GuideError, fleet_table, load, parse
from .placement import Placement, check, pinned

POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
    - name: c
      image: example.com/c:1
"""


NAMESPACED = POD.format(name="a").replace("  name: a", "  name: a\n  namespace: x")
LANDS_N = "**Lands on** `n`.\n"


def block(name: str = "p", lang: str = "yaml") -> str:
    return f"```{lang}\n{POD.format(name=name)}```\n"


def test_the_guide_holds_together() -> None:
    scenarios, rows = load()
    blocks = [b for s in scenarios for b in s.blocks]
    assert len(blocks) >= 15
    names = set(fleet_spec())
    assert {r.node for r in rows} == names
    for s in scenarios:
        assert len({b.dra for b in s.blocks}) == 1, f"{s.title}: DRA and other blocks mixed"
        configs = [i for i, b in enumerate(s.blocks) if b.config is not None]
        assert configs in ([], [0]), f"{s.title}: a ConfigMap comes first, once, in its scenario"
        for b in s.blocks:
            assert set(b.expect.nodes) <= names, f"line {b.line}: not a sample node"
            assert {n for n, _, _ in b.expect.published} <= names, f"line {b.line}"
    kinds = {b.expect.kind for b in blocks}
    assert kinds == {LANDS, PENDING, PUBLISHES}


def test_every_sample_node_has_a_description() -> None:
    for name in fleet_spec():
        assert (NODES_DIR / f"{name}.yaml").is_file(), name


def test_the_dra_note_follows_k8s() -> None:
    """The guide says its DRA recipes are not run exactly as long as that is true."""
    said = dra.SKIP_NOTE in " ".join(GUIDE.read_text().split())
    assert said == (not dra.device_classes())


def test_expectations_and_their_lists() -> None:
    text = (
        "# t\n"
        + block("a")
        + "\n**Lands on** `n1`, `n2` or `n3`: because `n4` is busy.\n\n"
        + block("b")
        + "\n**Stays Pending**: `Insufficient x/y`, `didn't match`. Prose `z`.\n"
    )
    [s] = parse(text)
    a, b = s.blocks
    assert (a.expect.kind, a.expect.nodes) == (LANDS, ("n1", "n2", "n3"))
    assert (b.expect.kind, b.expect.phrases) == (PENDING, ("Insufficient x/y", "didn't match"))
    assert a.pod_name == "a" and not a.dra


def test_publishes_wraps_over_lines() -> None:
    cm = (
        "```yaml\nkind: ConfigMap\napiVersion: v1\nmetadata: {name: c}\n"
        "data:\n  resources.yaml: |\n    resources: []\n```\n"
    )
    text = cm + "\n**Publishes** `r/a: 2` on `n1`, `r/b: 1` on\n`n2` and `r/a: 1` on `n3`.\n"
    [s] = parse(text)
    assert s.blocks[0].expect.published == (("n1", "r/a", 2), ("n2", "r/b", 1), ("n3", "r/a", 1))
    assert s.blocks[0].config == "resources: []\n"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (block(), "without a stated expectation"),
        (block() + "\nSome prose.\n\n**Lands on** `n1`.\n", "without a stated expectation"),
        (block() + "\n## next\n", "without a stated expectation"),
        (block("a") + block("b") + "\n**Lands on** `n1`.\n", "without a stated expectation"),
        ("Prose.\n\n**Lands on** `n1`.\n", "without a YAML block"),
        (block() + "\n**Lands on** `n1`.\n\n**Lands on** `n2`.\n", "without a YAML block"),
        (block(lang="") + "\n", "not marked yaml"),
        (block() + "\n**Lands on** nowhere.\n", "names nothing"),
        (block() + "\n**Publishes** `r: 1` on `n1`.\n", "one ConfigMap"),
        (block("a") + "\n**Lands on** `n`.\n\n" + block("a") + "\n**Lands on** `n`.\n", "also at"),
        (f"```yaml\n{POD.format(name='a')}---\n{POD.format(name='b')}```\n\n{LANDS_N}", "one Pod"),
        (f"```yaml\n{NAMESPACED}```\n\n{LANDS_N}", "namespace"),
        ("```yaml\nkind: [\n```\n\n**Lands on** `n`.\n", "does not parse"),
        ("```yaml\napiVersion: v1\nkind: Pod\n```\n\n**Lands on** `n`.\n", "metadata.name"),
        ("```yaml\n" + POD.format(name="a"), "never closed"),
    ],
)
def test_the_grammar_is_enforced(text: str, error: str) -> None:
    with pytest.raises(GuideError, match=error):
        parse(text)


def test_fleet_table_rows() -> None:
    text = (
        "| node | hw | labels | resources |\n|---|---|---|---|\n"
        "| `n1` | Pi | `edgefd.io/a.present=true`, `edgefd.io/b.present=true` "
        "| `edgefd.io/x: 1` |\n"
        "| `n2` | x86 | | |\n"
        "| not a node | | | |\n"
    )
    rows = fleet_table(text)
    assert [r.node for r in rows] == ["n1", "n2"]
    assert rows[0].labels == {"edgefd.io/a.present": "true", "edgefd.io/b.present": "true"}
    assert rows[0].resources == {"edgefd.io/x": 1} and rows[1].resources == {}


def test_pinned_adds_the_node_to_every_required_term() -> None:
    pod = {
        "metadata": {"name": "p", "labels": {"a": "b"}},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "k1", "operator": "Exists"}]},
                            {"matchExpressions": [{"key": "k2", "operator": "Exists"}]},
                        ]
                    }
                }
            }
        },
    }
    on = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    p = pinned(pod, "n1")
    terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["matchFields"] for t in terms["nodeSelectorTerms"]] == [[on], [on]]
    assert p["metadata"] == {"name": "p-on-n1"}
    assert "matchFields" not in str(pod)  # the guide's own pod is left alone
    bare = pinned({"metadata": {"name": "q"}, "spec": {"nodeSelector": {"x": "y"}}}, "n1")
    required = bare["spec"]["affinity"]["nodeAffinity"]
    assert required == {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [on]}]
        }
    }
    assert bare["spec"]["nodeSelector"] == {"x": "y"}


def test_check_compares_with_the_scheduler() -> None:
    text = (
        block("a") + "\n**Lands on** `n1` or `n2`.\n\n"
        + block("b") + "\n**Stays Pending**: `Insufficient r`.\n"
    )  # fmt: skip
    [s] = parse(text)
    lands, pending = s.blocks
    assert check(lands, Placement("n2", "", "")) is None
    assert "lands on n1 or n2; bound to n3" in (check(lands, Placement("n3", "", "")) or "")
    assert "Pending" in (check(lands, Placement(None, "Unschedulable", "0/5 nodes")) or "")
    msg = "0/5 nodes are available: 1 Insufficient r, 4 node(s) didn't match."
    assert check(pending, Placement(None, "Unschedulable", msg)) is None
    assert "lacks" in (check(pending, Placement(None, "Unschedulable", "0/5: 5 Too many")) or "")
    assert "bound to n1" in (check(pending, Placement("n1", "", "")) or "")
    assert "stays Pending" in (check(pending, Placement(None, "", "")) or "")


def test_device_classes_are_found_in_manifests(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "classes.yaml").write_text(
        "kind: ConfigMap\napiVersion: v1\n---\n"
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: edgetpu.edgefd.io}\n"
    )
    (tmp_path / "chart.yaml").write_text("{{ if .Values.x }}\nkind: DeviceClass\n{{ end }}\n")
    assert [c["metadata"]["name"] for c in dra.device_classes(tmp_path)] == ["edgetpu.edgefd.io"]
    assert dra.device_classes(tmp_path / "sub" / "none") == []


def test_slices_are_found_in_any_shape() -> None:
    s = {"kind": "ResourceSlice", "metadata": {"name": "a"}}
    assert dra._slices_in({"resourceSlices": [s, {"kind": "Other"}]}) == [s]
    assert dra._slices_in([s, {"items": [s]}]) == [s, s]
