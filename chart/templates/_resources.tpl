{{/*
Engine pods' resources: the devices from the parallelism, host CPU and memory from the
accelerator profile's hostResources (profiles.yaml) where <role>.resources leaves them out,
and, with engine.guaranteedQoS, every request raised to its limit (Kubernetes' Guaranteed QoS
class: the kubelet evicts and throttles these pods last).
*/}}

{{/* A profile CPU quantity ("4", "11750m") in millicores, as text. The profile table check
(mooncake-pd.resources.tableProblems) has allowed only these forms. */}}
{{- define "mooncake-pd.resources.millicores" -}}
{{- $text := toString . -}}
{{- if hasSuffix "m" $text }}{{ int (trimSuffix "m" $text) }}{{ else }}{{ mul (int $text) 1000 }}{{ end -}}
{{- end }}

{{/* A profile memory quantity ("44800Mi", "64Gi", "1Ti") in MiB, as text. */}}
{{- define "mooncake-pd.resources.mebibytes" -}}
{{- $text := toString . -}}
{{- $units := dict "Mi" 1 "Gi" 1024 "Ti" 1048576 -}}
{{- $unit := substr (int (sub (len $text) 2)) (len $text) $text -}}
{{- mul (int (trimSuffix $unit $text)) (get $units $unit) -}}
{{- end }}

{{/* A profile CPU quantity times `factor`, as a person writes it: whole cores, else
millicores. (dict "quantity" $q "factor" $n) */}}
{{- define "mooncake-pd.resources.cpu" -}}
{{- $m := mul (int (include "mooncake-pd.resources.millicores" .quantity)) (int .factor) -}}
{{- if eq (mod $m 1000) 0 }}{{ div $m 1000 }}{{ else }}{{ $m }}m{{ end -}}
{{- end }}

{{/* A profile memory quantity times `factor`: GiB where whole, else MiB. (dict "quantity" $q
"factor" $n) */}}
{{- define "mooncake-pd.resources.memory" -}}
{{- $mi := mul (int (include "mooncake-pd.resources.mebibytes" .quantity)) (int .factor) -}}
{{- if eq (mod $mi 1024) 0 }}{{ div $mi 1024 }}Gi{{ else }}{{ $mi }}Mi{{ end -}}
{{- end }}

{{/* What is wrong with the profile's hostResources row, as a JSON list (the profile table's
own check calls it for every accelerator). (dict "name" $accelerator "row" $hostResources) */}}
{{- define "mooncake-pd.resources.tableProblems" -}}
{{- $problems := list -}}
{{- $row := .row | default dict -}}
{{- $at := printf "accelerators.%s.hostResources" .name -}}
{{- if not (has (toString $row.per) (list "device" "pod")) -}}
{{- $problems = append $problems (printf "%s.per: %q; use device (times the pod's devices) or pod" $at (toString $row.per)) -}}
{{- end -}}
{{- range $kind := list "requests" "limits" -}}
{{- $set := get $row $kind | default dict -}}
{{- if not (regexMatch "^[0-9]+m?$" (toString (get $set "cpu"))) -}}
{{- $problems = append $problems (printf "%s.%s.cpu: %q; write whole cores (\"8\") or millicores (\"11750m\")" $at $kind (toString (get $set "cpu"))) -}}
{{- end -}}
{{- if not (regexMatch "^[0-9]+(Mi|Gi|Ti)$" (toString (get $set "memory"))) -}}
{{- $problems = append $problems (printf "%s.%s.memory: %q; write MiB, GiB or TiB (\"44800Mi\", \"64Gi\")" $at $kind (toString (get $set "memory"))) -}}
{{- end -}}
{{- end -}}
{{- toJson $problems -}}
{{- end }}

{{/* CPU and memory the profile gives a pod of the role, as JSON {requests: {}, limits: {}}.
Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.resources.hostDefaults" -}}
{{- $profile := include "mooncake-pd.profile" .root | fromJson -}}
{{- $row := $profile.hostResources -}}
{{- $factor := 1 -}}
{{- if eq $row.per "device" }}{{ $factor = int (include "mooncake-pd.parallelism.devicesPerPod" (index .root.Values .role)) }}{{ end -}}
{{- $out := dict -}}
{{- range $kind := list "requests" "limits" -}}
{{- $given := get $row $kind -}}
{{- $cpu := include "mooncake-pd.resources.cpu" (dict "quantity" $given.cpu "factor" $factor) -}}
{{- $memory := include "mooncake-pd.resources.memory" (dict "quantity" $given.memory "factor" $factor) -}}
{{- $_ := set $out $kind (dict "cpu" $cpu "memory" $memory) -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/* The resources of a role's engine container, as JSON: <role>.resources over the profile's
CPU and memory, name by name; the device (profile resourceName, TP x DP-local) in requests and
limits, and with accelerator.rdma on its device plugin's resource (count); with engine.guaranteedQoS every request set to its limit. Quantities as strings: inside
the ModelServing the pod template is checked by Kthena's CRD, whose quantities are
int-or-string, so a float from a values file (cpu: 0.5) is refused there ("must be of type
integer,string"), though a Deployment would take it. Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.resources.engine" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .role -}}
{{- $profile := include "mooncake-pd.profile" $root | fromJson -}}
{{- $defaults := include "mooncake-pd.resources.hostDefaults" . | fromJson -}}
{{- $own := $v.resources | default dict -}}
{{- $out := dict -}}
{{- range $kind := list "requests" "limits" -}}
{{- $set := dict -}}
{{- range $name, $q := get $defaults $kind }}{{ $_ := set $set $name $q }}{{ end -}}
{{- range $name, $q := get $own $kind | default dict }}{{ $_ := set $set $name (toString $q) }}{{ end -}}
{{- if $profile.resourceName }}{{ $_ := set $set $profile.resourceName (include "mooncake-pd.parallelism.devicesPerPod" $v) }}{{ end -}}
{{- with (include "mooncake-pd.profile.rdma" $root | fromJson) }}{{ if .resource }}{{ $_ := set $set .resource (toString (int .count)) }}{{ end }}{{ end -}}
{{- $_ := set $out $kind $set -}}
{{- end -}}
{{- if $root.Values.engine.guaranteedQoS -}}
{{- range $name, $q := $out.limits }}{{ $_ := set $out.requests $name $q }}{{ end -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/* Where a rendered engine quantity comes from, for messages: "" when the role's values set
it, else what did. (dict "root" $ "role" "prefill" "kind" "requests" "name" $resource) */}}
{{- define "mooncake-pd.resources.origin" -}}
{{- $v := index .root.Values .role -}}
{{- $own := get ($v.resources | default dict) .kind | default dict -}}
{{- if and .root.Values.engine.guaranteedQoS (eq .kind "requests") -}}
{{- printf " (the limit, by engine.guaranteedQoS)" -}}
{{- else if not (hasKey $own .name) -}}
{{- $profile := include "mooncake-pd.profile" .root | fromJson -}}
{{- $per := ternary (printf " for %s devices" (include "mooncake-pd.parallelism.devicesPerPod" $v)) "" (eq $profile.hostResources.per "device") -}}
{{- printf " (accelerator %s's hostResources%s; set %s.resources.%s.%s to choose)" $profile.type $per .role .kind .name -}}
{{- end -}}
{{- end }}
