"""edgefd's alerting rules as the tests read them: the one source (the chart's
alerts/prometheusrule.yaml), its groups as a plain Prometheus rule file for promtool, the
promtool the bootstrap installs, and the series each rule's expression selects (found by a
PromQL parser, not by pattern: a name inside a function call, an `offset`, a `by` list or a
string is told apart the way Prometheus tells it apart)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "charts" / "edgefd" / "alerts" / "prometheusrule.yaml"
UNIT_TESTS = Path(__file__).resolve().parent / "promtool"
RUNBOOKS = "https://github.com/edgefd/edgefd/blob/main/docs/troubleshooting.md#"


def rule_object() -> dict[str, Any]:
    return yaml.safe_load(SOURCE.read_text())


def alerts(obj: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Every alerting rule by name (names are unique: a test asks)."""
    obj = obj or rule_object()
    return {r["alert"]: r for g in obj["spec"]["groups"] for r in g["rules"] if "alert" in r}


def write_rule_file(path: Path, obj: dict[str, Any] | None = None) -> Path:
    """The object's spec, which is a Prometheus rule file (`groups:`), for promtool."""
    obj = obj or rule_object()
    path.write_text(yaml.safe_dump(obj["spec"], sort_keys=False))
    return path


def promtool() -> str:
    """promtool from Debian's `prometheus` package (scripts/lib/packages, pkgs_alerts): skip
    without it, as a missing harness binary does, and fail under CI, where nothing skips."""
    found = shutil.which("promtool")
    if found:
        return found
    msg = "promtool missing (Debian's prometheus package): run scripts/bootstrap"
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)
    raise AssertionError("unreachable")  # pragma: no cover


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def unit_test_dir(tmp: Path, obj: dict[str, Any] | None = None) -> list[Path]:
    """The promtool unit tests copied beside a rule file of `obj` (their `rule_files` name
    rules.yaml, next to them): the test files to run."""
    write_rule_file(tmp / "rules.yaml", obj)
    out = []
    for f in sorted(UNIT_TESTS.glob("*.yaml")):
        shutil.copy(f, tmp / f.name)
        out.append(tmp / f.name)
    return out


@dataclass(frozen=True)
class Selector:
    """One series selector of an expression: the metric name and its label matchers."""

    name: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, operator, value)


def selectors(expr: str) -> list[Selector]:
    """Every vector selector in `expr` (in range vectors, under `offset`, inside functions
    and aggregations), in the order the parser walks them."""
    import promql_parser

    found: list[Selector] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            ms = tuple(
                (m.name, _op(m.op), m.value) for m in node.matchers.matchers if m.name != "__name__"
            )
            name = node.name or next(
                (m.value for m in node.matchers.matchers if m.name == "__name__"), ""
            )
            found.append(Selector(name, ms))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


OPERATORS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}


def _op(op: Any) -> str:
    return OPERATORS[str(op).rpartition(".")[2]]  # promql_parser.MatchOp.Equal -> "="


def rule_selectors(obj: dict[str, Any] | None = None) -> dict[str, list[Selector]]:
    """Each alert's selectors."""
    return {name: selectors(rule["expr"]) for name, rule in alerts(obj).items()}
