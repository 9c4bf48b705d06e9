"""One watch-mode metric for every tool (issue 25 item 8: it was `edgefd_scan_watch_mode`,
`edgefd_sink_watch_mode` and `edgefd_devplugin_hotplug_mode`)."""

from __future__ import annotations

from edgefd.runtime.metrics import Metrics


def test_watch_mode_is_one_metric_labelled_by_component() -> None:
    m = Metrics()
    m.watch_mode("inventory", "uevent")
    m.watch_mode("feature-sink", "inotify")
    text = m.render().decode()
    assert 'edgefd_watch_mode{component="inventory",mode="uevent"} 1.0' in text
    assert 'edgefd_watch_mode{component="feature-sink",mode="inotify"} 1.0' in text
    assert text.count("# TYPE edgefd_watch_mode gauge") == 1
    assert "_watch_mode{mode=" not in text and "hotplug_mode" not in text
