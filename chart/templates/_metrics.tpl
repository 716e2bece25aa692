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

{{/* The alert rules of metrics.prometheusRule, as Prometheus rule groups (YAML list): what PD
looks like when it stops working, the silent ways first. Every series is one the engines export
(vLLM's names, checked against real vLLM engines by the e2e run) with the labels the PodMonitor's
relabelings add (role, modelserving; namespace and pod from the Prometheus Operator). The
transfer counters are the connector's (profiles.yaml transferMetrics): a connector that exports
none (vLLM-Ascend's MooncakeConnectorV1) gets the alerts that need none. */}}
{{- define "mooncake-pd.metrics.alertRules" -}}
{{- $rule := .Values.metrics.prometheusRule -}}
{{- $fullname := include "mooncake-pd.names.fullname" . -}}
{{- $transfer := (include "mooncake-pd.profile.connectorData" . | fromJson).transferMetrics -}}
{{- $sel := printf "namespace=%q,modelserving=%q" .Release.Namespace $fullname -}}
{{- $decode := printf "{%s,role=\"decode\"}" $sel -}}
{{- $engines := printf "{%s,role=~\"prefill|decode\"}" $sel -}}
{{- $window := $rule.window -}}
{{- $labels := dict "modelserving" $fullname -}}
{{- $alerts := list -}}
{{- $alerts = append $alerts (dict
  "alert" "MooncakePdDecodeRecomputing"
  "expr" (printf "(sum by (namespace, modelserving) (rate(vllm:external_prefix_cache_hits_total%s[%s])) / sum by (namespace, modelserving) (rate(vllm:prompt_tokens_total%s[%s]))) < %v" $decode $window $decode $window $rule.minTransferredFraction)
  "for" $rule.for
  "labels" (dict "severity" "warning")
  "annotations" (dict
    "summary" "Decode computes prompts itself: PD has degraded to plain serving"
    "description" (printf "Under %v of decode's prompt tokens came from prefill's KV cache over %s (ModelServing {{ $labels.modelserving }}). Answers stay right, so nothing else notices; the KV cache no longer moves (a restarted prefill decode cannot reach, a router sending to decode alone, a broken side channel). Run mooncake-pd verify; docs/operations.md, Alerts." $rule.minTransferredFraction $window))) -}}
{{- with $transfer -}}
{{- $alerts = append $alerts (dict
  "alert" "MooncakePdKvTransferFailing"
  "expr" (printf "sum by (namespace, modelserving, pod) (increase(%s%s[%s])) > 0" .failed $decode $window)
  "for" "0m"
  "labels" (dict "severity" "warning")
  "annotations" (dict
    "summary" "KV transfers from prefill to decode fail"
    "description" (printf "Decode pod {{ $labels.pod }} counted failed KV transfers (%s) over %s; with kvTransfer.loadFailurePolicy recompute it computes those prompts itself." .failed $window))) -}}
{{- $alerts = append $alerts (dict
  "alert" "MooncakePdNoKvTransfer"
  "expr" (printf "(sum by (namespace, modelserving) (rate(vllm:request_success_total%s[%s])) > 0) unless (sum by (namespace, modelserving) (rate(%s%s[%s])) > 0)" $decode $window .count $decode $window)
  "for" $rule.for
  "labels" (dict "severity" "critical")
  "annotations" (dict
    "summary" "Decode answers requests and no KV cache arrives"
    "description" (printf "Decode finished requests over %s with no KV transfer (%s): every prompt is computed on decode." $window .count))) -}}
{{- end -}}
{{- $alerts = append $alerts (dict
  "alert" "MooncakePdQueueGrowing"
  "expr" (printf "max by (namespace, modelserving, role, pod) (vllm:num_requests_waiting%s) > %v" $engines $rule.maxWaiting)
  "for" $rule.for
  "labels" (dict "severity" "warning")
  "annotations" (dict
    "summary" "Requests queue on an engine"
    "description" (printf "{{ $labels.role }} pod {{ $labels.pod }} has had more than %v requests waiting for %s: add replicas (autoscaling) or check the engine." $rule.maxWaiting $rule.for))) -}}
{{- $alerts = append $alerts (dict
  "alert" "MooncakePdEngineStalled"
  "expr" (printf "(max by (namespace, modelserving, role, pod) (vllm:num_requests_running%s) > 0) unless (sum by (namespace, modelserving, role, pod) (rate(vllm:generation_tokens_total%s[%s])) > 0)" $engines $engines $window)
  "for" $rule.for
  "labels" (dict "severity" "critical")
  "annotations" (dict
    "summary" "An engine holds requests and produces no token"
    "description" (printf "{{ $labels.role }} pod {{ $labels.pod }} has requests running and generated no token over %s; it is Ready (its /health answers) but serves nothing." $window))) -}}
{{- $alerts = append $alerts (dict
  "alert" "MooncakePdEngineDown"
  "expr" (printf "up%s == 0" $engines)
  "for" $rule.for
  "labels" (dict "severity" "critical")
  "annotations" (dict
    "summary" "Prometheus cannot scrape an engine"
    "description" "{{ $labels.role }} pod {{ $labels.pod }} has not answered /metrics; Kthena's recovery should replace it (recoveryPolicy).")) -}}
{{- if include "mooncake-pd.canary.cronJob" . -}}
{{- /* kube-state-metrics' CronJob series (STABLE in its docs/metrics/workload/cronjob-metrics.md):
the last successful run, or the CronJob's creation while it has had none. */ -}}
{{- $cron := printf "{namespace=%q,cronjob=%q}" .Release.Namespace (include "mooncake-pd.names.kvCanary" .) -}}
{{- $after := include "mooncake-pd.canary.alertAfterSeconds" . -}}
{{- $alerts = append $alerts (dict
  "alert" "MooncakePdKvCanaryFailing"
  "expr" (printf "(time() - max by (namespace, cronjob) (kube_cronjob_status_last_successful_time%s) > %s) or ((time() - max by (namespace, cronjob) (kube_cronjob_created%s) > %s) unless on (namespace, cronjob) kube_cronjob_status_last_successful_time%s)" $cron $after $cron $after $cron)
  "for" "0m"
  "labels" (dict "severity" "critical" "modelserving" $fullname)
  "annotations" (dict
    "summary" "The KV-transfer canary has not passed: some prefill/decode pair does not move the KV cache"
    "description" (printf "CronJob {{ $labels.cronjob }} has had no successful run for %s s. Its pod's log names the pair and what decode's counters showed (kubectl logs job/<last run>); docs/operations.md, KV canary." $after))) -}}
{{- end -}}
{{- toYaml (list (dict "name" (printf "%s.mooncake-pd" $fullname) "rules" $alerts)) -}}
{{- end }}
