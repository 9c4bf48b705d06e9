"""The scheduling guide (docs/scheduling.md) read as a test plan: its YAML blocks, the expectation
stated right after each one, the scenarios (headings) they belong to, and the fleet table.

The guide's grammar is what a reader sees, so the prose cannot say one thing while the test
checks another:

- a fenced ```yaml block is followed, as its next paragraph, by exactly one expectation:
  ``**Lands on** `node`[, `node` … or `node`]`` (the pod is bound to one of them),
  ``**Stays Pending**: `phrase`[, `phrase`]`` (unschedulable; the scheduler's message holds every
  phrase), or ``**Publishes** `resource: n` on `node`[, … and `resource: n` on `node`]`` (a
  ConfigMap of the device plugin: every non-zero edgefd resource it makes the fleet advertise);
- an expectation anywhere else, a block without one, or a Kubernetes manifest in a fence that is
  not marked ``yaml``, is an error;
- every heading starts a scenario, applied in order on the empty fleet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "scheduling.md"

LANDS = "Lands on"
PENDING = "Stays Pending"
PUBLISHES = "Publishes"
MARKERS = (LANDS, PENDING, PUBLISHES)

_FENCE = re.compile(r"^(```+)\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_MARKER = re.compile(r"^\*\*(" + "|".join(map(re.escape, MARKERS)) + r")\*\*:?\s*(.*)$")
_SPAN = r"`[^`]+`"
# code spans joined by ", ", " or ", ", or ", " and ": where the list ends, prose begins
_SPAN_LIST = re.compile(rf"{_SPAN}(?:(?:,? or |,? and |, ){_SPAN})*")
_PUB_ITEM = r"`[^`]+` on `[^`]+`"
_PUB_LIST = re.compile(rf"{_PUB_ITEM}(?:(?:,? and |, ){_PUB_ITEM})*")
_PUBLISHED = re.compile(r"`([^`:]+):\s*(\d+)` on `([^`]+)`")

DRA_GROUP = "resource.k8s.io/"
DRA_MODE = "# with devplugin --api dra"


class GuideError(ValueError):
    """The guide breaks its own grammar; the message names the line."""


@dataclass(frozen=True)
class Expectation:
    kind: str  # LANDS | PENDING | PUBLISHES
    line: int
    text: str
    nodes: tuple[str, ...] = ()  # LANDS: where the pod may be bound
    phrases: tuple[str, ...] = ()  # PENDING: in the scheduler's message
    published: tuple[tuple[str, str, int], ...] = ()  # PUBLISHES: (node, resource, count)


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    scenario: str
    text: str
    objects: tuple[dict[str, Any], ...]
    expect: Expectation

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]

    @property
    def pod(self) -> dict[str, Any] | None:
        pods = self.of_kind("Pod")
        return pods[0] if pods else None

    @property
    def pod_name(self) -> str:
        pod = self.pod
        return pod["metadata"]["name"] if pod else ""

    @property
    def config(self) -> str | None:
        """The device plugin's resources.yaml, for a ConfigMap block."""
        maps = self.of_kind("ConfigMap")
        return maps[0].get("data", {}).get("resources.yaml") if maps else None

    @property
    def dra_mode(self) -> bool:
        """Whether the block is applied with every node on `devplugin --api dra` (a first
        line `# with devplugin --api dra`): no node advertises an edgefd.io resource, and a
        pod's extended resources are served by the DeviceClasses that carry their names."""
        return self.text.lstrip().startswith(DRA_MODE)

    @property
    def dra(self) -> bool:
        """Whether the block needs Dynamic Resource Allocation (claims, or a pod using them)."""
        return self.dra_mode or any(
            str(o.get("apiVersion", "")).startswith(DRA_GROUP)
            or (o.get("kind") == "Pod" and (o.get("spec") or {}).get("resourceClaims"))
            for o in self.objects
        )


@dataclass
class Scenario:
    title: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def dra(self) -> bool:
        return any(b.dra for b in self.blocks)


@dataclass(frozen=True)
class FleetRow:
    node: str
    line: int
    labels: dict[str, str]  # edgefd capability labels the table lists
    resources: dict[str, int]  # extended resources the table lists


def parse_expectation(kind: str, rest: str, line: int) -> Expectation:
    if kind == PUBLISHES:
        m = _PUB_LIST.match(rest)
        items = re.findall(_PUB_ITEM, m.group(0)) if m else []
        found = _PUBLISHED.findall(m.group(0)) if m else []
        published = tuple((node, res.strip(), int(n)) for res, n, node in found)
        if not published or len(published) != len(items):
            raise GuideError(
                f"line {line}: **{PUBLISHES}** wants `resource: n` on `node`, … and `resource: n` "
                f"on `node`; got {rest!r}"
            )
        return Expectation(kind, line, rest, published=published)
    m = _SPAN_LIST.match(rest)
    spans = re.findall(r"`([^`]+)`", m.group(0)) if m else []
    if not spans:
        raise GuideError(f"line {line}: **{kind}** names nothing in code spans: {rest!r}")
    if kind == LANDS:
        return Expectation(kind, line, rest, nodes=tuple(spans))
    return Expectation(kind, line, rest, phrases=tuple(spans))


def _objects(text: str, line: int) -> tuple[dict[str, Any], ...]:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise GuideError(f"line {line}: the YAML block does not parse: {e}") from e
    for d in docs:
        if not isinstance(d, dict) or not d.get("kind") or not d.get("apiVersion"):
            raise GuideError(f"line {line}: every document of a block is a Kubernetes object")
        if not isinstance(d.get("metadata"), dict) or not d["metadata"].get("name"):
            raise GuideError(f"line {line}: every object of a block has a metadata.name")
    if not docs:
        raise GuideError(f"line {line}: empty YAML block")
    return tuple(docs)


def _check_block(objects: tuple[dict[str, Any], ...], expect: Expectation, line: int) -> None:
    kinds = [o["kind"] for o in objects]
    if expect.kind == PUBLISHES:
        if kinds != ["ConfigMap"] or "resources.yaml" not in (objects[0].get("data") or {}):
            raise GuideError(
                f"line {line}: **{PUBLISHES}** goes with one ConfigMap holding resources.yaml"
            )
        return
    if kinds.count("Pod") != 1:
        raise GuideError(f"line {line}: **{expect.kind}** goes with a block of exactly one Pod")
    if any("namespace" in o["metadata"] for o in objects):
        raise GuideError(f"line {line}: the recipes do not name a namespace")


def parse(text: str) -> list[Scenario]:
    """The guide's scenarios, each with its blocks and their expectations, in document order."""
    lines = text.splitlines()
    scenarios: list[Scenario] = []
    title = ""
    # (line, lang, text) of a block still waiting for its expectation
    pending: tuple[int, str, str] | None = None
    i = 0
    while i < len(lines):
        raw = lines[i]
        fence = _FENCE.match(raw)
        if fence:
            start, lang, ticks = i + 1, fence.group(2).lower(), fence.group(1)
            j = i + 1
            while j < len(lines) and lines[j].strip() != ticks:
                j += 1
            if j == len(lines):
                raise GuideError(f"line {start}: fence never closed")
            body = "\n".join(lines[i + 1 : j]) + "\n"
            if pending:
                raise GuideError(f"line {pending[0]}: YAML block without a stated expectation")
            if lang in ("yaml", "yml"):
                pending = (start, lang, body)
            elif re.search(r"^\s*apiVersion:", body, re.M):
                raise GuideError(f"line {start}: a Kubernetes manifest in a fence not marked yaml")
            i = j + 1
            continue
        heading = _HEADING.match(raw)
        if heading:
            if pending:
                raise GuideError(f"line {pending[0]}: YAML block without a stated expectation")
            title = heading.group(2)
            scenarios.append(Scenario(title))
            i += 1
            continue
        marker = _MARKER.match(raw.strip())
        if marker:
            if not pending:
                raise GuideError(f"line {i + 1}: **{marker.group(1)}** without a YAML block")
            # the whole paragraph: a list of nodes may wrap onto the next lines
            para = [marker.group(2)]
            k = i + 1
            while k < len(lines) and lines[k].strip() and not _FENCE.match(lines[k]):
                para.append(lines[k].strip())
                k += 1
            expect = parse_expectation(marker.group(1), " ".join(para), i + 1)
            objects = _objects(pending[2], pending[0])
            _check_block(objects, expect, pending[0])
            if not scenarios:
                scenarios.append(Scenario(title))
            scenarios[-1].blocks.append(Block(pending[0], title, pending[2], objects, expect))
            pending = None
            i = k
            continue
        if pending and raw.strip():
            raise GuideError(f"line {pending[0]}: YAML block without a stated expectation")
        i += 1
    if pending:
        raise GuideError(f"line {pending[0]}: YAML block without a stated expectation")
    _check_unique_names(scenarios)
    return [s for s in scenarios if s.blocks]


def _check_unique_names(scenarios: list[Scenario]) -> None:
    seen: dict[tuple[str, str], int] = {}
    for s in scenarios:
        for b in s.blocks:
            for o in b.objects:
                key = (o["kind"], o["metadata"]["name"])
                if key in seen:
                    raise GuideError(f"line {b.line}: {key[0]} {key[1]!r} also at line {seen[key]}")
                seen[key] = b.line


def fleet_table(text: str) -> list[FleetRow]:
    """The rows of the sample-fleet table: ``| `node` | hardware | labels | resources |``."""
    rows = []
    for n, raw in enumerate(text.splitlines(), 1):
        cells = [c.strip() for c in raw.strip().strip("|").split("|")]
        if not raw.lstrip().startswith("|") or len(cells) != 4:
            continue
        m = re.fullmatch(r"`([a-z0-9-]+)`", cells[0])
        if not m:
            continue
        labels = dict(s.split("=", 1) for s in re.findall(r"`([^`=]+=[^`]*)`", cells[2]))
        resources = {k: int(v) for k, v in re.findall(r"`([^`:]+):\s*(\d+)`", cells[3])}
        rows.append(FleetRow(m.group(1), n, labels, resources))
    return rows


def load(path: Path = GUIDE) -> tuple[list[Scenario], list[FleetRow]]:
    text = path.read_text()
    return parse(text), fleet_table(text)
