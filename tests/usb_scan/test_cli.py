"""usb-scan as a command (usb_scan/cli.py, on edgefd.cli.scanner's options): its own file with
the dry run's bytes, capability counts over both buses, --config files (NFD's shape or bare;
the command line wins), --explain and the JSON inventory, exit codes and one-line errors for a
host that cannot be read or an output path that is no regular file (the previous file kept),
durations checked when the command line is parsed, device strings that cannot forge a log or
explain line, and a start-up that imports no Kubernetes, gRPC, pyudev or YAML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgefd.usb_scan.cli import main
from tests.fixturegen import HostBuilder, build_host
from tests.helpers import feature_files, untimed

from .command import NFD, RPI4_CAPS, RPI4_NFD, file_labels, run


def test_writes_own_file_with_dry_run_bytes(rpi4: Path, tmp_path: Path) -> None:
    code, dry, _ = run("--host-root", rpi4, "--dry-run")
    code2, out, _ = run("--host-root", rpi4, "--features-dir", tmp_path)
    assert code == code2 == 0 and out == ""
    assert (tmp_path / "usb-scan").read_bytes() == dry.encode()
    assert feature_files(tmp_path) == ["usb-scan"]


def test_runtime_state_coral_and_cross_bus_count(x86: Path, tmp_path: Path) -> None:
    labels = file_labels(run("--host-root", x86, "--dry-run")[1])
    assert labels[NFD + "usb-ff_18d1_9302.present"] == "true"
    # one Coral on USB + one Coral M.2 on PCIe
    assert labels["edgefd.io/edgetpu.count"] == "2"
    assert labels["edgefd.io/hailo.count"] == "1"


def test_config_file_nfd_worker_shape(rpi4: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "nfd-worker.conf"
    cfg.write_text(
        "sources:\n  usb:\n    deviceClassWhitelist: ['fe']\n"
        "    deviceLabelFields: [vendor, device]\n"
        "  pci:\n    deviceClassWhitelist: ['02']\n"
    )
    out = run("--host-root", rpi4, "--dry-run", "--no-capabilities", "--config", cfg)[1]
    assert file_labels(out) == {NFD + "usb-1a6e_089a.present": "true"}
    # command line wins over the file
    out = run(
        "--host-root",
        rpi4,
        "--dry-run",
        "--no-capabilities",
        "--config",
        cfg,
        "--class-whitelist",
        "0e",
    )[1]
    # the webcam's device class is ef, so its 0e interfaces are never looked at (as in NFD)
    assert file_labels(out) == {}


def test_config_file_bare_shape_and_errors(rpi4: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("deviceClassWhitelist: ['ef']\n")
    out = run("--host-root", rpi4, "--dry-run", "--no-capabilities", "--config", cfg)[1]
    assert file_labels(out) == {NFD + "usb-ef_046d_0825.present": "true"}
    cfg.write_text("sources:\n  usb:\n    deviceClassWhitelist: fe\n")
    code, _, err = run("--host-root", rpi4, "--dry-run", "--config", cfg)
    assert code == 3 and "c.yaml: sources.usb.deviceClassWhitelist: must be a list" in err
    cfg.write_text("{ nope")
    code, _, err = run("--host-root", rpi4, "--dry-run", "--config", cfg)
    assert code == 3 and "c.yaml:2:1: did not find expected ',' or '}' (in the {...}" in err


def test_explain_covers_every_device(rpi4: Path) -> None:
    code, out, _ = run("--host-root", rpi4, "--explain")
    assert code == 0
    for name in ("1-1", "1-1.1", "1-1.2", "1-1.3", "1-1.4", "2-1", "usb1", "usb2"):
        assert f"usb {name} " in out
    assert "class 03 (HID) is not whitelisted" in out
    assert "interface 1-1.4:1.0, 1-1.4:1.1: class ff" in out  # de-duplicated instances
    assert "coral-usb (Google Coral USB Accelerator, boot state)" in out


def test_json_inventory(rpi4: Path) -> None:
    code, out, _ = run("--host-root", rpi4, "-o", "json", "--dry-run")
    inv = json.loads(out)
    assert code == 0 and inv["source"] == "usb"
    coral = next(d for d in inv["devices"] if d["name"] == "2-1")
    assert coral["port_path"] == "2-1" and coral["devnode"] == "/dev/bus/usb/002/002"
    assert coral["accelerator"]["id"] == "coral-usb" and coral["accelerator"]["state"] == "boot"
    assert coral["interfaces"] == [
        {"name": "2-1:1.0", "class": "fe", "subclass": "01", "protocol": "02", "driver": None}
    ]
    assert inv["labels"] == {**RPI4_NFD, **RPI4_CAPS}


# --------------------------------------------------------------------------- bad input


def test_missing_bus_directory(tmp_path: Path) -> None:
    """sysfs is there but this board has no USB bus: an honest empty file."""
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    code, out, err = run("--host-root", tmp_path, "--dry-run")
    assert code == 0 and file_labels(out) == {}
    assert "/sys/bus/usb/devices does not exist" in err and "Traceback" not in err


@pytest.mark.parametrize("broken", ["no-sysfs", "unreadable-bus"])
def test_unreadable_host_is_an_error_and_keeps_the_file(tmp_path: Path, broken: str) -> None:
    """ "Could not read" must never be published as "nothing there"."""
    host = tmp_path / "host"
    out_dir = tmp_path / "features.d"
    out_dir.mkdir()
    (out_dir / "usb-scan").write_text("edgefd.io/edgetpu.present=true\n")
    if broken == "unreadable-bus":
        (host / "sys/bus").mkdir(parents=True)
        (host / "sys/bus/usb").mkdir()
        (host / "sys/bus/usb/devices").write_text("not a directory\n")
    code, _out, err = run("--host-root", host, "--features-dir", out_dir)
    assert code == 3, err
    assert err.count("\n") == 1 and err.startswith("usb-scan: error: cannot ")
    assert (out_dir / "usb-scan").read_text() == "edgefd.io/edgetpu.present=true\n"


def test_no_kubernetes_or_grpc_import() -> None:
    code = (
        "import sys, edgefd.usb_scan.cli, edgefd.pci_scan.cli, edgefd.usb_scan.labels, "
        "edgefd.pci_scan.labels, edgefd.runtime.watch\n"
        "bad = [m for m in sys.modules\n"
        "       if m.split('.')[0] in ('kubernetes', 'grpc', 'pyudev', 'yaml')]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2]
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_dry_run_imports_no_yaml_pyudev_kubernetes_grpc(rpi4: Path) -> None:
    code = (
        "import sys\n"
        "from edgefd.usb_scan.cli import main\n"
        "try:\n"
        f"    main(['--host-root', {str(rpi4)!r}, '--dry-run'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "bad = [m for m in sys.modules\n"
        "       if m.split('.')[0] in ('kubernetes', 'grpc', 'pyudev', 'yaml')]\n"
        "sys.stderr.write(repr(bad)); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2]
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "usb-fe_1a6e_089a" in res.stdout


def test_python_dash_m_works(rpi4: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "edgefd.usb_scan", "--host-root", str(rpi4), "--dry-run"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert res.returncode == 0 and "usb-fe_1a6e_089a" in res.stdout


# --------------------------------------------------------------------------- bad numbers

BAD_DURATIONS = ["nan", "NaN", "inf", "-inf", "-1", "1e3", "9" * 400, "99999999", "", "30x", "0"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        (o, v)
        for o in ("--rescan-interval", "--poll-interval", "--hold")
        for v in BAD_DURATIONS
        if (o, v) != ("--hold", "0")  # 0 is a valid --hold: no hold
    ],
)
def test_bad_durations_are_usage_errors_at_parse_time(rpi4: Path, option: str, value: str) -> None:
    """Issue 11 item 8: `--rescan-interval inf` killed the hot-plug thread and `nan` spun a
    core; every duration is checked when the command line is parsed, before anything runs."""
    code, out, err = run("--host-root", rpi4, "--dry-run", option, value)
    assert code == 2, err
    assert out == ""
    assert f"Invalid value for '{option}'" in err and "Traceback" not in err


def test_good_durations_are_accepted(rpi4: Path) -> None:
    for option, value in (
        ("--rescan-interval", "0.5"),
        ("--rescan-interval", "30"),
        ("--rescan-interval", "1h"),
        ("--poll-interval", "250ms"),
        ("--poll-interval", ".1"),
        ("--hold", "0"),
        ("--hold", "1m"),
    ):
        code, _out, err = run("--host-root", rpi4, "--dry-run", option, value)
        assert code == 0, err


# --------------------------------------------------------------------------- cannot read, write


def run_process(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """A real process with a deadline: a producer that hangs fails the test, not the suite."""
    return subprocess.run(
        [sys.executable, "-m", "edgefd.usb_scan", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "broken", ["nonexistent-root", "sys-bus-is-a-file", "unlistable-usb", "unlistable-pci"]
)
def test_unreadable_sysfs_exits_3_and_keeps_the_file(
    tmp_path: Path, broken: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = tmp_path / "host"
    out_dir = tmp_path / "features.d"
    out_dir.mkdir()
    previous = "edgefd.io/edgetpu.present=true\nedgefd.io/edgetpu.count=1\n"
    (out_dir / "usb-scan").write_text(previous)
    if broken == "nonexistent-root":
        host = tmp_path / "nonexistent"
    elif broken == "sys-bus-is-a-file":
        (host / "sys").mkdir(parents=True)
        (host / "sys" / "bus").write_text("")
    else:
        build_host("rpi4-coral", host, devicetree=False)
        (host / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        # tests run as root, where chmod 000 stops nothing: fail the listing itself
        bus = "usb" if broken == "unlistable-usb" else "pci"
        target = str(host / f"sys/bus/{bus}/devices")
        real_scandir = os.scandir

        def denied(path):  # type: ignore[no-untyped-def]
            if str(path) == target:
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", denied)
    code, _out, err = run("--host-root", host, "--features-dir", out_dir)
    assert code == 3, err
    (line,) = err.splitlines()
    assert line.startswith("usb-scan: error: cannot "), line
    if broken.startswith("unlistable"):
        assert "(Permission denied)" in line
    assert (out_dir / "usb-scan").read_text() == previous
    assert feature_files(out_dir) == ["usb-scan"]


# --------------------------------------------------------------------------- hostile strings

FORGED = b"AB12\nusb-scan: ERROR: forged line\r\x1b[2J\xe2\x80\xae\xff"


def hostile_host(root: Path) -> Path:
    """A Coral whose serial and manufacturer forge log lines and carry undecodable bytes, and
    an NCS2 whose very sysfs name is not UTF-8."""
    b = HostBuilder(root)
    b.add_usb({"port": "usb1", "vendor": "1d6b", "product": "0002", "class": "09"})
    coral = b.add_usb({"port": "1-1", "vendor": "1a6e", "product": "089a", "class": "fe"})
    (coral / "serial").write_bytes(FORGED + b"\n")
    (coral / "manufacturer").write_bytes(b"Evil\nusb-scan: WARNING: also forged \xfe\n")
    ncs2 = b.add_usb({"port": "1-2", "vendor": "03e7", "product": "2485", "class": "ff"})
    bus = root / "sys/bus/usb/devices"
    bytes_real = os.fsencode(ncs2.parent) + b"/1-\xff"
    os.rename(os.fsencode(ncs2), bytes_real)
    os.unlink(bus / "1-2")
    os.symlink(os.path.relpath(bytes_real, os.fsencode(bus)), os.fsencode(bus) + b"/1-\xff")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    return root


def _strict_json(data: bytes) -> object:
    doc = json.loads(data.decode("utf-8", "strict"))

    def walk(x: object) -> None:
        if isinstance(x, str):
            x.encode("utf-8", "strict")  # a lone surrogate would fail here
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return doc


def test_device_strings_cannot_forge_log_or_explain_lines(tmp_path: Path) -> None:
    """Issue 11 item 10: a USB serial with a newline forged log lines."""
    root = hostile_host(tmp_path)
    fields = ["--label-fields", "class,vendor,device,serial"]  # the serial is in a label name
    argv = [sys.executable, "-m", "edgefd.usb_scan", "--host-root", str(root)]
    p = subprocess.run(
        [*argv, "--dry-run", "-vv", *fields],
        capture_output=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    err = untimed(p.stderr.decode("utf-8", "strict"))
    assert err and all(line.startswith("usb-scan: ") for line in err.splitlines()), err
    assert "forged line" in err and "\\nusb-scan: ERROR: forged line\\r\\x1b[2J\\u202e" in err
    p = subprocess.run(
        [*argv, "--explain", *fields],
        capture_output=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr  # an undecodable name once made this an exit 70
    out = p.stdout.decode("utf-8", "strict")
    assert not any(
        line.startswith(("usb-scan: ERROR", "usb-scan: WARNING")) for line in out.splitlines()
    )
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    assert "usb 1-\\xff" in out  # the undecodable byte, shown as itself


def test_json_inventory_is_strict_utf8_whatever_the_device_says(tmp_path: Path) -> None:
    root = hostile_host(tmp_path)
    res = CliRunner().invoke(main, ["--host-root", str(root), "--dry-run", "-o", "json"])
    assert res.exit_code == 0, res.stderr
    doc = _strict_json(res.stdout_bytes)
    assert isinstance(doc, dict)
    by_name = {d["name"]: d for d in doc["devices"]}
    assert set(by_name) == {"usb1", "1-1", "1-\\xff"}
    assert by_name["1-1"]["serial"].startswith("AB12\nusb-scan: ERROR")  # JSON escapes it


@pytest.mark.parametrize("tool", ["usb-scan", "pci-scan"])
def test_a_missing_features_dir_is_exit_4_unless_told_to_create_it(
    tool: str, rpi4: Path, tmp_path: Path
) -> None:
    """Issue 32 item 7: never a silent `mkdir -p` (a typo would be a directory no reader
    watches); the flag, or its variable, creates it; a dry run needs none."""
    fd = tmp_path / "features.d"
    argv = [tool, "--host-root", str(rpi4), "--features-dir", str(fd)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and not fd.exists()  # as feature-sink's missing --features-dir
    assert p.stderr == (
        f"{tool}: error: features directory {fd} does not exist "
        "(pass --create-features-dir to create it)\n"
    )
    assert subprocess.run([*argv, "--dry-run"], capture_output=True, timeout=60).returncode == 0
    env = {**os.environ, "EDGEFD_CREATE_FEATURES_DIR": "1"}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    assert (fd / tool).is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-o", "json"], "--explain prints text: drop -o json (-o json --dry-run prints the JSON"),
        (["--watch"], "--explain explains one scan: drop --watch"),
    ],
)
def test_explain_refuses_json_and_watch_at_once(
    extra: list[str], message: str, rpi4: Path, tmp_path: Path
) -> None:
    """Issue 32 item 9: text under -o json with exit 0, or a watch that writes nothing, were
    both accepted; each is a usage error, before anything is read."""
    code, out, err = run("--host-root", rpi4, "--explain", *extra)
    assert code == 2 and out == ""
    assert err.startswith(f"usb-scan: error: {message}") and err.count("\n") == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux")
def test_a_run_right_after_another_producers_write_ends_with_its_trailing_event(
    rpi4: Path, tmp_path: Path
) -> None:
    """dt-labeller's file renamed in just before (an init container a moment earlier): NFD's
    tick may swallow this run's write, so the run sends its trailing event before it exits."""
    import select

    from edgefd.core.publish import STAGING, write_atomic
    from edgefd.runtime.inotify import IN_ATTRIB, Inotify

    write_atomic(tmp_path / "dt-labeller", b"a.io/x=1\n", staging=tmp_path / STAGING)
    with Inotify() as ino:
        ino.add_watch(tmp_path, IN_ATTRIB)
        assert run("--host-root", rpi4, "--features-dir", tmp_path)[0] == 0
        ready, _, _ = select.select([ino.fileno()], [], [], 0)  # already there: no waiting
        assert ready and [e.name for e in ino.read()] == ["usb-scan"]


def test_a_platform_npu_is_counted_by_usb_scan_too(tmp_path: Path) -> None:
    """Capability labels count accelerators on every bus, the platform bus included: an
    RK3588 has no USB accelerator and no PCI, and its NPU is still edgefd.io/npu."""
    root = build_host("rk3588-npu", tmp_path / "rk", devicetree=False)
    code, out, _ = run("--host-root", root, "--dry-run")
    assert code == 0
    assert file_labels(out) == {"edgefd.io/npu.present": "true", "edgefd.io/npu.count": "1"}
