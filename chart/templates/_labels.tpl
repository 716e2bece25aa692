{{/*
Labels of the release's objects and pods.
*/}}

{{/* Labels that select this release's pods; never built from user-editable values. */}}
{{- define "mooncake-pd.labels.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mooncake-pd.labels.standard" -}}
helm.sh/chart: {{ include "mooncake-pd.names.chart" . }}
{{ include "mooncake-pd.labels.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mooncake-pd
{{- end }}

{{/* Pod template labels: no chart or app version, so an upgrade that changes neither the
pod spec nor the scripts does not restart engines. (dict "root" $ "component" "proxy") */}}
{{- define "mooncake-pd.labels.pod" -}}
{{ include "mooncake-pd.labels.selector" .root }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: mooncake-pd
{{- end }}
