"""Differential test: our blob walker against the `fdt` package on well-formed blobs.

We parse blobs with our own bounded walker (see tools/dt_labeller/tree.py for why); `fdt` is
kept as an independent reader so that, on valid input, the two must agree node for node on the
two properties labelling reads.
"""

from pathlib import Path

import fdt  # setup.cfg [test]: the independent reader; never skip on its absence
import pytest

from edgefd.dt_labeller.tree import parse_blob
from tests.fixturegen.devicetree import compile_dts

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    *sorted((ROOT / "samples/devicetree").glob("*.dts")),
    *sorted((ROOT / "tests/fixtures/dt").glob("*.dts")),
]


def _fdt_view(blob: bytes) -> dict[str, tuple[bytes | None, bytes | None]]:
    tree = fdt.parse_dtb(blob)
    view: dict[str, tuple[bytes | None, bytes | None]] = {}
    for path, nodes, props in tree.walk():
        del nodes
        found: dict[str, bytes] = {}
        for prop in props:
            if prop.name in ("compatible", "status"):
                # fdt decodes string lists; rebuild the NUL-separated raw property
                found[prop.name] = b"".join(s.encode() + b"\0" for s in prop.data)
        view[path if path == "/" else path.rstrip("/")] = (
            found.get("compatible"),
            found.get("status"),
        )
    return view


@pytest.mark.parametrize("dts", SOURCES, ids=lambda p: p.name)
def test_walker_agrees_with_fdt_package(dts: Path) -> None:
    blob = compile_dts(dts)
    ours = {n.path or "/": (n.compatible, n.status) for n in parse_blob(blob).nodes}
    theirs = _fdt_view(blob)
    assert ours == theirs
    assert len(ours) > 10
