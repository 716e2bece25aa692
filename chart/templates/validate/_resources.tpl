{{/*
Rules of resources: requests at most limits, and a device (an extended resource, domain/name)
or hugepages requested only with an equal limit, as the API server has it (k8s.io/kubernetes
v1.34.2 pkg/apis/core/validation/validation.go ValidateResourceRequirements: these cannot be
overcommitted; found by the fuzz against the local cluster). The API server refuses such a pod,
but inside a ModelServing it would only show as Kthena's failed pod creation.
*/}}
{{- define "mooncake-pd.validate.resources" -}}
{{- $errors := list -}}
{{- $resourceSets := dict "prefill.resources" .Values.prefill.resources "decode.resources" .Values.decode.resources "proxy.resources" .Values.proxy.resources "test.resources" .Values.test.resources "model.download.resources" .Values.model.download.resources "benchmark.resources" .Values.benchmark.resources }}
{{- range $key, $resources := $resourceSets }}
{{- $limits := ($resources | default dict).limits | default dict }}
{{- range $name, $request := ($resources | default dict).requests | default dict }}
{{- $native := or (not (contains "/" $name)) (hasPrefix "kubernetes.io/" $name) }}
{{- if or (not $native) (hasPrefix "hugepages-" $name) }}
{{- if not (hasKey $limits $name) }}
{{- $errors = append $errors (printf "%s.requests.%s: requested without a limit; a device or hugepages cannot be overcommitted, so set %s.limits.%s to the same %v" $key $name $key $name $request) }}
{{- else if ne (float64 (include "mooncake-pd.util.quantity" $request)) (float64 (include "mooncake-pd.util.quantity" (get $limits $name))) }}
{{- $errors = append $errors (printf "%s.requests.%s: %v differs from its limit %v; a device or hugepages cannot be overcommitted, so request what the limit says" $key $name $request (get $limits $name)) }}
{{- end }}
{{- else if and (hasKey $limits $name) (gt (float64 (include "mooncake-pd.util.quantity" $request)) (float64 (include "mooncake-pd.util.quantity" (get $limits $name)))) }}
{{- $errors = append $errors (printf "%s.requests.%s: %v is above its limit %v; raise the limit or lower the request" $key $name $request (get $limits $name)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
