{{/*
Where pods go: pull secrets, node selector, tolerations and affinity, written once for every
pod the chart renders.
*/}}

{{/* imagePullSecrets of a pod spec, for the caller to indent (nothing when none). */}}
{{- define "mooncake-pd.scheduling.pullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end -}}
{{- end }}

{{/* nodeSelector, tolerations, affinity and topologySpreadConstraints of a pod spec, each only
when set, in that order, for the caller to indent. (dict "nodeSelector" $map "tolerations" $list
"affinity" $map "topologySpreadConstraints" $list) */}}
{{- define "mooncake-pd.scheduling.placement" -}}
{{- $parts := list -}}
{{- range $key := list "nodeSelector" "tolerations" "affinity" "topologySpreadConstraints" -}}
{{- with get $ $key -}}
{{- $parts = append $parts (printf "%s:\n%s" $key (toYaml . | indent 2)) -}}
{{- end -}}
{{- end -}}
{{- join "\n" $parts -}}
{{- end }}

{{/* Prefill and decode pods land on different nodes (placement.separateRoles, or implied by
the Kthena router when both roles serve on one port). */}}
{{- define "mooncake-pd.scheduling.rolesSeparated" -}}
{{- $v := .Values -}}
{{- if or $v.placement.separateRoles (and (eq $v.router.type "kthena") (eq (int $v.prefill.port) (int $v.decode.port))) }}true{{ end -}}
{{- end }}

{{/* A role's affinity: the user's, plus anti-affinity to the other role when separated. YAML.
Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.scheduling.engineAffinity" -}}
{{- $root := .root -}}
{{- $affinity := deepCopy ((index $root.Values .role).affinity | default dict) -}}
{{- if include "mooncake-pd.scheduling.rolesSeparated" $root }}
{{- $other := ternary "decode" "prefill" (eq .role "prefill") }}
{{- $selector := merge (dict "app.kubernetes.io/component" $other) (include "mooncake-pd.labels.selector" $root | fromYaml) }}
{{- $term := dict "labelSelector" (dict "matchLabels" $selector) "topologyKey" "kubernetes.io/hostname" }}
{{- $anti := $affinity.podAntiAffinity | default dict }}
{{- $required := append ($anti.requiredDuringSchedulingIgnoredDuringExecution | default list) $term }}
{{- $_ := set $anti "requiredDuringSchedulingIgnoredDuringExecution" $required }}
{{- $_ := set $affinity "podAntiAffinity" $anti }}
{{- end }}
{{- if $affinity }}{{ toYaml $affinity }}{{ end -}}
{{- end }}

{{/* The benchmark Job's affinity: benchmark.affinity, or, for a hostPath model (on the engines'
nodes only) without a tokenizer of its own or a nodeSelector, beside an engine pod of the
release. YAML. */}}
{{- define "mooncake-pd.scheduling.benchmarkAffinity" -}}
{{- $bench := .Values.benchmark -}}
{{- $affinity := $bench.affinity -}}
{{- if and (not $affinity) (not $bench.nodeSelector) (not $bench.tokenizer) (eq .Values.model.storage.type "hostPath") }}
{{- $engines := dict "matchLabels" (fromYaml (include "mooncake-pd.labels.selector" .)) "matchExpressions" (list (dict "key" "app.kubernetes.io/component" "operator" "In" "values" (list "prefill" "decode"))) }}
{{- $affinity = dict "podAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list (dict "labelSelector" $engines "topologyKey" "kubernetes.io/hostname"))) }}
{{- end }}
{{- if $affinity }}{{ toYaml $affinity }}{{ end -}}
{{- end }}
