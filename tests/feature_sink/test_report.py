"""What the sink tells people about problems (report.py): each problem logged once and counted,
not again at every resync, and reported again when it recurs; a Warning Event each, at most a
few per sync; and never the content of a refused line or an unreadable file (issue 11, item
2: Events are readable cluster-wide, logs are shipped off the node). The Reporter in memory
first; then the sink's Events and log against the real kube-apiserver."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from edgefd.core.notices import CONFIG_RELOAD_FAILED, NoticeBoard
from edgefd.feature_sink.desired import read_directory, with_notices
from edgefd.feature_sink.metrics import SinkMetrics
from edgefd.feature_sink.ownership import Conflict
from edgefd.feature_sink.report import Reporter, conflict_problems, desired_problems
from tests.feature_sink.peer import event_messages, run_once, write
from tests.feature_sink.states import F, desired_of

SECRET = "s3cr3t"


def test_each_writers_notice_is_a_problem_naming_it_and_a_bad_one_its_too(tmp_path: Path):
    """A notice (edgefd.core.notices) becomes a Problem with its reason, naming the writer
    whose directory it is in and quoting its words, keyed by them (the same one at every
    resync is not a new Event); a file that is not a notice is its writer's too, and what is
    no writer's directory is a file problem. Nothing quotes what was refused."""
    notices = tmp_path / "notices"
    for w in ("bus-scan", "devplugin"):
        (notices / w).mkdir(parents=True)
    NoticeBoard(notices / "bus-scan", "usb-scan").post(
        CONFIG_RELOAD_FAILED, "reload failed: c.yaml:1:2: x"
    )
    (notices / "devplugin" / "notice").write_text(SECRET)
    (notices / "evil.notice").write_text(SECRET)
    (tmp_path / "features.d").mkdir()
    desired = with_notices(read_directory(tmp_path / "features.d"), notices)
    problems = desired_problems(desired)
    reasons = sorted((p.reason, p.message) for p in problems)
    assert reasons == [
        (
            CONFIG_RELOAD_FAILED,
            'edgefd\'s bus-scan left this notice: "reload failed: c.yaml:1:2: x"',
        ),
        ("FeatureFileProblem", f"notices {notices}: evil.notice is not a writer's directory"),
        (
            "NoticeUnreadable",
            "edgefd's devplugin left a notice the sink cannot read: not a JSON object; ignored",
        ),
    ]
    again = desired_problems(with_notices(read_directory(tmp_path / "features.d"), notices))
    assert {p.key for p in again} == {p.key for p in problems}
    assert not any(SECRET in p.message or SECRET in p.detail for p in problems)


def test_skipped_and_garbage_files_are_reported_not_silent(tmp_path: Path, caplog):
    """A file skipped whole (too big) or a line refused (not UTF-8) is logged once, counted."""
    (tmp_path / "huge").write_bytes(b"x" * 70000)
    (tmp_path / "binary").write_bytes(b"edgefd.io/k=\xff\xfe\nedgefd.io/good=1\n")
    (tmp_path / "ok").write_text(f"{F}/ok=1\n# +bogus-directive\n")
    desired = read_directory(tmp_path)
    metrics = SinkMetrics()
    reporter = Reporter(metrics, events=False)
    with caplog.at_level(logging.WARNING):
        reporter.observe(desired_problems(desired))
        reporter.observe(desired_problems(desired))  # a resync does not repeat the log lines
    text = caplog.text
    assert "huge: 70000 bytes, over the 65536-byte limit" in text
    assert "binary:1: not UTF-8 text; line skipped" in text
    assert "ok:2: unknown directive (known: expiry-time=, no-label, no-feature)" in text
    assert text.count("huge: 70000 bytes") == 1
    assert metrics.value("edgefd_sink_feature_file_problems") == 3
    assert desired.labels == {f"{F}/ok": "1", "edgefd.io/good": "1"}


def test_each_problem_is_logged_once_across_syncs(caplog):
    """A sync reports the files' problems before reading the object, then everything: a
    conflict (known only after the read) must not be logged again at every resync."""
    d = desired_of({"usb": f"{F}/a=1\nbad key\n"})
    files = desired_problems(d)
    conflicts = conflict_problems([Conflict(f"{F}/a", "1", "2", "usb")])
    metrics = SinkMetrics()
    reporter = Reporter(metrics, events=False)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # three syncs
            reporter.observe(files, complete=False)
            reporter.observe(files + conflicts)
    assert caplog.text.count("not applied: the node has '2'") == 1
    assert caplog.text.count("usb:2: label refused") == 1
    assert metrics.value("edgefd_sink_label_conflicts") == 1
    reporter.observe(files)  # the conflict went away: forgotten, so a recurrence is reported
    with caplog.at_level(logging.WARNING):
        reporter.observe(files + conflicts)
    assert caplog.text.count("not applied: the node has '2'") == 2


# -- the sink's Events and log, against the real API server ---------------------------------


@pytest.mark.realpeer
def test_symlinks_fifos_and_refused_lines_never_reach_events_or_logs(cluster, fdir, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text(f"team.example.com/owner={SECRET}-value\n")
    (fdir / "leak").symlink_to(secret)
    os.mkfifo(fdir / "pipe")
    (fdir / "bad").write_text(
        f"root:$6${SECRET}Hash/xyz:19000:0:99999:7:::\n"
        f"example.com/token=eyJ{SECRET}+/==\n"
        f"node-role.kubernetes.io/{SECRET}=\n"
        f"# +{SECRET}-directive\n"
        f"# +expiry-time={SECRET}\n"
        f"{F}/good=1\n"
    )
    write(fdir, "other", {f"{F}/good": f"{SECRET}-override"})  # an override names lines only
    node = cluster.new_node()
    p = run_once(cluster, node, fdir)  # default log level, as in a pod
    assert p.returncode == 0, p.stderr
    labels = cluster.labels(node)
    assert "team.example.com/owner" not in labels
    assert labels[f"{F}/good"] == f"{SECRET}-override"  # a valid label is published, as asked
    stderr = p.stderr.decode()
    events = event_messages(cluster, node)
    assert (
        "leak: is a symlink; not read" in events and "pipe: not a regular file; not read" in events
    )
    assert any(m.startswith("bad:1: label refused: key ") for m in events)
    assert any(m.startswith("bad:3: label refused: namespace node-role.") for m in events)
    for text in [stderr, *events]:
        assert SECRET not in text, text
    assert "bad:4: unknown directive" in stderr and "bad:5: expiry-time is not" in stderr


@pytest.mark.realpeer
def test_events_per_sync_are_bounded(cluster, fdir):
    (fdir / "junk").write_text("".join(f"bad key {i}\n" for i in range(14)))
    node = cluster.new_node()
    assert run_once(cluster, node, fdir).returncode == 0
    assert len(event_messages(cluster, node, "LabelRejected")) == 10
    assert run_once(cluster, node, fdir).returncode == 0  # the rest at the next sync, none twice
    got = event_messages(cluster, node, "LabelRejected")
    assert len(got) == 14 and len(set(got)) == 14
