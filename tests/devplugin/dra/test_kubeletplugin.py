"""The DRA kubelet plugin's gRPC services over their unix sockets (kubeletplugin.py), with real
gRPC clients calling them as the kubelet does (the kubelet's own stubs' wire names,
tests/devplugin/api/test_generate.py): registration (GetInfo, NotifyRegistrationStatus),
NodePrepareResources and NodeUnprepareResources (a failing claim is its own entry's error; a
device a claim's status lists twice is one device with both requests; a UID that is not a
Kubernetes UID is refused and touches nothing), the sockets where the kubelet looks and a
stale one left by a reboot, and serving afresh when a socket file disappears. The real kubelet
drives these in the real-node end-to-end (tests/system/checks_dra.py)."""

from __future__ import annotations

import json
import os
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgefd.devplugin import cdi
from edgefd.devplugin.dra.api import dra_pb2 as dra
from edgefd.devplugin.dra.api import dra_pb2_grpc as dra_grpc
from edgefd.devplugin.dra.api import pluginregistration_pb2 as reg
from edgefd.devplugin.dra.api import pluginregistration_pb2_grpc as reg_grpc
from edgefd.devplugin.dra.checkpoint import Checkpoint
from edgefd.devplugin.dra.claims import ClaimRef, Preparer
from edgefd.devplugin.dra.kubeletplugin import KubeletPlugin
from edgefd.devplugin.kubeletsocket import SocketDirs
from edgefd.devplugin.links import LinkLayout
from tests.devplugin.devices import CORAL, NODE, coral, table
from tests.devplugin.dra.fakeapi import Claims
from tests.devplugin.kubelet import channel
from tests.helpers import wait_until

NOT_UIDS = [
    "coral-usb",
    "../../etc/passwd",
    "",
    str(uuid.uuid4()).upper(),
    str(uuid.uuid4()) + "\n",
    str(uuid.uuid4()) + "/x",
]


@pytest.fixture
def served(kubelet_dir: Path) -> Iterator[tuple[KubeletPlugin, Claims, list]]:
    claims = Claims()
    preparer = Preparer(
        NODE,
        str(kubelet_dir / "cdi"),
        LinkLayout(None),
        Checkpoint(kubelet_dir / "plugins" / "edgefd.io", NODE),
        claims,
    )
    preparer.update(table((coral(), CORAL)))
    calls: list = []
    kp = KubeletPlugin(
        str(kubelet_dir), preparer, SocketDirs(), on_call=lambda op, ok: calls.append((op, ok))
    ).start()
    try:
        yield kp, claims, calls
    finally:
        kp.stop()


def test_sockets_where_the_kubelet_looks(served, kubelet_dir: Path) -> None:
    kp, _, _ = served
    registration = Path(kp.registration_socket)
    assert registration.parent == kubelet_dir / "plugins_registry"
    assert re.fullmatch(r"edgefd\.io-reg-[0-9a-f]+\.sock", registration.name)
    assert kp.service_socket == str(kubelet_dir / "plugins" / "edgefd.io" / "dra.sock")
    assert os.path.exists(kp.registration_socket) and os.path.exists(kp.service_socket)


def test_a_reboot_leaves_a_socket_the_new_process_does_not_reuse(kubelet_dir: Path) -> None:
    """A kubelet that booted before the plugin keeps redialling the registration socket the
    power cut left (seconds of backoff): the new process serves under a name of its own and
    removes the old ones (this release's and the fixed name of earlier ones); it leaves files
    that are not its sockets."""
    registry = kubelet_dir / "plugins_registry"
    registry.mkdir(parents=True, exist_ok=True)
    stale = [registry / "edgefd.io-reg.sock", registry / "edgefd.io-reg-17e0.sock"]
    for path in stale:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))  # bound, then closed: nobody listens, as after a reboot
    other = registry / "other.example.com-reg.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(other))
    (registry / "edgefd.io-reg-notes.sock").write_text("not a socket")
    checkpoint = Checkpoint(kubelet_dir / "plugins" / "edgefd.io", NODE)
    preparer = Preparer(NODE, str(kubelet_dir / "cdi"), LinkLayout(None), checkpoint, Claims())
    kp = KubeletPlugin(str(kubelet_dir), preparer, SocketDirs())
    try:
        kp.start()
        assert Path(kp.registration_socket) not in stale
        assert not any(p.exists() for p in stale)
        assert other.exists() and (registry / "edgefd.io-reg-notes.sock").exists()
        with channel(kp.registration_socket) as ch:
            info = reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=5)
        assert info.name == "edgefd.io"
    finally:
        kp.stop()
    assert not Path(kp.registration_socket).exists()


def test_registration(served) -> None:
    kp, _, _ = served
    with channel(kp.registration_socket) as ch:
        stub = reg_grpc.RegistrationStub(ch)
        info = stub.GetInfo(reg.InfoRequest(), timeout=5)
        assert info.type == "DRAPlugin"
        assert info.name == "edgefd.io"
        assert info.endpoint == kp.service_socket
        assert list(info.supported_versions) == ["v1.DRAPlugin"]
        assert not kp.registered.is_set()
        stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=5)
        assert kp.registered.is_set() and kp.registrations == 1
        stub.NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=False, error="version"), timeout=5
        )
        assert not kp.registered.is_set() and kp.last_error == "version"


def test_prepare_and_unprepare(served, kubelet_dir: Path) -> None:
    kp, claims, calls = served
    ok = claims.add("c1", ["coral-usb-2-1"])
    bad = claims.add("c2", ["coral-usb-9-9"])
    with channel(kp.service_socket) as ch:
        stub = dra_grpc.DRAPluginStub(ch)
        req = dra.NodePrepareResourcesRequest(
            claims=[dra.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in (ok, bad)]
        )
        resp = stub.NodePrepareResources(req, timeout=5)
        good = resp.claims[ok.uid]
        assert not good.error
        [dev] = good.devices
        assert list(dev.request_names) == ["tpu"]
        assert (dev.pool_name, dev.device_name) == (NODE, "coral-usb-2-1")
        assert list(dev.cdi_device_ids) == [f"edgefd.io/claim={ok.uid}-coral-usb-2-1"]
        # the failing claim is reported in its own entry (the kubelet retries it)
        assert "coral-usb-9-9 is not on node" in resp.claims[bad.uid].error
        assert not resp.claims[bad.uid].devices
        spec = kubelet_dir / "cdi" / f"edgefd.io-claim_{ok.uid}.json"
        assert spec.exists()
        un = stub.NodeUnprepareResources(
            dra.NodeUnprepareResourcesRequest(
                claims=[dra.Claim(namespace="default", uid=ok.uid, name="c1")]
            ),
            timeout=5,
        )
        assert ok.uid in un.claims and not un.claims[ok.uid].error
        assert not spec.exists()
    assert calls == [("prepare", True), ("prepare", False), ("unprepare", True)]


def test_a_device_still_prepared_for_another_claim_is_that_claims_retryable_error(
    served,
) -> None:
    """After a force-delete the kubelet prepares the next claim before unpreparing the old
    one (kubernetes#141471): B's entry names A and is retried; once A is unprepared, B's
    retry prepares."""
    kp, claims, _ = served
    a = claims.add("a", ["coral-usb-2-1"])
    b = claims.add("b", ["coral-usb-2-1"])

    def req(c, cls=dra.NodePrepareResourcesRequest):
        return cls(claims=[dra.Claim(namespace=c.namespace, uid=c.uid, name=c.name)])

    with channel(kp.service_socket) as ch:
        stub = dra_grpc.DRAPluginStub(ch)
        assert not stub.NodePrepareResources(req(a), timeout=5).claims[a.uid].error
        refused = stub.NodePrepareResources(req(b), timeout=5).claims[b.uid]
        assert "coral-usb-2-1 is still prepared for claim default/a" in refused.error
        assert a.uid in refused.error and not refused.devices
        stub.NodeUnprepareResources(req(a, dra.NodeUnprepareResourcesRequest), timeout=5)
        [dev] = stub.NodePrepareResources(req(b), timeout=5).claims[b.uid].devices
        assert dev.device_name == "coral-usb-2-1"


def test_a_deleted_socket_is_served_afresh(served) -> None:
    kp, _, _ = served
    with channel(kp.registration_socket) as ch:
        reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=True), timeout=5
        )
    os.unlink(kp.registration_socket)
    os.unlink(kp.service_socket)
    kp.check()
    assert not kp.registered.is_set()  # the kubelet has to find us again
    with channel(kp.registration_socket) as ch:
        info = reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=5)
        assert info.endpoint == kp.service_socket
    with channel(kp.service_socket) as ch:
        resp = dra_grpc.DRAPluginStub(ch).NodeUnprepareResources(
            dra.NodeUnprepareResourcesRequest(), timeout=5
        )
        assert not resp.claims


def test_stop_removes_the_sockets(served) -> None:
    kp, _, _ = served
    kp.stop()
    wait_until(lambda: not os.path.exists(kp.registration_socket), timeout=5)
    assert not os.path.exists(kp.service_socket)


def test_a_failing_write_is_that_claims_error_not_the_calls(kubelet_dir: Path) -> None:
    """A checkpoint that cannot be written fails the claim (retried by the kubelet), with a
    readable reason, and the service keeps answering."""
    blocker = kubelet_dir / "not-a-dir"
    blocker.write_text("")
    claims = Claims()
    preparer = Preparer(
        NODE, str(kubelet_dir / "cdi"), LinkLayout(None), Checkpoint(blocker, NODE), claims
    )
    preparer.update(table((coral(), CORAL)))
    kp = KubeletPlugin(str(kubelet_dir), preparer, SocketDirs()).start()
    try:
        ref = claims.add("c1", ["coral-usb-2-1"])
        with channel(kp.service_socket) as ch:
            stub = dra_grpc.DRAPluginStub(ch)
            req = dra.NodePrepareResourcesRequest(
                claims=[dra.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)]
            )
            resp = stub.NodePrepareResources(req, timeout=5)
            assert "Not a directory" in resp.claims[ref.uid].error
            again = stub.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(), timeout=5)
            assert not again.claims
    finally:
        kp.stop()


# -- the edges of NodePrepareResources / NodeUnprepareResources


def twice(claims: Claims, name: str, requests: list[str]) -> ClaimRef:
    ref = claims.add(name, ["coral-usb-2-1"])
    results = [
        {"request": r, "driver": "edgefd.io", "pool": NODE, "device": "coral-usb-2-1"}
        for r in requests
    ]
    claims.objects[("default", name)]["status"]["allocation"]["devices"]["results"] = results
    return ref


@pytest.mark.parametrize("requests", [["tpu", "tpu"], ["a", "b"]])
def test_a_device_listed_twice_is_prepared_once(served, kubelet_dir: Path, requests) -> None:
    kp, claims, _ = served
    ref = twice(claims, "dup", requests)
    with channel(kp.service_socket) as ch:
        stub = dra_grpc.DRAPluginStub(ch)
        claim = dra.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)
        resp = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[claim]), timeout=5)
    got = resp.claims[ref.uid]
    assert not got.error, got.error
    [dev] = got.devices
    assert list(dev.request_names) == list(dict.fromkeys(requests))
    assert list(dev.cdi_device_ids) == [f"edgefd.io/claim={ref.uid}-coral-usb-2-1"]
    spec = json.loads((kubelet_dir / "cdi" / f"edgefd.io-claim_{ref.uid}.json").read_text())
    assert [d["name"] for d in spec["devices"]] == [f"{ref.uid}-coral-usb-2-1"]
    assert spec["containerEdits"]["env"] == ["EDGEFD_CORAL_USB_DEVICES=coral-usb-2-1"]


@pytest.mark.parametrize("uid", NOT_UIDS)
def test_a_uid_that_is_not_a_kubernetes_uid_is_refused_and_touches_nothing(
    served, kubelet_dir: Path, uid: str
) -> None:
    kp, claims, _ = served
    cdi_dir = kubelet_dir / "cdi"
    cdi_dir.mkdir(exist_ok=True)
    plugin_spec = cdi_dir / "edgefd.io-coral-usb.json"  # the device plugin's, --api both
    plugin_spec.write_text(json.dumps(cdi.spec("edgefd.io/coral-usb", [{"name": "x"}])))
    with channel(kp.service_socket) as ch:
        stub = dra_grpc.DRAPluginStub(ch)
        claim = dra.Claim(namespace="default", uid=uid, name="c")
        un = stub.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[claim]), 5)
        pre = stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[claim]), 5)
    for resp in (un, pre):
        assert "is not a Kubernetes UID" in resp.claims[uid].error
    assert not pre.claims[uid].devices
    assert plugin_spec.exists()
    assert sorted(p.name for p in cdi_dir.iterdir()) == ["edgefd.io-coral-usb.json"]
    assert claims.gets == 0  # refused before asking the API server
