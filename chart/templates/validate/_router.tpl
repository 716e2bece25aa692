{{/*
Rules of the router and gang scheduling: one workloadPort for the Kthena router, and Kthena's
webhook rules for gangPolicy.minRoleReplicas.
*/}}
{{- define "mooncake-pd.validate.router" -}}
{{- $errors := list -}}
{{- if and (eq .Values.router.type "kthena") (ne (int .Values.prefill.port) (int .Values.decode.port)) }}
{{- $errors = append $errors (printf "decode.port: router.type kthena gives the ModelServer one workloadPort for both roles; set decode.port to prefill.port (%d); the chart then keeps prefill and decode on different nodes" (int .Values.prefill.port)) }}
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
