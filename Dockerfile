# syntax=docker/dockerfile:1
# edgefd image: every edgefd command (dt-labeller, usb-scan, pci-scan, feature-sink, devplugin)
# as a console script in one small image; the DaemonSet (k8s/pod-template.yaml) picks the
# command per container.
#
#   scripts/build-image            # buildah, no container engine needed; amd64 and/or arm64
#   docker build -t edgefd:0.1.0 . # where a docker engine and python:3.11-slim are at hand
#
# Stage 1 installs the package with its dependencies into a virtualenv and then removes what
# edgefd never imports (scripts/image/slim_venv.py says what and why); stage 2 is a clean
# python:3.11-slim with only that virtualenv copied in: no compiler, no pip, no source tree,
# running as the non-root uid 65532 unless a pod says otherwise.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
# pip verifies PyPI against the system CA bundle; scripts/build-image mounts the host's bundle
# there, so a TLS-inspecting proxy that the host trusts is trusted by the build too.
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY . .
# Every dependency ships binary wheels for amd64 and arm64 (grpcio, protobuf, pydantic-core) or
# is pure Python, so no compiler is needed even here. The smoke test runs after the slimming:
# every console script and the modules feature-sink and devplugin load lazily still import.
RUN python -m venv /opt/edgefd \
 && /opt/edgefd/bin/pip install --no-compile /src \
 && /opt/edgefd/bin/python scripts/image/slim_venv.py /opt/edgefd \
 && /opt/edgefd/bin/python -c "import kubernetes.client, kubernetes.config, kubernetes.client.rest, grpc, google.protobuf, yaml, pyudev, click" \
 && /opt/edgefd/bin/dt-labeller --help >/dev/null \
 && /opt/edgefd/bin/usb-scan --help >/dev/null \
 && /opt/edgefd/bin/pci-scan --help >/dev/null \
 && /opt/edgefd/bin/feature-sink --help >/dev/null \
 && /opt/edgefd/bin/devplugin --help >/dev/null \
 && /opt/edgefd/bin/device-keeper --help >/dev/null

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="edgefd" \
      org.opencontainers.image.description="Node labels from devicetree, USB and PCI, and a kubelet device plugin for edge accelerators" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/edgefd/edgefd"
# The same base image as the builder, so the virtualenv's python symlink stays valid.
COPY --from=builder /opt/edgefd /opt/edgefd
RUN groupadd --system --gid 65532 edgefd \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin edgefd
# Bytecode was compiled at build time: with a read-only root filesystem nothing is written.
ENV PATH=/opt/edgefd/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
WORKDIR /
# No fixed ENTRYPOINT: each container names its command (one of the console scripts above).
CMD ["feature-sink", "--help"]
