{{/*
Names of the release's objects and of the keys Kthena owns.
*/}}

{{/* Name of the ModelServing and prefix of every object: fullnameOverride or the release name. */}}
{{- define "mooncake-pd.names.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "mooncake-pd.names.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* Pod label keys that Kthena's controller sets (pkg/apis/workload/v1alpha1/labels.go). */}}
{{- define "mooncake-pd.names.kthenaLabel" -}}
{{- printf "modelserving.volcano.sh/%s" . -}}
{{- end }}

{{/* Name of the Service in front of one role replica of one serving group.
(dict "root" $ "group" 0 "roleName" "prefill" "replica" 0) */}}
{{- define "mooncake-pd.names.replicaService" -}}
{{- printf "%s-%d-%s-%d" (include "mooncake-pd.names.fullname" .root) (int .group) .roleName (int .replica) -}}
{{- end }}

{{/* ConfigMap key of a role's start script: <role>.sh, or <role>-worker.sh for workers. */}}
{{- define "mooncake-pd.names.script" -}}
{{- printf "%s%s.sh" .role (ternary "-worker" "" (default false .worker)) -}}
{{- end }}

{{/* The ConfigMap holding the start scripts and the programs of chart/files. */}}
{{- define "mooncake-pd.names.scripts" -}}
{{- printf "%s-scripts" (include "mooncake-pd.names.fullname" .) -}}
{{- end }}

{{/* The KV canary's CronJob (and its Jobs' prefix). */}}
{{- define "mooncake-pd.names.kvCanary" -}}
{{- printf "%s-kv-canary" (include "mooncake-pd.names.fullname" .) -}}
{{- end }}
