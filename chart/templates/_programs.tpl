{{/*
The programs pods run (chart/files/*.py, linted and tested as modules in the repository): each
is a key of the scripts ConfigMap, mounted at /workspace/<name> where it runs.
*/}}

{{/* The programs this release's pods run, as JSON: ConfigMap key -> text. Every engine runs
kv_transfer_config.py (and preflight.py with engine.preflight.enabled, engine_args.py with its
checks.engineArgs too, download_model.py in the download init container); the helm test pod chat_check.py (and kv_canary.py, which the canary's CronJob runs too); the
benchmark Job bench_result.py; the PD proxy proxy_guard.py. */}}
{{- define "mooncake-pd.programs.files" -}}
{{- $names := include "mooncake-pd.programs.engine" . | fromJsonArray -}}
{{- if .Values.engine.preflight.enabled }}{{ $names = append $names "preflight.py" }}{{ end -}}
{{- if and .Values.test.enabled (ne .Values.router.type "none") }}{{ $names = append $names "chat_check.py" }}{{ end -}}
{{- if or (include "mooncake-pd.canary.inTestPod" .) (include "mooncake-pd.canary.cronJob" .) }}{{ $names = append $names "kv_canary.py" }}{{ end -}}
{{- if .Values.benchmark.enabled }}{{ $names = append $names "bench_result.py" }}{{ end -}}
{{- $files := dict -}}
{{- range $name := $names }}{{ $_ := set $files $name ($.Files.Get (printf "files/%s" $name)) }}{{ end -}}
{{- if eq .Values.router.type "proxy" }}
{{- range $path := include "mooncake-pd.programs.proxy" . | fromJsonArray }}{{ $_ := set $files (base $path) ($.Files.Get (printf "files/%s" $path)) }}{{ end -}}
{{- end -}}
{{- toJson $files -}}
{{- end }}

{{/* The programs the PD proxy pod runs from the ConfigMap, as paths under chart/files (JSON
list): the guard, and the vendored proxy where its image lacks it
(mooncake-pd.profile.proxyScript). */}}
{{- define "mooncake-pd.programs.proxy" -}}
{{- $paths := list "proxy_guard.py" -}}
{{- with include "mooncake-pd.profile.proxyScript" . }}{{ $paths = append $paths . }}{{ end -}}
{{- toJson $paths -}}
{{- end }}

{{/* The programs an engine pod runs besides the preflight (which has a checksum of its own):
kv_transfer_config.py, engine_args.py where the engine check runs, and download_model.py in
the download init container. JSON list. */}}
{{- define "mooncake-pd.programs.engine" -}}
{{- $names := list "kv_transfer_config.py" -}}
{{- if include "mooncake-pd.programs.engineCheck" . }}{{ $names = append $names "engine_args.py" }}{{ end -}}
{{- if eq .Values.model.storage.type "download" }}{{ $names = append $names "download_model.py" }}{{ end -}}
{{- toJson $names -}}
{{- end }}

{{/* A pod's volume of the scripts ConfigMap (read-only files). */}}
{{- define "mooncake-pd.programs.volume" -}}
- name: scripts
  configMap:
    name: {{ include "mooncake-pd.names.scripts" . }}
    defaultMode: 0444
{{- end }}

{{/* The mount of one program at /workspace/<name>. (the ConfigMap key) */}}
{{- define "mooncake-pd.programs.mount" -}}
- name: scripts
  mountPath: {{ printf "/workspace/%s" . | toJson }}
  subPath: {{ . | toJson }}
  readOnly: true
{{- end }}

{{/* The sha256 of the programs a pod runs, so a change to one rolls the pods that run it.
(dict "root" $ "names" (list "kv_transfer_config.py" ...)): paths under chart/files. */}}
{{- define "mooncake-pd.programs.checksum" -}}
{{- $texts := list -}}
{{- range $name := .names }}{{ $texts = append $texts ($.root.Files.Get (printf "files/%s" $name)) }}{{ end -}}
{{- join "\n" $texts | sha256sum -}}
{{- end }}

{{/* "true" where the engines run the engine check (files/engine_args.py): engine.preflight.enabled
and its checks.engineArgs. */}}
{{- define "mooncake-pd.programs.engineCheck" -}}
{{- if and .Values.engine.preflight.enabled .Values.engine.preflight.checks.engineArgs }}true{{ end -}}
{{- end }}
