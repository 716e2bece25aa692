{{/*
The pod template of a role's entry pod (.worker false) or worker pods (.worker true).
Context: (dict "root" $ "role" "prefill" "worker" false).
*/}}
{{- define "mooncake-pd.podTemplate" -}}
{{- $root := .root -}}
{{- $role := .role -}}
{{- $v := index $root.Values $role -}}
{{- $accelerator := include "mooncake-pd.accelerator" $root | fromJson -}}
{{- $ascend := eq $accelerator.family "ascend" -}}
{{- $script := include "mooncake-pd.scriptName" . -}}
{{- $devices := include "mooncake-pd.devicesPerPod" $v -}}
{{- $resources := deepCopy ($v.resources | default dict) -}}
{{- if $accelerator.resourceName }}
{{- range $kind := list "requests" "limits" }}
{{- $_ := set $resources $kind (merge (dict $accelerator.resourceName $devices) (get $resources $kind | default dict)) }}
{{- end }}
{{- end -}}
metadata:
  labels:
    {{- include "mooncake-pd.podLabels" (dict "root" $root "component" $role) | nindent 4 }}
  annotations:
    # A change to the start script rolls the pods that run it.
    checksum/script: {{ include "mooncake-pd.script" . | sha256sum }}
    {{- if $root.Values.engine.preflight.enabled }}
    checksum/preflight: {{ $root.Files.Get "files/preflight.py" | sha256sum }}
    {{- end }}
spec:
  hostNetwork: true
  # Host network pods need this to resolve cluster Services (and ENTRY_ADDRESS).
  dnsPolicy: ClusterFirstWithHostNet
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ int64 $root.Values.engine.terminationGracePeriodSeconds }}
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
  {{- if eq $root.Values.model.storage.type "download" }}
  initContainers:
  {{- include "mooncake-pd.downloadContainer" $root | nindent 2 }}
  {{- end }}
  containers:
  - name: {{ $role }}
    image: {{ include "mooncake-pd.image" $root | toJson }}
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
    {{- range $i := until (int (include "mooncake-pd.kvPortCount" .)) }}
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
    {{- if $ascend }}
    - name: hccn-conf
      mountPath: /etc/hccn.conf
      readOnly: true
    - name: hccn-tool
      mountPath: /usr/local/Ascend/driver/tools/hccn_tool
      readOnly: true
    - name: ascend-install-info
      mountPath: /etc/ascend_install.info
      readOnly: true
    {{- end }}
    - name: scripts
      mountPath: {{ printf "/workspace/%s" $script | toJson }}
      subPath: {{ $script | toJson }}
      readOnly: true
    {{- if $root.Values.engine.preflight.enabled }}
    - name: scripts
      mountPath: /workspace/preflight.py
      subPath: preflight.py
      readOnly: true
    {{- end }}
  volumes:
  {{- include "mooncake-pd.modelVolume" $root | nindent 2 }}
  - name: dshm
    emptyDir:
      medium: Memory
  {{- if $ascend }}
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
  {{- end }}
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

{{/* The model volume for model.storage.type: hostPath, a claim, or the download target. */}}
{{- define "mooncake-pd.modelVolume" -}}
{{- $storage := .Values.model.storage -}}
- name: model
{{- if eq $storage.type "hostPath" }}
  hostPath:
    path: {{ $storage.hostPath | toJson }}
    type: Directory
{{- else if $storage.claimName }}
  persistentVolumeClaim:
    claimName: {{ $storage.claimName | toJson }}
    {{- if eq $storage.type "pvc" }}
    readOnly: true
    {{- end }}
{{- else }}
  emptyDir:
    {{- with $storage.emptyDirSizeLimit }}
    sizeLimit: {{ . | toJson }}
    {{- end }}
{{- end }}
{{- end }}

{{/* The init container that downloads model.download into model.path, once: a marker file
records what is there, and a lock keeps pods sharing a claim from downloading together. */}}
{{- define "mooncake-pd.downloadContainer" -}}
{{- $download := .Values.model.download -}}
- name: download-model
  image: {{ include "mooncake-pd.image" . | toJson }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["python3", "-c"]
  args:
  - |
    {{- include "mooncake-pd.downloadProgram" . | nindent 4 }}
  env:
  - name: MODEL_LOCATION
    value: {{ .Values.model.path | toJson }}
  - name: DOWNLOAD_HUB
    value: {{ $download.hub | toJson }}
  - name: DOWNLOAD_REPO
    value: {{ $download.repo | toJson }}
  - name: DOWNLOAD_REVISION
    value: {{ include "mooncake-pd.downloadRevision" . | toJson }}
  - name: HF_HUB_DISABLE_TELEMETRY
    value: "1"
  {{- include "mooncake-pd.cpuPythonEnv" . | nindent 2 }}
  {{- with $download.tokenSecret.name }}
  - name: {{ ternary "MODELSCOPE_API_TOKEN" "HF_TOKEN" (eq $download.hub "modelscope") }}
    valueFrom:
      secretKeyRef:
        name: {{ . | toJson }}
        key: {{ $download.tokenSecret.key | toJson }}
  {{- end }}
  {{- with .Values.engine.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  resources:
    {{- toYaml $download.resources | nindent 4 }}
  volumeMounts:
  - name: model
    mountPath: {{ .Values.model.storage.mountPath | toJson }}
{{- end }}

{{/* model.download.revision, or the hub's default branch: ModelScope's is master (modelscope
hub/api.py raises NotExistError for a revision that is no branch or tag, so main fails there),
Hugging Face's main. */}}
{{- define "mooncake-pd.downloadRevision" -}}
{{- $download := .Values.model.download -}}
{{- default (ternary "master" "main" (eq $download.hub "modelscope")) $download.revision -}}
{{- end }}

{{- define "mooncake-pd.downloadProgram" -}}
# Fetches DOWNLOAD_REPO@DOWNLOAD_REVISION into MODEL_LOCATION unless a marker says it is there.
import fcntl, os, pathlib, sys
target = pathlib.Path(os.environ["MODEL_LOCATION"])
hub, repo, revision = (os.environ[k] for k in ("DOWNLOAD_HUB", "DOWNLOAD_REPO", "DOWNLOAD_REVISION"))
wanted = f"{hub}:{repo}@{revision}"
marker = target / ".mooncake-pd-download"
target.parent.mkdir(parents=True, exist_ok=True)
with open(target.parent / f".{target.name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if marker.is_file() and marker.read_text().strip() == wanted:
        print(f"{target} already holds {wanted}; no download", flush=True)
        sys.exit(0)
    print(f"downloading {wanted} into {target}", flush=True)
    target.mkdir(exist_ok=True)
    if hub == "modelscope":
        from modelscope import snapshot_download
        if os.environ.get("MODELSCOPE_API_TOKEN"):
            from modelscope.hub.api import HubApi
            HubApi().login(os.environ["MODELSCOPE_API_TOKEN"])
        snapshot_download(repo, revision=revision, local_dir=str(target))
    else:
        from huggingface_hub import snapshot_download  # reads HF_TOKEN itself
        snapshot_download(repo_id=repo, revision=revision, local_dir=str(target))
    marker.write_text(wanted + "\n")
    print(f"downloaded {wanted}", flush=True)
{{- end }}
