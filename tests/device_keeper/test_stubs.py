"""The keeper's committed gRPC stubs regenerate byte for byte from their .proto (the kubelet's
own pod-resources api.proto; the keeper's CRI subset), and the CRI subset keeps CRI's wire
names and field numbers."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest

from edgefd.devplugin.api import generate

from .stubs import STUB_SETS


def _normalise(text: str) -> list[str]:
    return [
        ln
        for ln in text.splitlines()
        if not ln.startswith("# Protobuf Python Version:") and "GRPC_GENERATED_VERSION" not in ln
    ]


@pytest.mark.parametrize("stubs", STUB_SETS, ids=lambda s: s.name)
def test_generated_stubs_are_reproducible(stubs, tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    try:
        stubs.source()
    except generate.SourceMissing as e:
        if os.environ.get("CI"):
            pytest.fail(str(e), pytrace=False)
        pytest.skip(str(e))
    generate.generate_set(stubs, tmp_path)
    for name in stubs.outputs:
        committed = (stubs.out_dir / name).read_text()
        fresh = (tmp_path / name).read_text()
        diff = list(difflib.unified_diff(_normalise(committed), _normalise(fresh), name, "new"))
        assert not diff, "\n".join(diff[:40])


def test_cri_subset_matches_cri_api() -> None:
    """Every field of our subset has CRI's number (k8s.io/cri-api's api.proto, when present)."""
    cri = generate.kubelet_module_dir().parent / "cri-api@v0.37.2/pkg/apis/runtime/v1/api.proto"
    if not cri.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{cri} missing (scripts/build-harness downloads it)", pytrace=False)
        pytest.skip(f"{cri} missing")
    theirs = cri.read_text()
    ours = (STUB_SETS[1].out_dir / "cri.proto").read_text()
    for msg, body in re.findall(r"^message (\w+) \{(.*?)^\}", ours, re.S | re.M):
        m = re.search(rf"^message {msg} \{{(.*?)^\}}", theirs, re.S | re.M)
        assert m, msg
        for field in re.findall(r"^\s+(\S.*?=\s*\d+);", body, re.M):
            assert re.search(rf"\s{re.escape(field)};", m.group(1)), f"{msg}: {field}"
