"""Read the OCI archives scripts/build-image writes, without a container engine.

    python3 scripts/image/oci.py sizes ARCHIVE [--json]          sizes per platform and layer
    python3 scripts/image/oci.py extract ARCHIVE DIR [--arch A]  the image's root filesystem
    python3 scripts/image/oci.py name-for-containerd LAYOUT_DIR  (used by scripts/build-image)

An archive is a tar of an OCI image layout (oci-layout, index.json, blobs/sha256/...). Its
index.json lists one manifest per reference name; a manifest is either an image (config +
layers) or an image index (one image manifest per platform). `extract` applies the layers in
order, with their whiteouts, as a container runtime would; tests/image runs the result with
chroot. Standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

INDEX_TYPES = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
}
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"


@dataclass(frozen=True)
class Image:
    """One platform's image in an archive."""

    arch: str
    manifest_digest: str
    config: dict[str, Any]
    layers: tuple[dict[str, Any], ...]  # descriptors, base first


class Archive:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._tar = tarfile.open(self.path)  # noqa: SIM115 - closed by __exit__
        self._members = {m.name.removeprefix("./"): m for m in self._tar.getmembers()}

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self._tar.close()

    def blob(self, digest: str) -> BinaryIO:
        algo, _, hexd = digest.partition(":")
        f = self._tar.extractfile(self._members[f"blobs/{algo}/{hexd}"])
        assert f is not None, digest
        return f  # type: ignore[return-value]

    def json(self, name_or_digest: str) -> Any:
        if ":" in name_or_digest:
            return json.load(self.blob(name_or_digest))
        f = self._tar.extractfile(self._members[name_or_digest])
        assert f is not None
        return json.load(f)

    def refs(self) -> list[str]:
        """The reference names of the archive's top-level manifests."""
        return [
            m.get("annotations", {}).get(REF_NAME, "") for m in self.json("index.json")["manifests"]
        ]

    def images(self) -> list[Image]:
        """Every platform's image (each distinct manifest once, whatever its names)."""
        out: dict[str, Image] = {}
        todo = list(self.json("index.json")["manifests"])
        while todo:
            desc = todo.pop(0)
            doc = self.json(desc["digest"])
            mt = doc.get("mediaType", desc.get("mediaType"))
            if mt in INDEX_TYPES or "manifests" in doc:
                todo.extend(doc["manifests"])
                continue
            config = self.json(doc["config"]["digest"])
            out.setdefault(
                desc["digest"],
                Image(config["architecture"], desc["digest"], config, tuple(doc["layers"])),
            )
        return list(out.values())

    def image(self, arch: str | None = None) -> Image:
        images = self.images()
        if arch is None and len(images) == 1:
            return images[0]
        for im in images:
            if im.arch == arch:
                return im
        sys.exit(f"oci: no {arch} image in {self.path} ({[i.arch for i in images]})")

    def layer_stream(self, desc: dict[str, Any]) -> tarfile.TarFile:
        raw = self.blob(desc["digest"])
        if desc["mediaType"].endswith("gzip"):
            raw = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
        elif not desc["mediaType"].endswith("tar"):
            sys.exit(f"oci: unsupported layer type {desc['mediaType']}")
        return tarfile.open(fileobj=raw, mode="r|")

    def layer_size(self, desc: dict[str, Any]) -> int:
        """Uncompressed size of a layer (the tar stream), what `docker history` shows."""
        raw = self.blob(desc["digest"])
        if not desc["mediaType"].endswith("gzip"):
            return int(desc["size"])
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        n = 0
        while chunk := raw.read(1 << 20):
            n += len(d.decompress(chunk))
        return n + len(d.flush())


def sizes(path: Path) -> dict[str, Any]:
    with Archive(path) as a:
        out: dict[str, Any] = {"archive": str(path), "archive_bytes": path.stat().st_size}
        out["refs"] = a.refs()
        out["images"] = {}
        for im in a.images():
            layers = [a.layer_size(d) for d in im.layers]
            out["images"][im.arch] = {
                "manifest": im.manifest_digest,
                "layers_bytes": layers,
                "compressed_bytes": sum(int(d["size"]) for d in im.layers),
                "image_bytes": sum(layers),
                # the base image is every layer but edgefd's own (the last: the virtualenv
                # copied in, plus the user and group entries)
                "base_bytes": sum(layers[:-1]),
                "edgefd_layer_bytes": layers[-1],
            }
        return out


def extract(path: Path, dest: Path, arch: str | None = None) -> Image:
    """Unpack the image's layers into `dest` (which must not exist), applying whiteouts."""
    dest.mkdir(parents=True)
    with Archive(path) as a:
        im = a.image(arch)
        for desc in im.layers:
            with a.layer_stream(desc) as layer:
                for m in layer:
                    _apply(layer, m, dest)
        return im


def _apply(layer: tarfile.TarFile, m: tarfile.TarInfo, dest: Path) -> None:
    name = os.path.normpath(m.name.lstrip("/"))
    if name.startswith(".."):
        sys.exit(f"oci: layer entry outside the root: {m.name}")
    head, base = os.path.split(name)
    if base == ".wh..wh..opq":  # opaque directory: hide what lower layers put there
        d = dest / head
        if d.is_dir():
            for child in d.iterdir():
                _remove(child)
        return
    if base.startswith(".wh."):
        _remove(dest / head / base[len(".wh.") :])
        return
    target = dest / name
    if target.is_symlink() or (target.exists() and not (m.isdir() and target.is_dir())):
        _remove(target)
    if m.islnk():  # hard links name a path inside the image
        m = _relinked(m, dest)
    layer.extract(m, dest, set_attrs=True, numeric_owner=True, filter="fully_trusted")


def _relinked(m: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo:
    m = m.replace(linkname=os.path.normpath(m.linkname.lstrip("/")), deep=False)
    return m


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()


def name_for_containerd(layout: Path) -> None:
    """Give every manifest of an OCI layout containerd's own name annotation (its importer reads
    that first), equal to the full reference buildah wrote as the OCI ref name."""
    path = layout / "index.json"
    index = json.loads(path.read_text())
    for m in index["manifests"]:
        ann = m.setdefault("annotations", {})
        if REF_NAME in ann:
            ann[CONTAINERD_NAME] = ann[REF_NAME]
    path.write_text(json.dumps(index, separators=(",", ":")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sizes")
    s.add_argument("archive", type=Path)
    s.add_argument("--json", action="store_true")
    e = sub.add_parser("extract")
    e.add_argument("archive", type=Path)
    e.add_argument("dest", type=Path)
    e.add_argument("--arch")
    n = sub.add_parser("name-for-containerd")
    n.add_argument("layout", type=Path)
    args = ap.parse_args()
    if args.cmd == "name-for-containerd":
        name_for_containerd(args.layout)
        return
    if args.cmd == "extract":
        im = extract(args.archive, args.dest, args.arch)
        print(f"{im.arch} {im.manifest_digest} -> {args.dest}")
        return
    info = sizes(args.archive)
    if args.json:
        print(json.dumps(info, indent=2))
        return
    mb = 1e6
    print(f"{info['archive']}: {info['archive_bytes'] / mb:.1f} MB ({', '.join(info['refs'])})")
    for arch, im in info["images"].items():
        print(
            f"  linux/{arch}: image {im['image_bytes'] / mb:.1f} MB "
            f"(base {im['base_bytes'] / mb:.1f} MB"
            f" + edgefd {im['edgefd_layer_bytes'] / mb:.1f} MB),"
            f" {im['compressed_bytes'] / mb:.1f} MB compressed"
        )


if __name__ == "__main__":
    main()
