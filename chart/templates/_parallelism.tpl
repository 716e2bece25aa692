{{/*
What a role's parallelism implies: DP ranks per pod, devices per pod, side-channel ports.
*/}}

{{/* DP ranks on one pod of a role: parallelism.dataLocal, or all of parallelism.data.
Context: the role's values. */}}
{{- define "mooncake-pd.parallelism.dataLocal" -}}
{{- $p := .parallelism -}}
{{- if kindIs "invalid" $p.dataLocal }}{{ int $p.data }}{{ else }}{{ int $p.dataLocal }}{{ end -}}
{{- end }}

{{/* Accelerator devices one pod of a role requests: tensor x dataLocal. Context: the role's
values. */}}
{{- define "mooncake-pd.parallelism.devicesPerPod" -}}
{{- mul (int .parallelism.tensor) (int (include "mooncake-pd.parallelism.dataLocal" .)) -}}
{{- end }}

{{/* Side-channel ports per DP rank, by the connector's sideChannelPerRank (profiles.yaml):
"tensor", kvPort + dp_rank x tp + tp_rank, so tensor ports (Mooncake, vLLM-Ascend's V1 and
upstream); "one", kvPort + dp_rank (NIXL). Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.parallelism.kvPortsPerRank" -}}
{{- $p := (index .root.Values .role).parallelism -}}
{{- ternary (int $p.tensor) 1 (eq (include "mooncake-pd.profile.connectorData" .root | fromJson).sideChannelPerRank "tensor") -}}
{{- end }}

{{/* Side-channel ports a role binds from kvPort: data x kvPortsPerRank.
Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.parallelism.kvPortCount" -}}
{{- mul (int (index .root.Values .role).parallelism.data) (int (include "mooncake-pd.parallelism.kvPortsPerRank" .)) -}}
{{- end }}
