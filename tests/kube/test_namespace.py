"""The namespace a command means when none is given: kubectl's rule."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edgefd.kube.namespace import default_namespace


def kubeconfig(path: Path, current: str | None, contexts: dict[str, str | None]) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "contexts": [
            {
                "name": n,
                "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})},
            }
            for n, ns in contexts.items()
        ],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_the_current_or_named_context(tmp_path: Path) -> None:
    k = kubeconfig(tmp_path / "k", "cams", {"cams": "vision", "plain": None})
    assert default_namespace(k, None) == "vision"
    assert default_namespace(k, "plain") == "default"


def test_merged_files_first_current_context_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = kubeconfig(tmp_path / "a", None, {"x": "from-a"})
    b = kubeconfig(tmp_path / "b", "x", {"x": "from-b"})
    monkeypatch.setenv("KUBECONFIG", f"{a}:{b}")
    assert default_namespace(None, None) == "from-a"  # the first file to name a context wins


def test_in_a_pod_its_own_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "namespace").write_text("edgefd\n")
    assert default_namespace(None, None, account_dir=str(tmp_path)) == "edgefd"
    assert default_namespace(None, None, account_dir=str(tmp_path / "none")) == "default"
