"""Images for the node: the pod sandbox ("pause") image, built here, and edgefd's own image,
built by ``scripts/build-image``.

No image can be pulled on these machines, and containerd needs a sandbox image before it runs
any pod. A static ``pause`` binary (tests/system/pause.c) in a one-layer OCI archive, written
here byte for byte (no image builder needed), is all a sandbox needs. The archive is
deterministic, so rebuilding it changes nothing unless pause.c or the compiler does.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import shutil
import subprocess
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAUSE_SOURCE = HERE / "pause.c"
# A local name: this is not the upstream image, and nothing must try to pull it.
PAUSE_REF = "localhost/edgefd-e2e/pause:1"

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


class ImageError(RuntimeError):
    pass


def go_arch() -> str:
    """The OCI architecture name of this machine."""
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(m, m)


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    _add(tar, f"blobs/sha256/{digest}", data)
    return f"sha256:{digest}"


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def _layer(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, (data, mode) in sorted(files.items()):
            _add(t, name.lstrip("/"), data, mode)
    return buf.getvalue()


def write_oci_archive(
    out: Path, ref: str, files: dict[str, tuple[bytes, int]], entrypoint: list[str]
) -> Path:
    """A one-layer image holding ``files`` (path -> (content, mode)) as an OCI archive that
    ``ctr images import`` names ``ref``."""
    layer = _layer(files)
    diff_id = f"sha256:{hashlib.sha256(layer).hexdigest()}"
    config = {
        "architecture": go_arch(),
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        _add(t, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": OCI_CONFIG,
                "digest": _blob(t, config_bytes),
                "size": len(config_bytes),
            },
            "layers": [{"mediaType": OCI_LAYER, "digest": _blob(t, layer), "size": len(layer)}],
        }
        manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": _blob(t, manifest_bytes),
                    "size": len(manifest_bytes),
                    "annotations": {
                        "io.containerd.image.name": ref,
                        "org.opencontainers.image.ref.name": ref.rpartition(":")[2],
                    },
                }
            ],
        }
        _add(t, "index.json", json.dumps(index, sort_keys=True).encode())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(out)
    return out


def pause_archive(cache: Path) -> Path:
    """The sandbox image archive in ``cache``, (re)built when pause.c is newer."""
    binary, archive = cache / "pause", cache / "pause-oci.tar"
    if archive.exists() and archive.stat().st_mtime >= PAUSE_SOURCE.stat().st_mtime:
        return archive
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise ImageError("no C compiler (apt-get install gcc libc6-dev)")
    cache.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        [cc, "-static", "-Os", "-s", "-o", str(binary), str(PAUSE_SOURCE)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise ImageError(f"cannot build the pause binary: {r.stderr.strip()}")
    return write_oci_archive(
        archive, PAUSE_REF, {"/pause": (binary.read_bytes(), 0o755)}, ["/pause"]
    )
