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
  emptyDir:
    {{- with $storage.emptyDirSizeLimit }}
    sizeLimit: {{ . | toJson }}
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
  command: ["python3", "-c"]
  args:
  - |
    {{- include "mooncake-pd.model.downloadProgram" . | nindent 4 }}
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
{{- end }}

{{/* model.download.revision, or the hub's default branch: ModelScope's is master (modelscope
hub/api.py raises NotExistError for a revision that is no branch or tag, so main fails there),
Hugging Face's main. */}}
{{- define "mooncake-pd.model.downloadRevision" -}}
{{- $download := .Values.model.download -}}
{{- default (ternary "master" "main" (eq $download.hub "modelscope")) $download.revision -}}
{{- end }}

{{- define "mooncake-pd.model.downloadProgram" -}}
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
