{{/*
Rules of the KV connector: one the profile's family can run, a buffer device it has, and
kvTransfer.extraConfig holding only what the connector reads from there.
*/}}
{{- define "mooncake-pd.validate.kvtransfer" -}}
{{- $errors := list -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $connector := include "mooncake-pd.profile.connector" . -}}
{{- $kv := .Values.kvTransfer -}}
{{- $data := get $profile.engine.connectors $connector | default dict }}
{{- if not (has $connector $profile.connectors) }}
{{- $errors = append $errors (printf "kvTransfer.connector: %s is for %s, but accelerator.type is %s; use %s or leave it empty for the profile's" $connector (default "no accelerator the chart knows" $data.for) $profile.type (join " or " $profile.connectors)) }}
{{- end }}
{{- /* A profile without a device resource (resourceName empty) has no GPU or NPU. */ -}}
{{- $deviceless := not $profile.resourceName }}
{{- if and (has $connector $profile.connectors) $data.needsAccelerator $deviceless }}
{{- $errors = append $errors (printf "kvTransfer.connector: %s at engine.version %s (vLLM %s) needs a GPU or NPU when its worker starts (chart/files/profiles.yaml engines.%s.connectors.%s), and accelerator.type %s has none; use engine.version %s, or NixlConnector" $connector $profile.engine.version $profile.engine.vllm $profile.engine.version $connector $profile.type (include "mooncake-pd.validate.kvtransfer.cpuVersions" (dict "root" $ "connector" $connector))) }}
{{- end }}
{{- if eq (toString $data.pairing) "transferId" }}
{{- $errors = append $errors (printf "kvTransfer.connector: %s at engine.version %s (vLLM %s) pairs prefill's and decode's request by a kv_transfer_params.transfer_id the router must send, and neither the PD proxy (vLLM-Ascend's example) nor Kthena's router sends one: prefill frees the KV cache and decode computes every prompt; use NixlConnector, or a version whose %s pairs by request id (chart/files/profiles.yaml pairing)" $connector $profile.engine.version $profile.engine.vllm $connector) }}
{{- end }}
{{- if and (has $connector $profile.connectors) (eq (toString $data.blockSizeWithoutDevice) "kvHeads") $deviceless }}
{{- range $role := list "prefill" "decode" }}
{{- $args := include "mooncake-pd.vllm.serveArgs" (dict "root" $ "role" $role) | fromJson }}
{{- if or (not (hasKey $args "block-size")) (kindIs "invalid" (index $args "block-size")) }}
{{- $errors = append $errors (printf "%s.args.block-size: unset, and %s on accelerator.type %s asserts block_size == the KV cache's dimension -3, which in vLLM's CPU layout is the model's KV head count (chart/files/profiles.yaml blockSizeWithoutDevice; vllm mooncake_connector.py, kernel_block_size = cache.shape[-3]): vLLM's default block size fails at start; set engine.args.block-size to the model's num_key_value_heads (a size vLLM's CPU backend accepts), or use NixlConnector" $role $connector $profile.type) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* KV offloading takes the connector's place: with --kv-offloading-backend vLLM sets
kv_connector to OffloadingConnector (native) or LMCacheConnectorV1 (lmcache) and kv_role to
kv_both for every engine (vllm v0.13.0 vllm/config/vllm.py _post_init_kv_transfer_config
~471-510), so no KV cache reaches decode and every request is computed twice, with no error. */ -}}
{{- range $where := list "engine" "prefill" "decode" }}
{{- with index ((index $.Values $where).args | default dict) "kv-offloading-backend" }}
{{- $errors = append $errors (printf "%s.args.kv-offloading-backend: %s makes vLLM replace the PD connector (%s) with %s and both roles with kv_both (vllm/config/vllm.py _post_init_kv_transfer_config): no KV cache would reach decode, silently; remove it (and kv-offloading-size), since KV offloading and PD share vLLM's one kv_connector" $where (toString .) $connector (ternary "LMCacheConnectorV1" "OffloadingConnector" (eq (toString .) "lmcache"))) }}
{{- end }}
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

{{/* The engine versions whose `connector` runs without an accelerator (profiles.yaml
needsAccelerator false), for the refusal's fix. Context: (dict "root" $ "connector" <a connector name>). */}}
{{- define "mooncake-pd.validate.kvtransfer.cpuVersions" -}}
{{- $table := include "mooncake-pd.profile.table" .root | fromJson -}}
{{- $versions := list -}}
{{- range $version, $engine := $table.engines }}
{{- $row := get ($engine.connectors | default dict) $.connector }}
{{- if and $row (not $row.needsAccelerator) (ne (toString $row.pairing) "transferId") }}{{ $versions = append $versions $version }}{{ end }}
{{- end }}
{{- join " or " $versions -}}
{{- end }}
