"""The keeper's gRPC stub sets, generated with the device plugin's generator (the one way
edgefd produces stubs): the kubelet's pod-resources api.proto from the k8s.io/kubelet module
the harness pins, and the keeper's CRI subset. `python -m tests.device_keeper.stubs`
regenerates them into tools/device_keeper/api/.

They are declared here, not in edgefd.devplugin.api.generate, because tools/devplugin is
being restructured; that table is where they belong once it settles.
"""

from __future__ import annotations

import sys
from pathlib import Path

from edgefd.devplugin.api.generate import (
    KUBELET_MODULE,
    KUBELET_VERSION,
    StubSet,
    _kubelet_proto,
    generate_set,
)

API_DIR = Path(__file__).resolve().parents[2] / "tools" / "device_keeper" / "api"

STUB_SETS: tuple[StubSet, ...] = (
    StubSet(
        "podresources",
        _kubelet_proto("pkg/apis/podresources/v1/api.proto"),
        f"{KUBELET_MODULE}@{KUBELET_VERSION} pkg/apis/podresources/v1/api.proto",
        "edgefd/device_keeper/api/podresources.proto",
        API_DIR,
    ),
    StubSet(
        "cri",
        lambda: API_DIR / "cri.proto",
        "device_keeper/api/cri.proto",
        "edgefd/device_keeper/api/cri.proto",
        API_DIR,
    ),
)


if __name__ == "__main__":
    for s in STUB_SETS:
        for path in generate_set(s):
            print(path)
    sys.exit(0)
