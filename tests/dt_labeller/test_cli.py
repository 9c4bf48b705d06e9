"""dt-labeller end to end (cli.py): real processes over generated host roots. The reference
labels from a blob or either directory form, the node names and `--include-disabled`, the
reference format, --explain, a host without a devicetree, malformed and unreadable input,
outputs that cannot be written, the prefix, the environment's paths, the console entry point,
and a start-up that imports no Kubernetes or gRPC. (The file and JSON it writes are
test_output.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgefd.core.featuresd import MergedFeatures, merge, read_feature_files
from tests.fixturegen.devicetree import compile_dts, expand_dtb
from tests.helpers import feature_files, untimed

from .command import REPO, RPI4_LABELS, SAMPLE_LABELS, SAMPLES, host_with_blob, run, run_bytes


def read_features(directory: Path) -> MergedFeatures:
    return merge(read_feature_files(directory))


def host_with_dir(root: Path, blob: bytes, proc_only: bool = False) -> Path:
    if proc_only:
        expand_dtb(blob, root / "proc" / "device-tree")
    else:
        expand_dtb(blob, root / "sys" / "firmware" / "devicetree" / "base")
        (root / "proc").mkdir(parents=True, exist_ok=True)
        # as on a real host: an absolute symlink, which must be re-rooted, not followed out
        os.symlink("/sys/firmware/devicetree/base", root / "proc" / "device-tree")
    return root


def labels_of(features_dir: Path) -> dict[str, str]:
    return read_features(features_dir).labels


def test_rpi4_blob_writes_exactly_the_reference_labels(rpi4_blob: bytes, tmp_path: Path) -> None:
    root = host_with_blob(tmp_path / "root", rpi4_blob)
    fd = tmp_path / "features.d"
    fd.mkdir(exist_ok=True)  # a producer makes no features.d
    p = run("--host-root", str(root), "--features-dir", str(fd))
    assert p.returncode == 0, p.stderr
    assert p.stdout == "" and p.stderr == ""
    assert feature_files(fd) == ["dt-labeller"]
    assert labels_of(fd) == RPI4_LABELS


@pytest.mark.parametrize("form", ["sys", "proc"])
def test_directory_form_gives_identical_output(rpi4_blob: bytes, tmp_path: Path, form: str) -> None:
    blob_root = host_with_blob(tmp_path / "a", rpi4_blob)
    dir_root = host_with_dir(tmp_path / "b", rpi4_blob, proc_only=form == "proc")
    a = run_bytes("--dry-run", "--host-root", str(blob_root))
    b = run_bytes("--dry-run", "--host-root", str(dir_root))
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout
    ja = json.loads(run("--dry-run", "-o", "json", "--host-root", str(blob_root)).stdout)
    jb = json.loads(run("--dry-run", "-o", "json", "--host-root", str(dir_root)).stdout)
    assert ja.pop("source") == {"path": "/sys/firmware/fdt", "form": "blob"}
    expected = "/proc/device-tree" if form == "proc" else "/sys/firmware/devicetree/base"
    assert jb.pop("source") == {"path": expected, "form": "directory"}
    assert ja == jb


def test_jetson_like_tree_both_forms_reject_the_plus_label(
    jetson_blob: bytes, tmp_path: Path
) -> None:
    expected = {
        "beta.devicetree.org/nvidia-jetson-nano": "1",
        "beta.devicetree.org/nvidia-tegra210": "1",
        "beta.devicetree.org/arm-cortex-a57-64bit": "3",
        "beta.devicetree.org/arm-armv8": "3",
        "beta.devicetree.org/nvidia-tegra210-gm20b": "1",
        "beta.devicetree.org/nvidia-gm20b": "1",
    }
    for root in (
        host_with_blob(tmp_path / "a", jetson_blob),
        host_with_dir(tmp_path / "b", jetson_blob),
    ):
        fd = tmp_path / f"fd-{root.name}"
        fd.mkdir(exist_ok=True)  # a producer makes no features.d
        p = run("--host-root", str(root), "--features-dir", str(fd))
        assert p.returncode == 0
        assert labels_of(fd) == expected
        (line,) = untimed(p.stderr).splitlines()
        assert line.startswith("dt-labeller: WARNING: /: ")
        assert "nvidia,p3449-0000-b00+p3448-0000-b00" in line and "'+'" in line
        assert line.endswith("label skipped")


def test_include_disabled_and_extra_node_names(jetson_blob: bytes, tmp_path: Path) -> None:
    dtb = tmp_path / "j.dtb"
    dtb.write_bytes(jetson_blob)
    p = run("--dry-run", "--dtb", str(dtb), "--include-disabled", "-n", "pwm-fan", "-n", "fpga")
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert "beta.devicetree.org/arm-cortex-a57-64bit=4" in lines
    assert "beta.devicetree.org/nvidia-gm20b-vgpu=1" in lines
    assert "beta.devicetree.org/pwm-fan=1" in lines
    assert "beta.devicetree.org/xilinx-zynq-7000=1" in lines
    assert "beta.devicetree.org/acme-widget=1" in lines
    p = run("--dry-run", "--dtb", str(dtb), "--no-default-nodes")
    assert [ln for ln in p.stdout.splitlines() if not ln.startswith("#")] == [
        "beta.devicetree.org/nvidia-jetson-nano=1",
        "beta.devicetree.org/nvidia-tegra210=1",
    ]


def test_reference_format(rpi4_blob: bytes, tmp_path: Path) -> None:
    dtb = tmp_path / "x.dtb"
    dtb.write_bytes(rpi4_blob)
    p = run("--dry-run", "--format", "reference", "--dtb", str(dtb))
    assert p.returncode == 0
    assert p.stdout == (
        "Discovered the following devicetree properties:\n\n"
        "beta.devicetree.org/arm-cortex-a72: 4\n"
        "beta.devicetree.org/brcm-bcm2711: 1\n"
        "beta.devicetree.org/brcm-bcm2711-vc5: 1\n"
        "beta.devicetree.org/raspberrypi-4-model-b: 1\n"
    )
    p = run("--format", "reference", "--dtb", str(dtb), "--features-dir", str(tmp_path / "fd"))
    assert p.returncode == 2
    assert "only applies to --dry-run" in p.stderr
    assert not (tmp_path / "fd").exists()


def test_explain_prints_the_reasons_and_writes_nothing(rpi4_blob: bytes, tmp_path: Path) -> None:
    """Issue 25 item 8: like usb-scan's, the explanation is the output; as root, an explain
    once created the default features.d on the machine."""
    dtb = tmp_path / "x.dtb"
    dtb.write_bytes(rpi4_blob)
    fd = tmp_path / "features.d"
    json_explain = run("--explain", "-o", "json", "--dtb", str(dtb), "--features-dir", str(fd))
    assert json_explain.returncode == 2 and json_explain.stdout == ""  # issue 32 item 9
    assert json_explain.stderr.startswith("dt-labeller: error: --explain prints text: drop -o")
    for extra in ((), ("--dry-run",)):
        p = run_bytes("--explain", "--dtb", str(dtb), "--features-dir", str(fd), *extra)
        assert p.returncode == 0, p.stderr
        assert (
            b"beta.devicetree.org/arm-cortex-a72=4 <- /cpus/cpu@0, /cpus/cpu@1, /cpus/cpu@2, "
            b"/cpus/cpu@3\n" in p.stdout
        )
        assert p.stderr == b""
        assert not fd.exists()
    # and the same run without --explain does write (the directory is not the reason)
    assert (
        run("--dtb", str(dtb), "--features-dir", str(fd), "--create-features-dir").returncode == 0
    )
    assert (fd / "dt-labeller").is_file()


def test_devicetree_nodes_are_dt_node_and_node_name_is_a_deprecated_alias(
    jetson_blob: bytes, tmp_path: Path
) -> None:
    """`--node-name` is the Kubernetes Node everywhere else: the devicetree spelling is
    --dt-node (-n); the old one still works for a release, with a warning saying so."""
    dtb = tmp_path / "j.dtb"
    dtb.write_bytes(jetson_blob)
    new = run("--dry-run", "--dtb", str(dtb), "--dt-node", "pwm-fan", "-n", "fpga")
    old = run("--dry-run", "--dtb", str(dtb), "--node-name", "pwm-fan", "-n", "fpga")
    assert new.returncode == old.returncode == 0, old.stderr
    assert "beta.devicetree.org/pwm-fan=1" in new.stdout.splitlines()
    assert old.stdout == new.stdout
    assert "deprecated" not in new.stderr
    assert untimed(old.stderr) == (
        "dt-labeller: WARNING: --node-name is deprecated and will be removed in the next "
        "release: use --dt-node (everywhere else --node-name is the Kubernetes Node)\n"
        + untimed(new.stderr)
    )
    assert "--node-name" not in run("--help").stdout


def test_no_devicetree_is_a_normal_outcome(tmp_path: Path) -> None:
    root = tmp_path / "x86"
    (root / "sys" / "firmware" / "acpi").mkdir(parents=True)
    fd = tmp_path / "fd"
    fd.mkdir(exist_ok=True)  # a producer makes no features.d
    p = run("--host-root", str(root), "--features-dir", str(fd), "-v")
    assert p.returncode == 0
    assert "no devicetree" in p.stderr
    assert labels_of(fd) == {}
    assert (fd / "dt-labeller").read_bytes().startswith(b"# written by dt-labeller")
    # and a stale file from an earlier run is emptied, not left claiming hardware
    (fd / "dt-labeller").write_text("beta.devicetree.org/old=1\n")
    assert run("--host-root", str(root), "--features-dir", str(fd)).returncode == 0
    assert labels_of(fd) == {}


def test_blob_preferred_and_malformed_blob_falls_back_to_directory(
    rpi4_blob: bytes, jetson_blob: bytes, tmp_path: Path
) -> None:
    root = host_with_dir(tmp_path / "root", rpi4_blob)
    host_with_blob(root, jetson_blob)
    p = run("--dry-run", "--host-root", str(root))
    assert "nvidia-tegra210=1" in p.stdout  # the blob won
    (root / "sys" / "firmware" / "fdt").write_bytes(b"garbage, not a devicetree blob at all")
    p = run("--dry-run", "--host-root", str(root))
    assert p.returncode == 0
    assert "arm-cortex-a72=4" in p.stdout
    assert "bad magic" in p.stderr and "reading /sys/firmware/devicetree/base instead" in p.stderr


def test_malformed_blob_without_fallback_is_bad_input(tmp_path: Path) -> None:
    root = host_with_blob(tmp_path / "root", b"\xd0\x0d\xfe\xed" + b"\0" * 60)
    p = run("--dry-run", "--host-root", str(root))
    assert p.returncode == 3
    assert p.stderr.startswith("dt-labeller: error: /sys/firmware/fdt: not a usable")
    assert len(p.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "too short"),
        (b"\xd0\x0d\xfe\xed" + b"\xff" * 36, "only"),
        (b"hello world, this is not a devicetree blob", "bad magic"),
    ],
)
def test_bad_dtb_file(tmp_path: Path, content: bytes, message: str) -> None:
    dtb = tmp_path / "bad.dtb"
    dtb.write_bytes(content)
    p = run("--dry-run", "--dtb", str(dtb))
    assert p.returncode == 3
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"dt-labeller: error: {dtb}: ") and message in line
    assert p.stdout == ""


def test_missing_dtb_file_is_bad_input(tmp_path: Path) -> None:
    p = run("--dry-run", "--dtb", str(tmp_path / "nope.dtb"))
    assert p.returncode == 3
    assert (
        p.stderr
        == f"dt-labeller: error: {tmp_path / 'nope.dtb'}: cannot read (No such file or directory)\n"
    )


def test_unwritable_features_dir_is_exit_4(rpi4_blob: bytes, tmp_path: Path) -> None:
    dtb = tmp_path / "x.dtb"
    dtb.write_bytes(rpi4_blob)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    fd = blocker / "features.d"
    p = run("--dtb", str(dtb), "--features-dir", str(fd), "--create-features-dir")
    assert p.returncode == 4
    (line,) = p.stderr.splitlines()
    assert line == f"dt-labeller: error: cannot create features directory {fd}: Not a directory"


@pytest.mark.parametrize(
    ("prefix", "code"),
    [
        ("kubernetes.io", 2),
        ("node-role.kubernetes.io", 2),
        ("Upper.Example", 2),
        ("feature.node.kubernetes.io", 0),
        ("devicetree.example.com", 0),
    ],
)
def test_prefix_validation(rpi4_blob: bytes, tmp_path: Path, prefix: str, code: int) -> None:
    dtb = tmp_path / "x.dtb"
    dtb.write_bytes(rpi4_blob)
    p = run("--dry-run", "--dtb", str(dtb), "--prefix", prefix)
    assert p.returncode == code, p.stderr
    if code:
        assert p.stderr.startswith("dt-labeller: error: --prefix: ")
    else:
        assert f"{prefix}/arm-cortex-a72=4" in p.stdout


def test_environment_variables_configure_paths(rpi4_blob: bytes, tmp_path: Path) -> None:
    root = host_with_blob(tmp_path / "root", rpi4_blob)
    fd = tmp_path / "fd"
    fd.mkdir(exist_ok=True)  # a producer makes no features.d
    p = run(env={"EDGEFD_HOST_ROOT": str(root), "EDGEFD_FEATURES_DIR": str(fd)})
    assert p.returncode == 0
    assert labels_of(fd) == RPI4_LABELS


def test_console_entry_point_and_help() -> None:
    p = subprocess.run(
        [sys.executable, "-c", "import sys; from edgefd.dt_labeller.cli import main; main()", "-h"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 0
    assert "--dtb" in p.stdout and "--include-disabled" in p.stdout


def test_never_imports_kubernetes_or_grpc(rpi4_blob: bytes, tmp_path: Path) -> None:
    dtb = tmp_path / "x.dtb"
    dtb.write_bytes(rpi4_blob)
    code = (
        "import sys\n"
        "from edgefd.dt_labeller.cli import main\n"
        "try:\n"
        f"    main(['-o', 'json', '--dry-run', '--dtb', {str(dtb)!r}])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('kubernetes', 'grpc', 'google', 'fdt', 'yaml'))\n"
        "print('LOADED', bad, file=sys.stderr)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert p.returncode == 0, p.stderr
    assert "LOADED []" in p.stderr


# --------------------------------------------------------------------------- could not read


def _features_with_previous(tmp_path: Path) -> Path:
    fd = tmp_path / "fd"
    fd.mkdir()
    (fd / "dt-labeller").write_text("beta.devicetree.org/arm-cortex-a72=4\n")
    return fd


@pytest.mark.parametrize("broken", ["nonexistent-root", "no-sysfs", "fdt-fifo", "fdt-dir", "loop"])
def test_unreadable_devicetree_exits_3_and_keeps_the_previous_file(
    tmp_path: Path, broken: str
) -> None:
    """ "Could not read the devicetree" is never published as "no devicetree here"."""
    root = tmp_path / "root"
    fw = root / "sys" / "firmware"
    if broken == "nonexistent-root":
        root = tmp_path / "nonexistent"
    elif broken == "no-sysfs":
        root.mkdir()
    else:
        fw.mkdir(parents=True)
        if broken == "fdt-fifo":
            os.mkfifo(fw / "fdt")
        elif broken == "fdt-dir":
            (fw / "fdt").mkdir()
        else:
            (root / "proc").mkdir()
            os.symlink("device-tree", root / "proc" / "device-tree")
    fd = _features_with_previous(tmp_path)
    p = run("--host-root", str(root), "--features-dir", str(fd))
    assert p.returncode == 3, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith("dt-labeller: error: "), line
    assert (fd / "dt-labeller").read_text() == "beta.devicetree.org/arm-cortex-a72=4\n"
    assert feature_files(fd) == ["dt-labeller"]  # no temp file left either


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink"])
def test_output_path_that_is_not_a_regular_file_exits_4_without_hanging(
    rpi4_blob: bytes, tmp_path: Path, kind: str
) -> None:
    root = host_with_blob(tmp_path / "root", rpi4_blob)
    fd = tmp_path / "fd"
    fd.mkdir()
    out = fd / "dt-labeller"
    if kind == "fifo":
        os.mkfifo(out)  # opening it to write, or to compare, would wait for a reader for ever
    elif kind == "directory":
        out.mkdir()
    else:
        (tmp_path / "elsewhere").write_text("precious\n")
        out.symlink_to(tmp_path / "elsewhere")
    p = run("--host-root", str(root), "--features-dir", str(fd))  # run() times out at 60 s
    assert p.returncode == 4, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"dt-labeller: error: {out} is ") and "refusing to write" in line
    assert out.is_fifo() if kind == "fifo" else True
    assert out.is_dir() if kind == "directory" else True
    if kind == "symlink":
        assert out.is_symlink() and (tmp_path / "elsewhere").read_text() == "precious\n"
    assert feature_files(fd) == ["dt-labeller"]


def test_node_names_cannot_forge_lines_and_json_is_strict_utf8(
    rpi4_blob: bytes, tmp_path: Path
) -> None:
    """Issue 11 item 10: names come from the devicetree; a newline in one must not start a
    line of our own, and a byte that is not UTF-8 must not break the JSON."""
    root = tmp_path / "root"
    base = root / "sys" / "firmware" / "devicetree" / "base"
    expand_dtb(rpi4_blob, base)
    cpus = os.fsencode(base / "cpus")
    os.rename(cpus + b"/cpu@0", cpus + b"/cpu@0\ndt-labeller: ERROR: forged\x1b[2J")
    os.rename(cpus + b"/cpu@1", cpus + b"/cpu@1\xff")
    p = run_bytes("--host-root", str(root), "--dry-run", "-o", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout.decode("utf-8", "strict"))
    json.dumps(doc, ensure_ascii=False).encode("utf-8", "strict")
    assert doc["labels"]["beta.devicetree.org/arm-cortex-a72"] == "4"
    p = run_bytes("--host-root", str(root), "--explain")
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode("utf-8", "strict")
    assert not any(line.startswith("dt-labeller: ERROR: forged") for line in out.splitlines())
    assert "/cpus/cpu@0\\ndt-labeller: ERROR: forged\\x1b[2J" in out
    assert "/cpus/cpu@1\\xff" in out


def test_a_missing_features_dir_is_exit_4_unless_told_to_create_it(
    rpi4_blob: bytes, tmp_path: Path
) -> None:
    """Issue 32 item 7, as the bus scanners: refused before the devicetree is read."""
    dtb = tmp_path / "x.dtb"
    dtb.write_bytes(rpi4_blob)
    fd = tmp_path / "features.d"
    p = run("--dtb", str(dtb), "--features-dir", str(fd))
    assert p.returncode == 2 and not fd.exists()
    assert p.stderr == (
        f"dt-labeller: error: features directory {fd} does not exist "
        "(pass --create-features-dir to create it)\n"
    )
    assert (
        run("--dtb", str(dtb), "--features-dir", str(fd), "--create-features-dir").returncode == 0
    )
    assert (fd / "dt-labeller").is_file()


@pytest.mark.parametrize("board", sorted(SAMPLE_LABELS))
def test_each_board_sample_gives_its_labels_in_both_forms(board: str, tmp_path: Path) -> None:
    blob = compile_dts(SAMPLES / f"{board}.dts")
    for root in (host_with_blob(tmp_path / "a", blob), host_with_dir(tmp_path / "b", blob)):
        fd = tmp_path / root.name / "features.d"
        fd.mkdir()
        p = run("--host-root", str(root), "--features-dir", str(fd))
        assert p.returncode == 0, p.stderr
        assert labels_of(fd) == SAMPLE_LABELS[board]
    refused = "nvidia,p3737-0000+p3701-0000" in p.stderr
    assert refused is (board == "tegra234-agx-orin-devkit")


def test_the_rk3588_npu_cores_count_when_npu_nodes_are_visited(tmp_path: Path) -> None:
    root = host_with_blob(tmp_path, compile_dts(SAMPLES / "rk3588-rock-5b.dts"))
    p = run("--host-root", str(root), "--dry-run", "--dt-node", "npu")
    assert p.returncode == 0, p.stderr
    assert "beta.devicetree.org/rockchip-rk3588-rknn-core=3\n" in p.stdout
