{{/*
Rules of the ports each role binds on its node (hostNetwork): in range, outside the random
listener range of the connector (profiles.yaml randomListenPorts), no two overlapping where they
may share a node. The proxy is not on the host network: its port cannot collide with the
engines'.
*/}}
{{- define "mooncake-pd.validate.ports" -}}
{{- $errors := list -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $data := include "mooncake-pd.profile.connectorData" . | fromJson -}}
{{- /* Host ports of each role: [start, end] inclusive. */ -}}
{{- $ports := list -}}
{{- range $role := list "prefill" "decode" }}
{{- $v := index $.Values $role }}
{{- $ports = append $ports (dict "role" $role "key" (printf "%s.port" $role) "start" (int $v.port) "end" (int $v.port)) }}
{{- $ports = append $ports (dict "role" $role "key" (printf "%s.dataParallelRpcPort" $role) "start" (int $v.dataParallelRpcPort) "end" (int $v.dataParallelRpcPort)) }}
{{- $ports = append $ports (dict "role" $role "key" (printf "%s.kvPort" $role) "start" (int $v.kvPort) "end" (sub (add (int $v.kvPort) (int (include "mooncake-pd.parallelism.kvPortCount" (dict "root" $ "role" $role)))) 1)) }}
{{- end }}
{{- $random := $data.randomListenPorts }}
{{- $randomEnd := 0 }}
{{- if $random }}{{ $randomEnd = add (int $random.base) (mul (int $random.perDevice) (int $profile.devicesPerNode)) }}{{ end }}
{{- /* Roles kept on different nodes cannot collide with each other, only with themselves. */ -}}
{{- $separated := include "mooncake-pd.scheduling.rolesSeparated" . }}
{{- range $i, $a := $ports }}
{{- if or (lt (int $a.start) 1) (gt (int $a.end) 65535) }}
{{- $errors = append $errors (printf "%s: ports %d-%d must lie within 1-65535" $a.key (int $a.start) (int $a.end)) }}
{{- end }}
{{- if and $random (le (int $a.start) $randomEnd) (ge (int $a.end) (int $random.base)) }}
{{- $errors = append $errors (printf "%s: ports %d-%d overlap %s's random listener range %d-%d on a %d-device node (\"Address already in use\"); choose ports outside it, e.g. below %d" $a.key (int $a.start) (int $a.end) $random.owner (int $random.base) $randomEnd (int $profile.devicesPerNode) (int $random.base)) }}
{{- end }}
{{- range $j, $b := $ports }}
{{- $apart := and $separated (ne $a.role $b.role) }}
{{- if and (lt $i $j) (not $apart) (le (int $a.start) (int $b.end)) (le (int $b.start) (int $a.end)) }}
{{- $errors = append $errors (printf "%s: ports %d-%d overlap %s (%d-%d); roles may share a node on the host network, so every port must be distinct" $b.key (int $b.start) (int $b.end) $a.key (int $a.start) (int $a.end)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
