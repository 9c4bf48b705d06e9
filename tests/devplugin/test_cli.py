"""The devplugin command (cli.py) as it is run: `python -m edgefd.devplugin` in a subprocess
(click's runner for the options alone). Its exit codes (0 on SIGTERM, with its sockets removed
and no traceback; 2 for a usage error; 3 for a bad configuration, in one line naming the
field), SIGHUP reloading the configuration (unchanged resources left registered), a warning
for a configuration with no resources, and the options that only make sense together
(`--evict-after` without DRA, `--api dra` without a node name except in a dry run, which
then takes this host's name). What a dry run prints is v1beta1/test_dryrun.py's and
dra/test_dryrun.py's."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from edgefd.core.notices import read_notices
from edgefd.devplugin.resources import MAX_RESOURCES
from edgefd.devplugin.v1beta1.resource import socket_name
from tests.devplugin.command import ROOT, run_plugin
from tests.devplugin.kubelet import FakeKubelet
from tests.fixturegen import build_host
from tests.helpers import free_port, untimed, wait_until

CORAL = "edgefd.io/coral-usb"


def test_sigterm_removes_sockets_and_exits_0_sighup_reloads(
    host: Path, plugin_dir: Path, tmp_path: Path
) -> None:
    k = FakeKubelet(plugin_dir)
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb}\n")
    proc = run_plugin(
        [
            "--host-root",
            str(host),
            "--plugin-dir",
            str(plugin_dir),
            "--config",
            str(cfg),
            "--listen",
            "",
            "-v",
        ]
    )
    try:
        wait_until(lambda: k.last(CORAL), timeout=15)
        cfg.write_text(
            "resources:\n  - {name: edgefd.io/ncs2, accelerator: ncs2}\n"
            "  - {name: edgefd.io/coral-usb, accelerator: coral-usb}\n"
        )
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: k.last("edgefd.io/ncs2"), timeout=5)
        assert k.count(CORAL) == 1  # unchanged resources are left alone
        cfg.write_text("resources:\n  - {name: edgefd.io/ncs2, accelerator: ncs2}\n")
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: not (plugin_dir / socket_name(CORAL)).exists(), timeout=5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert "Traceback" not in err  # the gRPC loop is stopped before the interpreter exits
        assert not [
            p.name
            for p in plugin_dir.iterdir()
            if p.name.startswith("edgefd-") and p.name.endswith(".sock")
        ]
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        k.stop()


def test_a_failed_reload_shows_in_readyz_and_metrics_and_a_good_one_says_what_changed(
    host: Path, plugin_dir: Path, tmp_path: Path
) -> None:
    """Issue 32 items 1 and 8: a bad reload was one ERROR line (/readyz unchanged, no metric)
    and a good one said `edgefd.io/coral-usb: changed`; now /readyz (still 200) names the
    failure, the metrics count it, the notice (a Warning Event, through feature-sink) is
    left and taken back, and the next reload says `replicas 1 → 2`."""
    k = FakeKubelet(plugin_dir)
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb}\n")
    port = free_port()
    notices = tmp_path / "notices"  # the sink's view: devplugin's own directory in it
    mine = notices / "devplugin"
    mine.mkdir(parents=True)
    (mine / "notice").write_text("{}")  # the run before's: a start clears it
    args = ["--host-root", str(host), "--plugin-dir", str(plugin_dir), "--config", str(cfg)]
    proc = run_plugin([*args, "--listen", f"127.0.0.1:{port}", "--notice-dir", str(mine)])

    def get(path: str) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()

    try:
        wait_until(lambda: k.last(CORAL), timeout=15)
        cfg.write_text("resources:\n  - {name: edgefd.io/coral-usb, accelerator: [\n")
        wait_until(lambda: "configuration reload failed" in get("/readyz")[1], timeout=10)
        code, body = get("/readyz")
        assert code == 200 and "1 resource(s) registered" in body, body
        assert f"configuration reload failed: {cfg}" in body and "in use is kept" in body
        assert "edgefd_config_reload_failures_total 1.0" in get("/metrics")[1]
        # for feature-sink to post as a Warning Event (devplugin holds no token to)
        (notice,) = wait_until(lambda: read_notices(notices)[0], timeout=5)
        assert notice.writer == "devplugin" and notice.reason == "ConfigReloadFailed"
        assert f"configuration reload failed: {cfg}" in notice.message
        cfg.write_text(
            "resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb, replicas: 2}\n"
        )  # the file watch reloads it, as a ConfigMap edit
        wait_until(lambda: "reload failed" not in get("/readyz")[1], timeout=10)
        assert read_notices(notices) == ((), ())
        wait_until(lambda: len(k.last(CORAL) or []) == 2, timeout=10)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert "edgefd.io/coral-usb: replicas 1 → 2: restarting\n" in err, err
        assert "configuration reloaded: edgefd.io/coral-usb: replicas 1 → 2\n" in err, err
        assert ": changed\n" not in err
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        k.stop()


@pytest.mark.parametrize("attempt", range(3))
def test_sigterm_is_a_clean_exit(host: Path, tmp_path: Path, attempt: int) -> None:
    """The shared gRPC loop is stopped before the interpreter exits; left running, it fired
    gRPC's poller callbacks on closed descriptors (an EBADF traceback, most runs)."""
    dp = tmp_path / "dp"
    proc = run_plugin(["--host-root", str(host), "--plugin-dir", str(dp), "--listen", ""])
    # serving (its sockets exist), then a little longer each attempt
    wait_until(lambda: dp.is_dir() and any(dp.glob("edgefd-*.sock")), timeout=30)
    time.sleep(attempt * 0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Bad file descriptor" not in err, err


def test_bad_config_exits_3_naming_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(
        "resources:\n  - {name: edgefd.io/a, accelerator: ncs2}\n"
        "  - name: edgefd.io/b\n    usb: [{vendor: xyz1, product: '0001'}]\n"
    )
    proc = run_plugin(["--config", str(cfg), "--plugin-dir", str(tmp_path / "dp")])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert "resources[1].usb[0].vendor: 'xyz1' is not 4 hex digits" in err
    assert "Traceback" not in err


def test_a_key_given_twice_exits_3_naming_it_and_both_lines(tmp_path: Path) -> None:
    """Issue 46 item 7: the second `replicas` was taken silently; a start refuses it."""
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(
        "resources:\n  - name: edgefd.io/a\n    accelerator: ncs2\n    replicas: 1\n"
        "    replicas: 8\n"
    )
    proc = run_plugin(["--config", str(cfg), "--plugin-dir", str(tmp_path / "dp")])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert f"{cfg}:5:5: duplicate key 'replicas' (first at line 4)" in err, err
    assert "Traceback" not in err


def test_a_fifo_as_the_configuration_exits_3_at_once_in_one_line(tmp_path: Path) -> None:
    """Issue 30 item 9: a FIFO behind the ConfigMap's symlink must not block the start."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "resources.yaml").symlink_to(tmp_path / "fifo")
    proc = run_plugin(
        ["--config", str(tmp_path / "resources.yaml"), "--plugin-dir", str(tmp_path / "dp")]
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert "resources.yaml: a FIFO, not a regular file" in err and "Traceback" not in err


def many_resources(n: int) -> str:
    return "resources:\n" + "".join(
        f"  - {{name: edgefd.io/r{i}, kind: edgetpu}}\n" for i in range(n)
    )


def test_too_many_resources_exit_3_at_once_in_one_line(tmp_path: Path) -> None:
    """Issue 30 item 8: 14,000 resources in a valid 1 MiB ConfigMap took 345 MiB and 3,741
    threads; the count is refused before anything starts."""
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(many_resources(14_000))
    t0 = time.monotonic()
    proc = run_plugin(["--config", str(cfg), "--plugin-dir", str(tmp_path / "dp")])
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    said = "resources: 14000 resources (each is a server and a thread of its own), at most"
    assert f"{said} {MAX_RESOURCES}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "dp").exists() or not list((tmp_path / "dp").iterdir())


def test_a_reload_with_too_many_resources_keeps_the_configuration(
    host: Path, plugin_dir: Path, tmp_path: Path
) -> None:
    k = FakeKubelet(plugin_dir)
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb}\n")
    args = ["--host-root", str(host), "--plugin-dir", str(plugin_dir), "--config", str(cfg)]
    proc = run_plugin([*args, "--listen", ""])
    try:
        wait_until(lambda: k.last(CORAL), timeout=15)
        cfg.write_text(many_resources(MAX_RESOURCES + 1))
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert (plugin_dir / socket_name(CORAL)).exists()  # still served as it was
        assert not (plugin_dir / socket_name("edgefd.io/r0")).exists()
        cfg.write_text(
            "resources:\n  - {name: edgefd.io/coral-usb, accelerator: coral-usb}\n"
            "  - {name: edgefd.io/ncs2, accelerator: ncs2}\n"
        )
        proc.send_signal(signal.SIGHUP)  # a later valid one is taken
        wait_until(lambda: k.last("edgefd.io/ncs2"), timeout=10)
        assert k.count(CORAL) == 1
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert (
            f"ERROR: {cfg}: resources: {MAX_RESOURCES + 1} resources (each is a server and a "
            f"thread of its own), at most {MAX_RESOURCES}; keeping the configuration in use"
        ) in err, err
        assert "Traceback" not in err
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        k.stop()


def test_sigterm_while_the_most_resources_start_ends_it_promptly(
    host: Path, plugin_dir: Path, tmp_path: Path
) -> None:
    """Issue 30 item 8: SIGTERM while every one of the most resources allowed, each with a
    device, is starting: exit 0, promptly, no socket left behind."""
    k = FakeKubelet(plugin_dir)
    cfg = tmp_path / "resources.yaml"
    cfg.write_text(many_resources(MAX_RESOURCES))
    proc = run_plugin(
        ["--host-root", str(host), "--plugin-dir", str(plugin_dir), "--config", str(cfg),
         "--listen", ""]
    )  # fmt: skip
    try:
        wait_until(lambda: any(plugin_dir.glob("edgefd-*.sock")), timeout=30)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
        assert proc.returncode == 0, err
        assert took < 10, took
        assert "Traceback" not in err
        assert not list(plugin_dir.glob("edgefd-*.sock"))
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        k.stop()


def test_devplugin_with_an_empty_configuration_warns_at_start_up(
    plugin_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("resources: []\n")
    proc = run_plugin(["--config", str(cfg), "--plugin-dir", str(plugin_dir), "--listen", "", "-v"])
    try:
        assert proc.stderr is not None
        lines = []
        while not any("serving 0 resource(s)" in ln for ln in lines):  # signals are handled
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=15)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    err = "".join(lines) + rest
    assert proc.returncode == 0, err
    assert f"devplugin: WARNING: {cfg}: no resources configured, so nothing is advertised" in err


# --------------------------------------------------------------------------- bad numbers


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "-inf", "1e3", "9" * 400, "0", "86401"])
def test_bad_rescan_interval_is_a_usage_error(tmp_path: Path, value: str) -> None:
    from click.testing import CliRunner

    from edgefd.devplugin.cli import main

    res = CliRunner().invoke(
        main, ["--plugin-dir", str(tmp_path / "dp"), "--dry-run", "--rescan-interval", value]
    )
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--rescan-interval'" in res.stderr
    assert res.stdout == "" and not (tmp_path / "dp").exists()


def test_non_finite_forget_after_is_exit_3_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "resources.yaml"
    cfg.write_text("forget_after: .nan\nresources: [{name: edgefd.io/a, accelerator: ncs2}]\n")
    proc = run_plugin(["--config", str(cfg), "--plugin-dir", str(tmp_path / "dp")])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert err == f"devplugin: error: {cfg}: forget_after: nan is not a finite duration\n"


# --------------------------------------------------------------------------- DRA options


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--evict-after", "2s"], "--evict-after needs --api dra or both"),
        (["--api", "dra", "--node-name", "n", "--evict-after", "soon"], "is not a duration"),
    ],
)
def test_evict_after_usage(args: list[str], message: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "edgefd.devplugin", *args, "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_dra_mode_without_a_node_name_is_a_usage_error(tmp_path: Path) -> None:
    """Serving needs the pool's node; only a dry run may assume this host's name."""
    out = subprocess.run(
        [sys.executable, "-m", "edgefd.devplugin", "--api", "dra", "--plugin-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "devplugin: error: --api dra needs --node-name (or $NODE_NAME): the pool's node"
    )


def test_dra_dry_run_without_a_node_name_uses_the_host_name(tmp_path: Path) -> None:
    """Issue 25 item 8: as `feature-sink --dry-run` does, the README's
    `devplugin --api dra --dry-run` falls back to this host's name (it exited 2)."""
    root = build_host("x86-server", tmp_path / "host", devicetree=False)
    args = ["--api", "dra", "--dry-run", "-o", "json", "--host-root", str(root)]
    out = subprocess.run(
        [sys.executable, "-m", "edgefd.devplugin", *args, "--plugin-dir", str(tmp_path / "p")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    node = os.uname().nodename
    assert json.loads(out.stdout)["spec"]["nodeName"] == node
    assert untimed(out.stderr) == (
        f"devplugin: WARNING: no --node-name; the dry-run uses this host's name {node!r}\n"
    )


@pytest.mark.parametrize("api", ["dra", "device-plugin"])
def test_a_socket_path_the_kernel_cannot_bind_is_refused_before_anything_is_served(
    tmp_path: Path, api: str
) -> None:
    """Issue 46 item 8: a kubelet directory deep enough that a socket's path passes the
    kernel's 107 bytes was exit 70 ("Failed to bind", after DRA had published and deleted its
    slice); now exit 2 in one line naming the path and the limit, before any API call (the
    kubeconfig names a server that is not there) and with no socket or directory made."""
    deep = tmp_path / ("k" * 60) / ("d" * 60)
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    args = ["--api", api, "--node-name", "n", "--kubeconfig", str(cfg)]
    args += ["--kubelet-dir", str(deep), "--plugin-dir", str(deep / "device-plugins")]
    out = subprocess.run(
        [sys.executable, "-m", "edgefd.devplugin", *args, "--listen", "127.0.0.1:0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    [line] = [x for x in out.stderr.splitlines() if "error" in x]
    assert (
        line.startswith(f"devplugin: error: {deep}/")
        and "the kernel binds a unix socket at no more than 107" in line
    )
    assert not deep.exists()
