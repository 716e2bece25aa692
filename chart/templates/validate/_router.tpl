{{/*
Rules of the router and gang scheduling: one workloadPort for the Kthena router, Kthena's
webhook rules for gangPolicy.minRoleReplicas, and what the PD proxy's fixed host list survives.

The proxy is given one Service per role replica of each serving group, selecting the entry pod
by its group and role index (services-replicas.yaml). Kthena renumbers what it recreates or
rolls: a serving group comes back as the next ordinal above those left (deepseek-pd-0 -> -2 when
-1 remains), a role replica under RoleRecreate or RoleRollingUpdate as the next role index
(decode-0 -> decode-2 when decode-1 remains); measured with Kthena v1.0.0's controller on the
local cluster (tests/test_cluster_recovery.py). A lone group, or a lone replica, comes back under
its own name. So with the proxy: one serving group, and role replicas above 1 only while whole
groups are recreated and rolled (ServingGroupRecreate and ServingGroupRollingUpdate).
*/}}
{{- define "mooncake-pd.validate.router" -}}
{{- $errors := list -}}
{{- if and (eq .Values.router.type "kthena") (ne (int .Values.prefill.port) (int .Values.decode.port)) }}
{{- $errors = append $errors (printf "decode.port: router.type kthena gives the ModelServer one workloadPort for both roles; set decode.port to prefill.port (%d); the chart then keeps prefill and decode on different nodes" (int .Values.prefill.port)) }}
{{- end }}
{{- if eq .Values.router.type "proxy" }}
{{- $fullname := include "mooncake-pd.names.fullname" . }}
{{- if gt (int .Values.servingGroups) 1 }}
{{- $errors = append $errors (printf "servingGroups: %d with router.type proxy: Kthena recreates or rolls a serving group under a new ordinal (%s-0 comes back as %s-%d), and the proxy's Services for the old one then select no pod; use router.type kthena (it pairs pods by their labels), or one serving group with more role replicas" (int .Values.servingGroups) $fullname $fullname (int .Values.servingGroups)) }}
{{- end }}
{{- $perRole := or (eq .Values.recoveryPolicy "RoleRecreate") (eq .Values.rolloutStrategy.type "RoleRollingUpdate") }}
{{- range $role := list "prefill" "decode" }}
{{- $v := index $.Values $role }}
{{- if and $perRole (gt (int $v.replicas) 1) }}
{{- $errors = append $errors (printf "%s.replicas: %d with router.type proxy and %s: Kthena recreates or rolls a role replica under a new index (%s-0 comes back as %s-%d), and the proxy's Service for the old index then selects no pod; use router.type kthena, or recoveryPolicy ServingGroupRecreate with rolloutStrategy ServingGroupRollingUpdate" $role (int $v.replicas) (ternary "recoveryPolicy RoleRecreate" "rolloutStrategy RoleRollingUpdate" (eq $.Values.recoveryPolicy "RoleRecreate")) $v.name $v.name (int $v.replicas)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $replicasByName := dict .Values.prefill.name (int .Values.prefill.replicas) .Values.decode.name (int .Values.decode.replicas) }}
{{- range $name, $count := .Values.gangPolicy.minRoleReplicas }}
{{- if not (hasKey $replicasByName $name) }}
{{- $errors = append $errors (printf "gangPolicy.minRoleReplicas.%s: no role is named %q; use the role names %s" $name $name (keys $replicasByName | sortAlpha | join " and ")) }}
{{- else if gt (int $count) (int (get $replicasByName $name)) }}
{{- $errors = append $errors (printf "gangPolicy.minRoleReplicas.%s: %d is above the role's replicas (%d); Kthena rejects it" $name (int $count) (int (get $replicasByName $name))) }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
