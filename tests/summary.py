"""The end of every test run says which suites ran and which did not, and why.

A skipped real-node or image suite is easy to miss in a line of `s`; `make test` promises that
everything runs that the machine can run, so the summary lists each suite (a folder of tests/)
with its outcomes and time, every distinct skip reason with its count, and how many tests of
each kind of real peer ran (markers `realpeer`, `e2e`, `image`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
KINDS = {
    "realpeer": "real API server / kubelet",
    "e2e": "real node",
    "image": "container image",
}


@dataclass
class Suite:
    outcomes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> count


def suite_of(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if parts[0] == "tests" and len(parts) > 2 else parts[0]


def skip_reason(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def outcome_of(report: pytest.TestReport) -> str | None:
    """The test's outcome, from the one report of its three phases that decides it."""
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed" if report.when == "call" else None
    if report.when == "call":
        return report.outcome
    if report.skipped:
        return "skipped"
    if report.failed:
        return "error"
    return None


class SuiteSummary:
    def __init__(self) -> None:
        self.suites: dict[str, Suite] = defaultdict(Suite)
        self.kinds: dict[str, Counter[str]] = {k: Counter() for k in KINDS}
        self.markers: dict[str, set[str]] = {}  # nodeid -> the kinds of real peer it needs

    @pytest.hookimpl
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            self.markers[item.nodeid] = {m.name for m in item.iter_markers()} & KINDS.keys()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        suite = self.suites[suite_of(report.nodeid)]
        suite.seconds += report.duration
        outcome = outcome_of(report)
        if outcome is None:
            return
        suite.outcomes[outcome] += 1
        if outcome == "skipped":
            suite.skipped[skip_reason(report)] += 1
        for kind in self.markers.get(report.nodeid, ()):
            self.kinds[kind][outcome] += 1

    # the outermost wrapper: printed after pytest's own short summary, just above its last line
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        yield
        if self.suites:
            self.write(terminalreporter)

    def write(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.write_sep("=", "suites: what ran, what did not and why")
        width = max(len(name) for name in self.suites)
        for name in sorted(self.suites):
            s = self.suites[name]
            counts = ", ".join(f"{s.outcomes[o]} {o}" for o in OUTCOMES if s.outcomes[o])
            tr.write_line(f"{name:<{width}}  {counts or 'nothing ran'} ({s.seconds:.0f} s)")
            for reason, n in s.skipped.most_common():
                tr.write_line(f"{'':<{width}}    {n} skipped: {reason}")
        for kind, label in KINDS.items():
            c = self.kinds[kind]
            ran = sum(c.values()) - c["skipped"]
            if sum(c.values()):
                tr.write_line(f"{kind} ({label}): {ran} of {sum(c.values())} ran")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SuiteSummary(), "edgefd-suite-summary")
