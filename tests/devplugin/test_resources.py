"""The resources configuration (edgefd.devplugin.resources), which the device plugin serves
and device-keeper follows: the default one (one resource per catalogue model), a bad document
refused as one BadInput naming the file and the field, numbers and durations that are not
finite or out of range, a fuzz of what the YAML loader can produce (a valid configuration or
one BadInput, nothing else), and its values as its consumers read them: how long an absent
device is remembered (`forget_after: 0` is for ever), and where a device's node appears in a
container (a USB device's under /dev/edgefd beside the host's bus, anything else under its
own name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgefd.bus.key import DeviceKey, DevNode
from edgefd.core.errors import BadInput
from edgefd.devplugin.resources import (
    MAX_LIST,
    MAX_RESOURCES,
    Config,
    Resource,
    check_resource_name,
    default_config,
    load_config,
    parse_config,
)
from edgefd.inventory.device import Device
from edgefd.inventory.temperature import TemperatureLimit

CORAL = Device(
    "coral-usb-2-1",
    DeviceKey("usb", "2-1"),
    "coral-usb",
    "edgetpu",
    nodes=(DevNode("/dev/bus/usb/002/002", "189:129"),),
)
APEX = Device(
    "coral-pcie-0000-02-00-0",
    DeviceKey("pci", "0000:02:00.0"),
    "coral-pcie",
    "edgetpu",
    nodes=(DevNode("/dev/apex_0", "120:0"),),
)


def test_an_absent_device_is_remembered_for_forget_after_and_zero_is_for_ever() -> None:
    assert Config().memory == 86400.0
    assert parse_config({"forget_after": "10m"}, "test").memory == 600.0
    assert parse_config({"forget_after": 0}, "test").memory is None


def test_where_a_devices_nodes_appear_in_a_container() -> None:
    usb = Resource("edgefd.io/coral-usb", accelerator="coral-usb")
    assert usb.bus_mount(CORAL) and not usb.bus_mount(APEX)
    assert usb.container_path(CORAL, 0, "/dev/bus/usb/002/002") == "/dev/edgefd/coral-usb-2-1"
    assert usb.container_path(CORAL, 1, "/dev/bus/usb/002/003") == "/dev/edgefd/coral-usb-2-1.1"
    assert usb.container_path(APEX, 0, "/dev/apex_0") == "/dev/apex_0"
    unmounted = Resource("edgefd.io/coral-usb", accelerator="coral-usb", usb_bus_mount=False)
    assert unmounted.container_path(CORAL, 0, "/dev/bus/usb/002/002") == "/dev/bus/usb/002/002"


# --------------------------------------------------------------------------- configuration


def test_default_config_comes_from_the_catalogue() -> None:
    """One resource per catalogue model, selecting the model: its IDs (both life stages of
    a Coral USB), globs and env stay in the catalogue, resolved when the inventory matches."""
    by = default_config().by_name()
    coral = by["edgefd.io/coral-usb"]
    assert (coral.accelerator, coral.usb, coral.pci, coral.dev_globs) == ("coral-usb", (), (), ())
    assert by["edgefd.io/coral-pcie"].selector.accelerator == "coral-pcie"
    assert [r.accelerator for r in by.values()] == ["coral-usb", "coral-pcie", "ncs2", "ncs1",
                                                   "hailo8", "hailo10h", "intel-npu",
                                                   "rockchip-npu"]  # fmt: skip


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
        (
            _cfg({**GOOD, "mounts": [{"host_path": "/"}]}),
            "resources[0].mounts[0].host_path: '/' reaches /proc: every pod given the resource "
            "would get it, which can take the node; refused unless the mount says "
            "allow_sensitive: true",
        ),
        (
            _cfg({**GOOD, "mounts": [{"host_path": "/dev/mem", "read_only": True}]}),
            "resources[0].mounts[0].host_path: '/dev/mem' is /dev/mem: every pod",
        ),
        (
            _cfg({**GOOD, "mounts": [{"host_path": "/opt/../proc//1"}]}),
            "host_path: '/opt/../proc//1' reaches /proc",
        ),
        (
            _cfg({**GOOD, "mounts": [{"host_path": "/run"}]}),
            "host_path: '/run' reaches /run/containerd",
        ),
        (
            _cfg({**GOOD, "mounts": [{"host_path": "/run/containerd/containerd.sock"}]}),
            "reaches /run/containerd",
        ),
        (
            _cfg({**GOOD, "mounts": [{"host_path": "/sys", "allow_sensitive": "yes"}]}),
            "resources[0].mounts[0].allow_sensitive: must be",
        ),
        (
            _cfg({**GOOD, "temperature": {"limit": "hot"}}),
            "resources[0].temperature.limit: 'hot' must be degrees Celsius (80, 82.5 or 80C)",
        ),
        (
            _cfg({**GOOD, "temperature": {"limit": 30, "hysteresis": 30}}),
            "resources[0].temperature.hysteresis: 30 °C must be less than the limit 30 °C",
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


def test_the_number_of_resources_and_of_their_entries_is_bounded() -> None:
    """Issue 30 item 8: 14,000 resources (a valid 1 MiB ConfigMap) took 345 MiB and 3,741
    threads; each resource is a server and a thread, so their number has a limit, said as any
    other configuration error, before anything is built."""
    many = [{"name": f"edgefd.io/r{i}", "kind": "edgetpu"} for i in range(MAX_RESOURCES)]
    assert len(parse_config({"resources": many}, "resources.yaml").resources) == MAX_RESOURCES
    with pytest.raises(BadInput) as e:
        parse_config({"resources": [*many, many[0]] * 200}, "resources.yaml")
    assert str(e.value) == (
        f"resources.yaml: resources: {(MAX_RESOURCES + 1) * 200} resources (each is a server"
        f" and a thread of its own), at most {MAX_RESOURCES}"
    )
    usb = [{"vendor": "1a6e", "product": f"{i:04x}"} for i in range(MAX_LIST + 1)]
    with pytest.raises(BadInput, match=rf"resources\[0\].usb: {MAX_LIST + 1} entries, at most"):
        parse_config(_cfg({**GOOD, "usb": usb}), "resources.yaml")
    env = {f"V{i}": "x" for i in range(MAX_LIST + 1)}
    with pytest.raises(BadInput, match=rf"resources\[0\].env: {MAX_LIST + 1} entries, at most"):
        parse_config(_cfg({**GOOD, "env": env}), "resources.yaml")
    assert len(default_config().resources) <= MAX_RESOURCES  # the catalogue's fits


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
    with pytest.raises(BadInput, match=r"bad.yaml:2:1: did not find expected node content$"):
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


def test_the_default_configuration_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        assert load_config(None).serves_nothing() is None
    assert caplog.text == ""


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


def test_temperature_settings_per_resource_from_yaml(tmp_path: Path) -> None:
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(
        "resources:\n"
        "- {accelerator: coral-pcie, temperature: {limit: 80C, hysteresis: 3}}\n"
        "- {name: edgefd.io/tpu, kind: edgetpu, temperature: false}\n"
        "- {name: edgefd.io/ncs, accelerator: ncs2}\n"
    )
    got = load_config(cfg).temperature
    assert got == {
        "edgefd.io/coral-pcie": TemperatureLimit(80.0, 3.0),
        "edgefd.io/tpu": TemperatureLimit(enabled=False),
        "edgefd.io/ncs": TemperatureLimit(),  # the driver's limit, 5 °C: for whoever has one
    }
    assert default_config().temperature["edgefd.io/coral-pcie"] == TemperatureLimit()


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

    from edgefd.devplugin.resources import MAX_FORGET_AFTER, MAX_REPLICAS

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
        assert str(e).startswith("resources.yaml:") and "\n" not in str(e)
        return
    _check_config_or_refusal(doc)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"accelerator": "coarl-usb"},
            "resources[0].accelerator: 'coarl-usb' is not in the accelerator catalogue (its ids: "
            "coral-pcie, coral-usb, hailo10h, hailo8, intel-npu, ncs1, ncs2, rockchip-npu)",
        ),
        (
            {"kind": "tpu"},
            "resources[0].kind: 'tpu' is no kind of the accelerator catalogue (its kinds: "
            "edgetpu, hailo, myriad2, myriadx, npu)",
        ),
    ],
)
def test_an_unknown_catalogue_id_or_kind_lists_the_valid_ones(
    entry: dict[str, str], message: str
) -> None:
    """Issue 32 item 9: a typo is answered with what would have been right."""
    with pytest.raises(BadInput) as e:
        parse_config({"resources": [{"name": "edgefd.io/a", **entry}]}, "r.yaml")
    assert str(e.value) == f"r.yaml: {message}"


def test_a_sensitive_mount_is_taken_when_the_config_says_so_and_ordinary_ones_always() -> None:
    """Issue 46 item 7: the explicit allow, and paths that only look close (/procfs, /opt)."""
    doc = _cfg(
        {
            **GOOD,
            "mounts": [
                {"host_path": "/sys/class/apex", "allow_sensitive": True},
                {"host_path": "/procfs-data"},
                {"host_path": "/opt/edgetpu", "container_path": "/usr/lib/edgetpu"},
            ],
        }
    )
    [res] = parse_config(doc, "resources.yaml").resources
    assert [m.host_path for m in res.mounts] == ["/sys/class/apex", "/procfs-data", "/opt/edgetpu"]


def test_the_configmap_itself_is_told_apart_from_its_file() -> None:
    """Issue 45 item 7: `devplugin --config k8s/configmap.yaml` said `apiVersion: unknown
    field`; now what the file is and which key holds the configuration."""
    from edgefd.core.schema import read_yaml
    from tests.devplugin.command import ROOT

    doc = read_yaml(ROOT / "k8s" / "configmap.yaml", "configuration")
    with pytest.raises(BadInput) as e:
        parse_config(doc, "k8s/configmap.yaml")
    assert str(e.value).startswith(
        "k8s/configmap.yaml: a Kubernetes ConfigMap, not the resources configuration: pass the "
        "file one of its data keys holds (resources.yaml)"
    )
