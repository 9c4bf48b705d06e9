"""What a reload changed, per resource and field (issue 32 items 1 and 8: a reload said only
`edgefd.io/coral-usb: changed`)."""

from __future__ import annotations

from edgefd.devplugin.confdiff import config_changes, duration_text, resource_changes
from edgefd.devplugin.resources import parse_config

OLD = {
    "forget_after": "24h",
    "resources": [
        {"name": "edgefd.io/coral-usb", "accelerator": "coral-usb"},
        {"name": "edgefd.io/ncs2", "accelerator": "ncs2"},
    ],
}


def test_each_changed_field_is_named_with_its_old_and_new_value() -> None:
    new = {
        "forget_after": "1h",
        "resources": [
            {
                "name": "edgefd.io/coral-usb",
                "accelerator": "coral-usb",
                "replicas": 2,
                "env": {"MODE": "fast"},
                "mounts": [{"host_path": "/opt/m", "container_path": "/m", "read_only": False}],
            },
            {"name": "edgefd.io/hailo", "dev_globs": ["/dev/hailo*"]},
        ],
    }
    assert config_changes(parse_config(OLD, "a"), parse_config(new, "b")) == [
        "forget_after 24h → 1h",
        "edgefd.io/ncs2: removed",
        "edgefd.io/coral-usb: replicas 1 → 2, env [] → [MODE=fast], mounts [] → [/opt/m:/m:rw]",
        "edgefd.io/hailo: added",
    ]


def test_the_same_configuration_from_another_file_changes_nothing() -> None:
    assert config_changes(parse_config(OLD, "a.yaml"), parse_config(OLD, "b.yaml")) == []


def test_ids_are_shown_as_written() -> None:
    usb = [{"vendor": "18d1", "product": "9302", "state": "runtime"}]
    old = parse_config({"resources": [{"name": "edgefd.io/x", "usb": usb}]}, "a")
    new = parse_config({"resources": [{"name": "edgefd.io/x", "pci": [{"vendor": "1ac1"}]}]}, "b")
    assert resource_changes(old.resources[0], new.resources[0]) == [
        "usb [18d1:9302 (runtime)] → []",
        "pci [] → [1ac1:*]",
    ]


def test_durations_read_as_a_configuration_writes_them() -> None:
    texts = [duration_text(s) for s in (0, 86400, 5400, 90, 1.5)]
    assert texts == ["0", "24h", "90m", "90s", "1.5s"]


def test_a_temperature_setting_reads_as_written() -> None:
    def cfg(temperature: object) -> object:
        res = {"name": "edgefd.io/coral-pcie", "accelerator": "coral-pcie"}
        return parse_config({"resources": [{**res, "temperature": temperature}]}, "a")

    assert config_changes(cfg(None), cfg({"limit": "80C", "hysteresis": 3})) == [  # type: ignore[arg-type]
        "edgefd.io/coral-pcie: temperature the driver's limit, hysteresis 5 °C"
        " → limit 80 °C, hysteresis 3 °C"
    ]
    assert config_changes(cfg({"limit": 80}), cfg(False)) == [  # type: ignore[arg-type]
        "edgefd.io/coral-pcie: temperature limit 80 °C, hysteresis 5 °C → off"
    ]
