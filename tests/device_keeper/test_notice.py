"""A refused grant reaches the Node as an Event (notice.py): the keeper leaves it as its notice
in its own directory, in the form feature-sink reads (edgefd.core.notices), naming the pod and
container; a later move granted to every holder clears it."""

from __future__ import annotations

from pathlib import Path

from edgefd.core.notices import GRANT_REFUSED, NoticeBoard, read_notices
from edgefd.device_keeper.holders import Holder
from edgefd.device_keeper.notice import RefusalNotice
from edgefd.device_keeper.service import Done

from .test_service import MOVE


def test_a_refusal_is_the_keepers_notice_until_a_grant_goes_through(tmp_path: Path) -> None:
    root = tmp_path / "notices"
    (root / "device-keeper").mkdir(parents=True)
    notice = RefusalNotice(NoticeBoard(root / "device-keeper", "device-keeper"))
    h1, h2 = Holder("ns", "detector", "app", "dra"), Holder("ns", "other", "app", "dra")
    why = "kubepods.slice/x.scope: a systemd scope and no systemd to grant it through"
    notice.after(MOVE, [Done(h1, "c0ffee123456789", refused=why), Done(h2, "decaf", refused=why)])
    (got,), warnings = read_notices(root)  # as feature-sink reads it
    assert warnings == () and (got.writer, got.reason) == ("device-keeper", GRANT_REFUSED)
    assert got.message == (
        f"coral-usb-1-1-3 at c 189:5 not granted to ns/detector/app (container c0ffee123456): "
        f"{why} (and 1 more); its next open of the device fails with EPERM "
        "(docs/troubleshooting.md)"
    )
    notice.after(MOVE, [Done(h1, "c0ffee", node="current")])  # nothing granted: kept
    assert read_notices(root)[0] == (got,)
    notice.after(MOVE, [Done(h1, "c0ffee", cgroups=["v2:/sys/fs/cgroup/x"], node="replaced")])
    assert read_notices(root)[0] == ()


def test_without_a_notice_dir_nothing_is_written(tmp_path: Path) -> None:
    RefusalNotice(None).after(MOVE, [Done(Holder("ns", "p", "c", "dra"), refused="no")])
    assert list(tmp_path.iterdir()) == []
