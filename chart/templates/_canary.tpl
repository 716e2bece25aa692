{{/*
The KV-transfer canary (chart/files/kv_canary.py): the helm test pod's second container and the
optional CronJob's one. It pairs every prefill with every decode instance, as the routers may,
through the replica Services (services-replicas.yaml).
*/}}

{{/* "true" where the canary has its pairs: replica Services (none under autoscaling, whose
replicas no render can list). */}}
{{- define "mooncake-pd.canary.pairsKnown" -}}
{{- if not .Values.autoscaling.enabled }}true{{ end -}}
{{- end }}

{{/* "true" where the helm-test pod runs the canary: test.kvCanary.enabled, a test pod, pairs. */}}
{{- define "mooncake-pd.canary.inTestPod" -}}
{{- if and .Values.test.enabled (ne .Values.router.type "none") .Values.test.kvCanary.enabled (include "mooncake-pd.canary.pairsKnown" .) }}true{{ end -}}
{{- end }}

{{/* "true" where the CronJob is rendered (validate.router refuses it under autoscaling). */}}
{{- define "mooncake-pd.canary.cronJob" -}}
{{- if and .Values.test.kvCanary.cronJob.enabled (include "mooncake-pd.canary.pairsKnown" .) }}true{{ end -}}
{{- end }}

{{/* kv_canary.py's CANARY_CONFIG, as JSON: the pairs' URLs, the request, and the transfer
counters of the release's connector (profiles.yaml engines.<version>.connectors). */}}
{{- define "mooncake-pd.canary.config" -}}
{{- $connector := include "mooncake-pd.profile.connectorData" . | fromJson -}}
{{- $config := dict "model" .Values.model.servedName "prompt" .Values.test.prompt "maxTokens" (int .Values.test.kvCanary.maxTokens) "transferMetrics" $connector.transferMetrics -}}
{{- range $role, $instances := include "mooncake-pd.router.replicaEndpoints" . | fromJson -}}
{{- $urls := list -}}
{{- range $instances }}{{ $urls = append $urls (dict "name" .name "url" (printf "http://%s:%d" .host (int .port))) }}{{ end -}}
{{- $_ := set $config $role $urls -}}
{{- end -}}
{{- toJson $config -}}
{{- end }}

{{/* The canary container, on the test pod's image, resources and security context. */}}
{{- define "mooncake-pd.canary.container" -}}
- name: kv-canary
  image: {{ include "mooncake-pd.util.image" .Values.test.image | toJson }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  # chart/files/kv_canary.py: per prefill/decode pair, a request through prefill to decode,
  # passing when decode's counters show that the KV cache came over.
  command: ["python3", "/workspace/kv_canary.py"]
  env:
  - name: CANARY_CONFIG
    value: {{ include "mooncake-pd.canary.config" . | toJson }}
  {{- include "mooncake-pd.env.cpuPython" . | nindent 2 }}
  {{- include "mooncake-pd.env.apiKey" (dict "root" . "name" "OPENAI_API_KEY") | nindent 2 }}
  resources:
    {{- toYaml .Values.test.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.test.securityContext | nindent 4 }}
  volumeMounts:
  {{- include "mooncake-pd.programs.mount" "kv_canary.py" | nindent 2 }}
{{- end }}

{{/* The CronJob's schedule: every test.kvCanary.cronJob.intervalMinutes (a divisor of 60, so
the runs are evenly spaced). */}}
{{- define "mooncake-pd.canary.schedule" -}}
{{- $every := int .Values.test.kvCanary.cronJob.intervalMinutes -}}
{{- ternary "0 * * * *" (printf "*/%d * * * *" $every) (eq $every 60) -}}
{{- end }}

{{/* Seconds without a successful canary run after which its alert fires: two intervals and
the longest a run may take (activeDeadlineSeconds), so one missed or slow run does not page. */}}
{{- define "mooncake-pd.canary.alertAfterSeconds" -}}
{{- $c := .Values.test.kvCanary.cronJob -}}
{{- add (mul 2 60 (int $c.intervalMinutes)) (int $c.activeDeadlineSeconds) -}}
{{- end }}
