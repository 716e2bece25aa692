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

{{/* The engine image reference: repository:tag (each defaulting to the accelerator profile's),
with @digest when image.digest is set. */}}
{{- define "mooncake-pd.image" -}}
{{- $profile := include "mooncake-pd.accelerator" . | fromJson -}}
{{- $image := printf "%s:%s" (default $profile.repository .Values.image.repository) (default $profile.tag .Values.image.tag) -}}
{{- with .Values.image.digest }}{{ $image = printf "%s@%s" $image . }}{{ end -}}
{{- $image -}}
{{- end }}

{{/* The proxy image: proxy.image, else the engine image on Ascend, else the vLLM-Ascend
image that carries the proxy script (CPU only) on NVIDIA. */}}
{{- define "mooncake-pd.proxyImage" -}}
{{- $image := .Values.proxy.image -}}
{{- $profile := include "mooncake-pd.accelerator" . | fromJson -}}
{{- if $image.repository -}}
{{- printf "%s:%s" $image.repository (default $profile.tag $image.tag) -}}
{{- else if eq $profile.family "ascend" -}}
{{- include "mooncake-pd.image" . -}}
{{- else -}}
{{- printf "quay.io/ascend/vllm-ascend:%s" (default "v0.13.0" $image.tag) -}}
{{- end -}}
{{- end }}

{{/* The benchmark client's image: benchmark.image, else vLLM's own image of the engines' version
on Ascend (in the vLLM-Ascend image `vllm` cannot start without an NPU: its platform plugin,
vllm_ascend.register, returns NPUPlatform and vllm_ascend/utils.py imports torch_npu, which needs
the driver; transformers imports torch_npu too), else the engine image. */}}
{{- define "mooncake-pd.benchmarkImage" -}}
{{- $image := .Values.benchmark.image -}}
{{- $profile := include "mooncake-pd.accelerator" . | fromJson -}}
{{- if $image.repository -}}
{{- printf "%s:%s" $image.repository (default "v0.13.0" $image.tag) -}}
{{- else if eq $profile.family "ascend" -}}
{{- printf "docker.io/vllm/vllm-openai:%s" (default "v0.13.0" $image.tag) -}}
{{- else -}}
{{- include "mooncake-pd.image" . -}}
{{- end -}}
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

{{/* The accelerator profile as JSON: device resource, devices per node, family, default
image and KV connector (and the KV buffer device the connector must use). cpu has no device:
vLLM's CPU build, NixlConnector buffering the KV cache in host memory (nixl_connector.py reads
kv_buffer_device, default "cuda"). Unknown types fail here and in validate-values. */}}
{{- define "mooncake-pd.accelerator" -}}
{{- $ascend := dict "family" "ascend" "repository" "quay.io/ascend/vllm-ascend" "connector" "MooncakeConnectorV1" "modulePath" "vllm_ascend.distributed.mooncake_connector" -}}
{{- $profiles := dict
  "ascend-a3" (merge (dict "resourceName" "huawei.com/ascend-1980" "devicesPerNode" 16 "tag" "v0.13.0-a3") $ascend)
  "ascend-a2" (merge (dict "resourceName" "huawei.com/Ascend910" "devicesPerNode" 8 "tag" "v0.13.0") $ascend)
  "nvidia" (dict "family" "nvidia" "resourceName" "nvidia.com/gpu" "devicesPerNode" 8 "repository" "docker.io/vllm/vllm-openai" "tag" "v0.13.0" "connector" "NixlConnector" "modulePath" "")
  "cpu" (dict "family" "cpu" "resourceName" "" "devicesPerNode" 0 "repository" "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo" "tag" "v0.13.0" "connector" "NixlConnector" "modulePath" "" "kvBufferDevice" "cpu") -}}
{{- $profile := get $profiles .Values.accelerator.type -}}
{{- if not $profile -}}
{{- fail (printf "accelerator.type: %q is not a known profile; use one of: %s" .Values.accelerator.type (keys $profiles | sortAlpha | join ", ")) -}}
{{- end -}}
{{- toJson $profile -}}
{{- end }}

{{/* The KV connector: kvTransfer.connector, or the accelerator profile's. */}}
{{- define "mooncake-pd.connector" -}}
{{- default (include "mooncake-pd.accelerator" . | fromJson).connector .Values.kvTransfer.connector -}}
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

{{/* KV side-channel ports a role binds from kvPort (facts.md): Mooncake (vLLM-Ascend's V1 and
upstream) kvPort + dp_rank x tp + tp_rank, so data x tensor ports; NIXL kvPort + dp_rank, so data.
Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.kvPortCount" -}}
{{- $p := (index .root.Values .role).parallelism -}}
{{- if eq (include "mooncake-pd.connector" .root) "NixlConnector" }}{{ int $p.data }}{{ else }}{{ mul (int $p.tensor) (int $p.data) }}{{ end -}}
{{- end }}

{{/* vLLM 0.13.0's options of a command, read from its own parser (files/vllm/SOURCE.md), as
JSON: name without "--" (every spelling, --no-x included) -> kind (bool, value, list).
(dict "root" $ "file" "serve-flags-0.13.0.json") */}}
{{- define "mooncake-pd.vllmOptions" -}}
{{- /* Python's json writes float('inf') defaults as Infinity, which is not JSON: only the
names and kinds are read here. */ -}}
{{- $data := .root.Files.Get (printf "files/vllm/%s" .file) | replace ": Infinity" ": null" | fromJson -}}
{{- if not $data.flags }}{{ fail (printf "chart/files/vllm/%s: cannot read vLLM's option list" .file) }}{{ end -}}
{{- $names := dict -}}
{{- range $flag := $data.flags }}
{{- range $option := $flag.options }}
{{- if hasPrefix "--" $option }}{{ $_ := set $names (trimPrefix "--" $option) $flag.kind }}{{ end }}
{{- end }}
{{- end }}
{{- toJson $names -}}
{{- end }}

{{/* What vLLM's parser would refuse in one args key (from mooncake-pd.vllmOptions), or nothing:
an unknown flag, a value on a flag that takes none, none on one that needs it, false on a flag
without a --no- form. (dict "where" "prefill.args" "key" $k "value" $v "options" $options
"command" "vllm serve") */}}
{{- define "mooncake-pd.optionProblem" -}}
{{- $name := replace "_" "-" .key -}}
{{- $kind := get .options $name -}}
{{- $val := .value -}}
{{- if not $kind -}}
{{- printf "%s.%s: not an option of %s in vLLM 0.13.0; check its spelling (`mooncake-pd render` suggests the nearest)" .where .key .command -}}
{{- else if and (eq $kind "bool") (not (or (kindIs "bool" $val) (kindIs "invalid" $val))) -}}
{{- printf "%s.%s: --%s takes no value; use true or false" .where .key $name -}}
{{- else if and (eq $kind "bool") (kindIs "bool" $val) (not $val) (not (hasKey .options (printf "no-%s" $name))) -}}
{{- printf "%s.%s: vLLM has no --no-%s; remove the key (or null it to drop a shared one)" .where .key $name -}}
{{- else if and (ne $kind "bool") (kindIs "bool" $val) -}}
{{- printf "%s.%s: --%s takes a value, not %v" .where .key $name $val -}}
{{- end -}}
{{- end }}

{{/* A Kubernetes quantity ("350Gi", "500m", "1e3", 8) as a plain number (float, as text), for
comparing requests with limits. The schema has checked the grammar. */}}
{{- define "mooncake-pd.quantity" -}}
{{- $text := toString . -}}
{{- $number := regexFind "^[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" $text -}}
{{- $suffix := trimPrefix $number $text -}}
{{- $factors := dict "" 1.0 "n" 0.000000001 "u" 0.000001 "m" 0.001 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "P" 1000000000000000.0 "E" 1000000000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- $value := float64 (default "0" $number) -}}
{{- if hasKey $factors $suffix -}}
{{- $value = mulf $value (get $factors $suffix) -}}
{{- else if regexMatch "^[eE][+-]?[0-9]+$" $suffix -}}
{{- $exponent := int (substr 1 (len $suffix) $suffix) -}}
{{- range until (int (max $exponent (sub 0 $exponent))) }}{{ $value = ternary (mulf $value 10.0) (divf $value 10.0) (ge $exponent 0) }}{{ end -}}
{{- end -}}
{{- $value -}}
{{- end }}

{{/* The fix for a setting the chart owns: "set <key> instead and remove this key", or for one
that comes from the pod or Kthena, "(source)", "it comes from <source>; remove this key". */}}
{{- define "mooncake-pd.ownerFix" -}}
{{- if hasPrefix "(" . -}}
{{- printf "it comes from %s; remove this key" (trimSuffix ")" (trimPrefix "(" .)) -}}
{{- else -}}
{{- printf "set %s instead and remove this key" . -}}
{{- end -}}
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
{{- $extra := merge (deepCopy (.Values.kvTransfer.extraConfig | default dict)) (deepCopy ((.Values.accelerator.ascend | default dict).kvExtraConfig | default dict)) -}}
{{- $_ := set $extra "prefill" (dict "tp_size" (int .Values.prefill.parallelism.tensor) "dp_size" (int .Values.prefill.parallelism.data)) -}}
{{- $_ := set $extra "decode" (dict "tp_size" (int .Values.decode.parallelism.tensor) "dp_size" (int .Values.decode.parallelism.data)) -}}
{{- toJson $extra -}}
{{- end }}

{{/* --kv-transfer-config without engine_id, which the start script adds at run time.
MooncakeConnectorV1 (vLLM-Ascend) takes kv_port and both roles' sizes; upstream MooncakeConnector
and NixlConnector take their ports from environment variables (mooncake-pd.connectorEnv). */}}
{{- define "mooncake-pd.kvTransferConfig" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .role -}}
{{- $connector := include "mooncake-pd.connector" $root -}}
{{- $config := dict "kv_connector" $connector "kv_role" (ternary "kv_producer" "kv_consumer" (eq .role "prefill")) -}}
{{- if eq $connector "NixlConnector" }}
{{- $_ := set $config "kv_role" "kv_both" }}
{{- end }}
{{- $profile := include "mooncake-pd.accelerator" $root | fromJson -}}
{{- with (default $profile.modulePath $root.Values.kvTransfer.modulePath) }}
{{- $_ := set $config "kv_connector_module_path" . }}
{{- end }}
{{- $_ := merge $config (include "mooncake-pd.kvTransferFields" $root | fromJson) }}
{{- if eq $connector "MooncakeConnectorV1" }}
{{- $_ := set $config "kv_port" (int $v.kvPort) }}
{{- $_ := set $config "kv_connector_extra_config" (include "mooncake-pd.kvConnectorExtraConfig" $root | fromJson) }}
{{- else if $root.Values.kvTransfer.extraConfig }}
{{- $_ := set $config "kv_connector_extra_config" $root.Values.kvTransfer.extraConfig }}
{{- end }}
{{- toJson $config -}}
{{- end }}

{{/* The top-level KVTransferConfig fields a user sets (vllm/config/kv_transfer.py, vLLM
0.13.0), as JSON: kvTransfer.bufferDevice (or the profile's), bufferSize, loadFailurePolicy,
enablePermuteLocalKv; null keys are left to vLLM's defaults. */}}
{{- define "mooncake-pd.kvTransferFields" -}}
{{- $kv := .Values.kvTransfer -}}
{{- $fields := dict -}}
{{- with (default (include "mooncake-pd.accelerator" . | fromJson).kvBufferDevice $kv.bufferDevice) }}
{{- $_ := set $fields "kv_buffer_device" . }}
{{- end }}
{{- range $key, $field := dict "bufferSize" "kv_buffer_size" "loadFailurePolicy" "kv_load_failure_policy" "enablePermuteLocalKv" "enable_permute_local_kv" }}
{{- if not (kindIs "invalid" (get $kv $key)) }}
{{- $_ := set $fields $field (get $kv $key) }}
{{- end }}
{{- end }}
{{- toJson $fields -}}
{{- end }}

{{/* Environment a connector reads its side-channel port from (not MooncakeConnectorV1). */}}
{{- define "mooncake-pd.connectorEnv" -}}
{{- $v := index .root.Values .role -}}
{{- $connector := include "mooncake-pd.connector" .root -}}
{{- if eq $connector "NixlConnector" }}
export VLLM_NIXL_SIDE_CHANNEL_PORT={{ include "mooncake-pd.shellQuote" (int $v.kvPort) }}
export VLLM_NIXL_SIDE_CHANNEL_HOST="${POD_IP}"
{{- else if eq $connector "MooncakeConnector" }}
export VLLM_MOONCAKE_BOOTSTRAP_PORT={{ include "mooncake-pd.shellQuote" (int $v.kvPort) }}
{{- end }}
{{- end }}

{{/* Command-line words of a flag map, one list per flag (the flag, then its values): true ->
[--k], false -> [--no-k], map -> [--k, JSON], list -> [--k, v...], null -> nothing. JSON. */}}
{{- define "mooncake-pd.flagWords" -}}
{{- $words := list -}}
{{- range $k, $val := . }}
{{- if kindIs "bool" $val }}
{{- $words = append $words (list (printf "--%s%s" (ternary "" "no-" $val) $k)) }}
{{- else if kindIs "map" $val }}
{{- $words = append $words (list (printf "--%s" $k) (toJson $val)) }}
{{- else if kindIs "slice" $val }}
{{- $group := list (printf "--%s" $k) }}
{{- range $val }}{{ $group = append $group (include "mooncake-pd.scalar" .) }}{{ end }}
{{- $words = append $words $group }}
{{- else if not (kindIs "invalid" $val) }}
{{- $words = append $words (list (printf "--%s" $k) (include "mooncake-pd.scalar" $val)) }}
{{- end }}
{{- end }}
{{- toJson $words -}}
{{- end }}

{{/* One command-line line per flag of a map (mooncake-pd.flagWords), each on its own line after
.indent spaces and ending with " \": the flag as it is (the schema restricts flag names), its
values single-quoted. (dict "flags" $map "indent" 2) */}}
{{- define "mooncake-pd.argLines" -}}
{{- $pad := repeat (int .indent) " " -}}
{{- range $words := include "mooncake-pd.flagWords" .flags | fromJsonArray }}
{{ $pad }}{{ first $words }}{{ range rest $words }} {{ include "mooncake-pd.shellQuote" . }}{{ end }} \
{{- end }}
{{- end }}

{{/* "true" when vLLM-Ascend's recompute scheduler is on: engine.recomputeScheduler, where auto
means on only with the vLLM-Ascend PD proxy on Ascend. With it on, decode ends requests it has no
KV cache for with stop reason "recomputed" for the router to re-send
(vllm_ascend/core/recompute_scheduler.py); only that proxy does
(load_balance_proxy_server_example.py), the Kthena router passes the truncated answer on. */}}
{{- define "mooncake-pd.recomputeScheduler" -}}
{{- $setting := .Values.engine.recomputeScheduler -}}
{{- if kindIs "bool" $setting -}}
{{- if $setting }}true{{ end -}}
{{- else if and (eq .Values.router.type "proxy") (eq (include "mooncake-pd.accelerator" . | fromJson).family "ascend") -}}
true
{{- end -}}
{{- end }}

{{/* A role's vllm serve flags: engine.args overlaid by <role>.args, with the recompute
scheduler merged into --additional-config. JSON map. */}}
{{- define "mooncake-pd.serveArgs" -}}
{{- $args := include "mooncake-pd.overlay" (dict "base" .root.Values.engine.args "over" (index .root.Values .role).args) | fromJson -}}
{{- if include "mooncake-pd.recomputeScheduler" .root }}
{{- $additional := deepCopy (get $args "additional-config" | default dict) }}
{{- $_ := set $additional "recompute_scheduler_enable" true }}
{{- $_ := set $args "additional-config" $additional }}
{{- end }}
{{- toJson $args -}}
{{- end }}

{{/* The base of a pod's engine_id. The guide's <group>_<role-id> is unique per role replica;
vLLM appends only the local DP rank (vllm/v1/engine/core.py), so the pods of a multi-node role
add Kthena's WORKER_INDEX to stay unique per node (vLLM-Ascend's multi-node PD tutorial asks for
it; NixlConnector keys handshakes by engine_id). */}}
{{- define "mooncake-pd.engineIdExport" -}}
{{- if gt (int (index .root.Values .role).workerReplicas) 0 -}}
# Unique per pod: Kthena's group and role labels (downward API) and the pod's WORKER_INDEX.
export MOONCAKE_ENGINE_ID="${GROUP_NAME}_${ROLE_ID}_node${WORKER_INDEX}"
{{- else -}}
# Unique per role replica, from Kthena's pod labels (downward API).
export MOONCAKE_ENGINE_ID="${GROUP_NAME}_${ROLE_ID}"
{{- end -}}
{{- if eq (include "mooncake-pd.connector" .root) "NixlConnector" }}
# Unique per start too: NixlConnector keys the remote agents it has met by engine_id, so a decode
# engine that met this pod's previous process would keep reading from an agent that is gone
# (NIXL_ERR_NOT_FOUND; vLLM then recomputes every prompt, silently). Seen in the e2e run.
MOONCAKE_ENGINE_ID="${MOONCAKE_ENGINE_ID}_start$(date +%s%N)"
{{- end -}}
{{- end }}

{{/* Env of every CPU-only Python container the chart starts in the vLLM-Ascend image (proxy,
model download, helm test, benchmark). torch auto-loads the installed torch_npu backend on
`import torch` (torch/__init__.py _import_device_backends), and torch_npu cannot load without the
Ascend driver, which only accelerator pods mount: "RuntimeError: Failed to load the backend
extension: torch_npu". vllm and modelscope import torch. */}}
{{- define "mooncake-pd.cpuPythonEnv" -}}
- name: TORCH_DEVICE_BACKEND_AUTOLOAD
  value: "0"
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- end }}

{{/* The preflight's settings for a role (files/preflight.py), as JSON: what to check and the
values key each check answers to. Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.preflightSettings" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .role -}}
{{- $p := $v.parallelism -}}
{{- $profile := include "mooncake-pd.accelerator" $root | fromJson -}}
{{- $perRank := ternary 1 (int $p.tensor) (eq (include "mooncake-pd.connector" $root) "NixlConnector") -}}
{{- $ports := list (dict "port" (int $v.port) "key" (printf "%s.port" .role)) (dict "port" (int $v.dataParallelRpcPort) "key" (printf "%s.dataParallelRpcPort" .role)) -}}
{{- $settings := dict
  "role" .role
  "hfOverrides" ($root.Values.model.hfOverrides | default dict)
  "tensor" (int $p.tensor)
  "tensorKey" (printf "%s.parallelism.tensor" .role)
  "dataLocal" (int (include "mooncake-pd.dataLocal" $v))
  "devicesKey" (printf "%s.parallelism" .role)
  "maxModelLen" (int64 $root.Values.model.maxModelLen)
  "ports" $ports
  "kvPorts" (dict "start" (int $v.kvPort) "perRank" $perRank "key" (printf "%s.kvPort" .role))
  "family" $profile.family
  "devicePattern" (ternary "davinci" "nvidia" (eq $profile.family "ascend"))
  "hccnConf" "/etc/hccn.conf"
  "hccnTool" "/usr/local/Ascend/driver/tools/hccn_tool"
  "checks" (deepCopy $root.Values.engine.preflight.checks)
-}}
{{- if not $profile.resourceName }}
{{- /* No device to count (the cpu profile). */ -}}
{{- $_ := set $settings.checks "devices" false }}
{{- end }}
{{- toJson $settings -}}
{{- end }}

{{/* The --hf-overrides part of a start script: the preflight prints the JSON (model.hfOverrides
with head_dim derived from the mounted model) or refuses, exit 78; without it, model.hfOverrides
as it is. */}}
{{- define "mooncake-pd.preflightLines" -}}
{{- if .root.Values.engine.preflight.enabled }}
# Preflight (engine.preflight): the mounted model, this node and the topology, before vLLM loads.
# It prints the --hf-overrides JSON (head_dim follows the model) or refuses with exit 78.
hf_overrides="$(python3 "$(dirname "$0")/preflight.py" {{ include "mooncake-pd.shellQuote" (include "mooncake-pd.preflightSettings" .) }})"
{{- else }}
hf_overrides={{ include "mooncake-pd.shellQuote" (ternary (toJson .root.Values.model.hfOverrides) "" (not (empty .root.Values.model.hfOverrides))) }}
{{- end }}
model_args=()
if [ -n "${hf_overrides}" ]; then
  model_args+=(--hf-overrides "${hf_overrides}")
fi
{{- end }}

{{/* The start script of a role: exports its env, then execs vllm serve with derived and
user flags. Every value is single-quoted; JSON comes from toJson. */}}
{{- define "mooncake-pd.script" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .role -}}
{{- $p := $v.parallelism -}}
{{- $profile := include "mooncake-pd.accelerator" $root | fromJson -}}
{{- $env := include "mooncake-pd.overlay" (dict "base" $root.Values.engine.env "over" $v.env) | fromJson -}}
{{- if eq $profile.family "ascend" }}
{{- $ascend := $root.Values.accelerator.ascend | default dict }}
{{- $env = include "mooncake-pd.overlay" (dict "base" $ascend.env "over" $env) | fromJson }}
{{- $env = include "mooncake-pd.overlay" (dict "base" $env "over" (get ($ascend.roleEnv | default dict) .role)) | fromJson }}
{{- else if eq $profile.family "cpu" }}
{{- $cpu := $root.Values.accelerator.cpu }}
{{- $_ := set $env "VLLM_CPU_KVCACHE_SPACE" (int $cpu.kvCacheSpaceGiB) }}
{{- $_ := set $env "VLLM_CPU_OMP_THREADS_BIND" $cpu.ompThreadsBind }}
{{- end -}}
{{- $args := include "mooncake-pd.serveArgs" . | fromJson -}}
#!/bin/bash
# {{ .role }}{{ if .worker }} worker{{ end }} start script generated by the mooncake-pd chart: change values, not this file.
set -euo pipefail
{{- include "mooncake-pd.nicExports" (dict "root" $root "family" $profile.family) }}
{{- range $k, $val := $env }}
{{- if not (kindIs "invalid" $val) }}
export {{ $k }}={{ include "mooncake-pd.shellQuote" (include "mooncake-pd.scalar" $val) }}
{{- end }}
{{- end }}
{{- include "mooncake-pd.connectorEnv" . }}
{{ include "mooncake-pd.engineIdExport" . }}
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
{{- include "mooncake-pd.preflightLines" . }}
exec vllm serve "${MODEL_LOCATION}" \
  --headless \
  --data-parallel-size {{ include "mooncake-pd.shellQuote" (int $p.data) }} \
  --data-parallel-size-local {{ include "mooncake-pd.shellQuote" (int $p.dataLocal) }} \
  --data-parallel-start-rank "${start_rank}" \
{{- else }}
{{- include "mooncake-pd.preflightLines" . }}
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
  "${model_args[@]}" \
{{- include "mooncake-pd.argLines" (dict "flags" $args "indent" 2) }}
  --kv-transfer-config "${kv_transfer_config}"
{{ end }}

{{/* Name of the Service in front of one role replica of one serving group. */}}
{{- define "mooncake-pd.replicaServiceName" -}}
{{- printf "%s-%d-%s-%d" (include "mooncake-pd.fullname" .root) (int .group) .roleName (int .replica) -}}
{{- end }}

{{/* The base URL of the release's router: the proxy Service or the Kthena router. */}}
{{- define "mooncake-pd.routerURL" -}}
{{- if eq .Values.router.type "kthena" -}}
{{- printf "http://kthena-router.%s.svc:%d" .Values.router.kthena.namespace (int .Values.router.kthena.servicePort) -}}
{{- else -}}
{{- printf "http://%s-proxy.%s.svc:%d" (include "mooncake-pd.fullname" .) .Release.Namespace (int .Values.proxy.port) -}}
{{- end -}}
{{- end }}

{{/* The URL clients use for chat completions. */}}
{{- define "mooncake-pd.chatURL" -}}
{{- printf "%s/v1/chat/completions" (include "mooncake-pd.routerURL" .) -}}
{{- end }}

{{/* The NIC exports of a start script: HCCL, Gloo and TP sockets on Ascend, NCCL and Gloo on
NVIDIA. network.interface auto finds the default-route interface when the container starts. */}}
{{- define "mooncake-pd.nicExports" -}}
{{- $interface := .root.Values.network.interface }}
# The address vLLM advertises (vllm/utils/network_utils.py get_ip; Mooncake's side channel and
# DP use it) is the one the chart binds and checks, not whichever NIC routes to 8.8.8.8.
export VLLM_HOST_IP="${POD_IP}"
{{- if eq $interface "auto" }}
# network.interface auto: the interface of the default route, as `ip route | grep default` shows.
nic="$(ip -o -4 route show to default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}' || true)"
if [ -z "${nic}" ]; then
  nic="$(awk '$2 == "00000000" {print $1; exit}' /proc/net/route 2>/dev/null || true)"
fi
if [ -z "${nic}" ]; then
  echo "network.interface auto: no default route found; set network.interface to the NIC name" >&2
  exit 1
fi
{{- $nic := "\"${nic}\"" }}
{{- include "mooncake-pd.nicLines" (dict "nic" $nic "family" .family) }}
{{- else }}
{{- include "mooncake-pd.nicLines" (dict "nic" (include "mooncake-pd.shellQuote" $interface) "family" .family) }}
{{- end }}
{{- end }}

{{- define "mooncake-pd.nicLines" -}}
{{- if eq .family "ascend" }}
# HCCL, Gloo and TP sockets use the pod's (host network) address and NIC.
export HCCL_IF_IP="${POD_IP}"
export GLOO_SOCKET_IFNAME={{ .nic }}
export TP_SOCKET_IFNAME={{ .nic }}
export HCCL_SOCKET_IFNAME={{ .nic }}
{{- else if eq .family "cpu" }}
# Gloo sockets (vLLM's CPU build has no NCCL) use the pod's (host network) NIC.
export GLOO_SOCKET_IFNAME={{ .nic }}
{{- else }}
# NCCL and Gloo sockets use the pod's (host network) NIC.
export GLOO_SOCKET_IFNAME={{ .nic }}
export NCCL_SOCKET_IFNAME={{ .nic }}
{{- end }}
{{- end }}

{{/* Relabelings that put the role, serving group and ModelServing on every scraped series. */}}
{{- define "mooncake-pd.metricsRelabelings" -}}
- sourceLabels: [__meta_kubernetes_pod_label_app_kubernetes_io_component]
  targetLabel: role
- sourceLabels: [__meta_kubernetes_pod_label_modelserving_volcano_sh_group_name]
  targetLabel: serving_group
- sourceLabels: [__meta_kubernetes_pod_label_modelserving_volcano_sh_name]
  targetLabel: modelserving
- sourceLabels: [__meta_kubernetes_pod_name]
  targetLabel: pod
{{- end }}
