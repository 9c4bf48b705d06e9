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
# python:3.11-slim with only that virtualenv and the image's user copied in: no compiler, no pip,
# no source tree, running as the non-root uid 65532 unless a pod says otherwise.
#
# The builder always runs on the build machine's own architecture: for an arm64 image on an
# amd64 machine it installs the arm64 wheels (scripts/image/install_venv.py: pip picks them for
# the target platform, PyPA's installer unpacks them), so nothing is emulated; qemu is needed
# only to run the image. BUILDER_IMAGE is the same base for the build machine's architecture
# (scripts/build-image names it; with docker, python:3.11-slim's own variant).
ARG PYTHON_IMAGE=python:3.11-slim
ARG BUILDER_IMAGE=python:3.11-slim

FROM --platform=$BUILDPLATFORM ${BUILDER_IMAGE} AS builder
ARG TARGETARCH
ARG BUILDARCH
# pip verifies PyPI against the system CA bundle; scripts/build-image mounts the host's bundle
# there, so a TLS-inspecting proxy that the host trusts is trusted by the build too.
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY . .
# The smoke test runs after the slimming, where the builder can run the image's binaries (the
# same architecture): every console script and the modules feature-sink and devplugin load lazily
# still import. For another architecture tests/image runs every console script in the image.
RUN python -m venv /opt/edgefd \
 && /opt/edgefd/bin/pip install -q --target /tmp/installer installer \
 && /opt/edgefd/bin/python scripts/image/install_venv.py --arch "$TARGETARCH" \
      --installer /tmp/installer /opt/edgefd /src \
 && /opt/edgefd/bin/python scripts/image/slim_venv.py /opt/edgefd \
 && if [ "$TARGETARCH" = "$BUILDARCH" ]; then \
      /opt/edgefd/bin/python -c "import kubernetes.client, kubernetes.config, kubernetes.client.rest, grpc, google.protobuf, yaml, pyudev, click" \
      && /opt/edgefd/bin/dt-labeller --help >/dev/null \
      && /opt/edgefd/bin/usb-scan --help >/dev/null \
      && /opt/edgefd/bin/pci-scan --help >/dev/null \
      && /opt/edgefd/bin/feature-sink --help >/dev/null \
      && /opt/edgefd/bin/devplugin --help >/dev/null \
      && /opt/edgefd/bin/device-keeper --help >/dev/null \
      && /opt/edgefd/bin/kubectl-edgefd --help >/dev/null; \
    fi \
 && groupadd --system --gid 65532 edgefd \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin edgefd

FROM --platform=$TARGETPLATFORM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="edgefd" \
      org.opencontainers.image.description="Node labels from devicetree, USB and PCI, and a kubelet device plugin for edge accelerators" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/edgefd/edgefd"
# The same base image as the builder (for its own architecture), so the virtualenv's python
# symlink stays valid and the account files are the base's plus the image's user.
COPY --from=builder /opt/edgefd /opt/edgefd
COPY --from=builder /etc/passwd /etc/group /etc/shadow /etc/gshadow /etc/
# Bytecode was compiled at build time: with a read-only root filesystem nothing is written.
ENV PATH=/opt/edgefd/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
WORKDIR /
# No fixed ENTRYPOINT: each container names its command (one of the console scripts above).
CMD ["feature-sink", "--help"]
