"""The operator's documents hold together (issue 34 item 7): every relative link in a Markdown
file of the repository names a file that exists (and a heading that exists, for an anchor into
Markdown); the README stays an operator's guide whose first block is the two commands `.ci/run`
and a newcomer rely on; the troubleshooting page answers its five questions with commands; and
every flag those pages hand an operator for an edgefd tool is one the tool accepts."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
TROUBLESHOOTING = DOCS / "troubleshooting.md"

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`]*`")
TOOLS = ("dt-labeller", "usb-scan", "pci-scan", "feature-sink", "devplugin", "device-keeper")
PLUGIN = "kubectl-edgefd"


def markdown_files() -> list[Path]:
    """The Markdown files git tracks, plus new ones not yet added (a link test must see a
    page before its commit)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(ROOT / p for p in out if (ROOT / p).is_file())


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) outside fenced blocks, inline code removed: a link in an example
    is not a link of the page."""
    lines, fenced = [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((n, INLINE_CODE.sub("", line)))
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out, fenced = set(), False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6} (.+)$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    bad = []
    for n, line in prose_lines(path):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)}:{n}: {target}"
            if not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{where}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return bad


def test_anchors_are_githubs() -> None:
    assert slug("DRA (Dynamic Resource Allocation)") == "dra-dynamic-resource-allocation"
    assert slug("10. My pod is Pending") == "10-my-pod-is-pending"
    assert slug("EPERM or EACCES in my container") == "eperm-or-eacces-in-my-container"
    assert slug("DRA (`--api dra`)") == "dra---api-dra"


def test_every_relative_link_in_markdown_resolves() -> None:
    files = markdown_files()
    assert README in files and TROUBLESHOOTING in files
    assert [b for f in files for b in broken_links(f)] == []


def test_a_broken_link_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: a missing file and a missing heading are both found, a link inside
    code is not a link."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "a.md").write_text(
        "# Top\n[ok](#top) [gone](missing.md) [head](b.md#nowhere) `[code](x.md)`\n"
        "```\n[block](y.md)\n```\n"
    )
    (tmp_path / "b.md").write_text("# B\n")
    assert broken_links(tmp_path / "a.md") == [
        "a.md:2: missing.md: no such file",
        "a.md:2: b.md#nowhere: no heading #nowhere in b.md",
    ]


def first_block(path: Path) -> list[str]:
    text = path.read_text()
    block = text.split("```", 2)[1]
    return [line.split("#")[0].strip() for line in block.splitlines()[1:] if line.strip()]


def test_readme_opens_with_the_two_commands_ci_runs() -> None:
    """The README's first block: the demo and the test command; `.ci/run` runs "exactly the
    README's test command" after its bootstrap."""
    assert first_block(README) == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "make test" in [line.strip() for line in ci]


def test_readme_is_an_operators_guide() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 310  # 300, and kubectl edgefd's example output
    for heading in ("## What edgefd does", "## Install", "## Check that it worked"):
        assert heading in text
    # the agreed names of issue 34 (/tmp/iface34.md): one value or one component each
    for name in (
        "--set distribution=k3s",
        "--set distribution=microk8s",
        "--set distribution=k0s",
        "k8s/overlays/k3s",
        "k8s/overlays/microk8s",
        "k8s/overlays/k0s",
        "--set deviceKeeper.enabled=false",
        "k8s/overlays/no-device-keeper",
    ):
        assert name in text, name
    for page in ("docs/troubleshooting.md", "docs/development.md", "docs/failure-modes.md"):
        assert f"]({page}" in text, page


def test_what_left_the_readme_is_somewhere() -> None:
    """Nothing of the old README is lost: each of its sections has a home in docs/."""
    homes = {
        "development.md": [
            "## Testing",
            "**Time budget.**",
            "**whole `.ci/run`**",
            "## The image",
            "## The whole system on a real node",
            "## Benchmarks",
            "## Fleet scale",
            "## Layout",
            "### The inventory",
        ],
        "devices.md": [
            "## Live labels",
            "## Device names",
            "## DRA (Dynamic Resource Allocation)",
            "### When a device goes away",
            "## Coral USB and NCS2 in running containers",
            "## Node reboot",
        ],
        "tools.md": [
            "## Logs",
            "## dt-labeller",
            "## usb-scan, pci-scan",
            "## feature-sink",
            "## devplugin",
            "## In CI pipelines",
        ],
        "failure-modes.md": [
            f"**{c}**"
            for c in (
                "dt-labeller",
                "usb-scan, pci-scan",
                "feature-sink",
                "devplugin",
                "device-keeper",
            )
        ],
    }
    missing = [
        f"{page}: {h}"
        for page, hs in homes.items()
        for h in hs
        if h not in (DOCS / page).read_text()
    ]
    assert missing == []


QUESTIONS = (
    "No edgefd labels on my node",
    "EPERM or EACCES in my container",
    "The device plugin is not registered",
    "My pod is Pending",
    "An edgefd alert fired",
)


def sections(path: Path) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", path.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_troubleshooting_answers_each_question_with_commands() -> None:
    found = sections(TROUBLESHOOTING)
    assert list(found) == list(QUESTIONS)
    for question, body in found.items():
        commands = [c for c in shell_commands(body) if c.startswith("kubectl ")]
        assert commands, question
        assert any(c.startswith(("kubectl logs", "kubectl exec")) for c in commands), question


def shell_commands(text: str) -> list[str]:
    """Each command line of the fenced blocks (comments dropped)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced and line.strip() and not line.lstrip().startswith("#"):
            out.append(line.split(" #")[0].strip())
    return out


def tool_invocations(text: str) -> list[list[str]]:
    """Every edgefd tool run the page shows: `kubectl exec … -- <tool> …`, a line starting with
    a tool, and a tool after a pipe."""
    runs = []
    for command in shell_commands(text):
        if not command.startswith((*TOOLS, "kubectl", ". ", "set ")):
            continue  # a block of output (log lines), not a command
        tokens = shlex.split(command.replace("<", "").replace(">", ""))
        parts: list[list[str]] = [[]]
        for token in tokens:
            if token in ("|", "&&", ";"):
                parts.append([])
            else:
                parts[-1].append(token)
        for words in parts:
            if "--" in words:
                words = words[words.index("--") + 1 :]
            if words[:2] == ["kubectl", "edgefd"]:  # the kubectl plugin, kubectl-edgefd
                words = [PLUGIN, *words[2:]]
            if words and words[0] in (*TOOLS, PLUGIN):
                runs.append(words)
    return runs


def tool_help(command: tuple[str, ...]) -> str:
    exe = Path(sys.executable).parent / command[0]
    return subprocess.run(
        [str(exe), *command[1:], "--help"], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def test_every_flag_the_operator_pages_show_is_the_tools_own() -> None:
    """Checked against each tool's own --help (a subcommand's for device-keeper)."""
    pages = [README, TROUBLESHOOTING, DOCS / "tools.md", DOCS / "devices.md"]
    runs = [run for p in pages for run in tool_invocations(p.read_text())]
    assert len(runs) >= 20  # the exec lines, the dry runs, the per-tool examples
    helps: dict[tuple[str, ...], str] = {}
    unknown = []
    for run in runs:
        command = tuple(run[:2]) if run[0] in ("device-keeper", PLUGIN) else (run[0],)
        text = helps.setdefault(command, tool_help(command))
        for word in run[len(command) :]:
            flag = word.split("=")[0]
            if flag.startswith("--") and not re.search(rf"(^|[\s,]){re.escape(flag)}\b", text):
                unknown.append(f"{run[0]} {flag}")
    assert unknown == []


POINTER = re.compile(r"(the README|docs/[\w-]+\.md), '([^']+)'")


def test_the_tools_point_at_sections_that_exist() -> None:
    """A tool's message that sends its reader to a page's section ("see docs/devices.md, 'When
    a device goes away'") names a page and a heading that exist, wherever the section moved."""
    pointers = [
        (path, page, heading)
        for path in sorted((ROOT / "tools").rglob("*.py"))
        for page, heading in POINTER.findall(path.read_text())
    ]
    assert pointers  # devplugin's --evict-after refusal at least
    bad = []
    for path, page, heading in pointers:
        dest = README if page == "the README" else ROOT / page
        if not dest.is_file() or slug(heading) not in anchors(dest):
            bad.append(f"{path.relative_to(ROOT)}: {page}, '{heading}'")
    assert bad == []
