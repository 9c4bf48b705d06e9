"""What a resource's mount may reach (mounts.py): the path, a path under it or a directory above
it counts; paths that only look close do not; the resources config refuses them
(test_resources.py) unless a mount says allow_sensitive: true."""

from __future__ import annotations

import pytest

from edgefd.devplugin.mounts import SENSITIVE, sensitive


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/", "reaches /proc"),
        ("/proc", "is /proc"),
        ("/proc/1/root", "reaches /proc"),
        ("//proc//1", "reaches /proc"),
        ("/opt/../sys", "is /sys"),
        ("/dev/mem", "is /dev/mem"),
        ("/dev", "reaches /dev/mem"),
        ("/run", "reaches /run/containerd"),
        ("/run/containerd/containerd.sock", "reaches /run/containerd"),
        ("/var", "reaches /var/lib/kubelet"),
        ("/var/lib/kubelet/pods", "reaches /var/lib/kubelet"),
        ("/etc/kubernetes/admin.conf", "reaches /etc/kubernetes"),
        ("/procfs-data", None),
        ("/opt/edgetpu", None),
        ("/dev/bus/usb", None),
        ("/usr/lib/edgetpu", None),
    ],
)
def test_what_a_mount_reaches(path: str, said: str | None) -> None:
    assert sensitive(path) == said


def test_every_sensitive_path_is_absolute_and_normal() -> None:
    assert all(p.startswith("/") and p.rstrip("/") == p and "//" not in p for p in SENSITIVE)
