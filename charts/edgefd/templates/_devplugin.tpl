{{- /*
devplugin's and device-keeper's containers and volumes (but host-sys, which the labelling
containers share), for the one pod (pod-template.yaml) or devplugin's own DaemonSet with
splitByIdentity (devplugin.yaml); k8s/pod-template.yaml says why each privilege and mount.
devicePlugin.api=dra changes exactly what k8s/overlays/dra changes: the command line, the
kubelet's plugin directories, the CDI directory and an API token (a volume of devplugin's
own); api=both has the DRA pieces and the device-plugin directory; hostNetwork what
k8s/overlays/hostnetwork does.
*/ -}}

{{- /* one pod (the default): devplugin and device-keeper run in DaemonSet edgefd */ -}}
{{- define "edgefd.onePod" -}}
{{- if and .Values.labels.enabled .Values.devicePlugin.enabled (not .Values.splitByIdentity) }}true{{ end }}
{{- end }}

{{- /* the ServiceAccount devplugin runs as: the pod's, or its own in a DaemonSet of its own */ -}}
{{- define "edgefd.devpluginAccount" -}}
{{- if include "edgefd.onePod" . }}edgefd-feature-sink{{ else }}edgefd-devplugin{{ end }}
{{- end }}

{{- /* the marks the kustomize components select the DaemonSet holding devplugin by
(k8s/pod-template.yaml) */ -}}
{{- define "edgefd.devpluginMarks" }}
edgefd.io/devplugin: "true"
edgefd.io/devplugin-account: {{ include "edgefd.devpluginAccount" . }}
edgefd.io/distribution: {{ .Values.distribution }}
edgefd.io/device-api: {{ if include "edgefd.dra" . }}dra{{ else }}device-plugin{{ end }}
edgefd.io/device-keeper: {{ if .Values.deviceKeeper.enabled }}"on"{{ else }}"off"{{ end }}
{{- end }}

{{- /* devplugin: in the one pod the first init container, a native sidecar (restartPolicy
Always), so that the kubelet starts it with the pod rather than after dt-labeller and bus-scan's
startup probe: it needs nothing they write, and the node's workload pods wait for it. In a
DaemonSet of its own, an ordinary container: nothing comes before it there
(k8s/pod-template.yaml, k8s/overlays/split-identity). */ -}}
{{- define "edgefd.devpluginContainer" }}
{{- $image := include "edgefd.image" . }}
{{- $listen := include "edgefd.listenHost" . }}
{{- $dra := include "edgefd.dra" . }}
{{- $dp := include "edgefd.devicePluginApi" . }}
{{- $kubeletDir := include "edgefd.kubeletDir" . }}
{{- $devicePlugins := include "edgefd.devicePluginDir" . }}
{{- $registry := include "edgefd.pluginsRegistryDir" . }}
{{- $draPlugin := include "edgefd.draPluginDir" . }}
        - name: devplugin
          image: {{ $image }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          {{- if include "edgefd.onePod" . }}
          restartPolicy: Always
          {{- end }}
          command:
            - devplugin
            - --host-root=/host
            - --config=/etc/edgefd/devplugin/resources.yaml
            - --notice-dir=/run/edgefd/notices
            - --decisions=/run/edgefd/decisions/decisions.json
          env:
            - name: NODE_NAME
              valueFrom:
                fieldRef:
                  fieldPath: spec.nodeName
            - {name: EDGEFD_LISTEN, value: "{{ $listen }}:8082"}
            {{- if $dra }}
            - {name: EDGEFD_API, value: {{ .Values.devicePlugin.api }}}
            - {name: EDGEFD_KUBELET_DIR, value: {{ $kubeletDir }}}
            - {name: EDGEFD_CDI_DIR, value: /var/run/cdi}
            {{- with .Values.devicePlugin.evictAfter }}
            - {name: EDGEFD_EVICT_AFTER, value: {{ . | quote }}}
            {{- end }}
            {{- end }}
            {{- if $dp }}
            - {name: EDGEFD_PLUGIN_DIR, value: {{ $devicePlugins }}}
            {{- end }}
            {{- if $dra }}
            {{- include "edgefd.apiServerEnv" . | nindent 12 }}
            {{- end }}
          ports:
            - {name: plugin-http, containerPort: 8082, protocol: TCP}
          securityContext:
            privileged: false
            runAsUser: 0
            runAsGroup: 0
            runAsNonRoot: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
            seccompProfile:
              type: RuntimeDefault
          resources:
            {{- toYaml .Values.resources.devplugin | nindent 12 }}
          # No startup probe: on an init container it would hold dt-labeller, and so the labels,
          # until the plugin's peer answered; the first probes wait instead, so that a healthy
          # start fails none (k8s/pod-template.yaml says how long)
          livenessProbe:
            httpGet:
              path: /healthz
              port: plugin-http
              {{- include "edgefd.probeHost" . | nindent 14 }}
            initialDelaySeconds: 20
            periodSeconds: 20
            timeoutSeconds: 3
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: plugin-http
              {{- include "edgefd.probeHost" . | nindent 14 }}
            initialDelaySeconds: 3
            periodSeconds: 3
            timeoutSeconds: 3
            failureThreshold: 3
          volumeMounts:
            {{- if $dra }}
            # the kubelet's plugin registry and the driver's own directory, at the host paths
            # (k8s/overlays/dra/devplugin-dra.yaml), and the DRA driver's API token
            - {name: plugins-registry, mountPath: {{ $registry }}}
            - {name: dra-plugin, mountPath: {{ $draPlugin }}}
            - {name: cdi-specs, mountPath: /var/run/cdi}
            - name: devplugin-token
              mountPath: /var/run/secrets/kubernetes.io/serviceaccount
              readOnly: true
            {{- end }}
            {{- if $dp }}
            - name: device-plugins
              mountPath: {{ $devicePlugins }}
            {{- end }}
            - {name: host-sys, mountPath: /host/sys, readOnly: true}
            - {name: host-dev, mountPath: /host/dev, readOnly: true}
            - {name: devplugin-config, mountPath: /etc/edgefd/devplugin, readOnly: true}
            - {name: devplugin-notices, mountPath: /run/edgefd/notices}
            # what it decides for each device it serves, for device-keeper (read-only there)
            - {name: decisions, mountPath: /run/edgefd/decisions}
{{- end }}

{{- /* device-keeper, an ordinary container in either DaemonSet */ -}}
{{- define "edgefd.deviceKeeperContainer" }}
{{- $image := include "edgefd.image" . }}
{{- $listen := include "edgefd.listenHost" . }}
{{- $kubeletDir := include "edgefd.kubeletDir" . }}
{{- $criSocket := include "edgefd.criSocket" . }}
{{- $podResources := include "edgefd.podResourcesDir" . }}
        {{- if .Values.deviceKeeper.enabled }}
        # k8s/pod-template.yaml says why each capability and mount
        - name: device-keeper
          image: {{ $image }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          command:
            - device-keeper
            - serve
            - --host-root=/host
            - --decisions=/run/edgefd/decisions/decisions.json
            - --state-dir=/host/var/lib/edgefd/device-keeper
            - --notice-dir=/run/edgefd/notices
          env:
            - {name: EDGEFD_LISTEN, value: "{{ $listen }}:8084"}
            - {name: EDGEFD_KUBELET_DIR, value: {{ $kubeletDir }}}
            - {name: EDGEFD_CRI_SOCKET, value: {{ $criSocket }}}
          ports:
            - {name: keeper-http, containerPort: 8084, protocol: TCP}
          securityContext:
            privileged: false
            runAsUser: 0
            runAsGroup: 0
            runAsNonRoot: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
              add: ["SYS_ADMIN", "SYS_PTRACE", "MKNOD", "CHOWN"]
            seccompProfile:
              type: RuntimeDefault
          resources:
            {{- toYaml .Values.resources.deviceKeeper | nindent 12 }}
          startupProbe:
            exec:
              command: [/opt/edgefd/bin/python, -m, edgefd.probe, "8084", --within=20,
                        --or-alive=/healthz]
            periodSeconds: 1
            timeoutSeconds: 30
            failureThreshold: 5
          livenessProbe:
            httpGet:
              path: /healthz
              port: keeper-http
              {{- include "edgefd.probeHost" . | nindent 14 }}
            periodSeconds: 20
            timeoutSeconds: 3
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: keeper-http
              {{- include "edgefd.probeHost" . | nindent 14 }}
            periodSeconds: 10
            timeoutSeconds: 3
            failureThreshold: 3
          volumeMounts:
            - {name: host-proc, mountPath: /host/proc, readOnly: true}
            - {name: host-cgroup, mountPath: /host/sys/fs/cgroup}
            - {name: pod-resources, mountPath: /host{{ $podResources }}, readOnly: true}
            - {name: cri-socket, mountPath: /host{{ $criSocket }}}
            # systemd's private socket in it: under the systemd cgroup driver a grant is also
            # the container scope's DeviceAllow=, or a daemon-reload takes it back
            - {name: host-systemd, mountPath: /host/run/systemd, readOnly: true}
            # what it granted (granted.json): revoked after a restart too, not what a
            # container's own /dev names
            - {name: keeper-state, mountPath: /host/var/lib/edgefd/device-keeper}
            # devplugin's decisions: which devices it hands out, as what, at which container
            # path and number; the keeper follows exactly those
            - {name: decisions, mountPath: /run/edgefd/decisions, readOnly: true}
            # its notice (a refused grant), which feature-sink posts as a Warning Event
            - {name: device-keeper-notices, mountPath: /run/edgefd/notices}
        {{- end }}
{{- end }}

{{- define "edgefd.devpluginVolumes" }}
{{- $image := include "edgefd.image" . }}
{{- $listen := include "edgefd.listenHost" . }}
{{- $dra := include "edgefd.dra" . }}
{{- $dp := include "edgefd.devicePluginApi" . }}
{{- $kubeletDir := include "edgefd.kubeletDir" . }}
{{- $criSocket := include "edgefd.criSocket" . }}
{{- $devicePlugins := include "edgefd.devicePluginDir" . }}
{{- $registry := include "edgefd.pluginsRegistryDir" . }}
{{- $draPlugin := include "edgefd.draPluginDir" . }}
{{- $podResources := include "edgefd.podResourcesDir" . }}
        - name: host-dev
          hostPath:
            path: /dev
            type: Directory
        {{- if $dra }}
        - name: plugins-registry
          hostPath:
            path: {{ $registry }}
            type: Directory
        - name: dra-plugin
          hostPath:
            path: {{ $draPlugin }}
            type: DirectoryOrCreate
        - name: cdi-specs
          hostPath:
            path: /var/run/cdi
            type: DirectoryOrCreate
        - name: devplugin-token
          {{- include "edgefd.tokenVolume" . | nindent 10 }}
        {{- end }}
        {{- if $dp }}
        - name: device-plugins
          hostPath:
            path: {{ $devicePlugins }}
            type: Directory
        {{- end }}
        - name: devplugin-config
          configMap:
            name: edgefd-devplugin
        # devplugin's notice (a failed reload), read by feature-sink in the one pod; in a pod
        # of its own nobody reads it (/readyz and the metrics say it)
        - name: devplugin-notices
          emptyDir:
            sizeLimit: 1Mi
        # devplugin writes (decisions.json, atomically), device-keeper reads: a few KiB
        - name: decisions
          emptyDir:
            sizeLimit: 1Mi
        {{- if .Values.deviceKeeper.enabled }}
        - name: host-proc
          hostPath:
            path: /proc
            type: Directory
        - name: host-cgroup
          hostPath:
            path: /sys/fs/cgroup
            type: Directory
        - name: pod-resources
          hostPath:
            path: {{ $podResources }}
            type: Directory
        - name: cri-socket
          hostPath:
            path: {{ $criSocket }}
            type: Socket
        - name: keeper-state
          hostPath:
            path: /var/lib/edgefd/device-keeper
            type: DirectoryOrCreate
        # a directory systemd makes at boot; created empty on a node without systemd (whose
        # containers are no systemd scopes: the keeper never connects there)
        - name: host-systemd
          hostPath:
            path: /run/systemd
            type: DirectoryOrCreate
        # the keeper's notice (a refused grant), read by feature-sink in the one pod
        - name: device-keeper-notices
          emptyDir:
            sizeLimit: 1Mi
        {{- end }}
{{- end }}
