{{/*
The KV-transfer canary (chart/files/kv_canary.py): the helm test pod's second container and the
optional CronJob's one. It judges the pairs the router forms: behind the PD proxy, every prefill
with every decode instance through the replica Services the proxy itself is given
(services-replicas.yaml); behind Kthena's router, the pods it finds by their labels at each run,
as the router does, with a ServiceAccount that may only get and list the namespace's pods
(kv-canary-rbac.yaml): a rollout renumbers the groups, the autoscaler adds and removes replicas.
*/}}

{{/* "true" where the canary finds the pods by their labels from the API server: behind
Kthena's router, which pairs them so. */}}
{{- define "mooncake-pd.canary.discovers" -}}
{{- if eq .Values.router.type "kthena" }}true{{ end -}}
{{- end }}

{{/* "true" where the chart makes the canary's ServiceAccount, Role and RoleBinding: a canary
(helm test or CronJob) that finds the pods. */}}
{{- define "mooncake-pd.canary.apiAccess" -}}
{{- if and (include "mooncake-pd.canary.discovers" .) (or (include "mooncake-pd.canary.inTestPod" .) (include "mooncake-pd.canary.cronJob" .)) }}true{{ end -}}
{{- end }}

{{/* Where the canary's container finds its ServiceAccount token and the cluster's CA: the path
the kubelet uses for an automounted token, here mounted into the canary's container alone. */}}
{{- define "mooncake-pd.canary.serviceAccountPath" -}}
/var/run/secrets/kubernetes.io/serviceaccount
{{- end }}

{{/* The pod-level part of API access: the ServiceAccount, and the projected token volume (as
the kubelet projects it for an automounted token: a one-hour token it rotates, the cluster's CA
from kube-root-ca.crt, the namespace), which only the canary's container mounts. The pods keep
automountServiceAccountToken false, so the test pod's chat container has no token. */}}
{{- define "mooncake-pd.canary.serviceAccountName" -}}
{{- if include "mooncake-pd.canary.apiAccess" . -}}
serviceAccountName: {{ include "mooncake-pd.names.kvCanary" . }}
{{- end -}}
{{- end }}

{{- define "mooncake-pd.canary.apiVolume" -}}
{{- if include "mooncake-pd.canary.apiAccess" . -}}
- name: kv-canary-api
  projected:
    defaultMode: 0444
    sources:
    - serviceAccountToken:
        path: token
        expirationSeconds: 3600
    - configMap:
        name: kube-root-ca.crt
        items:
        - key: ca.crt
          path: ca.crt
    - downwardAPI:
        items:
        - path: namespace
          fieldRef:
            fieldPath: metadata.namespace
{{- end -}}
{{- end }}

{{/* "true" where the helm-test pod runs the canary: test.kvCanary.enabled, a test pod. The
canary always has its pairs: autoscaling needs Kthena's router (validate/_autoscaling.tpl), behind
which it finds them by label; behind the proxy, the replica Services list them. */}}
{{- define "mooncake-pd.canary.inTestPod" -}}
{{- if and .Values.test.enabled (ne .Values.router.type "none") .Values.test.kvCanary.enabled }}true{{ end -}}
{{- end }}

{{/* "true" where the CronJob is rendered. */}}
{{- define "mooncake-pd.canary.cronJob" -}}
{{- if .Values.test.kvCanary.cronJob.enabled }}true{{ end -}}
{{- end }}

{{/* kv_canary.py's CANARY_CONFIG, as JSON: the pairs' URLs, the request, and the transfer
counters of the release's connector (profiles.yaml engines.<version>.connectors). */}}
{{- define "mooncake-pd.canary.config" -}}
{{- $connector := include "mooncake-pd.profile.connectorData" . | fromJson -}}
{{- $config := dict "model" .Values.model.servedName "prompt" .Values.test.prompt "maxTokens" (int .Values.test.kvCanary.maxTokens) "transferMetrics" $connector.transferMetrics -}}
{{- if include "mooncake-pd.canary.discovers" . -}}
{{- $selector := printf "%s=%s" (include "mooncake-pd.names.kthenaLabel" "name") (include "mooncake-pd.names.fullname" .) -}}
{{- $roles := dict "prefill" .Values.prefill.name "decode" .Values.decode.name -}}
{{- $ports := dict "prefill" (int .Values.prefill.port) "decode" (int .Values.decode.port) -}}
{{- $_ := set $config "discover" (dict "namespace" .Release.Namespace "selector" $selector "roles" $roles "port" $ports "serviceAccount" (include "mooncake-pd.canary.serviceAccountPath" .)) -}}
{{- else -}}
{{- range $role, $instances := include "mooncake-pd.router.replicaEndpoints" . | fromJson -}}
{{- $urls := list -}}
{{- range $instances }}{{ $urls = append $urls (dict "name" .name "url" (printf "http://%s:%d" .host (int .port))) }}{{ end -}}
{{- $_ := set $config $role $urls -}}
{{- end -}}
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
  {{- if include "mooncake-pd.canary.apiAccess" . }}
  - name: kv-canary-api
    mountPath: {{ include "mooncake-pd.canary.serviceAccountPath" . }}
    readOnly: true
  {{- end }}
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
