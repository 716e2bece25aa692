{{/*
Labels of the release's objects and pods.
*/}}

{{/* Labels that select this release's pods; never built from user-editable values. */}}
{{- define "mooncake-pd.labels.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Every object's labels: commonLabels first, then the chart's (validate.pods refuses a
commonLabels key the chart sets). */}}
{{- define "mooncake-pd.labels.standard" -}}
{{- with .Values.commonLabels -}}
{{ toYaml . }}
{{ end -}}
helm.sh/chart: {{ include "mooncake-pd.names.chart" . }}
{{ include "mooncake-pd.labels.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mooncake-pd
{{- end }}

{{/* The label keys the chart itself writes on objects and pods (and Kthena's prefix on the
pods it creates): commonLabels and podLabels may not set them. JSON list. */}}
{{- define "mooncake-pd.labels.reserved" -}}
{{- toJson (list "helm.sh/chart" "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "app.kubernetes.io/part-of" "app.kubernetes.io/component" "mooncake-pd/engine-version") -}}
{{- end }}

{{/* Pod template labels: no chart or app version, so an upgrade that changes neither the
pod spec nor the scripts does not restart engines; commonLabels, podLabels and the
component's own podLabels (.own) come first; "standard" true adds the chart's version labels
(for a pod that is not a template). (dict "root" $ "component" "proxy" "own" $map) */}}
{{- define "mooncake-pd.labels.pod" -}}
{{- $extra := merge (deepCopy (.own | default dict)) (deepCopy (.root.Values.podLabels | default dict)) (deepCopy (.root.Values.commonLabels | default dict)) -}}
{{- with $extra -}}
{{ toYaml . }}
{{ end -}}
{{- if .standard -}}
helm.sh/chart: {{ include "mooncake-pd.names.chart" .root }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{ end -}}
{{ include "mooncake-pd.labels.selector" .root }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: mooncake-pd
{{- end }}

{{/* podAnnotations and the component's own (.own, winning), for a pod's metadata.annotations
(nothing when both are empty). (dict "root" $ "own" $map) */}}
{{- define "mooncake-pd.labels.podAnnotations" -}}
{{- with merge (deepCopy (.own | default dict)) (deepCopy (.root.Values.podAnnotations | default dict)) }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* The engine version (engine.version) every engine pod carries. The replica Services select it,
so the proxy and the KV canary reach only pods of the rendered version and never pair two
versions during a rollout (docs/upgrading.md; tests/test_engine_versions.py). Not in the Kthena
router's prefill and decode labels: Kthena v1.0.0's router sorts a pod into prefill or decode
when the pod is added and keeps it there when the ModelServer changes (kthena-router/datastore/
store.go AddOrUpdateModelServer), so a new label would not drop the old version's pods; its
group key and ServingGroupRollingUpdate keep versions apart there. */}}
{{- define "mooncake-pd.labels.engineVersion" -}}
mooncake-pd/engine-version: {{ (include "mooncake-pd.profile" . | fromJson).engine.version | quote }}
{{- end }}
