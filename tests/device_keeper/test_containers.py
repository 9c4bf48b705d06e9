"""From a holder to its running container through the CRI: the client against an in-process
gRPC server built from the same stubs (a unit test; the real containerd is the e2e node's
check 6k), the runtime's `info` (containerd's and CRI-O's shapes), the systemd cgroup driver
told apart, and where a container's device rules live (v1 and/or v2)."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from edgefd.device_keeper.api import cri_pb2 as cri
from edgefd.device_keeper.api import cri_pb2_grpc as cri_rpc
from edgefd.device_keeper.containers import Container, Runtime, parse_info
from edgefd.device_keeper.holders import Holder


def _info(pid, path):
    return {"info": json.dumps({"pid": pid, "runtimeSpec": {"linux": {"cgroupsPath": path}}})}


class FakeRuntime(cri_rpc.RuntimeServiceServicer):
    def __init__(self):
        self.requests = []

    def ListContainers(self, request, context):
        self.requests.append(request)
        labels = {
            "io.kubernetes.pod.namespace": "ns",
            "io.kubernetes.pod.name": "detector",
            "io.kubernetes.container.name": "app",
        }
        return cri.ListContainersResponse(
            containers=[
                cri.Container(id="abc123def4567", labels=labels, state=cri.CONTAINER_RUNNING),
                cri.Container(id="other", labels={**labels, "io.kubernetes.pod.name": "x"}),
            ]
        )

    def ContainerStatus(self, request, context):
        return cri.ContainerStatusResponse(info=_info(4242, "/kubepods/besteffort/pod1/abc"))


def test_runtime_finds_the_running_container_by_the_kubelet_labels(serve):
    fake = FakeRuntime()
    sock = serve(cri_rpc.add_RuntimeServiceServicer_to_server, fake)
    holder = Holder("ns", "detector", "app", "device-plugin")
    found = Runtime(sock).containers(holder)
    assert found == [Container(holder, "abc123def4567", 4242, "/kubepods/besteffort/pod1/abc")]
    flt = fake.requests[0].filter
    assert not flt.HasField("state")  # created ones too: the states are chosen here
    assert dict(flt.label_selector)["io.kubernetes.pod.name"] == "detector"


class TwoPodsOfOneName(cri_rpc.RuntimeServiceServicer):
    """A force-deleted pod's container still running beside its successor's (same name, a
    new UID), an exited earlier one, and one created with no process yet."""

    LABELS: ClassVar = {
        "io.kubernetes.pod.namespace": "ns",
        "io.kubernetes.pod.name": "detector",
        "io.kubernetes.container.name": "app",
    }
    LISTED: ClassVar = [  # id, pod UID, created_at, state
        ("old1", "uid-old", 100, cri.CONTAINER_RUNNING),
        ("new0", "uid-new", 150, cri.CONTAINER_EXITED),
        ("new1", "uid-new", 200, cri.CONTAINER_CREATED),
        ("new2", "uid-new", 210, cri.CONTAINER_CREATED),
    ]

    def ListContainers(self, request, context):
        return cri.ListContainersResponse(
            containers=[
                cri.Container(
                    id=cid,
                    labels={**self.LABELS, "io.kubernetes.pod.uid": uid},
                    created_at=at,
                    state=state,
                )
                for cid, uid, at, state in self.LISTED
            ]
        )

    def ContainerStatus(self, request, context):
        if request.container_id == "new2":  # created, no process yet
            return cri.ContainerStatusResponse(info=_info(0, "/kubepods/pod-new/new2"))
        return cri.ContainerStatusResponse(info=_info(7, f"/kubepods/x/{request.container_id}"))


def test_only_the_pod_created_last_is_its_holder_and_created_containers_count(serve, caplog):
    """Issue 46 item 6: by name alone the keeper granted a force-deleted pod's container. Only
    the containers of the pod created last are the holder's (the other pod's are said once);
    a created container is found before it runs (a move under way reaches it), one with no
    process yet is left for the next look, an exited one is not there."""
    import logging

    sock = serve(cri_rpc.add_RuntimeServiceServicer_to_server, TwoPodsOfOneName())
    holder = Holder("ns", "detector", "app", "device-plugin")
    with caplog.at_level(logging.WARNING, logger="device-keeper"):
        found = Runtime(sock).containers(holder)
    assert [c.id for c in found] == ["new1"]
    assert (
        "ns/detector/app: containers of another pod of that name are there too (old1 (pod "
        "uid-old)): only pod uid-new's, created last, is granted"
    ) in caplog.text


@pytest.mark.parametrize(
    "info",
    [
        {},
        {"info": json.dumps({"pid": 0, "runtimeSpec": {"linux": {"cgroupsPath": "/a"}}})},
        {"info": json.dumps({"pid": 7})},
        {"info": json.dumps({"pid": 7, "runtimeSpec": 1})},
        {"info": json.dumps({"pid": "7", "runtimeSpec": {"linux": {"cgroupsPath": "/a"}}})},
        {"info": "[1]"},
        {"info": "[" * 100000},
    ],
)
def test_info_without_pid_or_cgroup_path_is_refused(info):
    with pytest.raises(ValueError):
        parse_info(info)


def test_crio_and_containerd_info_shapes():
    # both put pid and runtimeSpec at the top of the "info" JSON
    assert parse_info(_info(9, "/kubepods/pod1/crio-x")) == (9, "/kubepods/pod1/crio-x")


def test_systemd_driver_and_cgroup_dirs(tmp_path):
    h = Holder("ns", "p", "c", "dra")
    assert Container(h, "x", 1, "kubepods-besteffort-pod1.slice:cri-containerd:x").systemd
    c = Container(h, "x", 1, "/kubepods/besteffort/pod1/x")
    assert not c.systemd
    (tmp_path / "devices/kubepods/besteffort/pod1/x").mkdir(parents=True)
    (tmp_path / "devices/kubepods/besteffort/pod1/x/devices.list").write_text("a *:* rwm\n")
    (tmp_path / "unified/kubepods/besteffort/pod1/x").mkdir(parents=True)
    (tmp_path / "unified/cgroup.controllers").write_text("")
    assert c.cgroup_dirs(str(tmp_path)) == [
        str(tmp_path / "devices/kubepods/besteffort/pod1/x"),
        str(tmp_path / "unified/kubepods/besteffort/pod1/x"),
    ]
    scope = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-x.scope"
    (tmp_path / "unified" / scope).mkdir(parents=True)
    sd = Container(h, "x", 1, "kubepods-besteffort-pod1.slice:cri:x")
    assert sd.cgroup_dirs(str(tmp_path)) == [str(tmp_path / "unified" / scope)]
    assert Container(h, "x", 1, "kubepods.slice::x").cgroup_dirs(str(tmp_path)) == []


def test_the_nodes_the_runtime_made_come_from_its_spec():
    """containerd's and CRI-O's info both carry the OCI spec: linux.devices are the nodes made
    at creation (a DeviceSpec's or CDI's), at their container paths."""
    from edgefd.device_keeper.containers import parse_devices
    from edgefd.device_keeper.rules import DeviceNumber

    devices = [
        {"path": "/dev/edgefd/coral-usb-1-1-3", "type": "c", "major": 189, "minor": 4,
         "fileMode": 8630, "uid": 0, "gid": 0},
        {"path": "/dev/edgefd/x", "type": "u", "major": 10, "minor": 200},
        {"path": "/dev/sda", "type": "b", "major": 8, "minor": 0},
        {"path": "/dev/p", "type": "p"},  # a FIFO: no number
        {"path": "/dev/bad", "type": "c", "major": "189", "minor": 4},
        {"path": "/dev/huge", "type": "c", "major": 1 << 40, "minor": 4},
        "not an object",
    ]  # fmt: skip
    info = {"info": json.dumps({"pid": 9, "runtimeSpec": {"linux": {"devices": devices}}})}
    got = parse_devices(info)
    assert got == (
        ("/dev/edgefd/coral-usb-1-1-3", DeviceNumber("c", 189, 4)),
        ("/dev/edgefd/x", DeviceNumber("c", 10, 200)),
        ("/dev/sda", DeviceNumber("b", 8, 0)),
    )
    c = Container(Holder("ns", "p", "c", "dra"), "x", 9, "/a", got)
    assert c.spec_numbers("/dev/edgefd/coral-usb-1-1-3") == {DeviceNumber("c", 189, 4)}
    for bad in ({}, {"info": "{"}, {"info": "[]"}, {"info": json.dumps({"runtimeSpec": 1})}):
        assert parse_devices(bad) == ()


def test_runtime_passes_the_spec_devices_on(serve):
    class WithDevices(FakeRuntime):
        def ContainerStatus(self, request, context):
            doc = json.loads(_info(4242, "/kubepods/pod1/abc")["info"])
            doc["runtimeSpec"]["linux"]["devices"] = [
                {"path": "/dev/edgefd/n", "type": "c", "major": 189, "minor": 4}
            ]
            return cri.ContainerStatusResponse(info={"info": json.dumps(doc)})

    sock = serve(cri_rpc.add_RuntimeServiceServicer_to_server, WithDevices())
    [found] = Runtime(sock).containers(Holder("ns", "detector", "app", "device-plugin"))
    assert [p for p, _ in found.devices] == ["/dev/edgefd/n"]


def test_a_pid_is_the_container_s_only_in_its_cgroup_and_while_it_lives(tmp_path):
    """The pid's own /proc/<pid>/cgroup, relative to the reader's namespace (`..`), names the
    container's cgroup or one under it; its start time is what identify saw."""
    import os

    from edgefd.device_keeper.containers import NotThisContainer, process_start

    h = Holder("ns", "p", "c", "dra")
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    stat = "7 (a) b) S" + " 1" * 18 + " 4242 0 0\n"  # field 22: the start time
    (proc / "7" / "stat").write_text(stat)
    assert process_start(str(proc), 7) == 4242
    cgroup = proc / "7" / "cgroup"
    cgroup.write_text("12:devices:/x\n0::/../../besteffort/pod1/abc/sub\n")
    c = Container(h, "abc", 7, "/kubepods/besteffort/pod1/abc")
    assert c.identify(str(proc)) == 4242
    c.same(str(proc), 4242)
    with pytest.raises(NotThisContainer, match="pid reused"):
        c.same(str(proc), 4243)
    cgroup.write_text("0::/kubepods/besteffort/pod2/abc\n")
    with pytest.raises(NotThisContainer, match="not in the container's cgroup"):
        c.identify(str(proc))
    with pytest.raises(NotThisContainer, match="gone"):
        Container(h, "abc", 8, "/a").identify(str(proc))
    # the systemd driver: the scope in its slices (the e2e's 6s: the path names it)
    scope = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice"
    cgroup.write_text(f"5:devices:/{scope}/cri-containerd-abc.scope\n")
    sd = Container(h, "abc", 7, "kubepods-besteffort-pod1.slice:cri-containerd:abc")
    assert sd.identify(str(proc)) == 4242
    cgroup.write_text(f"5:devices:/{scope}/cri-containerd-abd.scope\n")
    with pytest.raises(NotThisContainer, match="not in the container's cgroup"):
        sd.identify(str(proc))
    from pathlib import Path

    mine = Path("/proc/self/cgroup").read_text().split("::")[-1].strip()
    me = Container(h, "me", os.getpid(), mine)
    if me.cgroups_path != "/":  # the real one, where this process is not in the root cgroup
        assert me.identify("/proc") == process_start("/proc", os.getpid())
