"""What edgefd serves, by name, from the catalogue."""

from __future__ import annotations

from edgefd.kubectl_edgefd.known import is_edgefd_class, kind_count

from .objects import KNOWN, edgetpu_class, node


def test_resources_and_classes_map_to_kinds() -> None:
    assert KNOWN.kind_of_resource("edgefd.io/coral-usb") == "edgetpu"
    assert KNOWN.kind_of_resource("edgefd.io/ncs2") == "myriadx"
    assert KNOWN.kind_of_resource("example.com/x") is None
    assert KNOWN.name_of_resource("edgefd.io/coral-usb") == "Google Coral USB Accelerator"
    assert KNOWN.kind_of_class({"metadata": {"name": "edgetpu.edgefd.io"}}) == "edgetpu"
    assert KNOWN.kind_of_class({"metadata": {"name": "ncs2.resource.edgefd.io"}}) == "myriadx"
    assert KNOWN.kind_of_class({"metadata": {"name": "gpu.nvidia.com"}}) is None


def test_edgefd_classes_by_name_or_by_driver() -> None:
    assert is_edgefd_class(edgetpu_class())
    renamed = edgetpu_class()
    renamed["metadata"]["name"] = "my-tpus"
    assert is_edgefd_class(renamed)
    other = {
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
    }
    assert not is_edgefd_class(other)


def test_kind_count_from_the_capability_labels() -> None:
    assert kind_count(node("n", {"edgefd.io/edgetpu.count": "2"}), "edgetpu") == 2
    assert kind_count(node("n", {"edgefd.io/edgetpu.present": "true"}), "edgetpu") == 1
    assert kind_count(node("n", {}), "edgetpu") == 0
