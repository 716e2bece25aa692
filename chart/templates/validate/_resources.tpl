{{/*
Rules of resources: requests at most limits. The API server refuses such a pod, but inside a
ModelServing it would only show as Kthena's failed pod creation.
*/}}
{{- define "mooncake-pd.validate.resources" -}}
{{- $errors := list -}}
{{- $resourceSets := dict "prefill.resources" .Values.prefill.resources "decode.resources" .Values.decode.resources "proxy.resources" .Values.proxy.resources "test.resources" .Values.test.resources "model.download.resources" .Values.model.download.resources "benchmark.resources" .Values.benchmark.resources }}
{{- range $key, $resources := $resourceSets }}
{{- $limits := ($resources | default dict).limits | default dict }}
{{- range $name, $request := ($resources | default dict).requests | default dict }}
{{- if and (hasKey $limits $name) (gt (float64 (include "mooncake-pd.util.quantity" $request)) (float64 (include "mooncake-pd.util.quantity" (get $limits $name)))) }}
{{- $errors = append $errors (printf "%s.requests.%s: %v is above its limit %v; raise the limit or lower the request" $key $name $request (get $limits $name)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
