{{/*
The KV connector's configuration: --kv-transfer-config and the environment it reads, built from
the connector's row in profiles.yaml and each role's parallelism and kvPort.
*/}}

{{/* The connector's view of both roles (kv_connector_extra_config), for connectors with
extraConfigSizes: kvTransfer.extraConfig and accelerator.<family>.kvExtraConfig, with each
role's tp_size/dp_size derived from its parallelism (check_kv_extra_config). */}}
{{- define "mooncake-pd.kvtransfer.extraConfig" -}}
{{- $settings := include "mooncake-pd.profile.settings" . | fromJson -}}
{{- $extra := merge (deepCopy (.Values.kvTransfer.extraConfig | default dict)) (deepCopy ($settings.kvExtraConfig | default dict)) -}}
{{- $_ := set $extra "prefill" (dict "tp_size" (int .Values.prefill.parallelism.tensor) "dp_size" (int .Values.prefill.parallelism.data)) -}}
{{- $_ := set $extra "decode" (dict "tp_size" (int .Values.decode.parallelism.tensor) "dp_size" (int .Values.decode.parallelism.data)) -}}
{{- toJson $extra -}}
{{- end }}

{{/* --kv-transfer-config without engine_id, which the start script adds at run time. A
connector with kvPortInConfig (MooncakeConnectorV1) takes kv_port and both roles' sizes; the
others take their ports from environment variables (mooncake-pd.kvtransfer.env).
Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.kvtransfer.config" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .role -}}
{{- $connector := include "mooncake-pd.profile.connector" $root -}}
{{- $data := include "mooncake-pd.profile.connectorData" $root | fromJson -}}
{{- $config := dict "kv_connector" $connector "kv_role" (get ($data.roles | default dict) .role) -}}
{{- with (default $data.modulePath $root.Values.kvTransfer.modulePath) }}
{{- $_ := set $config "kv_connector_module_path" . }}
{{- end }}
{{- $_ := merge $config (include "mooncake-pd.kvtransfer.fields" $root | fromJson) }}
{{- if $data.kvPortInConfig }}
{{- $_ := set $config "kv_port" (int $v.kvPort) }}
{{- end }}
{{- if $data.extraConfigSizes }}
{{- $_ := set $config "kv_connector_extra_config" (include "mooncake-pd.kvtransfer.extraConfig" $root | fromJson) }}
{{- else if $root.Values.kvTransfer.extraConfig }}
{{- $_ := set $config "kv_connector_extra_config" $root.Values.kvTransfer.extraConfig }}
{{- end }}
{{- toJson $config -}}
{{- end }}

{{/* The kvTransfer values that set a top-level KVTransferConfig field (vllm/config/
kv_transfer.py): values key -> field, as JSON. What the chart writes (kvtransfer.fields) and
what it checks against the engine version's KVTransferConfig (validate/_engineversion.tpl). */}}
{{- define "mooncake-pd.kvtransfer.fieldNames" -}}
{{- toJson (dict "bufferDevice" "kv_buffer_device" "bufferSize" "kv_buffer_size" "loadFailurePolicy" "kv_load_failure_policy" "enablePermuteLocalKv" "enable_permute_local_kv") -}}
{{- end }}

{{/* The top-level KVTransferConfig fields a user sets, as JSON: kvTransfer.bufferDevice (or
the profile's default), bufferSize, loadFailurePolicy, enablePermuteLocalKv
(mooncake-pd.kvtransfer.fieldNames); null keys are left to vLLM's defaults. */}}
{{- define "mooncake-pd.kvtransfer.fields" -}}
{{- $kv := .Values.kvTransfer -}}
{{- $names := include "mooncake-pd.kvtransfer.fieldNames" . | fromJson -}}
{{- $fields := dict -}}
{{- with (default (include "mooncake-pd.profile" . | fromJson).kvBufferDevices.default $kv.bufferDevice) }}
{{- $_ := set $fields $names.bufferDevice . }}
{{- end }}
{{- range $key, $field := omit $names "bufferDevice" }}
{{- if not (kindIs "invalid" (get $kv $key)) }}
{{- $_ := set $fields $field (get $kv $key) }}
{{- end }}
{{- end }}
{{- toJson $fields -}}
{{- end }}

{{/* Start-script exports of the environment a connector reads its side channel from: the
port (<role>.kvPort) and the host (the pod IP), where its row names them (portEnv, hostEnv).
Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.kvtransfer.env" -}}
{{- $v := index .root.Values .role -}}
{{- $data := include "mooncake-pd.profile.connectorData" .root | fromJson -}}
{{- with $data.portEnv }}
export {{ . }}={{ include "mooncake-pd.util.shellQuote" (int $v.kvPort) }}
{{- end }}
{{- with $data.hostEnv }}
export {{ . }}="${POD_IP}"
{{- end }}
{{- end }}
