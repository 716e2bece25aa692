{{/*
Scraping the engines.
*/}}

{{/* Relabelings that put the role, serving group and ModelServing on every scraped series. */}}
{{- define "mooncake-pd.metrics.relabelings" -}}
- sourceLabels: [__meta_kubernetes_pod_label_app_kubernetes_io_component]
  targetLabel: role
- sourceLabels: [__meta_kubernetes_pod_label_modelserving_volcano_sh_group_name]
  targetLabel: serving_group
- sourceLabels: [__meta_kubernetes_pod_label_modelserving_volcano_sh_name]
  targetLabel: modelserving
- sourceLabels: [__meta_kubernetes_pod_name]
  targetLabel: pod
{{- end }}
