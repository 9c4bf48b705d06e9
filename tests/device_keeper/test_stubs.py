"""The keeper's CRI subset keeps CRI's wire names and field numbers. (That every committed stub
regenerates byte for byte, the keeper's included, is tests/devplugin/api/test_generate.py.)"""

from __future__ import annotations

import os
import re

import pytest

from edgefd.devplugin.api import generate


def test_cri_subset_matches_cri_api() -> None:
    """Every field of our subset has CRI's number (k8s.io/cri-api's api.proto, when present)."""
    cri = generate.kubelet_module_dir().parent / "cri-api@v0.37.2/pkg/apis/runtime/v1/api.proto"
    if not cri.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{cri} missing (scripts/build-harness downloads it)", pytrace=False)
        pytest.skip(f"{cri} missing")
    theirs = cri.read_text()
    ours = (generate.by_name("cri").out_dir / "cri.proto").read_text()
    for msg, body in re.findall(r"^message (\w+) \{(.*?)^\}", ours, re.S | re.M):
        m = re.search(rf"^message {msg} \{{(.*?)^\}}", theirs, re.S | re.M)
        assert m, msg
        for field in re.findall(r"^\s+(\S.*?=\s*\d+);", body, re.M):
            assert re.search(rf"\s{re.escape(field)};", m.group(1)), f"{msg}: {field}"
