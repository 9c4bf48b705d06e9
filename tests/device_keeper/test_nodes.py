"""The container's own path for the device is made to name the new node, inside a stand-in
container (own mount namespace, private /dev tmpfs, chroot), and nowhere else. Root only."""

from __future__ import annotations

import os
import stat

import pytest

from edgefd.device_keeper import nodes
from edgefd.device_keeper.rules import DeviceNumber

pytestmark = pytest.mark.root

OLD, NEW = DeviceNumber("c", 189, 4), DeviceNumber("c", 189, 5)
PATH = "/dev/edgefd/coral-usb-1-1-3"


def _inside(p, path=PATH):
    return os.stat(f"/proc/{p.pid}/root{path}", follow_symlinks=False)


@pytest.mark.parametrize("uid", [0, 1000])
def test_the_path_names_the_new_node_with_the_old_mode(standin, uid):
    p = standin("coral-usb-1-1-3", "189:4", uid=uid)
    r = nodes.replace(p.pid, PATH, NEW, OLD)
    assert r.changed and r.old == OLD
    st = _inside(p)
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (189, 5)
    assert stat.S_IMODE(st.st_mode) == 0o660
    assert os.listdir(f"/proc/{p.pid}/root/dev/edgefd") == ["coral-usb-1-1-3"]  # no temp left
    # the host's /dev is not where it went
    assert not os.path.exists(PATH)
    again = nodes.replace(p.pid, PATH, NEW, OLD)
    assert not again.changed


def test_a_missing_path_is_created(standin):
    p = standin("coral-usb-1-1-3", "189:4")
    os.unlink(f"/proc/{p.pid}/root{PATH}")
    assert nodes.replace(p.pid, PATH, NEW, OLD).old is None
    assert os.minor(_inside(p).st_rdev) == 5


def test_a_node_that_is_neither_old_nor_new_is_left_alone(standin):
    p = standin("coral-usb-1-1-3", "189:9")
    with pytest.raises(nodes.NodeNotReplaced, match="not the old node"):
        nodes.replace(p.pid, PATH, NEW, OLD)
    assert os.minor(_inside(p).st_rdev) == 9


def test_a_symlink_planted_by_the_container_is_not_followed(standin, tmp_path):
    """The container owns its /dev: `/dev/edgefd` -> `/etc` must not make the keeper create a
    node in the container's /etc, nor (an absolute link read on the host) in the host's."""
    p = standin("coral-usb-1-1-3", "189:4")
    base = f"/proc/{p.pid}/root/dev"
    os.rename(f"{base}/edgefd", f"{base}/real")
    os.symlink("/tmp", f"{base}/edgefd")
    with pytest.raises(nodes.NodeNotReplaced, match="symlink"):
        nodes.replace(p.pid, PATH, NEW, OLD)
    assert not os.path.exists("/tmp/coral-usb-1-1-3")


def test_a_regular_file_is_left_alone(standin):
    p = standin("coral-usb-1-1-3", "189:4")
    target = f"/proc/{p.pid}/root{PATH}"
    os.unlink(target)
    with open(target, "w") as f:
        f.write("not a device")
    with pytest.raises(nodes.NodeNotReplaced, match="not a device node"):
        nodes.replace(p.pid, PATH, NEW, OLD)


def test_a_gone_process(standin):
    with pytest.raises(nodes.NodeNotReplaced, match="cannot open its root"):
        nodes.replace(2**22 + 1, PATH, NEW, OLD)


def test_a_directory_at_the_temporary_name_is_left_alone_and_said(standin):
    """issue 30 (2): the container owns its /dev; a directory where the keeper makes its new
    node first (`.<name>.edgefd-keeper`) was an IsADirectoryError that killed the worker."""
    p = standin("coral-usb-1-1-3", "189:4")
    planted = f"/proc/{p.pid}/root/dev/edgefd/.coral-usb-1-1-3.edgefd-keeper"
    os.mkdir(planted)
    with pytest.raises(nodes.NodeNotReplaced, match=r"temporary name.*left alone"):
        nodes.replace(p.pid, PATH, NEW, OLD)
    assert os.path.isdir(planted) and os.minor(_inside(p).st_rdev) == 4


# the keeper pod's capabilities (k8s/): no CAP_DAC_OVERRIDE, so a mode the container set binds it
POD_CAPS = "-all,+sys_admin,+sys_ptrace,+mknod,+chown"


def test_an_unsearchable_dev_edgefd_is_left_alone_with_the_pods_capabilities(standin):
    """issue 30 (2): `chmod 000 /dev/edgefd` in the container: with the pod's capabilities
    the keeper may not look inside, and that was a PermissionError out of the catch-up and
    the replacement alike; now both say so for this container only."""
    import subprocess
    import sys

    p = standin("coral-usb-1-1-3", "189:4")
    os.chmod(f"/proc/{p.pid}/root/dev/edgefd", 0)
    code = (
        (
            "from edgefd.device_keeper import nodes\n"
            "from edgefd.device_keeper.rules import DeviceNumber as D\n"
            "for call in (lambda: nodes.current(PID, PATH),\n"
            "             lambda: nodes.replace(PID, PATH, D('c', 189, 5), D('c', 189, 4))):\n"
            "    try:\n"
            "        print('returned', call())\n"
            "    except nodes.NodeNotReplaced as e:\n"
            "        print('refused', e)\n"
        )
        .replace("PID", str(p.pid))
        .replace("PATH", repr(PATH))
    )
    argv = ["setpriv", "--inh-caps=-all", f"--bounding-set={POD_CAPS}", sys.executable, "-c"]
    r = subprocess.run([*argv, code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("refused ") for line in lines), lines
    assert all("Permission denied; left alone" in line for line in lines)
    os.chmod(f"/proc/{p.pid}/root/dev/edgefd", 0o755)
    assert os.minor(_inside(p).st_rdev) == 4
