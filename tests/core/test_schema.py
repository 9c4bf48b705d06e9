"""Reading the YAML documents people hand edgefd (edgefd.core.schema): every refusal names the
file and the field path it is about (`resources[1].usb[0].vendor`), an unknown key is refused
rather than defaulted, and numbers and durations must be finite and in range."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from edgefd.core.errors import BadInput
from edgefd.core.schema import Fields, parse_yaml, read_text, read_yaml

DOC = {"resources": [{"name": "a"}, {"name": "b", "usb": [{"vendor": "xyz1"}]}]}


def test_a_refusal_names_the_file_and_the_field_path() -> None:
    f = Fields(DOC, "", ("resources",), "resources.yaml")
    first, second = f.children("resources", ("name", "usb"))
    assert first.str("name") == "a" and first.children("usb", ("vendor",)) == []
    [usb] = second.children("usb", ("vendor",))
    with pytest.raises(BadInput) as e:
        usb.hex("vendor", 4)
    assert str(e.value) == "resources.yaml: resources[1].usb[0].vendor: 'xyz1' is not 4 hex digits"


def test_an_unknown_key_is_refused_with_the_known_ones() -> None:
    with pytest.raises(BadInput, match=r"^x.yaml: forget_afte: unknown field \(known: a, b\)$"):
        Fields({"forget_afte": "1h"}, "", ("b", "a"), "x.yaml")
    with pytest.raises(BadInput, match=r"^x.yaml: must be a mapping, not list$"):
        Fields([], "", (), "x.yaml")


def test_typed_accessors() -> None:
    f = Fields(
        {"hex": "0x1A6E", "list": "x", "flag": "yes", "n": 3, "strs": [" a ", 1]},
        "top",
        ("hex", "list", "flag", "n", "strs", "missing"),
    )
    assert f.hex("hex", (2, 4)) == "1a6e"
    assert f.str("missing", "default") == "default" and f.str_list("missing") is None
    for call, message in (
        (lambda: f.list("list"), "top.list: must be a list, not str"),
        (lambda: f.bool("flag", False), "top.flag: must be true or false, not 'yes'"),
        (lambda: f.str("missing", required=True), "top.missing: required"),
        (lambda: f.str_list("strs"), r"top.strs\[1\]: must be a string, not int"),
        (lambda: f.integer("n", 1, minimum=1, maximum=2), r"top.n: 3 is out of range"),
    ):
        with pytest.raises(BadInput, match=message):
            call()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "must be a finite number, not nan"),
        (math.inf, "must be a finite number, not inf"),
        (True, "must be a finite number, not True"),
        (-1, r"-1 is out of range \(must be >= 0\)"),
    ],
)
def test_a_number_is_finite_and_in_range(value: object, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        Fields({"n": value}, "", ("n",)).number("n", 1.0)


def test_a_duration_takes_the_flags_grammar_and_its_bounds() -> None:
    f = Fields({"d": "10m", "bad": "soon", "big": "2h"}, "", ("d", "bad", "big"))
    assert f.duration("d", 1.0) == 600.0 and f.duration("absent", 1.0) == 1.0
    with pytest.raises(BadInput, match="bad: 'soon' is not a duration"):
        f.duration("bad", 1.0)
    with pytest.raises(BadInput, match=r"big: '2h' is out of range \(must be 0 to 3600\)"):
        f.duration("big", 1.0, maximum=3600)


def test_yaml_that_does_not_parse_or_read_is_bad_input(tmp_path: Path) -> None:
    assert parse_yaml("a: [1, 2]\n", "x.yaml") == {"a": [1, 2]}
    with pytest.raises(BadInput, match=r"^x.yaml:2:1: did not find expected ',' or '}'"):
        parse_yaml("{ nope", "x.yaml")
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(BadInput, match=r"^cannot read configuration .*latin1.yaml: "):
        read_yaml(tmp_path / "latin1.yaml", "configuration")
    with pytest.raises(BadInput, match="No such file or directory"):
        read_yaml(tmp_path / "missing.yaml", "configuration")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "resources:\n  - name: a\n  - name: b\n   - x\n",
            "c1.yaml:4:4: did not find expected '-' indicator (in the list that starts at 2:3)",
        ),
        ("a: 'abc\n", "c1.yaml:2:1: found unexpected end of stream (in the quoted string that "
         "starts at 1:4)"),
        ("a: *x\n", "c1.yaml:1:4: found undefined alias"),
        ("a:\n  - x\n   z: 1\n", "c1.yaml:3:5: mapping values are not allowed in this context"),
    ],
)  # fmt: skip
def test_a_yaml_syntax_error_is_file_line_col_and_one_line(text: str, message: str) -> None:
    """Lines and columns count from 1 as editors do; no `<unicode string>`, no newline."""
    with pytest.raises(BadInput) as e:
        parse_yaml(text, "c1.yaml")
    assert str(e.value) == message


DUPLICATE = "; a key may appear only once in a mapping"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: 2\na: 3\n", "c.yaml:3:1: duplicate key 'a' (first at line 1)"),
        (
            "resources:\n  - name: edgefd.io/a\n    replicas: 1\n\n    replicas: 4\n",
            "c.yaml:5:5: duplicate key 'replicas' (first at line 3)",
        ),
        ("r: [{name: x, name: y}]\n", "c.yaml:1:15: duplicate key 'name' (first at line 1)"),
        ("1: a\n0x1: b\n", "c.yaml:2:1: duplicate key '0x1' (first at line 1)"),
        ("'k': 1\n\"k\": 2\n", "c.yaml:2:1: duplicate key 'k' (first at line 1)"),
    ],
)
def test_a_key_given_twice_is_refused_naming_it_and_both_lines(text: str, message: str) -> None:
    """Issue 46 item 7: PyYAML kept the last of two equal keys silently, so a resource pasted
    twice with an edit in the first copy ran a configuration nobody reads in the file."""
    with pytest.raises(BadInput) as e:
        parse_yaml(text, "c.yaml")
    assert str(e.value) == message + DUPLICATE


def test_equal_keys_in_different_mappings_and_a_merge_key_override_are_fine() -> None:
    doc = "a: {name: x}\nb: {name: y}\nbase: &b {x: 1, y: 2}\nitem:\n  <<: *b\n  x: 3\n"
    assert parse_yaml(doc, "c.yaml") == {
        "a": {"name": "x"},
        "b": {"name": "y"},
        "base": {"x": 1, "y": 2},
        "item": {"x": 3, "y": 2},
    }


def test_a_duplicate_key_in_a_file_is_bad_input_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "resources.yaml").write_text("resources: []\nresources: []\n")
    with pytest.raises(BadInput, match=r"resources.yaml:2:1: duplicate key 'resources' \(first"):
        read_yaml(tmp_path / "resources.yaml", "configuration")


@pytest.mark.parametrize(
    ("kind", "phrase"),
    [("fifo", "a FIFO, not a regular file"), ("large", "larger than 16 bytes")],
)
def test_a_configuration_that_is_not_a_small_regular_file_is_bad_input_at_once(
    tmp_path: Path, kind: str, phrase: str
) -> None:
    """Every tool's configuration (devplugin's and device-keeper's `--config`, the scanners',
    the catalogue) is read here: a FIFO, even behind the ConfigMap's symlink, is refused
    without blocking (issue 30, item 9), and the size is bounded."""
    target = tmp_path / "target.yaml"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.write_text("a: " + "x" * 20 + "\n")
    (tmp_path / "resources.yaml").symlink_to(target)
    with pytest.raises(BadInput, match=rf"^cannot read configuration .*resources.yaml: {phrase}$"):
        read_text(tmp_path / "resources.yaml", "configuration", limit=16)
    if kind == "fifo":
        with pytest.raises(BadInput, match=phrase):
            read_yaml(tmp_path / "resources.yaml", "configuration")


def test_a_kubeconfig_may_be_a_pipe_read_to_its_end(tmp_path: Path) -> None:
    """`--kubeconfig <(...)` (`pipe=True`): read, within the limit; a configuration is not."""
    r, w = os.pipe()
    os.write(w, b"a: 1\n")
    os.close(w)
    try:
        assert read_text(f"/dev/fd/{r}", "kubeconfig", pipe=True) == "a: 1\n"
    finally:
        os.close(r)
    r, w = os.pipe()
    os.write(w, b"x" * 32)
    os.close(w)
    try:
        with pytest.raises(BadInput, match="larger than 16 bytes"):
            read_text(f"/dev/fd/{r}", "kubeconfig", 16, pipe=True)
    finally:
        os.close(r)


def test_a_file_that_is_not_utf8_says_so_where_it_breaks(tmp_path: Path) -> None:
    """Issue 45 item 7: Python's codec words ('utf-8' codec can't decode byte 0xc4 in
    position 0: invalid continuation byte) became edgefd's, as the sink says of a feature file."""
    p = tmp_path / "resources.yaml"
    p.write_bytes(b"resources: []\n# caf\xc4\n")
    with pytest.raises(BadInput) as e:
        read_yaml(p, "configuration")
    assert str(e.value) == f"cannot read configuration {p}: not UTF-8 text (byte 0xc4 at offset 19)"
