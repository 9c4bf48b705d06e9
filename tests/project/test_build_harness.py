"""scripts/build-harness builds one group at a time per checkout, and `--later` leaves a build
running in the background that everyone who needs its binaries waits for (scripts/bootstrap
builds the node's runtime and helm that way while the first tests run).

The script runs in a copy of its checkout with a stand-in `go` on PATH whose build waits for a
gate file: what is tested is the script's own locking, not Go. The real builds run in every
`make test` (scripts/bootstrap --all)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.peers.processes import wait_for_build

ROOT = Path(__file__).resolve().parents[2]

FAKE_GO = """#!/bin/sh
# stand-in for go: a build waits for $FAKE_GO_GATE, then writes each binary and logs itself
case "$1" in
  version) echo "go version go1.26.0 linux/amd64" ;;
  list) echo v0.0.0 ;;
  mod) ;;
  build)
    while [ "$1" != -o ]; do shift; done
    out=$2
    echo "start $$" >>"$FAKE_GO_LOG"
    while [ ! -e "$FAKE_GO_GATE" ]; do sleep 0.05; done
    printf '#!/bin/sh\\n' >"$out/actionlint"
    chmod +x "$out/actionlint"
    echo "done $$" >>"$FAKE_GO_LOG"
    ;;
esac
"""


class Checkout:
    """A copy of the script, what it sources and the one group's module, with the fake go."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "repo"
        (self.root / "scripts" / "lib").mkdir(parents=True)
        shutil.copy2(ROOT / "scripts" / "build-harness", self.root / "scripts")
        shutil.copy2(ROOT / "scripts" / "lib" / "phase", self.root / "scripts" / "lib")
        shutil.copytree(ROOT / "tests" / "harness" / "lint", self.root / "tests/harness/lint")
        gobin = tmp / "go-bin"
        gobin.mkdir()
        (gobin / "go").write_text(FAKE_GO)
        (gobin / "go").chmod(0o755)
        self.gate, self.log = tmp / "gate", tmp / "go.log"
        self.env = {
            **os.environ,
            "PATH": f"{gobin}:{os.environ['PATH']}",
            "FAKE_GO_GATE": str(self.gate),
            "FAKE_GO_LOG": str(self.log),
            "EDGEFD_CACHE_DIR": str(tmp / "store"),
        }
        for k in ("EDGEFD_HARNESS_LOCKED", "EDGEFD_PHASE_LOG", "FORCE"):
            self.env.pop(k, None)
        self.bin = self.root / ".cache" / "harness" / "bin"
        self.lock = self.root / ".cache" / "harness" / ".lock"

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.root / "scripts" / "build-harness"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.root / "scripts" / "build-harness"), *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def builds(self) -> list[str]:
        return self.log.read_text().split("\n")[:-1] if self.log.exists() else []

    def held(self) -> bool:
        with open(self.lock) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
            return False


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Checkout]:
    c = Checkout(tmp_path)
    yield c
    c.gate.touch()  # no stand-in build outlives the test
    if c.lock.exists():
        wait_for_build(c.lock, timeout=30)


def test_later_returns_at_once_and_a_second_build_waits_for_it(checkout: Checkout) -> None:
    t0 = time.monotonic()
    r = checkout.run("--later", "lint")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 10
    assert "building in the background at low priority" in r.stderr
    wait_until(lambda: len(checkout.builds()) == 1, timeout=10)
    assert checkout.held()
    assert not (checkout.bin / "actionlint").exists()  # nothing half-built is in bin/

    # whoever needs it now waits: the script itself (scripts/e2e) and the tests' harness_binary
    second = checkout.start("lint")
    waited: list[bool] = []
    waiter = threading.Thread(target=lambda: waited.append(wait_for_build(checkout.lock, 30)))
    waiter.start()
    time.sleep(1.0)
    assert second.poll() is None and waiter.is_alive()
    assert len(checkout.builds()) == 1  # the second did not start a build of its own

    checkout.gate.touch()
    _, err = second.communicate(timeout=30)
    waiter.join(timeout=30)
    assert second.returncode == 0, err
    assert "waiting for the build in progress" in err
    assert waited == [True]
    assert [b.split()[0] for b in checkout.builds()] == ["start", "done"]  # one build in all
    assert os.access(checkout.bin / "actionlint", os.X_OK)
    assert (checkout.bin / ".stamp-lint").is_file()
    assert not (checkout.bin / ".building").exists()
    assert "lint up to date" in checkout.run("lint").stderr
    assert checkout.run("--later", "lint").stderr == ""  # up to date: nothing said, nothing run


def test_later_leaves_the_groups_to_whoever_needs_them_when_a_build_runs(
    checkout: Checkout,
) -> None:
    checkout.lock.parent.mkdir(parents=True)
    with open(checkout.lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        r = checkout.run("--later", "lint", timeout=10)
        assert r.returncode == 0, r.stderr
        assert "not started, another build holds" in r.stderr
        assert checkout.builds() == []
        fcntl.flock(f, fcntl.LOCK_UN)
    assert wait_for_build(checkout.lock, timeout=1) is False  # nobody holds it: no wait


def test_later_needs_groups(checkout: Checkout) -> None:
    r = checkout.run("--later")
    assert r.returncode == 2
    assert "--later needs the groups" in r.stderr
