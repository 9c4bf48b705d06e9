"""The one runner of the long-running tools: components start in order and stop in reverse,
whatever ends the run (a signal, a component's lifeline, a failure while starting); a reload
(SIGHUP or the configuration file changing) reaches every component that reconfigures, in
reverse order, and a bad configuration keeps the one in use; the probes answer for all of
them. Signals are real (sent to this process), as the tools get them."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from edgefd.core.errors import BadInput, EdgefdError
from edgefd.runtime.metrics import Metrics
from edgefd.runtime.runner import Lifeline, Reload, combined, run
from tests.helpers import free_port, wait_until


class Part:
    """A component that records what happened to it, in one shared journal."""

    def __init__(self, name: str, journal: list[str], ready: tuple[bool, str] = (True, "ok")):
        self.name = name
        self.journal = journal
        self._ready = ready
        self.config: Any = None

    def start(self) -> None:
        self.journal.append(f"start {self.name}")

    def stop(self) -> None:
        self.journal.append(f"stop {self.name}")

    def ready(self) -> tuple[bool, str]:
        return self._ready

    def reconfigure(self, config: Any) -> None:
        self.config = config
        self.journal.append(f"reconfigure {self.name}")


def later(seconds: float, fn: Any, *args: Any) -> threading.Timer:
    t = threading.Timer(seconds, fn, args)
    t.daemon = True
    t.start()
    return t


def signal_self(sig: int) -> None:
    os.kill(os.getpid(), sig)


def test_components_start_in_order_and_stop_in_reverse_on_sigterm() -> None:
    journal: list[str] = []
    parts = [Part("a", journal), Part("b", journal)]
    later(0.2, signal_self, signal.SIGTERM)
    assert run(lambda lifeline: parts, startup_line="test starting") == 0
    assert journal == ["start a", "start b", "stop b", "stop a"]


def test_the_signals_are_given_back_after_the_run() -> None:
    before = signal.getsignal(signal.SIGTERM)
    later(0.1, signal_self, signal.SIGINT)
    run(lambda lifeline: [Part("a", [])], startup_line="test starting")
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_component_that_fails_ends_the_run_with_its_error_after_stopping_all() -> None:
    journal: list[str] = []

    def build(lifeline: Lifeline) -> list[Part]:
        later(0.1, lifeline.fail, BadInput("the loop died"))
        return [Part("a", journal), Part("b", journal)]

    with pytest.raises(BadInput, match="the loop died"):
        run(build, startup_line="test starting")
    assert journal == ["start a", "start b", "stop b", "stop a"]


@pytest.mark.parametrize(
    "failure",
    [
        PermissionError(13, "Permission denied"),  # read as "the operation failed": 1
        BrokenPipeError(32, "Broken pipe"),  # read as "the reader went away": 0
        SystemExit(0),
        KeyboardInterrupt(),  # read as an interrupt: 130
        RuntimeError("a bug"),
    ],
)
def test_a_component_that_dies_of_a_bug_ends_the_run_with_70_whatever_it_raised(
    failure: BaseException,
) -> None:
    """issue 30 (2): a grant worker that died of the container's planted path ended `serve` as
    whatever the thread's exception said as a command's own (1, or 0: a crash loop nobody sees
    as one); a component's thread that dies is a bug, 70, with the exception as its cause."""
    from edgefd.runtime.runner import ComponentDied

    def build(lifeline: Lifeline) -> list[Part]:
        later(0.1, lifeline.fail, failure)
        return [Part("a", [])]

    with pytest.raises(ComponentDied, match="a component died: ") as e:
        run(build, startup_line="test starting")
    assert e.value.exit_code == 70 and e.value.__cause__ is failure


def test_a_component_whose_work_is_done_ends_the_run_cleanly() -> None:
    journal: list[str] = []

    def build(lifeline: Lifeline) -> list[Part]:
        later(0.1, lifeline.done)
        return [Part("feed", journal)]

    assert run(build, startup_line="test starting") == 0
    assert journal == ["start feed", "stop feed"]


def test_a_start_that_fails_stops_what_had_started_and_raises() -> None:
    journal: list[str] = []

    class Broken(Part):
        def start(self) -> None:
            raise EdgefdError("cannot listen")

    with pytest.raises(EdgefdError, match="cannot listen"):
        run(lambda lifeline: [Part("a", journal), Broken("b", journal)], startup_line="x")
    assert journal == ["start a", "stop b", "stop a"]  # b may have started threads: stopped


def test_a_stop_signal_while_starting_ends_it_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """Building can block (a FIFO given as a file, an API server that does not answer): a
    SIGTERM then ends the blocked call, and whatever had started is stopped."""
    journal: list[str] = []

    class Blocking(Part):
        def start(self) -> None:
            super().start()
            later(0.1, signal_self, signal.SIGTERM)
            time.sleep(30)  # interrupted by the signal

    t0 = time.monotonic()
    with caplog.at_level(logging.INFO):
        assert (
            run(lambda lifeline: [Part("a", journal), Blocking("b", journal)], startup_line="x")
            == 0
        )
    assert time.monotonic() - t0 < 5
    assert journal == ["start a", "start b", "stop b", "stop a"]  # b, half started, too
    assert "SIGTERM during start-up: stopping" in caplog.text


def test_sighup_reloads_every_component_in_reverse_and_a_bad_configuration_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    journal: list[str] = []
    configs = iter([{"replicas": 2}, BadInput("c.yaml: not valid YAML")])

    def load() -> Any:
        c = next(configs)
        if isinstance(c, Exception):
            raise c
        return c

    source, consumer = Part("source", journal), Part("consumer", journal)
    later(0.2, signal_self, signal.SIGHUP)
    later(0.5, signal_self, signal.SIGHUP)
    later(0.8, signal_self, signal.SIGTERM)
    with caplog.at_level(logging.INFO):
        run(lambda lifeline: [source, consumer], startup_line="x", reload=Reload(load))
    assert journal == [
        "start source",
        "start consumer",
        "reconfigure consumer",  # consumers first: the source's next snapshot is the new one
        "reconfigure source",
        "stop consumer",
        "stop source",
    ]
    assert source.config == consumer.config == {"replicas": 2}
    assert "c.yaml: not valid YAML; keeping the configuration in use" in caplog.text


def test_a_change_of_the_configuration_file_reloads(tmp_path: Path) -> None:
    conf = tmp_path / "resources.yaml"
    conf.write_text("a\n")
    journal: list[str] = []
    part = Part("p", journal)
    reloaded = threading.Event()

    def load() -> str:
        reloaded.set()
        return conf.read_text()

    def change_then_stop() -> None:
        time.sleep(0.3)
        conf.write_text("b\n")
        reloaded.wait(10)
        signal_self(signal.SIGTERM)

    later(0, change_then_stop)
    run(lambda lifeline: [part], startup_line="x", reload=Reload(load, conf))
    assert part.config == "b\n" and "reconfigure p" in journal


def test_the_probes_answer_for_every_component() -> None:
    port = free_port()
    ready = threading.Event()
    answers: dict[str, Any] = {}

    class Alive(Part):
        def alive(self) -> tuple[bool, str]:
            return True, "ok"

    def probe() -> None:
        wait_until(lambda: ready.is_set(), timeout=10)
        for path in ("/healthz", "/readyz"):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    answers[path] = (r.status, r.read().decode())
            except urllib.error.HTTPError as e:
                answers[path] = (e.code, e.read().decode())
        signal_self(signal.SIGTERM)

    class Ready(Part):
        def start(self) -> None:
            super().start()
            later(0.2, ready.set)

    parts = [
        Alive("a", []),
        Ready("b", [], ready=(True, "2 resource(s) registered")),
        Part("c", [], ready=(False, "not registered: edgefd.io/coral-usb: registering")),
    ]
    later(0, probe)
    run(lambda lifeline: parts, startup_line="x", listen=("127.0.0.1", port), metrics=Metrics())
    assert answers["/healthz"][0] == 200
    code, body = answers["/readyz"]
    assert code == 503 and "not registered: edgefd.io/coral-usb" in body


def test_combined_checks_say_the_first_failure_or_every_detail() -> None:
    ok = combined([lambda: (True, "ok"), lambda: (True, "following 2 device(s)")])
    assert ok() == (True, "following 2 device(s)")
    assert combined([])() == (True, "ok")
    bad = combined([lambda: (True, "x"), lambda: (False, "no scan yet"), lambda: (False, "y")])
    assert bad() == (False, "no scan yet")


def test_the_log_says_starting_first_and_stopping(caplog: pytest.LogCaptureFixture) -> None:
    later(0.1, signal_self, signal.SIGTERM)
    with caplog.at_level(logging.INFO):
        run(lambda lifeline: [Part("a", [])], startup_line=json.dumps({"mode": "test"}))
    messages = [r.getMessage() for r in caplog.records if r.name == "edgefd.runtime.runner"]
    assert messages[0] == '{"mode": "test"}' and messages[-1] == "stopping"


def test_a_reload_that_meets_a_fifo_keeps_the_configuration_and_later_ones_work(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30 item 9: SIGHUP while a FIFO is at `..data/resources.yaml` is an error that keeps
    the configuration in use, at once; the next valid one is picked up (by the watch)."""
    from edgefd.core.schema import read_yaml
    from tests.configmap import ConfigMapVolume

    vol = ConfigMapVolume(tmp_path / "config", {"resources.yaml": "a: 1\n"})
    conf = vol.path("resources.yaml")
    part = Part("p", [])

    def fifo_then_valid() -> None:
        target = vol.dir / "..data" / "resources.yaml"
        target.unlink()
        os.mkfifo(target)
        signal_self(signal.SIGHUP)
        wait_until(lambda: "a FIFO, not a regular file" in caplog.text, 5, what="the error")
        vol.update({"resources.yaml": "a: 2\n"})
        wait_until(lambda: part.config == {"a": 2}, 5, what="the reload after the FIFO")
        signal_self(signal.SIGTERM)

    later(0.3, fifo_then_valid)
    with caplog.at_level(logging.INFO):
        run(
            lambda lifeline: [part],
            startup_line="x",
            reload=Reload(lambda: read_yaml(conf, "configuration"), conf),
        )
    assert part.config == {"a": 2}
    errors = [r.getMessage() for r in caplog.records if "FIFO" in r.getMessage()]
    assert errors and all("keeping the configuration in use" in e for e in errors)
    assert {r.levelname for r in caplog.records if "FIFO" in r.getMessage()} == {"ERROR"}


def test_a_failed_reload_shows_in_readyz_and_metrics_and_a_good_one_says_what_changed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 32 item 1: a failed reload was one ERROR line; /readyz (still 200) now names it,
    the metrics count it, and the next good reload clears it and lists its changes."""
    port = free_port()
    metrics = Metrics()
    configs = iter([BadInput("c.yaml: not valid YAML"), {"replicas": 2}])
    answers: list[tuple[int, str, float]] = []

    def load() -> Any:
        c = next(configs)
        if isinstance(c, Exception):
            raise c
        return c

    def readyz() -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            failures = metrics.value("edgefd_config_reload_failures_total")
            answers.append((r.status, r.read().decode(), failures))

    def drive() -> None:
        wait_until(lambda: _listening(port), 10)
        signal_self(signal.SIGHUP)
        wait_until(lambda: "keeping the configuration in use" in caplog.text, 5)
        readyz()
        signal_self(signal.SIGHUP)
        wait_until(lambda: "configuration reloaded" in caplog.text, 5)
        readyz()
        signal_self(signal.SIGTERM)

    def changes(old: Any, new: Any) -> list[str]:
        return [f"replicas {old['replicas']} → {new['replicas']}"]

    later(0, drive)
    with caplog.at_level(logging.INFO):
        run(
            lambda lifeline: [Part("p", [], ready=(True, "1 resource(s) registered"))],
            startup_line="x",
            listen=("127.0.0.1", port),
            metrics=metrics,
            reload=Reload(load, current={"replicas": 1}, changes=changes),
        )
    (code1, body1, n1), (code2, body2, n2) = answers
    assert code1 == 200 and "1 resource(s) registered" in body1
    assert "configuration reload failed: c.yaml: not valid YAML" in body1 and n1 == 1
    assert code2 == 200 and body2 == "1 resource(s) registered\n" and n2 == 1
    assert metrics.value("edgefd_config_last_reload_success_timestamp_seconds") > 0
    assert "configuration reloaded: replicas 1 → 2" in caplog.text


def _listening(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1):
            return True
    except OSError:
        return False
