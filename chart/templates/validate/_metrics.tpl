{{/*
Rules of the monitoring objects: the PrometheusRule's alerts select the series by the labels
the PodMonitor's relabelings add (role, modelserving), so they need that PodMonitor.
*/}}
{{- define "mooncake-pd.validate.metrics" -}}
{{- $errors := list -}}
{{- if and .Values.metrics.prometheusRule.enabled (not .Values.metrics.podMonitor.enabled) }}
{{- $errors = append $errors "metrics.prometheusRule.enabled: true without metrics.podMonitor.enabled; the alerts read the engines' series with the labels role and modelserving that the chart's PodMonitor adds: set metrics.podMonitor.enabled true" }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
