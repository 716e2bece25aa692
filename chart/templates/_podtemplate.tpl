{{/*
The pod template of a role's entry pod (.worker false) or worker pods (.worker true).
Context: (dict "root" $ "role" "prefill" "worker" false).
*/}}
{{- define "mooncake-pd.podTemplate" -}}
{{- $root := .root -}}
{{- $role := .role -}}
{{- $v := index $root.Values $role -}}
{{- $accelerator := include "mooncake-pd.accelerator" $root | fromJson -}}
{{- $script := include "mooncake-pd.scriptName" . -}}
{{- $devices := include "mooncake-pd.devicesPerPod" $v -}}
{{- $resources := deepCopy ($v.resources | default dict) -}}
{{- range $kind := list "requests" "limits" }}
{{- $_ := set $resources $kind (merge (dict $accelerator.resourceName $devices) (get $resources $kind | default dict)) }}
{{- end -}}
metadata:
  labels:
    {{- include "mooncake-pd.podLabels" (dict "root" $root "component" $role) | nindent 4 }}
  annotations:
    # A change to the start script rolls the pods that run it.
    checksum/script: {{ include "mooncake-pd.script" . | sha256sum }}
spec:
  hostNetwork: true
  # Host network pods need this to resolve cluster Services (and ENTRY_ADDRESS).
  dnsPolicy: ClusterFirstWithHostNet
  automountServiceAccountToken: false
  {{- with $root.Values.engine.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with include "mooncake-pd.affinity" . | fromYaml }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
  - name: {{ $role }}
    image: {{ include "mooncake-pd.image" $root | toJson }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    command: ["/bin/bash"]
    args: [{{ printf "/workspace/%s" $script | toJson }}]
    workingDir: /workspace
    env:
    - name: ROLE
      value: {{ $role | toJson }}
    - name: GROUP_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['{{ include "mooncake-pd.kthenaLabel" "group-name" }}']
    - name: ROLE_ID
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['{{ include "mooncake-pd.kthenaLabel" "role-id" }}']
    - name: ENGINE_ID
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: NODE_IP
      valueFrom:
        fieldRef:
          fieldPath: status.hostIP
    - name: MODEL_LOCATION
      value: {{ $root.Values.model.path | toJson }}
    - name: TP_SIZE
      value: {{ int $v.parallelism.tensor | quote }}
    - name: DP_SIZE
      value: {{ int $v.parallelism.data | quote }}
    ports:
    {{- if not .worker }}
    - name: server
      containerPort: {{ int $v.port }}
      protocol: TCP
    - name: dp-rpc
      containerPort: {{ int $v.dataParallelRpcPort }}
      protocol: TCP
    {{- end }}
    {{- range $i := until (int (include "mooncake-pd.kvPortCount" $v)) }}
    - name: kv-{{ $i }}
      containerPort: {{ add (int $v.kvPort) $i }}
      protocol: TCP
    {{- end }}
    {{- if not .worker }}
    readinessProbe:
      httpGet:
        path: /health
        port: {{ int $v.port }}
        scheme: HTTP
      {{- toYaml $v.readinessProbe | nindent 6 }}
    {{- range $probe := list "startupProbe" "livenessProbe" }}
    {{- with index $root.Values.engine $probe }}
    {{ $probe }}:
      httpGet:
        path: /health
        port: {{ int $v.port }}
        scheme: HTTP
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- end }}
    {{- end }}
    {{- with $root.Values.engine.securityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    resources:
      {{- toYaml $resources | nindent 6 }}
    volumeMounts:
    - name: model
      mountPath: {{ $root.Values.model.storage.mountPath | toJson }}
      readOnly: true
    - name: dshm
      mountPath: /dev/shm
    - name: hccn-conf
      mountPath: /etc/hccn.conf
      readOnly: true
    - name: hccn-tool
      mountPath: /usr/local/Ascend/driver/tools/hccn_tool
      readOnly: true
    - name: ascend-install-info
      mountPath: /etc/ascend_install.info
      readOnly: true
    - name: scripts
      mountPath: {{ printf "/workspace/%s" $script | toJson }}
      subPath: {{ $script | toJson }}
      readOnly: true
  volumes:
  - name: model
    hostPath:
      path: {{ $root.Values.model.storage.hostPath | toJson }}
      type: Directory
  - name: dshm
    emptyDir:
      medium: Memory
  - name: hccn-conf
    hostPath:
      path: {{ $root.Values.hostFiles.hccnConf | toJson }}
      type: File
  - name: hccn-tool
    hostPath:
      path: {{ $root.Values.hostFiles.hccnTool | toJson }}
      type: File
  - name: ascend-install-info
    hostPath:
      path: {{ $root.Values.hostFiles.ascendInstallInfo | toJson }}
      type: File
  - name: scripts
    configMap:
      name: {{ include "mooncake-pd.fullname" $root }}-scripts
      defaultMode: 0444
{{- end }}

{{/* ConfigMap key of a role's start script: <role>.sh, or <role>-worker.sh for workers. */}}
{{- define "mooncake-pd.scriptName" -}}
{{- printf "%s%s.sh" .role (ternary "-worker" "" (default false .worker)) -}}
{{- end }}

{{/* Prefill and decode pods land on different nodes (placement.separateRoles, or implied by
the Kthena router when both roles serve on one port). */}}
{{- define "mooncake-pd.rolesSeparated" -}}
{{- $v := .Values -}}
{{- if or $v.placement.separateRoles (and (eq $v.router.type "kthena") (eq (int $v.prefill.port) (int $v.decode.port))) }}true{{ end -}}
{{- end }}

{{/* A role's affinity: the user's, plus anti-affinity to the other role when separated. */}}
{{- define "mooncake-pd.affinity" -}}
{{- $root := .root -}}
{{- $affinity := deepCopy ((index $root.Values .role).affinity | default dict) -}}
{{- if include "mooncake-pd.rolesSeparated" $root }}
{{- $other := ternary "decode" "prefill" (eq .role "prefill") }}
{{- $selector := merge (dict "app.kubernetes.io/component" $other) (include "mooncake-pd.selectorLabels" $root | fromYaml) }}
{{- $term := dict "labelSelector" (dict "matchLabels" $selector) "topologyKey" "kubernetes.io/hostname" }}
{{- $anti := $affinity.podAntiAffinity | default dict }}
{{- $required := append ($anti.requiredDuringSchedulingIgnoredDuringExecution | default list) $term }}
{{- $_ := set $anti "requiredDuringSchedulingIgnoredDuringExecution" $required }}
{{- $_ := set $affinity "podAntiAffinity" $anti }}
{{- end }}
{{- if $affinity }}{{ toYaml $affinity }}{{ end -}}
{{- end }}
