"""What edgefd serves, by name: its resources and kinds from the accelerator catalogue (the
one source the scanners and devplugin use too), and how a node's labels, a DeviceClass and a
resource name map onto a kind. So `why` can say "a Coral USB" and "did you mean
edgefd.io/coral-usb", and can tell "the node has one but serves none" from "no node has one".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgefd.bus.catalogue import load_catalogue

from .podspec import RESOURCE_PREFIX, count, labels, name_of

DRA_CLASS_SUFFIX = "." + RESOURCE_PREFIX.rstrip("/")  # edgetpu.edgefd.io
RESOURCE_CLASS_SUFFIX = ".resource" + DRA_CLASS_SUFFIX  # coral-usb.resource.edgefd.io


@dataclass(frozen=True)
class Known:
    resources: dict[str, tuple[str, str]]  # resource -> (kind, the accelerator's name)
    models: dict[str, str]  # catalogue id (the `model` attribute) -> kind

    def kind_of_resource(self, resource: str) -> str | None:
        found = self.resources.get(resource)
        return found[0] if found else None

    def name_of_resource(self, resource: str) -> str:
        found = self.resources.get(resource)
        return found[1] if found else resource

    def kind_of_class(self, cls: dict[str, Any]) -> str | None:
        """The kind a DeviceClass of edgefd's takes: `<kind>.edgefd.io`, or the kind of the
        model of `<model>.resource.edgefd.io`; None for another's class."""
        name = name_of(cls)
        if name.endswith(RESOURCE_CLASS_SUFFIX):
            return self.models.get(name[: -len(RESOURCE_CLASS_SUFFIX)])
        if name.endswith(DRA_CLASS_SUFFIX):
            kind = name[: -len(DRA_CLASS_SUFFIX)]
            return kind if kind in self.models.values() else None
        return None


def known() -> Known:
    cat = load_catalogue()
    return Known(
        {a.resource: (a.kind, a.name) for a in cat.accelerators if a.resource},
        {a.id: a.kind for a in cat.accelerators},
    )


def kind_count(node: dict[str, Any], kind: str) -> int:
    """How many devices of `kind` the node's capability labels say it has (0: none)."""
    have = labels(node)
    n = count(have.get(f"{RESOURCE_PREFIX}{kind}.count", "0"))
    if n == 0 and have.get(f"{RESOURCE_PREFIX}{kind}.present") == "true":
        return 1
    return n


def is_edgefd_class(cls: dict[str, Any]) -> bool:
    """A DeviceClass that takes edgefd's devices: named in its domain, or pinning its driver."""
    if name_of(cls).endswith(DRA_CLASS_SUFFIX):
        return True
    driver = '"' + RESOURCE_PREFIX.rstrip("/") + '"'
    return any(driver in (s.get("cel") or {}).get("expression", "") for s in class_selectors(cls))


def class_selectors(cls: dict[str, Any]) -> list[dict[str, Any]]:
    return list((cls.get("spec") or {}).get("selectors") or ())


def expressions(selectors: list[dict[str, Any]]) -> list[str]:
    return [str((s.get("cel") or {}).get("expression") or "") for s in selectors if s.get("cel")]
