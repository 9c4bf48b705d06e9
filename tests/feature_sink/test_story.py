"""The sink's log at the default level tells what happened, and nothing while nothing happens
(issue 25 items 1 and 2): a start-up line with version, mode and settings; every label added,
changed or removed with its producer and why; an owned label repaired; a producer's file gone
and its grace; the API lost once and back once. Against the real API server."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import edgefd
from edgefd.core.version import build_info
from tests.feature_sink.peer import F, Sink, wait_for, write

pytestmark = pytest.mark.realpeer


def lines(sink: Sink) -> list[str]:
    sink.log.flush()
    return sink.log_path.read_text(errors="replace").splitlines()


def logged(sink: Sink, pattern: str, timeout: float = 15.0) -> str:
    """The first log line matching `pattern` (a regular expression), waited for."""
    rx = re.compile(pattern)
    return wait_for(
        lambda: next((ln for ln in lines(sink) if rx.search(ln)), None),
        timeout,
        f"a log line like {pattern!r}; log:\n" + "\n".join(lines(sink)[-30:]),
    )


def test_a_default_level_log_tells_the_labels_story(cluster, sinks, fdir: Path) -> None:
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/a": "true", f"{F}/b": "1"})
    s = sinks(node, fdir, "--removal-grace", "2s", verbose=False)
    what = f"feature-sink: INFO: node {node}:"

    info = build_info()
    start = logged(s, "starting")
    assert start.startswith(
        f"feature-sink: INFO: edgefd {edgefd.__version__} (python {info['python']}, "
        f"{info['platform']}) starting, mode node: node={node}, features={fdir}, "
    )
    assert "resync=2s, removal-grace=2s" in start and f"listen=127.0.0.1:{s.port}" in start
    logged(s, rf"^feature-sink: INFO: serving /healthz /readyz /metrics on 127\.0\.0\.1:{s.port}$")

    assert logged(s, "label.s. added") == f"{what} 2 label(s) added, 0 changed, 0 removed; 2 owned"
    assert f"{what} add     {F}/a=true (from usb-scan)" in lines(s)
    assert f"{what} add     {F}/b=1 (from usb-scan)" in lines(s)

    # a producer's change, a removal, then hand edits the sink sets back
    write(fdir, "usb-scan", {f"{F}/b": "2"})
    logged(s, re.escape(f"{what} remove  {F}/a (was true) (usb-scan no longer lists it)"))
    logged(s, re.escape(f"{what} replace {F}/b=2 (was 1) (from usb-scan)"))
    cluster.set_label(node, f"{F}/b", "99")
    logged(s, re.escape("(from usb-scan; repaired: someone had changed it on the node)"))
    cluster.set_label(node, f"{F}/b", None)
    logged(s, re.escape(f"{what} add     {F}/b=2 (from usb-scan; repaired: someone had removed"))

    # steady state: two resyncs (2 s each) and not a line
    before = len(lines(s))
    time.sleep(5)
    assert lines(s)[before:] == []

    # a producer's file gone: kept for the grace, then removed, each said once
    (fdir / "usb-scan").unlink()
    logged(s, re.escape(f"{what} usb-scan's file is gone; its 1 label(s) are kept until "))
    logged(
        s,
        re.escape(f"{what} remove  {F}/b (was 2) (usb-scan's file is gone and its removal "),
    )
    assert not [ln for ln in lines(s) if "WARNING" in ln or "DEBUG" in ln], lines(s)
    assert s.metric("edgefd_build_info", **info) == 1


def test_the_api_lost_and_back_is_said_once_each(cluster, sinks, fdir, kube_apiserver) -> None:
    node = cluster.new_node()
    write(fdir, "usb-scan", {f"{F}/a": "true"})
    s = sinks(node, fdir, verbose=False)
    s.wait_synced()
    kube_apiserver.stop_apiserver()
    try:
        write(fdir, "usb-scan", {f"{F}/a": "true", f"{F}/c": "true"})
        wait_for(
            lambda: s.metric("edgefd_sink_sync_failures_total", reason="unreachable") >= 4,
            30,
            "several failed attempts",
        )
    finally:
        kube_apiserver.start_apiserver()
    back = logged(s, "sync succeeded again", 60)
    assert re.fullmatch(
        r"feature-sink: INFO: sync succeeded again after \d+ failed attempt\(s\) over \d+s "
        r"\(unreachable\)",
        back,
    ), back
    lost = [ln for ln in lines(s) if "sync failed" in ln]
    assert len(lost) == 1 and lost[0].startswith("feature-sink: WARNING: sync failed (unreachable)")
    logged(s, re.escape(f"add     {F}/c=true (from usb-scan)"))
