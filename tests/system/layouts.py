"""Where each distribution puts the kubelet and containerd, so the end-to-end node can be laid
out as kubeadm, k3s, MicroK8s or k0s lay a node out (``scripts/e2e --layout``, or ``%LAYOUT``
in a scenario), and edgefd installed with the matching profile must find everything.

What edgefd meets on a node differs between them in: the kubelet's ``--root-dir`` (its
plugins_registry, plugins and pod-resources directories follow it); the containerd socket
(device-keeper dials it); and the containerd configuration each generates (whether device
nodes are chowned to the container's user, the CDI spec directories). The kubelet's
device-plugin directory does *not* follow ``--root-dir``: it is ``DevicePluginPath``,
``/var/lib/kubelet/device-plugins/``, a constant of k8s.io/kubelet
pkg/apis/deviceplugin/v1beta1/constants.go, which pkg/kubelet/cm/devicemanager/manager.go
NewManagerImpl uses whatever the root directory (k8s.io/kubernetes v1.37.2, the harness's
kubelet). So on k0s a device plugin registers under /var/lib/kubelet/device-plugins while DRA
drivers register under /var/lib/k0s/kubelet/plugins_registry, and the node here does exactly
that; only MicroK8s joins the two, by a symlink its snap's install hook makes.

The facts, from each distribution's own source:

* k3s (k3s-io/k3s pkg/agent/config/config.go and config_linux.go): data dir
  /var/lib/rancher/k3s; containerd root <data>/agent/containerd, state /run/k3s/containerd,
  socket /run/k3s/containerd/containerd.sock, config <data>/agent/etc/containerd/config.toml
  rendered from a template (config-v3.toml.tmpl for containerd 2: k3s-io/docs
  docs/advanced.md); the kubelet's root dir is left at its default, /var/lib/kubelet. The
  template sets ``device_ownership_from_security_context`` from ``--nonroot-devices``, and no
  CDI setting (containerd's defaults).
* MicroK8s (canonical/microk8s microk8s-resources/default-args/{kubelet,containerd,
  containerd-template.toml}, snap/hooks/install): kubelet ``--root-dir=$SNAP_COMMON/var/lib/
  kubelet`` and ``--container-runtime-endpoint=$SNAP_COMMON/run/containerd.sock``; containerd
  ``--root $SNAP_COMMON/var/lib/containerd --state $SNAP_COMMON/run/containerd``, its config
  $SNAP_DATA/args/containerd.toml rendered from containerd-template.toml (version 2, no CDI or
  device-ownership setting); SNAP_COMMON is /var/snap/microk8s/common and SNAP_DATA
  /var/snap/microk8s/current. The install hook links /var/lib/kubelet to the root dir when
  nothing is there ("so that most kubelet device plugins work out of the box").
* k0s (k0sproject/k0s pkg/config/cfgvars.go, pkg/component/worker/kubelet.go,
  pkg/component/worker/containerd/{component.go,component_other.go,utils_other.go,
  configurer.go}): data dir /var/lib/k0s, kubelet ``--root-dir`` <data>/kubelet; run dir
  /run/k0s; containerd ``--root=<data>/containerd --state=<run>/containerd
  --address=<run>/containerd.sock --config=/etc/k0s/containerd.toml``, a version 3 file with
  only the pinned sandbox image and ``imports = ["/etc/k0s/containerd.d/*.toml"]``, the
  drop-ins where a user's settings go.
* kubeadm: containerd's own defaults (/run/containerd/containerd.sock, /var/lib/containerd,
  /run/containerd, /etc/containerd/config.toml) and the kubelet's (/var/lib/kubelet).

The cgroup driver is the distribution's default (``Layout.cgroup_driver``: systemd for kubeadm
and k3s, cgroupfs for MicroK8s and k0s; ``scripts/e2e --cgroup-driver`` overrides it): with
systemd, the node's init is a real systemd (systemd.py) and runc's ``SystemdCgroup`` is on.

Every layout's containerd is stock: no ``device_ownership_from_security_context`` (non-root
workloads get their devices through CDI's additionalGids, checks 6n and 7b); a node asked for
it turns it on the way that distribution's user does (k3s ``--nonroot-devices``, an edit of
MicroK8s' template, a k0s drop-in, kubeadm's config.toml), so the rest of the file is as
generated. What only this machine needs (no CAP_SYS_RESOURCE, Debian's runc and CNI plugins,
a loopback CNI network, the pause image imported rather than pulled) is added to every layout
the way that distribution takes additions.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
SNAP_COMMON = "/var/snap/microk8s/common"
SNAP_DATA = "/var/snap/microk8s/current"
# containerd plugins that cannot run here and would only log errors
DISABLED = (
    '["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
    ' "io.containerd.snapshotter.v1.devmapper", "io.containerd.nri.v1.nri"]'
)


def _s(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these paths


@dataclass(frozen=True)
class Layout:
    name: str
    kubelet_root: str
    socket: str
    root: str  # containerd's
    state: str
    config: str  # where the distribution writes containerd's config
    cni_conf_dir: str
    writable: tuple[str, ...] = ()  # machine directories the node must write under (overlay)
    scratch: tuple[str, ...] = ()  # in those, where the node's scratch directories go (binds)
    links: tuple[tuple[str, str], ...] = ()  # (link, target) the distribution's installer makes
    drop_in: str = ""  # k0s: the imported file the node's own settings go into
    # the cgroup driver the distribution's kubelet and containerd use by default: kubeadm's
    # since 1.22 (its KubeletConfiguration defaulting), k3s's when it runs as a systemd service
    # (k3s PR #5462: pkg/agent/containerd/config_linux.go, pkg/daemons/agent/agent_linux.go);
    # MicroK8s' and k0s' kubelets keep cgroupfs (their default-args, k0s's worker config)
    cgroup_driver: str = "cgroupfs"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def device_plugin_dir(self) -> str:
        """The kubelet's, whatever ``--root-dir`` is (see the module's docstring)."""
        return "/var/lib/kubelet/device-plugins"

    @property
    def scratch_roots(self) -> tuple[str, ...]:
        """Where edgefd and the node write under the kubelet's and containerd's directories
        (for the power cut: every mount below them goes)."""
        return ("/run/", f"{self.kubelet_root}/", "/var/lib/kubelet/", f"{self.root}/")

    def files(
        self, sandbox: str, runc_root: str, ownership: bool = False, systemd: bool = False
    ) -> dict[str, str]:
        """containerd's configuration as this distribution writes it (stock: no device
        ownership), plus what this machine needs, by path inside the node; `ownership` adds
        device_ownership_from_security_context where docs/scheduling.md says to put it;
        `systemd`, runc's SystemdCgroup (the systemd cgroup driver)."""
        text = CONFIGS[self.name](self, sandbox, runc_root, ownership)
        flag = "true" if systemd else "false"
        return {
            p: t.replace("SystemdCgroup = false", f"SystemdCgroup = {flag}")
            for p, t in text.items()
        }


def _machine_v3(layout: Layout, sandbox: str, runc_root: str, ownership: bool) -> str:
    """Version 3 tables with what this machine needs (and the device ownership a non-root
    workload needs, when the layout's own file does not carry it)."""
    runc = shutil.which("runc") or "/usr/sbin/runc"
    owner = "\n  device_ownership_from_security_context = true" if ownership else ""
    return f"""disabled_plugins = {DISABLED}
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {_s(sandbox)}
[plugins."io.containerd.cri.v1.runtime"]
  # These machines lack CAP_SYS_RESOURCE: runc cannot set a negative oom_score_adj (the
  # sandbox's -998, system-node-critical pods), and fails with only "can't get final child's
  # PID from pipe: EOF". This clamps it to the runtime's own value instead.
  restrict_oom_score_adj = true{owner}
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = {_s(runc)}
        Root = {_s(runc_root)}
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [{_s(CNI_BIN_DIR)}]
    conf_dir = {_s(layout.cni_conf_dir)}
"""


def _v3_head(layout: Layout, extra: str = "") -> str:
    """A version 3 file's own paths (root, state, socket), `extra` tables, and the stream
    server on any loopback port (a fixed one would collide between runs here)."""
    return f"""version = 3
root = {_s(layout.root)}
state = {_s(layout.state)}
[grpc]
  address = {_s(layout.socket)}
{extra}[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def _kubeadm(layout: Layout, sandbox: str, runc_root: str, ownership: bool) -> dict[str, str]:
    # kubeadm writes no containerd config; /etc/containerd/config.toml is the operator's. The
    # CDI directories: only the node's own /var/run/cdi (scratch /run), never the machine's
    # /etc/cdi, which this layout does not make private.
    head = _v3_head(layout)
    body = _machine_v3(layout, sandbox, runc_root, ownership)
    body = body.replace(
        "restrict_oom_score_adj = true",
        'restrict_oom_score_adj = true\n  cdi_spec_dirs = ["/var/run/cdi"]',
    )
    return {layout.config: head + body}


def _k3s(layout: Layout, sandbox: str, runc_root: str, ownership: bool) -> dict[str, str]:
    # k3s's v3 template (with --nonroot-devices: device_ownership_from_security_context = true)
    # and its opt directory; stream server on 127.0.0.1:10010 as k3s has it would collide
    # between runs here, so port 0 (any)
    opt = f'[plugins."io.containerd.internal.v1.opt"]\n  path = {_s(layout.root)}\n'
    head = _v3_head(layout, opt)
    return {layout.config: head + _machine_v3(layout, sandbox, runc_root, ownership)}


def _microk8s(layout: Layout, sandbox: str, runc_root: str, ownership: bool) -> dict[str, str]:
    # containerd-template.toml as the snap renders it (version 2; root, state and address are
    # its command-line flags, not in the file), with device_ownership_from_security_context
    # added to its CRI table when asked, as a user edits the template
    runc = shutil.which("runc") or "/usr/sbin/runc"
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    owner = "\n  device_ownership_from_security_context = true" if ownership else ""
    text = f"""version = 2
oom_score = 0
disabled_plugins = {DISABLED}
[grpc]
  uid = 0
  gid = 0
  max_recv_message_size = 16777216
  max_send_message_size = 16777216
[cgroup]
  path = ""
{cri}
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  sandbox_image = {_s(sandbox)}
  max_container_log_line_size = 16384
  restrict_oom_score_adj = true{owner}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = {_s(runc)}
        Root = {_s(runc_root)}
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {_s(CNI_BIN_DIR)}
    conf_dir = {_s(layout.cni_conf_dir)}
"""
    return {layout.config: text}


def _k0s(layout: Layout, sandbox: str, runc_root: str, ownership: bool) -> dict[str, str]:
    # k0s's generated file verbatim in content (the placeholder header, the imports glob, the
    # pinned sandbox); everything else in a drop-in, as k0s tells its users to
    header = "# k0s_managed=true\n"
    main = f"""{header}version = 3
imports = [{_s(str(Path(layout.drop_in).parent / "*.toml"))}]
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = {_s(sandbox)}
[plugins."io.containerd.cri.v1.runtime"]
"""
    # (k0s warns of a drop-in with the CRI v1 table; the stream server's defaults suit here)
    drop_in = "version = 3\n" + _machine_v3(layout, sandbox, runc_root, ownership)
    return {layout.config: main, layout.drop_in: drop_in}


CONFIGS = {"kubeadm": _kubeadm, "k3s": _k3s, "microk8s": _microk8s, "k0s": _k0s}

LAYOUTS: dict[str, Layout] = {
    "kubeadm": Layout(
        name="kubeadm",
        kubelet_root="/var/lib/kubelet",
        socket="/run/containerd/containerd.sock",
        root="/var/lib/containerd",
        state="/run/containerd",
        config="/run/containerd/config.toml",  # /etc/containerd stays the machine's
        cni_conf_dir="/var/lib/cni/net.d",
        cgroup_driver="systemd",
    ),
    "k3s": Layout(
        name="k3s",
        kubelet_root="/var/lib/kubelet",
        socket="/run/k3s/containerd/containerd.sock",
        root="/var/lib/rancher/k3s/agent/containerd",
        state="/run/k3s/containerd",
        config="/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        cni_conf_dir="/var/lib/rancher/k3s/agent/etc/cni/net.d",
        cgroup_driver="systemd",
    ),
    "microk8s": Layout(
        name="microk8s",
        kubelet_root=f"{SNAP_COMMON}/var/lib/kubelet",
        socket=f"{SNAP_COMMON}/run/containerd.sock",
        root=f"{SNAP_COMMON}/var/lib/containerd",
        state=f"{SNAP_COMMON}/run/containerd",
        config=f"{SNAP_DATA}/args/containerd.toml",
        cni_conf_dir=f"{SNAP_DATA}/args/cni-network",
        writable=("/var",),
        scratch=("/var/snap",),
        links=(("/var/lib/kubelet", f"{SNAP_COMMON}/var/lib/kubelet"),),
    ),
    "k0s": Layout(
        name="k0s",
        kubelet_root="/var/lib/k0s/kubelet",
        socket="/run/k0s/containerd.sock",
        root="/var/lib/k0s/containerd",
        state="/run/k0s/containerd",
        config="/etc/k0s/containerd.toml",
        cni_conf_dir="/etc/cni/net.d",  # containerd's default: k0s sets none
        writable=("/etc",),
        scratch=("/etc/k0s",),
        drop_in="/etc/k0s/containerd.d/edgefd-e2e-node.toml",
    ),
}


def containerd_argv(layout: Layout) -> list[str]:
    """The flags the distribution starts containerd with (MicroK8s and k0s give root, state
    and address on the command line; the others in the file)."""
    argv = ["--config", layout.config]
    if layout.name in ("microk8s", "k0s"):
        argv += ["--root", layout.root, "--state", layout.state, "--address", layout.socket]
    return argv
