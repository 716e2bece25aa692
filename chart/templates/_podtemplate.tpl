{{/*
The pod template of a role's entry pod (.worker false) or worker pods (.worker true): the
engine container with its env, ports, probes, devices and mounts, on the profile's host files.
Context: (dict "root" $ "role" "prefill" "worker" false). Rendered once per render and kept on
the root context (as the profile table is): the ModelServing and the validate.pods rules read
the same text.
*/}}
{{- define "mooncake-pd.podtemplate.engine" -}}
{{- $key := printf "mooncakePdPodTemplate-%s-%t" .role .worker -}}
{{- if not (hasKey .root $key) -}}
{{- $_ := set .root $key (include "mooncake-pd.podtemplate.render" .) -}}
{{- end -}}
{{- get .root $key -}}
{{- end }}

{{- define "mooncake-pd.podtemplate.render" -}}
{{- $root := .root -}}
{{- $role := .role -}}
{{- $v := index $root.Values $role -}}
{{- $profile := include "mooncake-pd.profile" $root | fromJson -}}
{{- $script := include "mooncake-pd.names.script" . -}}
{{- $devices := include "mooncake-pd.parallelism.devicesPerPod" $v -}}
{{- $resources := include "mooncake-pd.resources.engine" . | fromJson -}}
{{- $hostNetwork := include "mooncake-pd.security.hostNetwork" $root -}}
{{- $rdma := include "mooncake-pd.profile.rdma" $root | fromJson -}}
{{- $restartQuiet := gt (int (include "mooncake-pd.script.restartQuietSeconds" .)) 0 -}}
metadata:
  labels:
    {{- include "mooncake-pd.labels.pod" (dict "root" $root "component" $role "own" $v.podLabels) | nindent 4 }}
    # The engine version the pod runs (engine.version): what ran where is visible per pod, and
    # what pairs prefill and decode selects it (mooncake-pd.labels.engineVersion).
    {{- include "mooncake-pd.labels.engineVersion" $root | nindent 4 }}
  annotations:
    {{- with include "mooncake-pd.labels.podAnnotations" (dict "root" $root "own" $v.podAnnotations) }}
    {{- . | nindent 4 }}
    {{- end }}
    # A change to the start script rolls the pods that run it.
    checksum/script: {{ include "mooncake-pd.script.engine" . | sha256sum }}
    {{- if $root.Values.engine.preflight.enabled }}
    checksum/preflight: {{ $root.Files.Get "files/preflight.py" | sha256sum }}
    {{- end }}
    # ... and so does a change to the other programs it runs (chart/files).
    checksum/programs: {{ include "mooncake-pd.programs.checksum" (dict "root" $root "names" (include "mooncake-pd.programs.engine" $root | fromJsonArray)) }}
spec:
  {{- if $hostNetwork }}
  hostNetwork: true
  # Host network pods need this to resolve cluster Services (and ENTRY_ADDRESS).
  dnsPolicy: ClusterFirstWithHostNet
  {{- end }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ int64 $root.Values.engine.terminationGracePeriodSeconds }}
  {{- with $v.priorityClassName }}
  priorityClassName: {{ . | toJson }}
  {{- end }}
  {{- with $root.Values.engine.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with include "mooncake-pd.scheduling.pullSecrets" $root }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- with include "mooncake-pd.scheduling.placement" (dict "nodeSelector" $v.nodeSelector "tolerations" $v.tolerations "affinity" (include "mooncake-pd.scheduling.engineAffinity" . | fromYaml) "topologySpreadConstraints" $v.topologySpreadConstraints) }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- if eq $root.Values.model.storage.type "download" }}
  initContainers:
  {{- include "mooncake-pd.model.downloadContainer" $root | nindent 2 }}
  {{- end }}
  containers:
  - name: {{ $role }}
    image: {{ include "mooncake-pd.profile.image" $root | toJson }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    command: ["/bin/bash"]
    args: [{{ printf "/workspace/%s" $script | toJson }}]
    workingDir: /workspace
    # A preflight refusal is written to the termination log; otherwise the log's tail.
    terminationMessagePolicy: FallbackToLogsOnError
    env:
    - name: ROLE
      value: {{ $role | toJson }}
    - name: GROUP_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['{{ include "mooncake-pd.names.kthenaLabel" "group-name" }}']
    - name: ROLE_ID
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['{{ include "mooncake-pd.names.kthenaLabel" "role-id" }}']
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
    {{- if $restartQuiet }}
    # The start script's restart marker (mooncake-pd.script.restartWaitLines).
    - name: RESTART_MARKER
      value: /run/mooncake-pd/engine-started
    {{- end }}
    - name: TP_SIZE
      value: {{ int $v.parallelism.tensor | quote }}
    - name: DP_SIZE
      value: {{ int $v.parallelism.data | quote }}
    {{- include "mooncake-pd.env.apiKey" (dict "root" $root "name" "VLLM_API_KEY") | nindent 4 }}
    {{- with include "mooncake-pd.env.rdma" $root | trim }}
    # RDMA between nodes (accelerator.rdma): NCCL's IB transport and NIXL's UCX on the RDMA NICs.
    {{- . | nindent 4 }}
    {{- end }}
    ports:
    {{- if not .worker }}
    - name: server
      containerPort: {{ int $v.port }}
      protocol: TCP
    - name: dp-rpc
      containerPort: {{ int $v.dataParallelRpcPort }}
      protocol: TCP
    {{- end }}
    {{- range $i := until (int (include "mooncake-pd.parallelism.kvPortCount" .)) }}
    - name: kv-{{ $i }}
      containerPort: {{ add (int $v.kvPort) $i }}
      protocol: TCP
    {{- end }}
    {{- if not .worker }}
    {{- with $v.readinessProbe }}
    readinessProbe:
      httpGet:
        path: /health
        port: {{ int $v.port }}
        scheme: HTTP
      {{- toYaml . | nindent 6 }}
    {{- end }}
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
    {{- if not .worker }}
    lifecycle:
      preStop:
        exec:
          # A terminating pod leaves the Service endpoints at once; the wait lets routers
          # notice and in-flight requests finish before vLLM gets SIGTERM.
          command: ["sleep", {{ int $root.Values.engine.drainSeconds | toString | toJson }}]
    {{- end }}
    {{- with include "mooncake-pd.security.engineContext" $root | fromJson }}
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
    {{- range $profile.hostMounts }}
    - name: {{ .name }}
      mountPath: {{ .mountPath }}
      readOnly: true
    {{- end }}
    {{- if $rdma.mountInfiniband }}
    # The node's RDMA devices, where no device plugin gives them (accelerator.rdma.mountInfiniband).
    - name: infiniband
      mountPath: /dev/infiniband
    {{- end }}
    {{- if $restartQuiet }}
    - name: restart-marker
      mountPath: /run/mooncake-pd
    {{- end }}
    - name: scripts
      mountPath: {{ printf "/workspace/%s" $script | toJson }}
      subPath: {{ $script | toJson }}
      readOnly: true
    {{- include "mooncake-pd.programs.mount" "kv_transfer_config.py" | nindent 4 }}
    {{- if $root.Values.engine.preflight.enabled }}
    {{- include "mooncake-pd.programs.mount" "preflight.py" | nindent 4 }}
    {{- end }}
    {{- if include "mooncake-pd.programs.engineCheck" $root }}
    {{- include "mooncake-pd.programs.mount" "engine_args.py" | nindent 4 }}
    {{- end }}
    {{- with $root.Values.engine.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $root.Values.engine.extraContainers }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  volumes:
  {{- include "mooncake-pd.model.volume" $root | nindent 2 }}
  - name: dshm
    emptyDir:
      medium: Memory
  {{- range $profile.hostMounts }}
  - name: {{ .name }}
    hostPath:
      path: {{ get $root.Values.hostFiles .hostFile | toJson }}
      type: File
  {{- end }}
  {{- if $rdma.mountInfiniband }}
  - name: infiniband
    hostPath:
      path: /dev/infiniband
      type: Directory
  {{- end }}
  {{- if $restartQuiet }}
  # Outlives the engine container, not the pod: a restarted container finds its marker.
  - name: restart-marker
    emptyDir:
      sizeLimit: 1Mi
  {{- end }}
  {{- include "mooncake-pd.programs.volume" $root | nindent 2 }}
  {{- with $root.Values.engine.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
