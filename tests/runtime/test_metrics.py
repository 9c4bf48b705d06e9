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


def test_the_text_format_reads_back_with_the_ecosystems_parser() -> None:
    """What a scrape gets, read by the Prometheus client's own parser: each metric once with
    its type and help, labels escaped, the build's info; a gauge's series that went
    (replace_series) gone."""
    from prometheus_client.parser import text_string_to_metric_families

    from edgefd.runtime.metrics import replace_series

    m = Metrics()
    c = m.counter("edgefd_test_events_total", 'Events, "quoted"\nand a second line', ["kind"])
    c.labels(kind='a "b"\\c').inc()
    c.labels(kind="plain").inc(2)
    g = m.gauge("edgefd_test_devices", "Devices", ["device"])
    replace_series(g, [({"device": "x"}, 1.0), ({"device": "y"}, 0.5)])
    replace_series(g, [({"device": "y"}, 3.0)])
    plain = m.counter("edgefd_test_plain_total", "Unlabelled")
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    events = families["edgefd_test_events"]  # the parser names a counter by its family
    assert (events.type, events.documentation) == ("counter", 'Events, "quoted"\nand a second line')
    assert {(s.name, s.labels["kind"], s.value) for s in events.samples} == {
        ("edgefd_test_events_total", 'a "b"\\c', 1.0),
        ("edgefd_test_events_total", "plain", 2.0),
    }
    assert [(s.labels, s.value) for s in families["edgefd_test_devices"].samples] == [
        ({"device": "y"}, 3.0)
    ]
    assert [s.value for s in families["edgefd_test_plain"].samples] == [0.0]  # at 0
    assert families["edgefd_build_info"].samples[0].value == 1.0
    assert m.value("edgefd_test_events_total", kind="plain") == 2.0
    assert m.value("edgefd_test_devices", device="x") == 0.0 and plain is not None


def test_a_counter_is_named_total_and_declared_once() -> None:
    import pytest

    m = Metrics()
    with pytest.raises(ValueError, match="ends in _total"):
        m.counter("edgefd_test_events", "x")
    m.counter("edgefd_test_x_total", "x")
    with pytest.raises(ValueError, match="declared twice"):
        m.counter("edgefd_test_x_total", "x")
    with pytest.raises(ValueError, match=r"use \.labels"):
        m.gauge("edgefd_test_g", "g", ["a"]).set(1)
