"""The one vocabulary of a device's identity, written here once and imported everywhere else:
the domain edgefd names things in, the device name, the kubelet IDs of a shared device, and the
path a container finds the device at. Processes that agree on a device (the scanners, the
device plugin, DRA, CDI, device-keeper) agree because they call these functions, not because
they each spell the same string.

The device name is the same in every API: the kubelet device ID, the DRA device name, the CDI
device name, the link directory, the container path and what `EDGEFD_<RESOURCE>_DEVICES` lists.
`<model>-<place>` as a DNS label: `coral-usb-1-1-3` (a Coral USB at port 1-1.3),
`ncs2-1-1-1`, `coral-pcie-0000-02-00-0`, `hailo8-0000-03-00-0`; a bare /dev node a resource's
glob matched is `<resource>-<path below /dev>` (`dri-card0`); a device identified by its serial
(`id_from: serial`) is `<model>-sn-<serial>`. The model is part of the name because it is part
of the identity: a Coral plugged into the port an NCS2 left is another device, and nothing
prepared for the NCS2 may ever be pointed at it.
"""

from __future__ import annotations

import re

from edgefd.bus.key import DeviceKey

# The domain: the DRA driver and its pool's taint key, the CDI vendor, the capability labels'
# namespace, the default resources' domain, the sink's annotation and Events.
DOMAIN = "edgefd.io"
# Where a container finds a device whose node the runtime cannot place under its own name (a
# USB device: its /dev/bus/usb path is the host's live view, see devplugin/container.py).
CONTAINER_DIR = "/dev/edgefd"
MAX_NAME = 63  # a DNS label, what DRA requires of a device name

_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
# they only separate numbers and path parts, so turning them into '-' loses nothing
_SEPARATORS = str.maketrans({".": "-", ":": "-", "/": "-"})
_REPLICA_SUFFIX = "-r"


def fit_label(raw: str, limit: int = MAX_NAME) -> str:
    """`raw` as a DNS label of at most `limit` characters. Separators become '-'; a name that
    loses anything else (upper case, other characters) or is too long keeps a readable head
    and ends in a hash of the whole `raw`, so names stay distinct and stable."""
    dashed = raw.translate(_SEPARATORS)
    if 0 < len(dashed) <= limit and _LABEL_CHARS.issuperset(dashed) and dashed.strip("-") == dashed:
        return dashed  # the common case, checked without a regex
    label = re.sub(r"[^a-z0-9-]+", "-", dashed.lower()).strip("-") or "device"
    if label == dashed and len(label) <= limit:
        return label
    import hashlib  # lazy: most names need no hash, and it costs a start-up

    suffix = hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return label[: limit - len(suffix) - 1].rstrip("-") + "-" + suffix


def device_name(model: str, key: DeviceKey, serial: str | None = None) -> str:
    """The name of the device of `model` at `key` (or with `serial`, wherever it is)."""
    if serial:
        place = "sn-" + serial
    elif key.bus == "dev":
        place = key.place.removeprefix("/dev/")
    else:
        place = key.place
    return fit_label(f"{model}-{place}")


def qualified(name: str) -> str:
    """`edgefd.io/<name>`: a resource, a label or an annotation in edgefd's domain."""
    return f"{DOMAIN}/{name}"


def replica_id(name: str, k: int) -> str:
    """The `k`-th kubelet ID of a device shared `replicas` times: `<name>-r<k>`, the name cut
    (with a hash, see fit_label) so that the ID is still a DNS label."""
    suffix = f"{_REPLICA_SUFFIX}{k}"
    return fit_label(name, MAX_NAME - len(suffix)) + suffix


def replica_ids(name: str, replicas: int) -> list[str]:
    """The IDs the kubelet sees for one device: its name, or `<name>-r0` ... `<name>-r<n-1>`."""
    if replicas <= 1:
        return [name]
    return [replica_id(name, k) for k in range(replicas)]


def names_device(device_id: str, name: str) -> bool:
    """Whether kubelet device ID `device_id` is device `name`, itself or one of its replicas,
    however many replicas were configured when the ID was handed out (a pod keeps its ID
    across a configuration change)."""
    if device_id == name:
        return True
    head, sep, k = device_id.rpartition(_REPLICA_SUFFIX)
    if not (sep and head and k.isascii() and k.isdigit()) or k != str(int(k)):
        return False
    return head == name or replica_id(name, int(k)) == device_id


def container_path(name: str, index: int = 0) -> str:
    """Where a container finds device `name`'s `index`-th node: `/dev/edgefd/<name>`, then
    `/dev/edgefd/<name>.1`, ... (a device with several nodes)."""
    return f"{CONTAINER_DIR}/{name}" + ("" if index == 0 else f".{index}")
