{{/*
Rules of rollouts and recovery: what Kthena's webhook refuses together, a maxUnavailable
that comes to 0 (Kthena rounds percentages down), so that a rollout never proceeds, and the
role partition a Kthena version lacks (kthena.version).
*/}}
{{- define "mooncake-pd.validate.rollout" -}}
{{- $errors := list -}}
{{- if and (eq .Values.recoveryPolicy "ServingGroupRecreate") (eq .Values.rolloutStrategy.type "RoleRollingUpdate") }}
{{- $errors = append $errors "rolloutStrategy.type: RoleRollingUpdate is rejected by Kthena together with recoveryPolicy ServingGroupRecreate; use ServingGroupRollingUpdate or recoveryPolicy RoleRecreate" }}
{{- end }}
{{- $kthena := include "mooncake-pd.profile.kthena" . | fromJson }}
{{- if not $kthena }}
{{- $known := (include "mooncake-pd.profile.table" . | fromJson).kthena }}
{{- $errors = append $errors (printf "kthena.version: %q is not a Kthena version the chart knows; use one of %s (chart/files/profiles.yaml, table kthena)" (toString .Values.kthena.version) (keys $known | sortAlpha | join ", ")) }}
{{- else if and (eq .Values.rolloutStrategy.type "RoleRollingUpdate") (not $kthena.rolePartition) }}
{{- range $role := list "prefill" "decode" }}
{{- $partition := (index $.Values $role).partition }}
{{- if and $partition (ne (toString $partition) "0") (ne (toString $partition) "0%") }}
{{- $errors = append $errors (printf "%s.partition: Kthena %s's ModelServing role has no partition (it came after v1.0.0), so the API server would drop or refuse it; set it to 0, or kthena.version to a Kthena that has it (main-3cc0572)" $role $.Values.kthena.version) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Percentages: 0-100 (validateIntOrPercent, pkg/model-serving-controller/webhook/validator.go
at v1.0.0 for rollingUpdateConfiguration's maxUnavailable and partition and a role's
maxUnavailable; at main-3cc0572 for a role's partition too): only what is rendered. */ -}}
{{- $percents := dict }}
{{- if eq .Values.rolloutStrategy.type "ServingGroupRollingUpdate" }}
{{- range $field := list "maxUnavailable" "partition" }}
{{- $_ := set $percents (printf "rolloutStrategy.rollingUpdateConfiguration.%s" $field) (index $.Values.rolloutStrategy.rollingUpdateConfiguration $field) }}
{{- end }}
{{- else }}
{{- range $role := list "prefill" "decode" }}
{{- $_ := set $percents (printf "%s.maxUnavailable" $role) (index $.Values $role).maxUnavailable }}
{{- if and $kthena $kthena.rolePartition }}
{{- $_ := set $percents (printf "%s.partition" $role) (index $.Values $role).partition }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key := keys $percents | sortAlpha }}
{{- $value := get $percents $key }}
{{- if and (kindIs "string" $value) (gt (int (trimSuffix "%" $value)) 100) }}
{{- $errors = append $errors (printf "%s: %s is above 100%%, which Kthena's webhook refuses (validateIntOrPercent: must be a valid percent value (0-100)); use at most 100%% or a number" $key $value) }}
{{- end }}
{{- end }}
{{- $rollouts := list }}
{{- if eq .Values.rolloutStrategy.type "ServingGroupRollingUpdate" }}
{{- $rollouts = append $rollouts (dict "key" "rolloutStrategy.rollingUpdateConfiguration.maxUnavailable" "value" .Values.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable "of" (int .Values.servingGroups) "what" "servingGroups") }}
{{- else }}
{{- range $role := list "prefill" "decode" }}
{{- $v := index $.Values $role }}
{{- /* With autoscaling, a rollout may run at the fewest replicas the autoscaler keeps. */ -}}
{{- if $.Values.autoscaling.enabled }}
{{- /* Its replicas are left out (the autoscaler owns them): the CRD defaults them to 1 at
create, which is what the webhook compares a role maxUnavailable with then. */ -}}
{{- $rollouts = append $rollouts (dict "key" (printf "%s.maxUnavailable" $role) "value" $v.maxUnavailable "of" (int (index $.Values.autoscaling $role).minReplicas) "what" (printf "autoscaling.%s.minReplicas" $role) "atCreate" 1 "createWhat" "the replicas the CRD defaults to at create, the autoscaler owning them") }}
{{- else }}
{{- $rollouts = append $rollouts (dict "key" (printf "%s.maxUnavailable" $role) "value" $v.maxUnavailable "of" (int $v.replicas) "what" (printf "%s.replicas" $role) "atCreate" (int $v.replicas) "createWhat" (printf "%s.replicas" $role)) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $r := $rollouts }}
{{- if and (hasKey $r "atCreate") (not (kindIs "string" $r.value)) (gt (int $r.value) (int $r.atCreate)) }}
{{- $errors = append $errors (printf "%s: %d is more than the role's %d replica(s) (%s), which Kthena's webhook refuses (validateMaxUnavailableForRoles at v1.0.0); use at most %d or a percentage" $r.key (int $r.value) (int $r.atCreate) $r.createWhat (int $r.atCreate)) }}
{{- end }}
{{- if kindIs "string" $r.value }}
{{- $percent := int (trimSuffix "%" $r.value) }}
{{- if lt (div (mul $percent (int $r.of)) 100) 1 }}
{{- $errors = append $errors (printf "%s: %s of %s (%d) rounds down to 0 pods, so the rollout could never proceed; use at least 1 or a larger percentage" $r.key $r.value $r.what (int $r.of)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
