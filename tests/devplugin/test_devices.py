"""devplugin, pure parts: configuration, what the resources select (through the inventory),
health, kubelet IDs, Allocate answers, the proto."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgefd.bus.catalogue import UsbId as UsbMatch
from edgefd.bus.key import DeviceKey, DevNode
from edgefd.core.errors import BadInput
from edgefd.core.hostroot import HostRoot
from edgefd.devplugin.api import deviceplugin_pb2 as pb
from edgefd.devplugin.app import Options, make_inventory
from edgefd.devplugin.cdi import cdi_name
from edgefd.devplugin.links import LinkLayout
from edgefd.devplugin.v1beta1.advertised import Advertised, health
from edgefd.devplugin.v1beta1.allocate import (
    UnknownDevice,
    container_response,
    preferred,
    resolve,
)
from edgefd.inventory.device import Device
from edgefd.inventory.resources import (
    Config,
    Resource,
    check_resource_name,
    default_config,
    load_config,
    parse_config,
)
from tests.fixturegen import HostBuilder, build_host

# --------------------------------------------------------------------------- configuration


def test_default_config_comes_from_the_catalogue() -> None:
    """One resource per catalogue model, selecting the model: its IDs (both life stages of
    a Coral USB), globs and env stay in the catalogue, resolved when the inventory matches."""
    by = default_config().by_name()
    coral = by["edgefd.io/coral-usb"]
    assert (coral.accelerator, coral.usb, coral.pci, coral.dev_globs) == ("coral-usb", (), (), ())
    assert by["edgefd.io/coral-pcie"].selector.accelerator == "coral-pcie"
    assert [r.accelerator for r in by.values()] == ["coral-usb", "coral-pcie", "ncs2", "ncs1",
                                                   "hailo8"]  # fmt: skip


def _cfg(*resources: dict, **top: object) -> dict:
    return {"resources": list(resources), **top}


GOOD = {"name": "example.com/stick", "usb": [{"vendor": "1234", "product": "abcd"}]}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            _cfg(GOOD, {"name": "example.com/x", "usb": [{"vendor": "12g4", "product": "0001"}]}),
            "resources[1].usb[0].vendor: '12g4' is not 4 hex digits",
        ),
        (_cfg({"name": "stick", "usb": GOOD["usb"]}), "resources[0].name: 'stick' must be"),
        (
            _cfg({"name": "kubernetes.io/stick", "usb": GOOD["usb"]}),
            "resources[0].name: 'kubernetes.io/stick': domain 'kubernetes.io' is reserved",
        ),
        (
            _cfg({"name": "dev.k8s.io/stick", "usb": GOOD["usb"]}),
            "resources[0].name: 'dev.k8s.io/stick': domain 'dev.k8s.io' is reserved",
        ),
        (_cfg({"name": "Example.com/x", "usb": GOOD["usb"]}), "resources[0].name: key"),
        (_cfg({"name": "example.com/x"}), "resources[0]: needs at least one of usb, pci"),
        (
            _cfg({**GOOD, "replicas": 0}),
            "resources[0].replicas: 0 is out of range (must be 1 to 1000)",
        ),
        (
            _cfg({**GOOD, "replicas": True}),
            "resources[0].replicas: must be a whole number, not True",
        ),
        (_cfg({**GOOD, "id_from": "devnum"}), "resources[0].id_from: 'devnum' must be one of"),
        (_cfg({**GOOD, "colour": "red"}), "resources[0].colour: unknown field"),
        (_cfg(GOOD, GOOD), "resources[1].name: 'example.com/stick' is already resources[0]"),
        (_cfg({**GOOD, "accelerator": "tpu9000"}), "resources[0].accelerator: 'tpu9000' is not"),
        (_cfg({**GOOD, "env": {"1BAD": "x"}}), "resources[0].env.1BAD: not a valid environment"),
        (
            _cfg({**GOOD, "usb": [{"vendor": "1234", "product": "abcd", "state": "warm"}]}),
            "resources[0].usb[0].state: 'warm' must be boot, runtime or empty",
        ),
        (
            _cfg({"name": "example.com/x", "pci": [{"vendor": "1ac1", "class": "zz"}]}),
            "resources[0].pci[0].class: 'zz' is not 2 to 6 hex digits",
        ),
        (
            _cfg({**GOOD, "dev_globs": ["/sys/x"]}),
            "resources[0].dev_globs[0]: '/sys/x' must be a path glob under /dev/",
        ),
        (
            _cfg({**GOOD, "mounts": [{"host_path": "relative"}]}),
            "resources[0].mounts[0].host_path: must be an absolute path",
        ),
        (_cfg(GOOD, forget_after=-1), "forget_after: -1 is out of range (must be 0 to 315360000)"),
        ({"resources": {"name": "x"}}, "resources: must be a list"),
        ([1, 2], ": must be a mapping"),
    ],
)
def test_bad_config_names_the_field(doc: object, message: str) -> None:
    with pytest.raises(BadInput) as e:
        parse_config(doc, "resources.yaml")
    assert str(e.value).startswith("resources.yaml: ")
    assert message in str(e.value)


def test_config_accelerator_fills_matchers_and_overrides_apply() -> None:
    cfg = parse_config(
        _cfg(
            {
                "name": "example.com/tpu",
                "accelerator": "coral-usb",
                "id_from": "serial",
                "replicas": 3,
                "env": {"EXTRA": 1},
                "mounts": [{"host_path": "/opt/edgetpu"}],
            }
        ),
        "x.yaml",
    )
    r = cfg.resources[0]
    assert r.name == "example.com/tpu" and r.selector.accelerator == "coral-usb"
    assert (r.id_from, r.replicas, r.env) == ("serial", 3, (("EXTRA", "1"),))
    assert r.mounts[0].container_path == "/opt/edgetpu" and r.mounts[0].read_only
    assert r.env_prefix == "EDGEFD_TPU"


def test_load_config_reports_unreadable_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="cannot read configuration"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources: [\n")
    with pytest.raises(BadInput, match="not valid YAML"):
        load_config(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(empty).resources == ()


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("edgefd.io/coral-usb", True),
        ("edgefd.io/coral_usb.v2", True),
        ("coral", False),
        ("kubernetes.io/coral", False),
        ("node.kubernetes.io/coral", False),
        ("k8s.io/coral", False),
        ("requests.edgefd.io/coral", False),
        ("edgefd.io/a/b", False),
        ("edgefd.io/-coral", False),
    ],
)
def test_resource_name_rules(name: str, ok: bool) -> None:
    assert (check_resource_name(name) is None) is ok


# --------------------------------------------------------------------------- what is selected


def _devices(root: Path, res: Resource) -> list[Device]:
    cfg = Config(resources=(res,))
    snap = make_inventory(Options("/nonexistent", HostRoot.of(root)), cfg).scan()
    return list(snap.of_resource(res.name))


@pytest.fixture
def rpi4(tmp_path: Path) -> Path:
    return build_host("rpi4-coral", tmp_path / "rpi4", devicetree=False)


def test_rpi4_coral_and_ncs2_in_boot_state(rpi4: Path) -> None:
    by = default_config().by_name()
    [coral] = _devices(rpi4, by["edgefd.io/coral-usb"])
    assert (coral.name, coral.state, coral.ids, health(coral)) == (
        "coral-usb-2-1",
        "boot",
        "1a6e:089a",
        "Healthy",
    )
    assert coral.devnodes[0].startswith("/dev/bus/usb/002/")
    [ncs2] = _devices(rpi4, by["edgefd.io/ncs2"])
    assert (ncs2.name, ncs2.state) == ("ncs2-1-1-1", "boot")
    assert _devices(rpi4, by["edgefd.io/coral-pcie"]) == []


def test_a_device_behind_two_bus_entries_is_one_device(rpi4: Path) -> None:
    """Issue 11 item 10: a second sysfs name for the Coral (here one that sorts first) must
    neither advertise it twice nor give it a name from the wrong entry."""
    import os

    bus = rpi4 / "sys/bus/usb/devices"
    os.symlink("2-1", bus / "1-0")
    res = default_config().by_name()["edgefd.io/coral-usb"]
    assert [d.name for d in _devices(rpi4, res)] == ["coral-usb-2-1"]


def test_reenumeration_keeps_the_name(rpi4: Path) -> None:
    """Coral 1a6e:089a -> 18d1:9302 on the same port with a new devnum: same device name."""
    res = default_config().by_name()["edgefd.io/coral-usb"]
    [before] = _devices(rpi4, res)
    hb = HostBuilder(rpi4)
    hb.remove_usb("2-1")
    assert _devices(rpi4, res) == []
    hb.add_usb({"port": "2-1", "vendor": "18d1", "product": "9302", "devnum": 7})
    [after] = _devices(rpi4, res)
    assert after.name == before.name == "coral-usb-2-1"
    assert (after.state, after.ids) == ("runtime", "18d1:9302")
    assert after.devnodes == ("/dev/bus/usb/002/007",) != before.devnodes


def test_id_from_serial_follows_the_stick(rpi4: Path) -> None:
    res = parse_config(
        _cfg({"name": "edgefd.io/ncs2", "accelerator": "ncs2", "id_from": "serial"}), "x"
    ).resources[0]
    [d] = _devices(rpi4, res)
    assert d.name == "ncs2-sn-03e72485" and d.by_serial
    # a device without a serial falls back to its port
    coral = parse_config(
        _cfg({"name": "edgefd.io/c", "accelerator": "coral-usb", "id_from": "serial"}), "x"
    ).resources[0]
    assert [d.name for d in _devices(rpi4, coral)] == ["coral-usb-2-1"]


def test_own_ids_of_a_catalogue_device_still_name_it_by_its_model(rpi4: Path) -> None:
    """A resource that lists the Coral's boot ID by hand selects the same device as the
    default resource, under the same name: the catalogue says what it is."""
    res = parse_config(
        _cfg({"name": "example.com/tpu", "usb": [{"vendor": "1a6e", "product": "089a"}]}), "x"
    ).resources[0]
    [d] = _devices(rpi4, res)
    assert (d.name, d.model, d.state) == ("coral-usb-2-1", "coral-usb", "boot")


def test_a_kind_selects_every_model_of_it(tmp_path: Path) -> None:
    root = build_host("x86-server", tmp_path / "x86", devicetree=False)
    res = parse_config(_cfg({"name": "example.com/tpu", "kind": "edgetpu"}), "x").resources[0]
    assert [d.name for d in _devices(root, res)] == ["coral-pcie-0000-02-00-0", "coral-usb-2-3"]


def test_missing_device_node_is_unhealthy(rpi4: Path) -> None:
    res = default_config().by_name()["edgefd.io/coral-usb"]
    [d] = _devices(rpi4, res)
    (rpi4 / d.devnodes[0].lstrip("/")).unlink()
    [d2] = _devices(rpi4, res)
    assert health(d2) == "Unhealthy" and "missing" in d2.reason


def test_pci_coral_and_driverless_pci(tmp_path: Path) -> None:
    root = build_host("x86-server", tmp_path / "x86", devicetree=False)
    res = default_config().by_name()["edgefd.io/coral-pcie"]
    [d] = _devices(root, res)
    assert (d.name, d.devnodes, d.numa_node, health(d)) == (
        "coral-pcie-0000-02-00-0",
        ("/dev/apex_0",),
        0,
        "Healthy",
    )
    hb = HostBuilder(root)
    hb.remove_pci("0000:02:00.0")
    hb.add_pci(
        {
            "address": "0000:02:00.0",
            "class": "088000",
            "vendor": "1ac1",
            "device": "089a",
            "subsystem_vendor": "1ac1",
            "subsystem_device": "089a",
        }
    )
    [d] = _devices(root, res)
    assert health(d) == "Unhealthy" and "driver" in d.reason


def test_dev_glob_only_resource(tmp_path: Path) -> None:
    root = build_host("x86-server", tmp_path / "x86", devicetree=False)
    res = parse_config(_cfg({"name": "example.com/dri", "dev_globs": ["/dev/dri/render*"]}), "x")
    [d] = _devices(root, res.resources[0])
    assert d.devnodes == ("/dev/dri/renderD128",) and d.key == DeviceKey("dev", d.devnodes[0])
    assert d.name.startswith("dri-dri-renderd128-")  # upper case is lossy: a hash suffix


# --------------------------------------------------------------------------- allocate

CORAL = Resource(
    name="edgefd.io/coral-usb",
    usb=(UsbMatch("1a6e", "089a", "boot"), UsbMatch("18d1", "9302", "runtime")),
    env=(("EDGETPU", "1"),),
)


def _dev(name: str, node: str = "/dev/x", bus: str = "usb", place: str = "1-1") -> Device:
    return Device(name, DeviceKey(bus, place), "m", "m", nodes=(DevNode(node, None),))


USB_DEV = _dev("coral-usb-1-1-3", "/dev/bus/usb/001/004", "usb", "1-1.3")
PCI_DEV = _dev("coral-pcie-0000-02-00-0", "/dev/apex_0", "pci", "0000:02:00.0")
LINKS = LinkLayout("/var/lib/kubelet/device-plugins/edgefd-links")


def test_usb_allocate_uses_links_alias_and_bus_mount() -> None:
    r = container_response(CORAL, [USB_DEV], LINKS)
    assert [(d.container_path, d.host_path, d.permissions) for d in r.devices] == [
        (
            "/dev/edgefd/coral-usb-1-1-3",
            "/var/lib/kubelet/device-plugins/edgefd-links/edgefd.io_coral-usb/coral-usb-1-1-3/0",
            "rw",
        )
    ]
    assert [(m.container_path, m.host_path, m.read_only) for m in r.mounts] == [
        ("/dev/bus/usb", "/dev/bus/usb", True)
    ]
    assert dict(r.envs) == {"EDGETPU": "1", "EDGEFD_CORAL_USB_DEVICES": "coral-usb-1-1-3"}
    assert list(r.cdi_devices) == []


def test_allocate_without_links_or_mount_gives_the_raw_node() -> None:
    res = Resource(name="edgefd.io/coral-usb", usb=CORAL.usb, usb_bus_mount=False)
    r = container_response(res, [USB_DEV], LinkLayout(None))
    assert [(d.container_path, d.host_path) for d in r.devices] == [
        ("/dev/bus/usb/001/004", "/dev/bus/usb/001/004")
    ]
    assert list(r.mounts) == []


def test_pci_allocate_keeps_node_name_and_adds_cdi() -> None:
    res = parse_config(
        _cfg(
            {
                "name": "edgefd.io/coral-pcie",
                "accelerator": "coral-pcie",
                "mounts": [{"host_path": "/usr/lib/edgetpu", "read_only": False}],
            }
        ),
        "x",
    ).resources[0]
    r = container_response(res, [PCI_DEV], LINKS, cdi_prefix="edgefd.io")
    assert [(d.container_path, d.host_path) for d in r.devices] == [
        (
            "/dev/apex_0",
            "/var/lib/kubelet/device-plugins/edgefd-links/edgefd.io_coral-pcie/"
            "coral-pcie-0000-02-00-0/0",
        )
    ]
    assert [c.name for c in r.cdi_devices] == ["edgefd.io/coral-pcie=coral-pcie-0000-02-00-0"]
    assert [(m.host_path, m.read_only) for m in r.mounts] == [("/usr/lib/edgetpu", False)]
    assert r.envs["EDGEFD_CORAL_PCIE_DEVICES"] == "coral-pcie-0000-02-00-0"
    assert cdi_name("vendor.com/tpu", res, "x") == "vendor.com/tpu=x"


def test_resolve_folds_replicas_and_refuses_unknown_ids() -> None:
    adv = Advertised.build([USB_DEV, PCI_DEV], 2)
    devs = resolve(["coral-usb-1-1-3-r1", "coral-usb-1-1-3-r0"], adv.by_kubelet_id)
    assert devs == [USB_DEV]
    with pytest.raises(UnknownDevice) as e:
        resolve(["coral-usb-9-9"], adv.by_kubelet_id)
    assert "unknown device ID(s) coral-usb-9-9" in str(e.value)
    assert "coral-pcie-0000-02-00-0-r0" in str(e.value)


def test_preferred_allocation_spreads_over_devices() -> None:
    devs = [_dev("a"), _dev("b"), _dev("c")]
    adv = Advertised.build(devs, 2)
    ids = sorted(adv.by_kubelet_id)
    assert preferred(ids, [], 3, adv.by_kubelet_id) == ["a-r0", "b-r0", "c-r0"]
    # a-r0 and b-r0 are in use elsewhere: c is idle, so it comes first
    avail = [i for i in ids if i not in ("a-r0", "b-r0")]
    assert preferred(avail, [], 2, adv.by_kubelet_id) == ["c-r0", "a-r1"]
    # must_include is kept and counts as load on its device
    assert preferred(ids, ["a-r1"], 2, adv.by_kubelet_id) == ["a-r1", "b-r0"]
    assert preferred(["a-r0"], [], 5, adv.by_kubelet_id) == ["a-r0"]


# --------------------------------------------------------------------------- the proto


def _fields(msg: type) -> dict[str, tuple[int, str]]:
    return {f.name: (f.number, f.json_name) for f in msg.DESCRIPTOR.fields}


def test_proto_field_numbers_match_the_kubelet_api() -> None:
    """The numbers and names the kubelet puts on the wire (REFERENCE §7)."""
    expect = {
        pb.DevicePluginOptions: {"pre_start_required": 1, "get_preferred_allocation_available": 2},
        pb.RegisterRequest: {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
        pb.ListAndWatchResponse: {"devices": 1},
        pb.Device: {"ID": 1, "health": 2, "topology": 3},
        pb.TopologyInfo: {"nodes": 1},
        pb.NUMANode: {"ID": 1},
        pb.ContainerPreferredAllocationRequest: {
            "available_deviceIDs": 1,
            "must_include_deviceIDs": 2,
            "allocation_size": 3,
        },
        pb.PreferredAllocationRequest: {"container_requests": 1},
        pb.PreferredAllocationResponse: {"container_responses": 1},
        pb.ContainerPreferredAllocationResponse: {"deviceIDs": 1},
        pb.AllocateRequest: {"container_requests": 1},
        pb.ContainerAllocateRequest: {"devices_ids": 1},
        pb.AllocateResponse: {"container_responses": 1},
        pb.ContainerAllocateResponse: {
            "envs": 1,
            "mounts": 2,
            "devices": 3,
            "annotations": 4,
            "cdi_devices": 5,
        },
        pb.Mount: {"container_path": 1, "host_path": 2, "read_only": 3},
        pb.DeviceSpec: {"container_path": 1, "host_path": 2, "permissions": 3},
        pb.CDIDevice: {"name": 1},
        pb.PreStartContainerRequest: {"devices_ids": 1},
    }
    for msg, fields in expect.items():
        assert {k: v[0] for k, v in _fields(msg).items()} == fields, msg.__name__
    assert pb.DESCRIPTOR.package == "v1beta1"
    svc = pb.DESCRIPTOR.services_by_name["DevicePlugin"]
    assert [m.name for m in svc.methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
    law = svc.methods_by_name["ListAndWatch"]
    assert law.server_streaming and not law.client_streaming
    assert not svc.methods_by_name["Allocate"].server_streaming
    assert [m.name for m in pb.DESCRIPTOR.services_by_name["Registration"].methods] == ["Register"]


def test_proto_wire_bytes() -> None:
    """Hand-encoded bytes, as the kubelet's Go code would write them, decode as expected."""
    # Device{ID:"a", health:"Healthy", topology{nodes{ID:1}}}
    raw = b"\x0a\x01a\x12\x07Healthy\x1a\x04\x0a\x02\x08\x01"
    d = pb.Device.FromString(raw)
    assert (d.ID, d.health, d.topology.nodes[0].ID) == ("a", "Healthy", 1)
    assert d.SerializeToString() == raw
    # ContainerAllocateResponse{cdi_devices{name:"v/c=x"}, devices{host_path:"/h"}}
    r = pb.ContainerAllocateResponse(
        devices=[pb.DeviceSpec(host_path="/h")], cdi_devices=[pb.CDIDevice(name="v/c=x")]
    )
    assert r.SerializeToString() == b"\x1a\x04\x12\x02/h" + b"\x2a\x07\x0a\x05v/c=x"
    rt = pb.AllocateResponse(container_responses=[r])
    assert pb.AllocateResponse.FromString(rt.SerializeToString()) == rt


def test_default_config_round_trips_through_yaml(tmp_path: Path) -> None:
    cfg = default_config()
    doc = {
        "resources": [
            {
                "name": r.name,
                "usb": [
                    {"vendor": m.vendor, "product": m.product, "state": m.state} for m in r.usb
                ],
                "pci": [{"vendor": m.vendor, "device": m.device} for m in r.pci],
                "dev_globs": list(r.dev_globs),
                "accelerator": r.accelerator,
            }
            for r in cfg.resources
        ]
    }
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert load_config(p).resources == cfg.resources


# --------------------------------------------------------------------------- numbers and fuzz


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        ("forget_after", ".nan", "forget_after: nan is not a finite duration"),
        ("forget_after", ".inf", "forget_after: inf is not a finite duration"),
        ("forget_after", "-.inf", "forget_after: -inf is not a finite duration"),
        ("forget_after", "1.0e+400", "forget_after: inf is not a finite duration"),
        ("forget_after", "1e400", "forget_after: '1e400' is not a duration (e.g. 30, 30s, 10m"),
        ("forget_after", "-1", "forget_after: -1 is out of range (must be 0 to 315360000)"),
        ("forget_after", "4.0e+8", "forget_after: 400000000.0 is out of range"),
        ("forget_after", "87601h", "forget_after: '87601h' is out of range"),
        ("forget_after", "-10m", "forget_after: '-10m' is not a duration"),
        ("forget_after", "10d", "forget_after: '10d' is not a duration"),
        ("forget_after", "true", "forget_after: True is not a duration"),
        ("replicas", ".nan", "replicas: must be a whole number, not nan"),
        ("replicas", "1.5", "replicas: must be a whole number, not 1.5"),
        ("replicas", "1.0e+400", "replicas: must be a whole number, not inf"),
        ("replicas", "-1", "replicas: -1 is out of range (must be 1 to 1000)"),
        ("replicas", "1001", "replicas: 1001 is out of range (must be 1 to 1000)"),
        ("replicas", "99999999999999999999999", "replicas: 99999999999999999999999 is out of"),
    ],
)
def test_bad_numbers_in_the_yaml_are_refused(
    tmp_path: Path, field: str, text: str, message: str
) -> None:
    """Issue 11 item 8: `.nan`/`.inf` durations were accepted and spun a core."""
    cfg = tmp_path / "resources.yaml"
    if field == "forget_after":
        cfg.write_text(
            f"forget_after: {text}\nresources: [{{name: edgefd.io/a, accelerator: ncs2}}]\n"
        )
    else:
        cfg.write_text(f"resources: [{{name: edgefd.io/a, accelerator: ncs2, replicas: {text}}}]\n")
    with pytest.raises(BadInput) as e:
        load_config(cfg)
    assert str(e.value).startswith(f"{cfg}: ") and message in str(e.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("86400", 86400.0),
        ("'60'", 60.0),
        ("24h", 86400.0),
        ("10m", 600.0),
        ("30s", 30.0),
        ("1500ms", 1.5),
        ("0", 0.0),
        ("2.5h", 9000.0),
    ],
)
def test_forget_after_takes_the_flags_durations(tmp_path: Path, text: str, seconds: float) -> None:
    """Issue 25 item 8: `forget_after: 86400` was bare seconds where every flag takes `10m`."""
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(f"forget_after: {text}\nresources: [{{name: edgefd.io/a, accelerator: ncs2}}]\n")
    assert load_config(cfg).forget_after == seconds


# Hypothesis: any document the YAML loader can produce is either a valid configuration or
# one BadInput naming the file; nothing else escapes (a TypeError would be exit 70).
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(
        [
            "1a6e",
            "089a",
            "0x1ac1",
            "boot",
            "runtime",
            "port",
            "serial",
            "edgefd.io/x",
            "/dev/apex_*",
            "coral-usb",
            "ncs2",
            "/opt/x",
            "EXTRA",
        ]
    ),
)
_ANY = st.recursive(
    _SCALARS,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(_SCALARS, c, max_size=3),
    max_leaves=8,
)
_HEXISH = st.one_of(st.sampled_from(["1a6e", "089a", "03e7", "0x1AC1", "12", "zzzz"]), _SCALARS)
_USB = st.fixed_dictionaries(
    {}, optional={"vendor": _HEXISH, "product": _HEXISH, "state": _SCALARS, "x": _SCALARS}
)
_PCI = st.fixed_dictionaries({}, optional={"vendor": _HEXISH, "device": _HEXISH, "class": _HEXISH})
_MOUNT = st.fixed_dictionaries(
    {}, optional={"host_path": _SCALARS, "container_path": _SCALARS, "read_only": _SCALARS}
)
_RESOURCE = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(
            st.sampled_from(["edgefd.io/a", "edgefd.io/b", "x/y", "kubernetes.io/a"]), _SCALARS
        ),
        "accelerator": st.one_of(st.sampled_from(["coral-usb", "ncs2", "hailo", "nope"]), _SCALARS),
        "usb": st.one_of(st.lists(st.one_of(_USB, _ANY), max_size=2), _ANY),
        "pci": st.one_of(st.lists(st.one_of(_PCI, _ANY), max_size=2), _ANY),
        "dev_globs": st.one_of(st.lists(_SCALARS, max_size=2), _ANY),
        "id_from": _SCALARS,
        "replicas": _SCALARS,
        "usb_bus_mount": _SCALARS,
        "env": st.one_of(st.dictionaries(_SCALARS, _ANY, max_size=2), _ANY),
        "mounts": st.one_of(st.lists(st.one_of(_MOUNT, _ANY), max_size=2), _ANY),
    },
)
_DOC = st.one_of(
    _ANY,
    st.fixed_dictionaries(
        {},
        optional={
            "resources": st.one_of(st.lists(st.one_of(_RESOURCE, _ANY), max_size=3), _ANY),
            "forget_after": _SCALARS,
        },
    ),
)
_FUZZ = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def _check_config_or_refusal(doc: object) -> None:
    import math

    from edgefd.inventory.resources import MAX_FORGET_AFTER, MAX_REPLICAS

    try:
        cfg = parse_config(doc, "resources.yaml")
    except BadInput as e:
        assert str(e).startswith("resources.yaml: "), str(e)
        return
    assert math.isfinite(cfg.forget_after) and 0 <= cfg.forget_after <= MAX_FORGET_AFTER
    names = [r.name for r in cfg.resources]
    assert len(set(names)) == len(names)
    for r in cfg.resources:
        assert check_resource_name(r.name) is None
        assert isinstance(r.replicas, int) and 1 <= r.replicas <= MAX_REPLICAS
        assert r.usb or r.pci or r.dev_globs or r.accelerator or r.kind
        assert r.id_from in ("port", "serial")
        assert all(re.fullmatch("[0-9a-f]{4}", u.vendor) for u in r.usb)
        assert all(re.fullmatch("[0-9a-f]{4}", u.product) for u in r.usb)
        assert all(u.state in ("", "boot", "runtime") for u in r.usb)
        assert all(g.startswith("/dev/") for g in r.dev_globs)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in r.env)
        assert all(m.host_path.startswith("/") for m in r.mounts)


@_FUZZ
@given(doc=_DOC)
def test_fuzz_resources_documents(doc: object) -> None:
    _check_config_or_refusal(doc)


@_FUZZ
@given(
    forget=st.sampled_from(
        [
            ".nan",
            ".inf",
            "-.inf",
            "1e400",
            "0x1F",
            "0o17",
            "1_000",
            "~",
            "2001-12-14",
            "!!binary aGk=",
            "[1]",
            "{a: 1}",
            "'5'",
            "yes",
            "60",
        ]
    ),
    replicas=st.one_of(
        st.sampled_from([".nan", "1.0", "2", "0x2", "1e3", "!!str 2", "null"]),
        st.text(alphabet=" -.:#!&*[]{}01eEn", max_size=6),
    ),
)
def test_fuzz_resources_yaml_text(forget: str, replicas: str) -> None:
    from edgefd.core.schema import parse_yaml

    text = (
        f"forget_after: {forget}\n"
        f"resources:\n  - name: edgefd.io/a\n    accelerator: ncs2\n    replicas: {replicas}\n"
    )
    try:
        doc = parse_yaml(text, "resources.yaml")
    except BadInput as e:
        assert str(e).startswith("resources.yaml: not valid YAML")
        return
    _check_config_or_refusal(doc)
