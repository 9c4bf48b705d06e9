"""`nodes`' rows from plain objects: which counts each API gives, and the table."""

from __future__ import annotations

from edgefd.kubectl_edgefd.nodes import accelerators, rows, table

from .objects import claim, coral, device, node, pod, slice_of, snapshot

EDGEFD = {"app.kubernetes.io/part-of": "edgefd"}


def plugin_pod(node_name: str, api: str = "device-plugin", keeper: bool = True) -> dict:
    containers = [{"name": "device-keeper", "image": "e:0.1.0"}] if keeper else []
    return {
        "metadata": {"name": f"edgefd-{node_name}", "namespace": "edgefd", "labels": EDGEFD},
        "spec": {
            "nodeName": node_name,
            "initContainers": [{"name": "devplugin", "image": "e:0.1.0", "args": [f"--api={api}"]}],
            "containers": containers,
        },
        "status": {"phase": "Running"},
    }


def test_accelerators_from_the_count_labels() -> None:
    n = node(
        "n",
        {
            "edgefd.io/edgetpu.count": "2",
            "edgefd.io/edgetpu.present": "true",
            "edgefd.io/npu.count": "0",
        },
    )
    assert accelerators(n) == {"edgetpu": 2}


def test_device_plugin_and_dra_rows() -> None:
    dp = node("a", {"edgefd.io/edgetpu.count": "1"}, {"edgefd.io/coral-usb": (2, 1), "cpu": (4, 4)})
    dra = node("b", {"edgefd.io/myriadx.count": "1"})
    snap = snapshot(
        nodes=[dra, dp, node("c")],
        pods=[
            plugin_pod("a"),
            plugin_pod("b", "dra", keeper=False),
            pod("x", "apps", node="a", limits={"edgefd.io/coral-usb": "1"}),
        ],
        slices=[slice_of("b", [coral(taint="unplugged"), device("ncs2-1", kind="myriadx")])],
        claims=[claim("c", "apps", allocated=[("b", "ncs2-1")], users=["y"])],
    )
    got = rows(snap)
    assert [r.node for r in got] == ["a", "b", "c"]
    assert [r.cells() for r in got] == [
        ("a", "edgetpu=1", "device-plugin", "2", "1", "1", "0.1.0", "on"),
        ("b", "myriadx=1", "dra", "2", "1", "1", "0.1.0", "off"),
        ("c", "-", "-", "0", "0", "0", "-", "-"),
    ]
    assert got[0].as_json()["resources"] == [
        {
            "resource": "edgefd.io/coral-usb",
            "capacity": 2,
            "allocatable": 1,
            "in_use": 1,
            "pods": ["apps/x"],
        }
    ]
    assert got[1].as_json()["dra_devices"][1] == {
        "name": "ncs2-1",
        "node": "b",
        "model": None,
        "kind": "myriadx",
        "taints": [],
        "claim": "apps/c",
        "pods": ["apps/y"],
    }
    assert table(got).splitlines()[0].split("   ")[:2] == ["NODE", "ACCELERATORS"]
    assert table(got).splitlines()[3].split() == ["c", "-", "-", "0", "0", "0", "-", "-"]
