"""The one device name, the same in every API: the kubelet device ID, the DRA device name, the
CDI device name, the link directory, `/dev/edgefd/<name>` in a container and what
`EDGEFD_<RESOURCE>_DEVICES` lists. Written here once.

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

MAX_NAME = 63  # a DNS label, what DRA requires of a device name

_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
# they only separate numbers and path parts, so turning them into '-' loses nothing
_SEPARATORS = str.maketrans({".": "-", ":": "-", "/": "-"})


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
