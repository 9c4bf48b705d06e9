"""edgefd's alerting rules (charts/edgefd/alerts/prometheusrule.yaml) with Prometheus' own
promtool: `check rules` with every lint, and `test rules` on the unit tests in promtool/, where
each alert fires when it should (with its labels and its rendered text) and stays silent when it
should not. Each alert's tests fail without it; each alert says its severity, what happened
and where its runbook is, a section of docs/troubleshooting.md that exists.

That every metric a rule reads is one the tools export is test_live_metrics.py's."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from tests.alerts.rules import (
    RUNBOOKS,
    UNIT_TESTS,
    alerts,
    rule_object,
    rule_selectors,
    run_promtool,
    unit_test_dir,
    write_rule_file,
)
from tests.docs.test_operator_docs import TROUBLESHOOTING, anchors, slug


def test_a_missing_promtool_skips_here_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The bootstrap installs it; without it a run outside CI says how to get it, and CI,
    where nothing skips, fails."""
    from tests.alerts.rules import promtool

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="run scripts/bootstrap"):
        promtool()
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="Debian's prometheus package"):
        promtool()


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    rules = write_rule_file(tmp_path / "rules.yaml")
    r = run_promtool("check", "rules", "--lint=all", "--lint-fatal", rules.name, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in r.stdout, r.stdout


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    """What the check above is worth: a bad expression fails it."""
    obj = rule_object()
    obj["spec"]["groups"][0]["rules"][0]["expr"] = "sum by (pod) (edgefd_build_info"
    rules = write_rule_file(tmp_path / "rules.yaml", obj)
    r = run_promtool("check", "rules", rules.name, cwd=tmp_path)
    assert r.returncode != 0 and "parse error" in r.stdout + r.stderr, r.stdout + r.stderr


def test_the_unit_tests_pass(tmp_path: Path) -> None:
    files = unit_test_dir(tmp_path)
    r = run_promtool("test", "rules", *(f.name for f in files), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(files), r.stdout


def expectations() -> dict[str, dict[str, int]]:
    """Per alert, how many evaluations of the unit tests expect it firing and how many
    expect it silent."""
    out: dict[str, dict[str, int]] = {}
    for f in sorted(UNIT_TESTS.glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        assert doc["rule_files"] == ["rules.yaml"], f.name
        for test in doc["tests"]:
            for case in test.get("alert_rule_test", []):
                seen = out.setdefault(case["alertname"], {"firing": 0, "silent": 0})
                seen["firing" if case.get("exp_alerts") else "silent"] += 1
    return out


def test_every_alert_is_tested_firing_and_silent() -> None:
    seen = expectations()
    assert set(seen) == set(alerts()), "unit tests of alerts that do not exist, or missing"
    for name, n in seen.items():
        assert n["firing"] and n["silent"], (name, n)


@pytest.mark.parametrize("name", sorted(alerts()))
def test_each_alerts_unit_tests_fail_without_it(name: str, tmp_path: Path) -> None:
    """The unit tests can fail: with the alert taken out of the rules, promtool reports the
    alert missing where it expected it firing."""
    obj = copy.deepcopy(rule_object())
    for group in obj["spec"]["groups"]:
        group["rules"] = [r for r in group["rules"] if r.get("alert") != name]
    files = unit_test_dir(tmp_path, obj)
    r = run_promtool("test", "rules", *(f.name for f in files), cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert f"alertname: {name}," in out, out


def test_names_are_unique_and_edgefds() -> None:
    names = [r["alert"] for g in rule_object()["spec"]["groups"] for r in g["rules"]]
    assert len(names) == len(set(names)) and all(n.startswith("Edgefd") for n in names)


@pytest.mark.parametrize("name", sorted(alerts()))
def test_each_alert_says_what_and_where_its_runbook_is(name: str) -> None:
    rule = alerts()[name]
    assert rule["labels"]["severity"] in ("warning", "critical", "info")
    text = rule["annotations"]
    assert set(text) == {"summary", "description", "runbook_url"}
    assert text["summary"].endswith(".") and "\n" not in text["summary"]
    # its own section, one heading per alert
    assert text["runbook_url"] == RUNBOOKS + slug(name)
    assert slug(name) in anchors(TROUBLESHOOTING), f"no runbook section ### {name}"


def test_every_runbook_section_is_an_alerts() -> None:
    """The alert sections of the troubleshooting page and the alerts are the same set."""
    text = TROUBLESHOOTING.read_text()
    headings = re.findall(r"^### (Edgefd\w+)$", text, re.M)
    assert sorted(headings) == sorted(alerts())


def test_the_rules_read_edgefds_metrics_only() -> None:
    """Every selector names an edgefd metric (the live test finds each on /metrics); none is
    a regular expression on the name, which no check could hold to a tool."""
    for name, found in rule_selectors().items():
        assert found, name
        for sel in found:
            assert sel.name.startswith("edgefd_"), (name, sel)
