{{/*
Rules of the KV canary (_canary.tpl): it pairs the instances through their replica Services.
*/}}
{{- define "mooncake-pd.validate.canary" -}}
{{- $errors := list -}}
{{- if and .Values.test.kvCanary.cronJob.enabled .Values.autoscaling.enabled }}
{{- $errors = append $errors "test.kvCanary.cronJob.enabled: true with autoscaling.enabled; the canary reaches each prefill and decode instance by its replica Service, and under autoscaling the replicas are the autoscaler's, so no render can list them: set test.kvCanary.cronJob.enabled false and run `mooncake-pd verify`, which pairs the pods it finds" }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
