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

{{/* Side-channel ports a role binds from kvPort, by the connector's sideChannelPerRank
(profiles.yaml): "tensor", kvPort + dp_rank x tp + tp_rank, so data x tensor ports (Mooncake,
vLLM-Ascend's V1 and upstream); "one", kvPort + dp_rank, so data ports (NIXL).
Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.parallelism.kvPortCount" -}}
{{- $p := (index .root.Values .role).parallelism -}}
{{- $perRank := ternary (int $p.tensor) 1 (eq (include "mooncake-pd.profile.connectorData" .root | fromJson).sideChannelPerRank "tensor") -}}
{{- mul (int $p.data) $perRank -}}
{{- end }}
