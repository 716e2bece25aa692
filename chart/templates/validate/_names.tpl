{{/*
Rules of names: the ModelServing and role names Kthena's CRD and webhook accept, the
longest name Kthena derives from them, and the names of imagePullSecrets (a list keyed by name:
server-side apply, helm 4's default, refuses a repeated key, "duplicate entries for key").
*/}}
{{- define "mooncake-pd.validate.names" -}}
{{- $errors := list -}}
{{- $fullname := include "mooncake-pd.names.fullname" . -}}
{{- $dns1035 := "^[a-z]([-a-z0-9]*[a-z0-9])?$" -}}
{{- if not (regexMatch $dns1035 $fullname) }}
{{- $errors = append $errors (printf "fullnameOverride / release name: %q must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter); Kthena rejects it" $fullname) }}
{{- end }}
{{- if eq .Values.prefill.name .Values.decode.name }}
{{- $errors = append $errors (printf "decode.name: %q is also prefill.name; Kthena needs unique role names" .Values.decode.name) }}
{{- end }}
{{- range $role := list "prefill" "decode" }}
{{- $v := index $.Values $role }}
{{- if or (not (regexMatch $dns1035 $v.name)) (gt (len $v.name) 12) }}
{{- $errors = append $errors (printf "%s.name: %q must be a DNS-1035 label of at most 12 characters (Kthena role name), e.g. %q" $role $v.name $role) }}
{{- end }}
{{- /* The longest name the chart or Kthena derives from the release: the webhook's
<name>-<groups>-<role>-<roleReplicas>-<workers> check. It is never shorter than the chart's
own names (<name>-scripts, <name>-<g>-<role>-<r>), so it bounds them too. With autoscaling, at
the most replicas the autoscaler may set. */ -}}
{{- $mostReplicas := ternary (max (int $v.replicas) (int (index $.Values.autoscaling $role).maxReplicas)) (int $v.replicas) $.Values.autoscaling.enabled }}
{{- $podName := printf "%s-%d-%s-%d-%d" $fullname (int $.Values.servingGroups) $v.name (int $mostReplicas) (int $v.workerReplicas) }}
{{- if or (gt (len $podName) 63) (not (regexMatch $dns1035 $podName)) }}
{{- $errors = append $errors (printf "fullnameOverride / release name: Kthena's pod name check %q (name-groups-role-replicas-workers) is %d characters, above 63 or not DNS-1035; shorten the release name or %s.name%s" $podName (len $podName) $role (ternary (printf ", or lower autoscaling.%s.maxReplicas (the replicas in the check)" $role) "" $.Values.autoscaling.enabled)) }}
{{- end }}
{{- end }}
{{- $pullSecrets := dict -}}
{{- range $i, $secret := .Values.imagePullSecrets }}
{{- $name := toString (get $secret "name") }}
{{- if not $name }}
{{- $errors = append $errors (printf "imagePullSecrets[%d].name: empty; name the Secret (type kubernetes.io/dockerconfigjson) the kubelet pulls with" $i) }}
{{- else if hasKey $pullSecrets $name }}
{{- $errors = append $errors (printf "imagePullSecrets[%d].name: %q is listed twice; list each Secret once (the API server's server-side apply refuses duplicate entries)" $i $name) }}
{{- end }}
{{- $_ := set $pullSecrets $name true }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
