{{/*
Rules of parallelism: the DP ranks of every pod of an instance, and the tensor-parallel rule
between prefill and decode of the connector (profiles.yaml tensorRule).
*/}}
{{- define "mooncake-pd.validate.parallelism" -}}
{{- $errors := list -}}
{{- range $role := list "prefill" "decode" }}
{{- $v := index $.Values $role }}
{{- $p := $v.parallelism }}
{{- $dataLocal := int (include "mooncake-pd.parallelism.dataLocal" $v) }}
{{- $workers := int $v.workerReplicas }}
{{- if and $workers (kindIs "invalid" $p.dataLocal) }}
{{- $errors = append $errors (printf "%s.parallelism.dataLocal: a multi-node role (%s.workerReplicas %d) needs dataLocal, the DP ranks on each pod; set it to data / (workerReplicas + 1)" $role $role $workers) }}
{{- else if ne (int $p.data) (mul $dataLocal (add $workers 1)) }}
{{- $errors = append $errors (printf "%s.parallelism: data (%d) must equal dataLocal (%d) x (workerReplicas (%d) + 1) = %d; every pod of an instance runs dataLocal DP ranks" $role (int $p.data) $dataLocal $workers (mul $dataLocal (add $workers 1))) }}
{{- end }}
{{- end }}
{{- /* The connector's rule at the release's engine version (profiles.yaml tensorRule):
prefillMultiple: prefill TP >= decode TP and divisible by it for non-MLA models (vLLM-Ascend
MooncakeConnectorV1, check_kv_extra_config); decodeMultiple: the reverse (vLLM 0.13's NIXL);
divisible: either divides the other (NIXL from vLLM 0.18); equal: upstream MooncakeConnector;
any: no rule. */ -}}
{{- $connector := include "mooncake-pd.profile.connector" . }}
{{- $rule := (include "mooncake-pd.profile.connectorData" . | fromJson).tensorRule }}
{{- $ptp := int .Values.prefill.parallelism.tensor }}
{{- $dtp := int .Values.decode.parallelism.tensor }}
{{- if eq $rule "equal" }}
{{- if ne $ptp $dtp }}
{{- $errors = append $errors (printf "decode.parallelism.tensor: %d differs from prefill.parallelism.tensor (%d); %s needs equal TP (NixlConnector does not)" $dtp $ptp $connector) }}
{{- end }}
{{- else if eq $rule "decodeMultiple" }}
{{- if or (lt $dtp $ptp) (ne 0 (mod $dtp (max $ptp 1))) }}
{{- $errors = append $errors (printf "decode.parallelism.tensor: %d is not a multiple of prefill.parallelism.tensor (%d); %s of vLLM %s needs decode TP to be a multiple of prefill TP (\"Decode TP cannot be smaller than prefill TP\"); from engine.version v0.18.0 either may divide the other" $dtp $ptp $connector (include "mooncake-pd.profile" . | fromJson).engine.vllm) }}
{{- end }}
{{- else if eq $rule "divisible" }}
{{- if ne 0 (mod (max $ptp $dtp) (max (min $ptp $dtp) 1)) }}
{{- $errors = append $errors (printf "decode.parallelism.tensor: %d and prefill.parallelism.tensor (%d) do not divide one another; %s needs the larger TP to be a multiple of the smaller" $dtp $ptp $connector) }}
{{- end }}
{{- else if ne $rule "prefillMultiple" }}
{{- else if lt $ptp $dtp }}
{{- $errors = append $errors (printf "prefill.parallelism.tensor: %d is below decode.parallelism.tensor (%d); %s needs prefill TP >= decode TP" $ptp $dtp $connector) }}
{{- else if and (not .Values.model.mla) (ne 0 (mod $ptp (max $dtp 1))) }}
{{- $errors = append $errors (printf "prefill.parallelism.tensor: %d is not a multiple of decode.parallelism.tensor (%d); %s needs it for non-MLA models" $ptp $dtp $connector) }}
{{- end }}
{{- /* Decode context parallel splits each TP group into TP / DCP groups, so DCP must divide TP.
vLLM 0.13.0 asserts it in create_engine_config after it has read the model's config
(vllm/engine/arg_utils.py ~1354), where the engine check (chart/files/engine_args.py) does not
reach without the model, so the engine would fail seconds into its start; ParallelConfig checks it
from 0.18.0. */ -}}
{{- range $role := list "prefill" "decode" }}
{{- $dcp := get (include "mooncake-pd.validate.engineFlags" (dict "root" $ "role" $role) | fromJson) "decode-context-parallel-size" }}
{{- $tp := int (index $.Values $role).parallelism.tensor }}
{{- if and $dcp (gt (int $dcp) 0) (ne 0 (mod $tp (int $dcp))) }}
{{- $where := include "mooncake-pd.validate.engineRuleKey" (dict "root" $ "role" $role "operand" "args.decode-context-parallel-size") }}
{{- $errors = append $errors (printf "%s: decode context parallel %d does not divide %s.parallelism.tensor (%d); vLLM splits each TP group into TP / DCP groups (\"tp_size=%d must be divisible by dcp_size=%d\"): use a divisor of %d" $where (int $dcp) $role $tp $tp (int $dcp) $tp) }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
