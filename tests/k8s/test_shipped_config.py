"""The device plugin's shipped ConfigMap (k8s/configmap.yaml, the chart's devicePlugin.config)
is the built-in default written out: the same resources, matching the same hardware, in the
same order, so editing the shipped file starts from what `devplugin` does without one (issue 25
item 7: it once lacked edgefd.io/ncs1)."""

from __future__ import annotations

from pathlib import Path

import yaml

from edgefd.devplugin.resources import default_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def shipped() -> dict[str, str]:
    cm = yaml.safe_load((ROOT / "k8s" / "configmap.yaml").read_text())
    chart = yaml.safe_load((ROOT / "charts" / "edgefd" / "values.yaml").read_text())
    return {
        "k8s/configmap.yaml": cm["data"]["resources.yaml"],
        "charts/edgefd/values.yaml": chart["devicePlugin"]["config"],
    }


def test_the_shipped_config_is_the_built_in_default() -> None:
    default = default_config()
    for where, text in shipped().items():
        config = parse_config(yaml.safe_load(text), where)
        assert [r.name for r in config.resources] == [r.name for r in default.resources], where
        # every field, so `accelerator: ncs1` really stands for what the default serves
        assert config.resources == default.resources, where
        assert config.forget_after == default.forget_after, where


def test_the_chart_ships_the_same_file_as_kustomize() -> None:
    files = list(shipped().values())
    assert files[0] == files[1]
