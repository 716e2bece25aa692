{{/*
Rules of the ports each role binds on its node (hostNetwork): in range, outside the random
ranges the connector's libraries pick ports from at random (profiles.yaml randomPorts, per engine version), no two overlapping where they
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
{{- /* The connector's random ports on a node of this profile: [start, end] with its owner;
baseEnv moves a range's start where accelerator.<family>.env sets it (ASCEND_BASE_PORT). */ -}}
{{- $settings := include "mooncake-pd.profile.settings" . | fromJson }}
{{- $randoms := list }}
{{- range $r := $data.randomPorts | default list }}
{{- $start := int $r.start }}
{{- if and $r.baseEnv (hasKey ($settings.env | default dict) $r.baseEnv) }}{{ $start = int (get $settings.env $r.baseEnv) }}{{ end }}
{{- $randoms = append $randoms (dict "owner" $r.owner "start" $start "end" (add $start (int $r.size) (mul (int $r.perDevice) (int $profile.devicesPerNode)))) }}
{{- end }}
{{- /* Roles kept on different nodes cannot collide with each other, only with themselves. */ -}}
{{- $separated := include "mooncake-pd.scheduling.rolesSeparated" . }}
{{- range $i, $a := $ports }}
{{- if or (lt (int $a.start) 1) (gt (int $a.end) 65535) }}
{{- $errors = append $errors (printf "%s: ports %d-%d must lie within 1-65535" $a.key (int $a.start) (int $a.end)) }}
{{- end }}
{{- range $r := $randoms }}
{{- if and (le (int $a.start) (int $r.end)) (ge (int $a.end) (int $r.start)) }}
{{- $errors = append $errors (printf "%s: ports %d-%d overlap the range %d-%d where %s picks ports at random on a %d-device node (engine.version %s; \"Address already in use\"); choose ports outside it" $a.key (int $a.start) (int $a.end) (int $r.start) (int $r.end) $r.owner (int $profile.devicesPerNode) $profile.engine.version) }}
{{- end }}
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
