"""The one device name: `<model>-<place as DNS label>`, the same in every API."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from edgefd.bus.key import DeviceKey
from edgefd.inventory.naming import (
    DOMAIN,
    MAX_NAME,
    container_path,
    device_name,
    fit_label,
    names_device,
    qualified,
    replica_ids,
)

LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize(
    ("model", "key", "serial", "name"),
    [
        ("coral-usb", DeviceKey("usb", "1-1.3"), None, "coral-usb-1-1-3"),
        ("ncs2", DeviceKey("usb", "1-1.1"), None, "ncs2-1-1-1"),
        ("coral-pcie", DeviceKey("pci", "0000:02:00.0"), None, "coral-pcie-0000-02-00-0"),
        ("hailo8", DeviceKey("pci", "0000:03:00.0"), None, "hailo8-0000-03-00-0"),
        ("hailo", DeviceKey("dev", "/dev/hailo0"), None, "hailo-hailo0"),
        ("dri", DeviceKey("dev", "/dev/dri/card0"), None, "dri-dri-card0"),
        ("ncs2", DeviceKey("usb", "1-1.1"), "03e72485", "ncs2-sn-03e72485"),
    ],
)
def test_names(model: str, key: DeviceKey, serial: str | None, name: str) -> None:
    assert device_name(model, key, serial) == name


def test_lossy_or_long_names_get_a_hash_and_stay_distinct() -> None:
    a = device_name("ncs2", DeviceKey("usb", "1-1"), "ABC")
    b = device_name("ncs2", DeviceKey("usb", "1-1"), "abc")
    assert b == "ncs2-sn-abc" and a != b and a.startswith("ncs2-sn-abc-")
    upper = device_name("dri", DeviceKey("dev", "/dev/dri/renderD128"))
    assert upper.startswith("dri-dri-renderd128-") and len(upper) == len("dri-dri-renderd128-") + 8
    long = device_name("x" * 80, DeviceKey("usb", "1-1"))
    assert len(long) == MAX_NAME and long == device_name("x" * 80, DeviceKey("usb", "1-1"))
    for n in (a, upper, long, fit_label("--"), fit_label("é")):
        assert LABEL.fullmatch(n), n
    assert fit_label("coral-usb-2-1-r0", 10) != fit_label("coral-usb-2-1-r1", 10)


def test_names_that_need_no_regex_and_those_that_do_agree_with_the_rule() -> None:
    # nothing left: "device" and a hash of what it was
    assert fit_label("").startswith("device-") and fit_label("-").startswith("device-")
    assert fit_label("a-b") == "a-b" and fit_label("-a") != "-a" and fit_label("a" * 64) != "a" * 64
    assert fit_label("usb-1-\udcff").startswith("usb-1-")  # undecodable bytes from sysfs


def test_replica_ids_fit_the_limit_and_name_their_device() -> None:
    assert replica_ids("coral-usb-1-1-3", 1) == ["coral-usb-1-1-3"]
    assert replica_ids("coral-usb-1-1-3", 2) == ["coral-usb-1-1-3-r0", "coral-usb-1-1-3-r1"]
    ids = replica_ids("x" * MAX_NAME, 12)
    assert all(len(i) <= MAX_NAME for i in ids) and len(set(ids)) == 12
    # parsed back whatever the number of replicas now: a pod keeps its ID across a change
    assert all(names_device(i, "x" * MAX_NAME) for i in ids)
    assert names_device("coral-usb-1-1-3", "coral-usb-1-1-3")
    assert names_device("coral-usb-1-1-3-r7", "coral-usb-1-1-3")
    for other in ("coral-usb-1-1-3-rx", "coral-usb-1-1-3-r", "coral-usb-1-1-3-r01",
                  "coral-usb-1-1-4-r0", "coral-usb-1-1-3-r١", "-r0"):  # fmt: skip
        assert not names_device(other, "coral-usb-1-1-3"), other


def test_the_domain_and_the_container_path_are_spelled_here_only() -> None:
    assert DOMAIN == "edgefd.io" and qualified("coral-usb") == "edgefd.io/coral-usb"
    assert container_path("coral-usb-2-1") == "/dev/edgefd/coral-usb-2-1"
    assert container_path("coral-usb-2-1", 1) == "/dev/edgefd/coral-usb-2-1.1"


IDENTITY = ("edgefd.io", "/dev/edgefd", "-r{")  # the domain, the container dir, the replica suffix


def _spelled(path: Path) -> list[str]:
    """The string literals of one module (f-string parts included) that spell a piece of the
    identity vocabulary, docstrings aside (they may say what a name looks like)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            text = node.value
        else:
            continue
        found += [f"{path}:{node.lineno}: {piece}" for piece in IDENTITY if piece in text]
    return found


def test_identity_is_spelled_in_naming_only() -> None:
    """Processes agree on a device by calling naming.py, not by spelling the same string: a
    name, a path or a suffix written anywhere else would break silently on the next change."""
    tools = Path(__file__).resolve().parents[2] / "tools"
    found = [
        hit
        for path in sorted(tools.rglob("*.py"))
        if path.name != "naming.py" and not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
        for hit in _spelled(path)
    ]
    assert found == []
