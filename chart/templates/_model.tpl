{{/*
The model on the engines' pods: its volume and the download at start.
*/}}

{{/* The model volume for model.storage.type: hostPath, a claim, or the download target. */}}
{{- define "mooncake-pd.model.volume" -}}
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
  {{- /* {} when unsized: a bare `emptyDir:` is null, which Kthena's CRD refuses ("must be of
  type object") and kubernetes-validate lets through (found on the local cluster). */}}
  {{- with $storage.emptyDirSizeLimit }}
  emptyDir:
    sizeLimit: {{ . | toJson }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end }}
{{- end }}

{{/* The init container that downloads model.download into model.path, once: a marker file
records what is there, and a lock keeps pods sharing a claim from downloading together. */}}
{{- define "mooncake-pd.model.downloadContainer" -}}
{{- $download := .Values.model.download -}}
- name: download-model
  image: {{ include "mooncake-pd.profile.image" . | toJson }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["python3", "/workspace/download_model.py"]
  env:
  - name: MODEL_LOCATION
    value: {{ .Values.model.path | toJson }}
  - name: DOWNLOAD_HUB
    value: {{ $download.hub | toJson }}
  - name: DOWNLOAD_REPO
    value: {{ $download.repo | toJson }}
  - name: DOWNLOAD_REVISION
    value: {{ include "mooncake-pd.model.downloadRevision" . | toJson }}
  - name: HF_HUB_DISABLE_TELEMETRY
    value: "1"
  {{- include "mooncake-pd.env.cpuPython" . | nindent 2 }}
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
  {{- include "mooncake-pd.programs.mount" "download_model.py" | nindent 2 }}
{{- end }}

{{/* model.download.revision, or the hub's default branch: ModelScope's is master (modelscope
hub/api.py raises NotExistError for a revision that is no branch or tag, so main fails there),
Hugging Face's main. */}}
{{- define "mooncake-pd.model.downloadRevision" -}}
{{- $download := .Values.model.download -}}
{{- default (ternary "master" "main" (eq $download.hub "modelscope")) $download.revision -}}
{{- end }}
