{{/*
Rules of the KV connector: one the profile's family can run, a buffer device it has, and
kvTransfer.extraConfig holding only what the connector reads from there.
*/}}
{{- define "mooncake-pd.validate.kvtransfer" -}}
{{- $errors := list -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $connector := include "mooncake-pd.profile.connector" . -}}
{{- $kv := .Values.kvTransfer -}}
{{- if not (has $connector $profile.connectors) }}
{{- $data := get $profile.engine.connectors $connector | default dict }}
{{- $errors = append $errors (printf "kvTransfer.connector: %s is for %s, but accelerator.type is %s; use %s or leave it empty for the profile's" $connector (default "no accelerator the chart knows" $data.for) $profile.type (join " or " $profile.connectors)) }}
{{- end }}
{{- $buffer := $profile.kvBufferDevices }}
{{- if and $kv.bufferDevice (not (has $kv.bufferDevice $buffer.allowed)) }}
{{- $errors = append $errors (printf "kvTransfer.bufferDevice: %s on accelerator.type %s %s; use %s or null" $kv.bufferDevice $profile.type (default "is not a buffer device there" $buffer.refusal) (join " or " $buffer.allowed)) }}
{{- end }}
{{- range $k := list "prefill" "decode" }}
{{- if hasKey ($kv.extraConfig | default dict) $k }}
{{- $errors = append $errors (printf "kvTransfer.extraConfig.%s: the chart derives each role's tp_size/dp_size from %s.parallelism; remove this key" $k $k) }}
{{- end }}
{{- end }}
{{- /* Top-level KVTransferConfig fields (vllm/config/kv_transfer.py) are not read from
kv_connector_extra_config: there they would render and do nothing. */ -}}
{{- $kvFields := dict "kv_connector" "kvTransfer.connector" "engine_id" "(Kthena's group and role labels)" "kv_role" "(the role: producer, consumer, or both for NIXL)" "kv_port" "<role>.kvPort" "kv_connector_module_path" "kvTransfer.modulePath" "kv_connector_extra_config" "kvTransfer.extraConfig itself" "kv_buffer_device" "kvTransfer.bufferDevice" "kv_buffer_size" "kvTransfer.bufferSize" "kv_load_failure_policy" "kvTransfer.loadFailurePolicy" "enable_permute_local_kv" "kvTransfer.enablePermuteLocalKv" "kv_rank" "(P2pNcclConnector only, which the chart does not deploy)" "kv_parallel_size" "(P2pNcclConnector only, which the chart does not deploy)" "kv_ip" "(P2pNcclConnector only, which the chart does not deploy)" }}
{{- range $k, $_ := $kv.extraConfig | default dict }}
{{- if hasKey $kvFields $k }}
{{- $errors = append $errors (printf "kvTransfer.extraConfig.%s: a top-level field of vLLM's KVTransferConfig, which the connector does not read from kv_connector_extra_config; %s" $k (include "mooncake-pd.validate.ownerFix" (get $kvFields $k))) }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
