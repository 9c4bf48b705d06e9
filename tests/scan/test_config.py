"""The scanners' NFD-style settings: command-line lists and nfd-worker.conf files, good or bad.

Ends with hypothesis fuzzing of both inputs: every document or option list is either a valid
SourceConfig or one error naming what is wrong (UsageError, exit 2; BadInput, exit 3).
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgefd.core.errors import BadInput, UsageError
from edgefd.pci_scan.labels import RULES as PCI_RULES
from edgefd.scan.config import (
    FIELDS_KEY,
    WHITELIST_KEY,
    SourceConfig,
    load_config_file,
    resolve_config,
    source_changes,
    split_list,
)
from edgefd.usb_scan.cli import main as usb_scan
from edgefd.usb_scan.labels import RULES as USB_RULES


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("host")
    (root / "sys/bus/usb/devices").mkdir(parents=True)
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    return root


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--class-whitelist", ",,,zz", "empty item in the comma-separated list"),
        ("--class-whitelist", ",", "empty item"),
        ("--class-whitelist", "fe,,ff", "empty item"),
        ("--class-whitelist", " ", "empty item"),
        ("--class-whitelist", "zz", "'zz' is not a hex class prefix"),
        ("--class-whitelist", "0x", "'0x' is not a hex class prefix"),
        ("--class-whitelist", "fe;ff", "'fe;ff' is not a hex class prefix"),
        ("--label-fields", ",,", "empty item"),
        ("--label-fields", "class,,vendor", "empty item"),
    ],
)
def test_garbage_lists_are_usage_errors(host: Path, option: str, value: str, message: str) -> None:
    """Issue 11 item 10: `--class-whitelist ',,,zz'` was accepted silently."""
    res = CliRunner().invoke(usb_scan, ["--host-root", str(host), "--dry-run", option, value])
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"usb-scan: error: {option}") and message in line
    assert res.stdout == ""


def test_good_lists_are_accepted(host: Path) -> None:
    lists = ["--class-whitelist", "0x0E, FF", "--label-fields", "vendor,device"]
    res = CliRunner().invoke(usb_scan, ["--host-root", str(host), "--dry-run", *lists])
    assert res.exit_code == 0, res.stderr


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({WHITELIST_KEY: ["zz"]}, f"{WHITELIST_KEY}[0]: 'zz' is not a hex class prefix"),
        ({WHITELIST_KEY: [""]}, f"{WHITELIST_KEY}[0]: '' is not a hex class prefix"),
        ({WHITELIST_KEY: "fe"}, f"{WHITELIST_KEY}: must be a list, not str"),
        ({WHITELIST_KEY: [float("nan")]}, f"{WHITELIST_KEY}[0]: must be a string, not float"),
        ({"sources": {"usb": {"colour": 1}}}, "sources.usb.colour: unknown field"),
        ({"sources": []}, "sources: must be a mapping, not list"),
        ([1], "must be a mapping"),
    ],
)
def test_bad_config_files_name_the_field(tmp_path: Path, doc: Any, message: str) -> None:
    path = tmp_path / "nfd-worker.conf"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BadInput) as e:
        load_config_file(path, "usb")
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


# --------------------------------------------------------------------------- fuzz

FUZZ = settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["fe", "0x0E", "ff", "12", "0b40", "zz", "", "class", "vendor", "serial"]),
)
_ANY = st.recursive(
    _SCALARS,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)
_SOURCE = st.fixed_dictionaries(
    {},
    optional={WHITELIST_KEY: st.one_of(st.lists(_SCALARS, max_size=3), _ANY), FIELDS_KEY: _ANY},
)
_DOC = st.one_of(
    _ANY,
    _SOURCE,
    st.fixed_dictionaries({}, optional={"usb": _SOURCE, "pci": _SOURCE, "core": _ANY}),
    st.fixed_dictionaries(
        {}, optional={"sources": st.fixed_dictionaries({}, optional={"usb": _SOURCE, "pci": _ANY})}
    ),
)


def _check_source(config: Any, rules: Any) -> None:
    assert config.class_whitelist == tuple(config.class_whitelist)
    for w in config.class_whitelist:
        assert w and set(w) <= set(string.hexdigits.lower()), w
    assert config.label_fields and set(config.label_fields) <= set(rules.all_fields)


@FUZZ
@given(doc=_DOC, bus=st.sampled_from(["usb", "pci"]))
def test_fuzz_nfd_config_documents(
    tmp_path_factory: pytest.TempPathFactory, doc: Any, bus: str
) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz-nfd-worker.conf"
    path.write_text(yaml.safe_dump(doc))
    rules = USB_RULES if bus == "usb" else PCI_RULES
    try:
        config, warnings = resolve_config(rules, None, None, path)
    except BadInput as e:
        assert str(e).startswith(f"{path}: "), str(e)
        return
    _check_source(config, rules)
    assert all(isinstance(w, str) for w in warnings)


@FUZZ
@given(text=st.text(alphabet="-:[]{},#&*!|>'\"%@` \n\tabcdefx0123456789", max_size=60))
def test_fuzz_nfd_config_text(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz-nfd-worker-text.conf"
    path.write_text(text)
    try:
        config, _ = resolve_config(USB_RULES, None, None, path)
    except BadInput as e:
        assert str(e).startswith(f"cannot read config {path}") or str(e).startswith(f"{path}:")
        return
    _check_source(config, USB_RULES)


@FUZZ
@given(
    whitelist=st.one_of(
        st.none(), st.lists(st.text(alphabet=",0x fFeEzZ19", max_size=8), max_size=3)
    ),
    fields=st.one_of(
        st.none(), st.lists(st.text(alphabet=",classvendoriceERIAL ", max_size=12), max_size=3)
    ),
)
def test_fuzz_command_line_lists(whitelist: list[str] | None, fields: list[str] | None) -> None:
    try:
        config, _ = resolve_config(
            USB_RULES,
            split_list(whitelist, "--class-whitelist"),
            split_list(fields, "--label-fields"),
            None,
        )
    except UsageError as e:
        assert str(e).startswith(("--class-whitelist", "--label-fields")), str(e)
        return
    _check_source(config, USB_RULES)


def test_a_reload_names_each_changed_setting_as_the_nfd_config_does() -> None:
    """Issue 32 item 1: `configuration reloaded from F` said nothing of what changed."""
    old = SourceConfig(class_whitelist=("fe",), label_fields=("vendor", "device"))
    new = SourceConfig(class_whitelist=("fe", "03"), label_fields=("vendor", "device"))
    assert source_changes(old, new) == ["deviceClassWhitelist [fe] → [fe, 03]"]
    assert source_changes(old, old) == []
    fields = SourceConfig(class_whitelist=("fe",), label_fields=("class", "vendor"))
    assert source_changes(old, fields) == ["deviceLabelFields [vendor, device] → [class, vendor]"]
