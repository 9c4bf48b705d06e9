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

{{/* The same for devplugin's DaemonSet and ServiceAccount (k8s/devplugin.yaml). */}}
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
