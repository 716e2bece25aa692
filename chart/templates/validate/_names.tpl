{{/*
Rules of names: the ModelServing and role names Kthena's CRD and webhook accept, the
longest name Kthena derives from them, and the names of imagePullSecrets (a list keyed by name:
server-side apply, helm 4's default, refuses a repeated key, "duplicate entries for key").
The names of the batch objects, which fail `helm install` halfway: the KV canary's CronJob is
at most 52 characters (kubernetes v1.34.2 pkg/apis/batch/validation/validation.go
ValidateCronJobCreate: the CronJob controller appends an 11-character `-<timestamp>` to name each
Job, whose name is at most 63), and the benchmark Job's name, which the API server copies into
its pod template's batch.kubernetes.io/job-name label (pkg/registry/batch/job/strategy.go
generateSelector), at most 63, a label value's limit (ValidateJob -> ValidatePodTemplateSpec ->
ValidateLabels).
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
{{- if include "mooncake-pd.canary.cronJob" . }}
{{- $cronJob := include "mooncake-pd.names.kvCanary" . }}
{{- if gt (len $cronJob) 52 }}
{{- $errors = append $errors (printf "fullnameOverride / release name: the KV canary's CronJob name %q is %d characters, above the 52 the API server allows a CronJob (its controller adds 11 to name each Job); use a release name or fullnameOverride of at most %d characters, or set test.kvCanary.cronJob.enabled false" $cronJob (len $cronJob) (sub 52 (sub (len $cronJob) (len $fullname)))) }}
{{- end }}
{{- end }}
{{- if .Values.benchmark.enabled }}
{{- /* benchmark.yaml: <fullname>-benchmark-<8 hex digits of its spec's hash>. */ -}}
{{- $job := len (printf "%s-benchmark-12345678" $fullname) }}
{{- if gt $job 63 }}
{{- $errors = append $errors (printf "fullnameOverride / release name: the benchmark Job's name (%s-benchmark-<hash>) is %d characters, above the 63 of the job-name label the API server gives its pods; use a release name or fullnameOverride of at most %d characters, or set benchmark.enabled false" $fullname $job (sub 63 (sub $job (len $fullname)))) }}
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
