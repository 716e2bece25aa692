{{/*
Helpers, each small and single-purpose. A role context is (dict "root" $ "role" "prefill").
*/}}

{{/* Name of the ModelServing and prefix of every object: fullnameOverride or the release name. */}}
{{- define "mooncake-pd.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "mooncake-pd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* Labels that select this release's pods; never built from user-editable values. */}}
{{- define "mooncake-pd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mooncake-pd.labels" -}}
helm.sh/chart: {{ include "mooncake-pd.chart" . }}
{{ include "mooncake-pd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mooncake-pd
{{- end }}

{{/* The engine image reference: repository:tag, with @digest when image.digest is set. */}}
{{- define "mooncake-pd.image" -}}
{{- $image := printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- with .Values.image.digest }}{{ $image = printf "%s@%s" $image . }}{{ end -}}
{{- $image -}}
{{- end }}

{{/* Pod template labels: no chart or app version, so an upgrade that changes neither the
pod spec nor the scripts does not restart engines. (dict "root" $ "component" "proxy") */}}
{{- define "mooncake-pd.podLabels" -}}
{{ include "mooncake-pd.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: mooncake-pd
{{- end }}

{{/* Pod label keys that Kthena's controller sets (pkg/apis/workload/v1alpha1/labels.go). */}}
{{- define "mooncake-pd.kthenaLabel" -}}
{{- printf "modelserving.volcano.sh/%s" . -}}
{{- end }}

{{/* The accelerator profile as JSON: device resource name and devices per node. */}}
{{- define "mooncake-pd.accelerator" -}}
{{- $profiles := dict
  "ascend-a3" (dict "resourceName" "huawei.com/ascend-1980" "devicesPerNode" 16)
  "ascend-a2" (dict "resourceName" "huawei.com/Ascend910" "devicesPerNode" 8) -}}
{{- $profile := get $profiles .Values.accelerator.type -}}
{{- if not $profile -}}
{{- fail (printf "accelerator.type: %q is not a known profile; use one of: %s" .Values.accelerator.type (keys $profiles | sortAlpha | join ", ")) -}}
{{- end -}}
{{- toJson $profile -}}
{{- end }}

{{/* A role's values (.role is "prefill" or "decode"). */}}
{{- define "mooncake-pd.roleValues" -}}
{{- toJson (index .root.Values .role) -}}
{{- end }}

{{/* DP ranks on one pod of a role: parallelism.dataLocal, or all of parallelism.data. */}}
{{- define "mooncake-pd.dataLocal" -}}
{{- $p := .parallelism -}}
{{- if kindIs "invalid" $p.dataLocal }}{{ int $p.data }}{{ else }}{{ int $p.dataLocal }}{{ end -}}
{{- end }}

{{/* Accelerator devices one pod of a role requests: tensor x dataLocal. */}}
{{- define "mooncake-pd.devicesPerPod" -}}
{{- mul (int .parallelism.tensor) (int (include "mooncake-pd.dataLocal" .)) -}}
{{- end }}

{{/* Mooncake side-channel ports a role binds: [kvPort, kvPort + data x tensor). */}}
{{- define "mooncake-pd.kvPortCount" -}}
{{- mul (int .parallelism.tensor) (int .parallelism.data) -}}
{{- end }}

{{/* Single-quote a string for bash so that it arrives literally ('\'' for each quote). */}}
{{- define "mooncake-pd.shellQuote" -}}
{{- printf "'%s'" (replace "'" "'\\''" (toString .)) -}}
{{- end }}

{{/* A scalar as text: strings as they are, numbers and booleans as JSON (no 1e+06). */}}
{{- define "mooncake-pd.scalar" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end }}

{{/* Shared settings overlaid by a role's: the role's keys win, null included. JSON map. */}}
{{- define "mooncake-pd.overlay" -}}
{{- $out := dict -}}
{{- range $k, $v := (.base | default dict) }}{{ $_ := set $out $k $v }}{{ end -}}
{{- range $k, $v := (.over | default dict) }}{{ $_ := set $out $k $v }}{{ end -}}
{{- toJson $out -}}
{{- end }}

{{/* The KV connector's view of both roles, derived from their parallelism. */}}
{{- define "mooncake-pd.kvConnectorExtraConfig" -}}
{{- $extra := deepCopy (.Values.kvTransfer.extraConfig | default dict) -}}
{{- $_ := set $extra "prefill" (dict "tp_size" (int .Values.prefill.parallelism.tensor) "dp_size" (int .Values.prefill.parallelism.data)) -}}
{{- $_ := set $extra "decode" (dict "tp_size" (int .Values.decode.parallelism.tensor) "dp_size" (int .Values.decode.parallelism.data)) -}}
{{- toJson $extra -}}
{{- end }}

{{/* --kv-transfer-config without engine_id, which the start script adds at run time. */}}
{{- define "mooncake-pd.kvTransferConfig" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .role -}}
{{- toJson (dict
  "kv_connector" $root.Values.kvTransfer.connector
  "kv_role" (ternary "kv_producer" "kv_consumer" (eq .role "prefill"))
  "kv_port" (int $v.kvPort)
  "kv_connector_module_path" $root.Values.kvTransfer.modulePath
  "kv_connector_extra_config" (include "mooncake-pd.kvConnectorExtraConfig" $root | fromJson)) -}}
{{- end }}

{{/* One `vllm serve` flag line per user arg: true -> --k, false -> --no-k, map -> JSON,
list -> several values, null -> omitted. Each line ends with " \". */}}
{{- define "mooncake-pd.argLines" -}}
{{- range $k, $val := . }}
{{- if kindIs "bool" $val }}
  --{{ if not $val }}no-{{ end }}{{ $k }} \
{{- else if kindIs "map" $val }}
  --{{ $k }} {{ include "mooncake-pd.shellQuote" (toJson $val) }} \
{{- else if kindIs "slice" $val }}
  --{{ $k }}{{ range $val }} {{ include "mooncake-pd.shellQuote" (include "mooncake-pd.scalar" .) }}{{ end }} \
{{- else if not (kindIs "invalid" $val) }}
  --{{ $k }} {{ include "mooncake-pd.shellQuote" (include "mooncake-pd.scalar" $val) }} \
{{- end }}
{{- end }}
{{- end }}

{{/* The start script of a role: exports its env, then execs vllm serve with derived and
user flags. Every value is single-quoted; JSON comes from toJson. */}}
{{- define "mooncake-pd.script" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .role -}}
{{- $p := $v.parallelism -}}
{{- $nic := include "mooncake-pd.shellQuote" $root.Values.network.interface -}}
{{- $env := include "mooncake-pd.overlay" (dict "base" $root.Values.engine.env "over" $v.env) | fromJson -}}
{{- $args := include "mooncake-pd.overlay" (dict "base" $root.Values.engine.args "over" $v.args) | fromJson -}}
#!/bin/bash
# {{ .role }}{{ if .worker }} worker{{ end }} start script generated by the mooncake-pd chart: change values, not this file.
set -euo pipefail
# HCCL, Gloo and TP sockets use the pod's (host network) address and NIC.
export HCCL_IF_IP="${POD_IP}"
export GLOO_SOCKET_IFNAME={{ $nic }}
export TP_SOCKET_IFNAME={{ $nic }}
export HCCL_SOCKET_IFNAME={{ $nic }}
{{- range $k, $val := $env }}
{{- if not (kindIs "invalid" $val) }}
export {{ $k }}={{ include "mooncake-pd.shellQuote" (include "mooncake-pd.scalar" $val) }}
{{- end }}
{{- end }}
# Unique per role replica, from Kthena's pod labels (downward API).
export MOONCAKE_ENGINE_ID="${GROUP_NAME}_${ROLE_ID}"
# The connector config is JSON rendered by the chart; engine_id is added here as data.
kv_transfer_config="$(python3 -c 'import json, os, sys; c = json.loads(sys.argv[1]); c["engine_id"] = os.environ["MOONCAKE_ENGINE_ID"]; print(json.dumps(c))' {{ include "mooncake-pd.shellQuote" (include "mooncake-pd.kvTransferConfig" .) }})"
{{- $multiNode := gt (int $v.workerReplicas) 0 }}
{{- $dpAddress := ternary "\"${ENTRY_ADDRESS}\"" "\"${POD_IP}\"" $multiNode }}
{{- if .worker }}
# Kthena numbers this role's workers 1..{{ int $v.workerReplicas }} (WORKER_INDEX; the entry is 0): each runs
# DP ranks [WORKER_INDEX x {{ int $p.dataLocal }}, (WORKER_INDEX + 1) x {{ int $p.dataLocal }}) of {{ int $p.data }}.
if ! [[ "${WORKER_INDEX}" =~ ^[1-9][0-9]*$ ]]; then
  echo "WORKER_INDEX must be a worker number (1..{{ int $v.workerReplicas }}), got '${WORKER_INDEX}'" >&2
  exit 1
fi
start_rank=$(( WORKER_INDEX * {{ int $p.dataLocal }} ))
exec vllm serve "${MODEL_LOCATION}" \
  --headless \
  --data-parallel-size {{ include "mooncake-pd.shellQuote" (int $p.data) }} \
  --data-parallel-size-local {{ include "mooncake-pd.shellQuote" (int $p.dataLocal) }} \
  --data-parallel-start-rank "${start_rank}" \
{{- else }}
exec vllm serve "${MODEL_LOCATION}" \
  --host "${POD_IP}" \
  --port {{ include "mooncake-pd.shellQuote" (int $v.port) }} \
  --data-parallel-size {{ include "mooncake-pd.shellQuote" (int $p.data) }} \
{{- if not (kindIs "invalid" $p.dataLocal) }}
  --data-parallel-size-local {{ include "mooncake-pd.shellQuote" (int $p.dataLocal) }} \
{{- end }}
{{- end }}
  --data-parallel-address {{ $dpAddress }} \
  --data-parallel-rpc-port {{ include "mooncake-pd.shellQuote" (int $v.dataParallelRpcPort) }} \
  --tensor-parallel-size {{ include "mooncake-pd.shellQuote" (int $p.tensor) }} \
  --served-model-name {{ include "mooncake-pd.shellQuote" $root.Values.model.servedName }} \
  --max-model-len {{ include "mooncake-pd.shellQuote" (int64 $root.Values.model.maxModelLen) }} \
{{- with $root.Values.model.hfOverrides }}
  --hf-overrides {{ include "mooncake-pd.shellQuote" (toJson .) }} \
{{- end }}
{{- include "mooncake-pd.argLines" $args }}
  --kv-transfer-config "${kv_transfer_config}"
{{ end }}

{{/* Name of the Service in front of one role replica of one serving group. */}}
{{- define "mooncake-pd.replicaServiceName" -}}
{{- printf "%s-%d-%s-%d" (include "mooncake-pd.fullname" .root) (int .group) .roleName (int .replica) -}}
{{- end }}

{{/* The URL clients use for chat completions: the proxy Service or the Kthena router. */}}
{{- define "mooncake-pd.chatURL" -}}
{{- if eq .Values.router.type "kthena" -}}
{{- printf "http://kthena-router.%s.svc:%d/v1/chat/completions" .Values.router.kthena.namespace (int .Values.router.kthena.servicePort) -}}
{{- else -}}
{{- printf "http://%s-proxy.%s.svc:%d/v1/chat/completions" (include "mooncake-pd.fullname" .) .Release.Namespace (int .Values.proxy.port) -}}
{{- end -}}
{{- end }}
