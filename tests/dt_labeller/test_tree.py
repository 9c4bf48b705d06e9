"""Reading the devicetree: the blob walker, the directory form, and hostile input."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from edgefd.dt_labeller import tree
from edgefd.dt_labeller.labels import derive
from edgefd.dt_labeller.tree import DtNode, MalformedTree, parse_blob, read_directory
from tests.fixturegen.devicetree import compile_dts, expand_dtb

REPO = Path(__file__).resolve().parents[2]
RPI4_DTS = REPO / "samples" / "devicetree" / "rpi4-model-b.dts"
JETSON_DTS = REPO / "tests" / "fixtures" / "dt" / "jetson-nano-like.dts"


@pytest.fixture(scope="module")
def rpi4() -> bytes:
    return compile_dts(RPI4_DTS)


def by_path(node: DtNode) -> list[str]:
    return node.path.split("/")


def _set_u32(blob: bytes, off: int, value: int) -> bytes:
    b = bytearray(blob)
    struct.pack_into(">I", b, off, value)
    return bytes(b)


def test_rpi4_sample_is_a_realistic_size(rpi4: bytes) -> None:
    assert 25_000 <= len(rpi4) <= 40_000
    t = parse_blob(rpi4)
    assert len(t.nodes) > 150


def test_blob_nodes_and_properties(rpi4: bytes) -> None:
    t = parse_blob(rpi4, source="x.dtb")
    by_path = {n.path: n for n in t.nodes}
    assert t.form == "blob" and t.source == "x.dtb"
    assert by_path["/"].compatible == b"raspberrypi,4-model-b\0brcm,bcm2711\0"
    assert by_path["/cpus/cpu@2"].compatible == b"arm,cortex-a72\0"
    assert by_path["/soc/serial@7e201400"].status == b"disabled\0"
    assert by_path["/scb/pcie@7d500000/pci@0,0/usb@0,0"].compatible == b"pci1106,3483\0"
    assert by_path["/cpus"].compatible is None
    assert t.nodes[0].path == "/"


def test_parse_is_fast_on_a_board_blob(rpi4: bytes) -> None:
    parse_blob(rpi4)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        parse_blob(rpi4)
        times.append(time.perf_counter() - t0)
    # budget is 5 ms; generous here so a loaded CI machine does not flake
    assert sorted(times)[len(times) // 2] < 0.015


@pytest.mark.parametrize("dts", [RPI4_DTS, JETSON_DTS])
def test_directory_form_gives_the_same_nodes_as_the_blob(dts: Path, tmp_path: Path) -> None:
    blob = compile_dts(dts)
    expand_dtb(blob, tmp_path / "base")
    from_blob = parse_blob(blob)
    from_dir = read_directory(tmp_path / "base")
    assert from_dir.warnings == ()
    assert sorted(from_dir.nodes, key=by_path) == sorted(from_blob.nodes, key=by_path)
    assert from_dir.nodes == tuple(sorted(from_dir.nodes, key=by_path))  # walked in name order
    for include_disabled in (False, True):
        a = derive(from_blob.nodes, ("cpu", "gpu", "pwm-fan"), include_disabled=include_disabled)
        b = derive(from_dir.nodes, ("cpu", "gpu", "pwm-fan"), include_disabled=include_disabled)
        assert a == b


def test_expand_dtb_writes_name_pseudo_properties(rpi4: bytes, tmp_path: Path) -> None:
    expand_dtb(rpi4, tmp_path)
    assert (tmp_path / "cpus" / "cpu@0" / "name").read_bytes() == b"cpu\0"
    assert (tmp_path / "cpus" / "cpu@0" / "reg").read_bytes() == b"\0\0\0\0"
    assert (tmp_path / "compatible").read_bytes() == b"raspberrypi,4-model-b\0brcm,bcm2711\0"


def test_compile_dts_accepts_text() -> None:
    blob = compile_dts('/dts-v1/;\n/ { compatible = "a,b"; };\n')
    assert parse_blob(blob).nodes[0].compatible == b"a,b\0"


# --- malformed blobs: one clear error each, never another exception -------------------------


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b"", "too short"),
        (lambda b: b[:20], "too short"),
        (lambda b: b"\0" * 4 + b[4:], "bad magic"),
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: _set_u32(b, 4, 0xFFFFFFF0), "only"),
        (lambda b: _set_u32(b, 8, 0xFFFFFF00), "structure block"),
        (lambda b: _set_u32(b, 8, 41), "structure block"),
        (lambda b: _set_u32(b, 12, len(b)), "strings block"),
        (lambda b: _set_u32(b, 16, 0xFFFFFFF0), "memory reservation"),
        (lambda b: _set_u32(b, 20, 15), "version"),
        (lambda b: _set_u32(b, 24, 18), "version"),
        (lambda b: _set_u32(b, 36, 0xFFFFFFF0), "structure block"),
    ],
)
def test_bad_header(rpi4: bytes, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MalformedTree, match=message):
        parse_blob(mutate(rpi4))


def _struct_off(blob: bytes) -> int:
    return struct.unpack_from(">I", blob, 8)[0]


def test_bad_token(rpi4: bytes) -> None:
    with pytest.raises(MalformedTree, match="unknown token 0x00000007"):
        parse_blob(_set_u32(rpi4, _struct_off(rpi4), 7))


def test_property_length_past_block(rpi4: bytes) -> None:
    off = _struct_off(rpi4)
    # root BEGIN_NODE, empty name padded to 4 bytes, then the first PROP's length
    assert struct.unpack_from(">I", rpi4, off + 8)[0] == 3
    with pytest.raises(MalformedTree, match="past the structure block"):
        parse_blob(_set_u32(rpi4, off + 12, 0x7FFFFFFF))


def test_property_name_offset_outside_strings(rpi4: bytes) -> None:
    off = _struct_off(rpi4)
    with pytest.raises(MalformedTree, match="outside the strings block"):
        parse_blob(_set_u32(rpi4, off + 16, 0x00FFFFFF))


def _deep_blob(depth: int) -> bytes:
    """A valid blob with `depth` nested nodes, built by hand (dtc would take long to parse it)."""
    body = (
        struct.pack(">I", 1)
        + b"\0\0\0\0"
        + (struct.pack(">I", 1) + b"n\0\0\0") * depth
        + struct.pack(">I", 2) * (depth + 1)
        + struct.pack(">I", 9)
    )
    off_rsv = 40
    off_struct = off_rsv + 16
    off_strings = off_struct + len(body)
    total = off_strings
    header = struct.pack(
        ">10I", 0xD00DFEED, total, off_struct, off_strings, off_rsv, 17, 16, 0, 0, len(body)
    )
    return header + b"\0" * 16 + body


def test_absurd_nesting_is_refused_quickly() -> None:
    assert len(parse_blob(_deep_blob(10)).nodes) == 11
    blob = _deep_blob(100_000)
    t0 = time.perf_counter()
    with pytest.raises(MalformedTree, match="nesting deeper than 64"):
        parse_blob(blob)
    assert time.perf_counter() - t0 < 1


def test_unbalanced_and_missing_end(rpi4: bytes) -> None:
    # drop the END token: the block now ends without one
    size_struct = struct.unpack_from(">I", rpi4, 36)[0]
    with pytest.raises(MalformedTree, match="without an END token"):
        parse_blob(_set_u32(rpi4, 36, size_struct - 4))


def test_non_utf8_node_name_is_kept_visible() -> None:
    blob = bytearray(_deep_blob(1))
    i = blob.index(b"n\0\0\0")
    blob[i] = 0xFF
    t = parse_blob(bytes(blob))
    assert t.nodes[1].path == "/\\xff"


def test_oversized_blob_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    big = tmp_path / "big.dtb"
    with open(big, "wb") as fh:
        fh.truncate(tree.MAX_BLOB_SIZE + 100)
    with pytest.raises(MalformedTree, match="over"):
        tree.read_blob_file(big)


# --- directory form: hostile trees -----------------------------------------------------------


def _dir_tree(root: Path) -> Path:
    base = root / "base"
    (base / "cpus" / "cpu@0").mkdir(parents=True)
    (base / "compatible").write_bytes(b"acme,board\0")
    (base / "name").write_bytes(b"\0")
    (base / "cpus" / "cpu@0" / "compatible").write_bytes(b"arm,cortex-a53\0")
    (base / "cpus" / "cpu@0" / "status").write_bytes(b"okay\0")
    return base


def test_symlink_loop_is_not_followed(tmp_path: Path) -> None:
    base = _dir_tree(tmp_path)
    os.symlink("..", base / "cpus" / "cpu@0" / "loop")
    os.symlink("compatible", base / "cpus" / "cpu@0" / "alias")
    t = read_directory(base)
    assert [n.path for n in t.nodes] == ["/", "/cpus", "/cpus/cpu@0"]
    assert len(t.warnings) == 2
    assert all("symlink; not followed" in w for w in t.warnings)


def test_symlinked_compatible_is_ignored_with_warning(tmp_path: Path) -> None:
    base = _dir_tree(tmp_path)
    (base / "real").write_bytes(b"evil,thing\0")
    os.unlink(base / "compatible")
    os.symlink("real", base / "compatible")
    t = read_directory(base)
    assert t.nodes[0].compatible is None
    assert any("'compatible' is a symlink" in w for w in t.warnings)


def test_unreadable_property_is_skipped_with_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _dir_tree(tmp_path)
    real_open = os.open

    def fake_open(path, *a, **kw):  # type: ignore[no-untyped-def]
        if str(path).endswith("cpu@0/compatible"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(tree.os, "open", fake_open)
    t = read_directory(base)
    cpu = t.nodes[-1]
    assert cpu.path == "/cpus/cpu@0" and cpu.compatible is None and cpu.status == b"okay\0"
    assert t.warnings == (
        "/cpus/cpu@0:compatible: cannot read (Permission denied); property ignored",
    )


def test_unlistable_node_is_skipped_with_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _dir_tree(tmp_path)
    real_scandir = os.scandir

    def fake_scandir(path):  # type: ignore[no-untyped-def]
        if str(path).endswith("/cpus"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", fake_scandir)
    t = read_directory(base)
    assert [n.path for n in t.nodes] == ["/"]
    assert t.warnings == ("/cpus: cannot list node (Permission denied); node skipped",)


def test_oversized_property_file_is_skipped(tmp_path: Path) -> None:
    base = _dir_tree(tmp_path)
    (base / "compatible").write_bytes(b"a" * (tree.MAX_PROP_FILE + 1))
    t = read_directory(base)
    assert t.nodes[0].compatible is None
    assert "over 65536 bytes" in t.warnings[0]


def test_fifo_named_like_a_property_does_not_block(tmp_path: Path) -> None:
    base = _dir_tree(tmp_path)
    os.unlink(base / "cpus" / "cpu@0" / "status")
    os.mkfifo(base / "cpus" / "cpu@0" / "status")
    t = read_directory(base)
    assert t.nodes[-1].status is None


def test_absurd_directory_depth_is_cut_off(tmp_path: Path) -> None:
    base = _dir_tree(tmp_path)
    p = base
    for _ in range(tree.MAX_DEPTH + 5):
        p = p / "n"
    p.mkdir(parents=True)
    t = read_directory(base)
    # the root is level 0, so MAX_DEPTH levels end at MAX_DEPTH - 1 separators, as in blobs
    assert max(n.path.count("/") for n in t.nodes) == tree.MAX_DEPTH - 1
    assert any("nested deeper than 64" in w for w in t.warnings)


def test_unlistable_top_directory_is_an_error_not_an_empty_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _dir_tree(tmp_path)
    real_scandir = os.scandir

    def fake_scandir(path):  # type: ignore[no-untyped-def]
        if str(path) == str(base):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", fake_scandir)
    with pytest.raises(PermissionError):
        read_directory(base)


@pytest.mark.parametrize("kind", ["fifo", "directory", "loop"])
def test_blob_file_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    p = tmp_path / "fdt"
    if kind == "fifo":
        os.mkfifo(p)  # a plain open() would wait for a writer for ever
    elif kind == "directory":
        p.mkdir()
    else:
        os.symlink("fdt", p)
    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        tree.read_blob_file(p)
    assert time.monotonic() - t0 < 1.0
    if kind == "loop":
        assert "symbolic links" in str(e.value.strerror)
    else:
        assert f"a {kind if kind == 'directory' else 'FIFO'}, not a devicetree blob file" in str(
            e.value.strerror
        )


def test_a_blob_the_user_pipes_in_is_read(tmp_path: Path) -> None:
    blob = compile_dts('/dts-v1/;\n/ { compatible = "acme,board"; };\n')
    r, w = os.pipe()
    os.write(w, blob)
    os.close(w)
    try:
        assert tree.read_blob_file(f"/proc/self/fd/{r}", allow_pipe=True) == blob
    finally:
        os.close(r)


@pytest.mark.parametrize(
    "source", [b"/dts-v1/;\n/ { };\n", b"\n  /dts-v1/;", b'/include/ "a.dtsi"']
)
def test_devicetree_source_is_told_to_be_compiled(source: bytes) -> None:
    """Issue 45 item 7: a .dts given as the blob was '17 bytes is too short for a devicetree
    header'; now the command that makes the blob."""
    with pytest.raises(
        MalformedTree,
        match=r"devicetree source \(\.dts\): compile it first with `dtc -I dts -O dtb",
    ):
        parse_blob(source)
