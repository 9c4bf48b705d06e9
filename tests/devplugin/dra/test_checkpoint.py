"""The prepared claims on disk (checkpoint.py): a round trip (with where a claim's device
metadata goes, none for a record an earlier release wrote), a corrupt file or one that is not
a small regular file (a FIFO, a symlink to /dev/zero, a huge file) moved aside without
blocking and the plugin starting empty, and a FIFO or a link put in the file's place after
start replaced by the next write, never written through."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edgefd.devplugin.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from edgefd.devplugin.dra.claims import Preparer
from edgefd.devplugin.links import LinkLayout
from tests.devplugin.devices import CORAL, NODE, coral, table
from tests.devplugin.dra.fakeapi import Claims
from tests.devplugin.dra.obstacles import fifo_symlink_huge, finishes


def test_claim_checkpoint_round_trip(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, NODE)
    claim = PreparedClaim(
        "u1",
        "ns",
        "c",
        (PreparedDevice("r", NODE, "coral-usb-2-1", "coral-usb-2-1", CORAL.name, ("k=x",)),),
    )
    cp.put(claim)
    assert Checkpoint(tmp_path, NODE).load() == {"u1": claim}
    assert cp.remove("u1") and not cp.remove("u1")
    assert Checkpoint(tmp_path, NODE).load() == {}


def test_where_a_claims_metadata_goes_is_kept_and_an_older_record_has_none(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, NODE)
    cp.put(PreparedClaim("u1", "ns", "c", (), "resourceclaimtemplates/tpu"))
    assert Checkpoint(tmp_path, NODE).load()["u1"].metadata_dir == "resourceclaimtemplates/tpu"
    older = {"uid": "u2", "namespace": "ns", "name": "c", "devices": []}
    body = {"version": 1, "node": NODE, "claims": [older]}
    (tmp_path / "checkpoint.json").write_text(json.dumps(body))
    assert Checkpoint(tmp_path, NODE).load()["u2"].metadata_dir == ""


def test_a_corrupt_checkpoint_is_moved_aside(tmp_path: Path, caplog) -> None:
    d = tmp_path / "plugin"
    d.mkdir()
    (d / "checkpoint.json").write_text("{not json")
    assert Checkpoint(d, NODE).load() == {}
    assert (d / "checkpoint.json.corrupt").exists()
    assert "unreadable" in caplog.text


@pytest.mark.parametrize("what", ["fifo", "symlink", "huge"])
def test_a_checkpoint_that_is_not_a_small_regular_file_is_moved_aside_without_blocking(
    tmp_path: Path, what: str, caplog
) -> None:
    d = tmp_path / "plugin"
    d.mkdir()
    fifo_symlink_huge(d / "checkpoint.json", what)
    assert finishes(Checkpoint(d, NODE).load) == {}
    assert "unreadable" in caplog.text
    assert os.path.lexists(d / "checkpoint.json.corrupt")


@pytest.mark.parametrize("what", ["fifo", "symlink"])
def test_a_checkpoint_path_obstructed_after_start_is_replaced_not_written_through(
    tmp_path: Path, what: str
) -> None:
    """The checkpoint is the plugin's own file: what is put in its place later (a FIFO, a
    link to a file elsewhere) is replaced by the next write, never written through, and the
    claim is prepared."""
    claims = Claims()
    cp = Checkpoint(tmp_path / "plugin", NODE)
    cp.load()
    p = Preparer(NODE, str(tmp_path / "cdi"), LinkLayout(None), cp, claims)
    p.update(table((coral(), CORAL)))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep\n")
    (tmp_path / "plugin").mkdir()
    if what == "fifo":
        os.mkfifo(cp.path)
    else:
        cp.path.symlink_to(elsewhere)
    ref = claims.add("c", ["coral-usb-2-1"])
    finishes(lambda: p.prepare(ref))
    assert cp.path.is_file() and not cp.path.is_symlink()
    assert list(Checkpoint(tmp_path / "plugin", NODE).load()) == [ref.uid]
    assert elsewhere.read_text() == "keep\n"
