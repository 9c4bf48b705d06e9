"""Tests a maintainer can find: the tests of `tools/<pkg>/<mod>.py` are in
`tests/<pkg>/test_<mod>.py`. A module without such a test module is either generated, a
declaration with no behaviour of its own, or named below with where its behaviour is tested."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS, TESTS = ROOT / "tools", ROOT / "tests"

# product modules with no test module of their own, and why
NOT_ON_THEIR_OWN = {
    # declarations of metrics and nothing else: counted where what they count happens (the
    # keeper's service, the inventory's scans, the v1beta1 front-end and its resources)
    "device_keeper/metrics.py": "tests/device_keeper/test_service.py, test_watch.py",
    "inventory/metrics.py": "tests/inventory/test_inventory.py",
    "devplugin/v1beta1/metrics.py": "tests/devplugin/v1beta1/test_frontend.py, test_resource.py",
    # one dataclass, what report.py and notices.py make: tested through them
    "feature_sink/problem.py": "tests/feature_sink/test_report.py, test_notices.py",
}


def product_modules() -> list[Path]:
    return sorted(
        p.relative_to(TOOLS)
        for p in TOOLS.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
        and not p.name.endswith(("_pb2.py", "_pb2_grpc.py"))
    )


def test_every_product_module_has_a_test_module_beside_it() -> None:
    missing = [
        str(m)
        for m in product_modules()
        if not (TESTS / m.parent / f"test_{m.stem}.py").is_file() and str(m) not in NOT_ON_THEIR_OWN
    ]
    assert missing == []


def test_the_exceptions_are_still_exceptions() -> None:
    """An exception that got a test module, or whose module is gone, leaves the list."""
    modules = {str(m) for m in product_modules()}
    stale = [
        m
        for m in NOT_ON_THEIR_OWN
        if m not in modules or (TESTS / Path(m).parent / f"test_{Path(m).stem}.py").is_file()
    ]
    assert stale == []
