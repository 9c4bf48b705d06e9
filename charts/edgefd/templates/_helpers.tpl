{{/*
The labels of every object: the base's two (k8s/), then Helm's conventional ones, which tell
which release and chart version made the object. Only the base's are used in selectors.
*/}}
{{- define "edgefd.labels" -}}
app.kubernetes.io/name: edgefd
app.kubernetes.io/part-of: edgefd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The same for devplugin's own DaemonSet and ServiceAccount (splitByIdentity:
k8s/overlays/split-identity). */}}
{{- define "edgefd.devpluginLabels" -}}
app.kubernetes.io/name: edgefd-devplugin
app.kubernetes.io/part-of: edgefd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "edgefd.namespace" -}}
{{ .Values.namespace.name }}
{{- end }}

{{/* Which requests the admission policies look at: those of a holder of edgefd's mark
(k8s/rbac.yaml), whatever its ServiceAccount is called. */}}
{{- define "edgefd.markCondition" -}}
- name: edgefd-mark
  expression: >-
    request.userInfo.username.startsWith('system:serviceaccount:') &&
    authorizer.group('admission.edgefd.io').resource('restrictions').check('subject').allowed()
    && !authorizer.group('admission.edgefd.io').resource('restrictions')
    .check('unassigned').allowed()
{{- end }}

{{- /* keepPoliciesOnUninstall: `helm uninstall` leaves the admission policies and their
bindings (values.yaml says why); the next install of the release takes them over. */ -}}
{{- define "edgefd.policyAnnotations" -}}
{{- if .Values.keepPoliciesOnUninstall }}
  annotations:
    helm.sh/resource-policy: keep
{{- end }}
{{- end }}

{{- /* The hook Jobs' (prune-hook.yaml, policy-gate.yaml) pod and container security: the
restricted profile, as the image's non-root user. */ -}}
{{- define "edgefd.jobPodSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- define "edgefd.jobContainerSecurity" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{- define "edgefd.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* Where the HTTP listeners bind: every address, or loopback only with hostNetwork. */}}
{{- define "edgefd.listenHost" -}}
{{- if .Values.hostNetwork }}127.0.0.1{{ end }}
{{- end }}

{{/* The probes' host: the pod IP by default, loopback with hostNetwork. */}}
{{- define "edgefd.probeHost" -}}
{{- if .Values.hostNetwork }}
host: 127.0.0.1
{{- end }}
{{- end }}

{{/* KUBERNETES_SERVICE_HOST/PORT for the containers with an API token, when set. */}}
{{- define "edgefd.apiServerEnv" -}}
{{- if .Values.apiServer.host }}
- {name: KUBERNETES_SERVICE_HOST, value: {{ .Values.apiServer.host | quote }}}
- {name: KUBERNETES_SERVICE_PORT, value: {{ .Values.apiServer.port | toString | quote }}}
{{- end }}
{{- end }}

{{/* The projected, pod-bound, expiring token of feature-sink (and devplugin in DRA mode). */}}
{{- define "edgefd.tokenVolume" -}}
projected:
  defaultMode: 0444
  sources:
    - serviceAccountToken:
        path: token
        expirationSeconds: 3607
    - configMap:
        name: kube-root-ca.crt
        items:
          - {key: ca.crt, path: ca.crt}
    - downwardAPI:
        items:
          - path: namespace
            fieldRef:
              fieldPath: metadata.namespace
{{- end }}

{{- /* devicePlugin.api: dra and both serve through DRA, device-plugin and both through the
kubelet's device-plugin directory (devplugin --api takes the same three) */ -}}
{{- define "edgefd.dra" -}}
{{- if and .Values.devicePlugin.enabled (ne .Values.devicePlugin.api "device-plugin") }}true{{ end }}
{{- end }}

{{- define "edgefd.devicePluginApi" -}}
{{- if and .Values.devicePlugin.enabled (ne .Values.devicePlugin.api "dra") }}true{{ end }}
{{- end }}

{{- define "edgefd.check" -}}
{{- if not (or .Values.labels.enabled .Values.devicePlugin.enabled) }}
{{- fail "labels.enabled and devicePlugin.enabled are both false: nothing would run" }}
{{- end }}
{{- /* The combinations kustomize refuses (k8s/KustomizeComponents), refused here in the same
words: the rule's key first, as kustomize names it, then the values that break it. (Two
distributions, the fourth rule, cannot be said in values: `distribution` is one.) */ -}}
{{- $dp := .Values.devicePlugin }}
{{- if and (not $dp.enabled) (ne $dp.api "device-plugin") }}
{{- fail (printf "edgefd.io/list-dra-or-no-devplugin-not-both: devicePlugin.api is %s but devicePlugin.enabled is false: no devplugin would serve DRA" $dp.api) }}
{{- end }}
{{- if and $dp.evictAfter (eq $dp.api "device-plugin") }}
{{- fail "edgefd.io/list-dra-before-dra-evict: devicePlugin.evictAfter needs devicePlugin.api dra or both: the device-plugin API cannot evict" }}
{{- end }}
{{- if and .Values.splitByIdentity (not $dp.enabled) }}
{{- fail "edgefd.io/list-split-identity-or-no-devplugin-not-both: splitByIdentity is true but devicePlugin.enabled is false: no device plugin to give a pod of its own" }}
{{- end }}
{{- if and .Values.apiServer.host (not .Values.apiServer.port) }}
{{- fail "apiServer.host needs apiServer.port" }}
{{- end }}
{{- range .Values.labels.allowNamespaces }}
{{- $nfd := or (eq . "feature.node.kubernetes.io") (hasSuffix ".feature.node.kubernetes.io" .) (eq . "profile.node.kubernetes.io") (hasSuffix ".profile.node.kubernetes.io" .) }}
{{- $k8s := or (eq . "kubernetes.io") (hasSuffix ".kubernetes.io" .) (eq . "k8s.io") (hasSuffix ".k8s.io" .) }}
{{- if and $k8s (not $nfd) }}
{{- fail (printf "labels.allowNamespaces: %s is a Kubernetes namespace; the admission policy refuses its labels whatever feature-sink is told" .) }}
{{- end }}
{{- end }}
{{- end }}

{{- /*
The kubelet's and the runtime's paths of each distribution (values.yaml `distribution`); each
distribution's source files are named in k8s/overlays/<distribution>/kustomization.yaml:
  k3s       kubelet --root-dir only for a rootless agent (k3s-io/k3s
            pkg/daemons/agent/agent_linux.go, pkg/agent/config/config.go); containerd
            /run/k3s/containerd/containerd.sock (pkg/agent/config/config_linux.go)
  microk8s  --root-dir=${SNAP_COMMON}/var/lib/kubelet, containerd --address
            ${SNAP_COMMON}/run/containerd.sock (canonical/microk8s
            microk8s-resources/default-args/kubelet, containerd; a classic snap:
            SNAP_COMMON=/var/snap/microk8s/common)
  k0s       --root-dir=<data dir>/kubelet with data dir /var/lib/k0s, containerd
            <run dir>/containerd.sock with run dir /run/k0s (k0sproject/k0s
            pkg/constant/constant_unix.go, pkg/config/cfgvars.go,
            pkg/component/worker/containerd/utils_other.go)
kubeletDir and criSocket, when set, win.
*/ -}}
{{- define "edgefd.profile" -}}
{{- $profiles := dict
  "kubeadm" (dict "kubeletDir" "/var/lib/kubelet" "criSocket" "/run/containerd/containerd.sock")
  "k3s" (dict "kubeletDir" "/var/lib/kubelet" "criSocket" "/run/k3s/containerd/containerd.sock")
  "microk8s" (dict "kubeletDir" "/var/snap/microk8s/common/var/lib/kubelet"
                   "criSocket" "/var/snap/microk8s/common/run/containerd.sock")
  "k0s" (dict "kubeletDir" "/var/lib/k0s/kubelet" "criSocket" "/run/k0s/containerd.sock") }}
{{- $p := get $profiles .Values.distribution }}
{{- if not $p }}
{{- fail (printf "distribution: %s is not one of kubeadm, k3s, microk8s, k0s" .Values.distribution) }}
{{- end }}
{{- toYaml $p }}
{{- end }}

{{/* The kubelet's --root-dir on the host. */}}
{{- define "edgefd.kubeletDir" -}}
{{- .Values.kubeletDir | default (get (include "edgefd.profile" . | fromYaml) "kubeletDir") }}
{{- end }}

{{/* The container runtime's CRI socket on the host (device-keeper). */}}
{{- define "edgefd.criSocket" -}}
{{- .Values.criSocket | default (get (include "edgefd.profile" . | fromYaml) "criSocket") }}
{{- end }}

{{/* The device-plugins directory: not <kubeletDir>/device-plugins but this constant of the
kubelet's (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1 DevicePluginPath, which
pkg/kubelet/cm/devicemanager NewManagerImpl uses whatever --root-dir says), on every
distribution. */}}
{{- define "edgefd.devicePluginDir" -}}
/var/lib/kubelet/device-plugins
{{- end }}

{{/* The kubelet's plugin registry, which it watches for DRA drivers' registration sockets. */}}
{{- define "edgefd.pluginsRegistryDir" -}}
{{ include "edgefd.kubeletDir" . }}/plugins_registry
{{- end }}

{{/* The DRA driver's own directory (service socket, checkpoint, stable device links, device
metadata files). */}}
{{- define "edgefd.draPluginDir" -}}
{{ include "edgefd.kubeletDir" . }}/plugins/edgefd.io
{{- end }}

{{/* The kubelet's pod-resources socket directory (device-keeper). */}}
{{- define "edgefd.podResourcesDir" -}}
{{ include "edgefd.kubeletDir" . }}/pod-resources
{{- end }}
