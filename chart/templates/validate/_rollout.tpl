{{/*
Rules of rollouts and recovery: what Kthena's webhook refuses together, and a maxUnavailable
that comes to 0 (Kthena rounds percentages down), so that a rollout never proceeds.
*/}}
{{- define "mooncake-pd.validate.rollout" -}}
{{- $errors := list -}}
{{- if and (eq .Values.recoveryPolicy "ServingGroupRecreate") (eq .Values.rolloutStrategy.type "RoleRollingUpdate") }}
{{- $errors = append $errors "rolloutStrategy.type: RoleRollingUpdate is rejected by Kthena together with recoveryPolicy ServingGroupRecreate; use ServingGroupRollingUpdate or recoveryPolicy RoleRecreate" }}
{{- end }}
{{- $rollouts := list }}
{{- if eq .Values.rolloutStrategy.type "ServingGroupRollingUpdate" }}
{{- $rollouts = append $rollouts (dict "key" "rolloutStrategy.rollingUpdateConfiguration.maxUnavailable" "value" .Values.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable "of" (int .Values.servingGroups) "what" "servingGroups") }}
{{- else }}
{{- range $role := list "prefill" "decode" }}
{{- $v := index $.Values $role }}
{{- /* With autoscaling, a rollout may run at the fewest replicas the autoscaler keeps. */ -}}
{{- if $.Values.autoscaling.enabled }}
{{- $rollouts = append $rollouts (dict "key" (printf "%s.maxUnavailable" $role) "value" $v.maxUnavailable "of" (int (index $.Values.autoscaling $role).minReplicas) "what" (printf "autoscaling.%s.minReplicas" $role)) }}
{{- else }}
{{- $rollouts = append $rollouts (dict "key" (printf "%s.maxUnavailable" $role) "value" $v.maxUnavailable "of" (int $v.replicas) "what" (printf "%s.replicas" $role)) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $r := $rollouts }}
{{- if kindIs "string" $r.value }}
{{- $percent := int (trimSuffix "%" $r.value) }}
{{- if lt (div (mul $percent (int $r.of)) 100) 1 }}
{{- $errors = append $errors (printf "%s: %s of %s (%d) rounds down to 0 pods, so the rollout could never proceed; use at least 1 or a larger percentage" $r.key $r.value $r.what (int $r.of)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
