"""Why an edgefd.io/* extended resource is not given: each cause from plain objects."""

from __future__ import annotations

from edgefd.kubectl_edgefd import extended
from edgefd.kubectl_edgefd.claims import Scene

from .objects import KNOWN, node, pod, snapshot

CORAL = "edgefd.io/coral-usb"
LABELS = {"edgefd.io/edgetpu.present": "true", "edgefd.io/edgetpu.count": "1"}


def why(
    nodes: list[dict],
    pods: list[dict] = (),
    resource: str = CORAL,
    n: int = 1,
    p: dict | None = None,
):
    snap = snapshot(nodes=list(nodes), pods=list(pods))
    p = p or pod("waits", limits={resource: str(n)})
    scene = Scene.of(p, snap, KNOWN, [x["metadata"]["name"] for x in nodes])
    return [(c.kind, c.text) for c in extended.explain(resource, n, scene)]


def test_every_device_held_and_by_whom() -> None:
    holder = pod("first", "apps", node="pi", limits={CORAL: "1"})
    done = pod("done", "apps", node="pi", limits={CORAL: "1"}, phase="Succeeded")
    got = why([node("pi", LABELS, {CORAL: (1, 1)})], [holder, done])
    assert got == [("in-use", f"Every {CORAL} is in use: node pi's 1 held by pod apps/first.")]


def test_unhealthy() -> None:
    [(kind, text)] = why([node("pi", LABELS, {CORAL: (2, 0)})])
    assert kind == "unhealthy" and text.startswith(f"Node pi has 2 {CORAL}s, 2 of them unhealthy")


def test_a_free_device_on_a_cordoned_node() -> None:
    [(kind, text)] = why([node("pi", LABELS, {CORAL: (1, 1)}, unschedulable=True)])
    assert kind == "node-blocked"
    assert "does not tolerate its taint node.kubernetes.io/unschedulable:NoSchedule" in text


def test_could_fit_now() -> None:
    [(kind, text)] = why([node("pi", LABELS, {CORAL: (1, 1)})])
    assert kind == "could-fit" and text.startswith(f"Node pi has 1 free {CORAL} now")


def test_more_than_any_node_has() -> None:
    got = why([node("pi", LABELS, {CORAL: (1, 1)})], n=2)
    assert (
        "no-device",
        f"The pod asks for 2 {CORAL} at once; no node it may run on has more than 1.",
    ) in got


def test_labelled_but_served_as_another_model() -> None:
    [(kind, text)] = why([node("x86", LABELS, {"edgefd.io/coral-pcie": (1, 1)})])
    assert kind == "no-device"
    assert text == (
        "Node x86 has 1 edgetpu device (label edgefd.io/edgetpu.count=1), but it is served as "
        "edgefd.io/coral-pcie, not edgefd.io/coral-usb (a Google Coral USB Accelerator)."
    )


def test_labelled_without_the_resource_and_devplugin_serving_dra() -> None:
    devplugin = {
        "metadata": {
            "name": "edgefd-1",
            "namespace": "edgefd",
            "labels": {"app.kubernetes.io/part-of": "edgefd"},
        },
        "spec": {
            "nodeName": "pi",
            "initContainers": [{"name": "devplugin", "args": ["--api=dra"]}],
        },
        "status": {"phase": "Running"},
    }
    [(kind, text)] = why([node("pi", LABELS, {})], [devplugin])
    assert kind == "plugin-not-registered"
    assert "its devplugin serves devices through DRA (--api dra)" in text


def test_no_node_has_one() -> None:
    [(kind, text)] = why([node("pi", {}, {})], resource="edgefd.io/ncs1")
    assert (kind, text) == (
        "no-device",
        "No node has a device of edgefd.io/ncs1 (Intel Movidius Neural Compute Stick (Myriad 2); "
        "none is labelled edgefd.io/myriad2.present).",
    )


def test_an_excluded_node_has_it() -> None:
    snap = snapshot(nodes=[node("pi", LABELS, {CORAL: (1, 1)}), node("x86", {}, {})])
    p = pod("waits", limits={CORAL: "1"}, nodeSelector={"kubernetes.io/hostname": "x86"})
    scene = Scene.of(p, snap, KNOWN, ["x86"])
    [cause] = extended.explain(CORAL, 1, scene)
    assert cause.kind == "node-blocked"
    assert cause.text == f"pi has {CORAL}, but its nodeSelector or node affinity excludes it."


def test_unknown_resource_with_the_name_meant() -> None:
    [(kind, text)] = why([node("pi", LABELS, {CORAL: (1, 1)})], resource="edgefd.io/coral")
    assert kind == "unknown-resource" and "did you mean edgefd.io/coral-usb?" in text
