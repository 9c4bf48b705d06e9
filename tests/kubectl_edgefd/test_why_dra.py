"""`kubectl edgefd why` for pods with DRA claims, against the real API server, the real
kube-scheduler (which allocates the claims) and the real resourceclaim controller (which
makes a template's claim): the ResourceSlices are what `devplugin --api dra` publishes for a
fixture host; each Pending pod must be told its real cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgefd.devplugin.dra.slices import TAINT_KEY
from tests.helpers import wait_until

from .peer import EDGEFD_NS, IMAGE, NS, Cluster, host, labels_of, slice_devices

pytestmark = pytest.mark.realpeer

TPU = "edgetpu.edgefd.io"


def kinds(told: dict[str, Any]) -> list[str]:
    return [c["kind"] for c in told["causes"]]


def dra_node(cluster: Cluster, hosts: Path, name: str, taint: str | None = None) -> list[dict]:
    root = host("rpi4-coral", str(hosts))
    cluster.node(name, labels_of(root))
    devices = slice_devices(root)
    if taint:
        for d in devices:
            if d["attributes"]["model"]["string"] == "coral-usb":
                d["taints"] = [{"key": TAINT_KEY, "value": taint, "effect": "NoSchedule"}]
    cluster.slice(name, devices)
    return devices


def tpu_claim(selector: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": TPU}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"devices": {"requests": [{"name": "tpu", "exactly": exactly}]}}


def claiming(claim: str = "", template: str = "") -> dict[str, Any]:
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    return {
        "resourceClaims": [{"name": "tpu", **source}],
        "containers": [
            {
                "name": "app",
                "image": "registry.example.com/app:1",
                "resources": {"claims": [{"name": "tpu"}]},
            }
        ],
    }


def test_selector_matches_nothing(cluster: Cluster, hosts: Path) -> None:
    dra_node(cluster, hosts, "pi-a")
    cluster.claim("usbb", tpu_claim('device.attributes["edgefd.io"].model == "coral-usbb"'))
    cluster.pod("waits", claiming("usbb"))
    assert cluster.wait_placed("waits") is None
    told = cluster.why("waits")
    assert kinds(told) == ["selector-matches-nothing"]
    text = told["paragraph"]
    assert "The selectors of request 'tpu' of claim why-test/usbb match no device" in text
    assert "coral-usb-2-1 on pi-a" in text and "their model: coral-usb" in text
    assert "cannot allocate all claims" in told["scheduler"]


def test_selector_error(cluster: Cluster, hosts: Path) -> None:
    dra_node(cluster, hosts, "pi-a")
    cluster.claim("modle", tpu_claim('device.attributes["edgefd.io"].modle == "coral-usb"'))
    cluster.pod("waits", claiming("modle"))
    assert cluster.wait_placed("waits") is None
    told = cluster.why("waits")
    assert kinds(told) == ["selector-error"]
    assert "no device has an attribute modle; did you mean model?" in told["paragraph"]
    assert "CEL runtime error: no such key: modle" in told["scheduler"]


def test_every_device_allocated_and_to_whom(cluster: Cluster, hosts: Path) -> None:
    dra_node(cluster, hosts, "pi-a")
    for n in ("one", "two"):
        cluster.claim(n, tpu_claim())
    cluster.pod("first", claiming("one"))
    assert cluster.wait_placed("first") == "pi-a"
    cluster.pod("second", claiming("two"))
    assert cluster.wait_placed("second") is None
    told = cluster.why("second")
    assert kinds(told) == ["in-use"]
    assert "coral-usb-2-1 on pi-a to pod why-test/first (claim why-test/one)" in told["paragraph"]


def test_tainted_device(cluster: Cluster, hosts: Path) -> None:
    dra_node(cluster, hosts, "pi-a", taint="unplugged")
    cluster.claim("any", tpu_claim())
    cluster.pod("waits", claiming("any"))
    assert cluster.wait_placed("waits") is None
    told = cluster.why("waits")
    assert kinds(told) == ["tainted"]
    assert (
        "Devices request 'tpu' of claim why-test/any matches are tainted, and it does not "
        "tolerate the taint: coral-usb-2-1 on pi-a (edgefd.io/unhealthy=unplugged:NoSchedule)"
    ) in told["paragraph"]


def test_plugin_not_registered(cluster: Cluster, hosts: Path) -> None:
    """A node labelled with an Edge TPU whose devplugin (DRA) published no slice."""
    root = host("rpi4-coral", str(hosts))
    cluster.node("pi-a", labels_of(root))
    devplugin = {
        "name": "devplugin",
        "image": IMAGE,
        "restartPolicy": "Always",
        "env": [{"name": "EDGEFD_API", "value": "dra"}],
    }
    cluster.pod(
        "edgefd-x1",
        {"nodeName": "pi-a", "initContainers": [devplugin]},
        ns=EDGEFD_NS,
        labels={"app.kubernetes.io/part-of": "edgefd", "app.kubernetes.io/name": "edgefd"},
    )
    dra_node(cluster, hosts, "pi-b", taint="unplugged")  # a node that does publish
    cluster.claim("any", tpu_claim())
    cluster.pod("waits", claiming("any"))
    assert cluster.wait_placed("waits") is None
    told = cluster.why("waits")
    assert sorted(kinds(told)) == ["plugin-not-registered", "tainted"]
    text = told["paragraph"]
    assert "Node pi-a has 1 edgetpu device (label edgefd.io/edgetpu.count) but publishes no" in text
    assert "(kubectl logs -n edgefd edgefd-x1 -c devplugin)" in text


def test_claim_from_a_template(cluster: Cluster, hosts: Path) -> None:
    """The resourceclaim controller makes the pod's claim; its selector matches nothing."""
    dra_node(cluster, hosts, "pi-a")
    cluster.template("pcie", tpu_claim('device.attributes["edgefd.io"].bus == "pci"'))
    cluster.pod("waits", claiming(template="pcie"))
    made = wait_until(
        lambda: (cluster.get_pod("waits").get("status") or {}).get("resourceClaimStatuses"),
        30,
        0.05,
        "the pod's claim made from its template",
    )
    assert cluster.wait_placed("waits") is None
    told = cluster.why("waits")
    assert kinds(told) == ["selector-matches-nothing"]
    assert f"claim {NS}/{made[0]['resourceClaimName']} match no device" in told["paragraph"]
    assert "their bus: usb" in told["paragraph"]


def test_missing_claim(cluster: Cluster, hosts: Path) -> None:
    dra_node(cluster, hosts, "pi-a")
    cluster.pod("waits", claiming("nowhere"))  # the scheduler does not even try it
    told = cluster.why("waits")
    assert kinds(told) == ["claim-missing"]
    assert told["paragraph"] == (
        "Pod why-test/waits is Pending. Its ResourceClaim why-test/nowhere does not exist; "
        "the scheduler does not try to place the pod until it does."
    )
