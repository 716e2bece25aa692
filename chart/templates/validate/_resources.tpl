{{/*
Rules of resources (the engines', the sidecars', the proxy's, the canary's, the download's and
the benchmark's): requests at most limits, and a device (an extended resource, domain/name)
or hugepages requested only with an equal limit, as the API server has it (k8s.io/kubernetes
v1.34.2 pkg/apis/core/validation/validation.go ValidateResourceRequirements: these cannot be
overcommitted; found by the fuzz against the local cluster). The API server refuses such a pod,
but inside a ModelServing it would only show as Kthena's failed pod creation.
*/}}
{{- define "mooncake-pd.validate.resources" -}}
{{- $errors := list -}}
{{- /* The engines' as rendered: the profile's CPU and memory where the role gives none. */ -}}
{{- $engines := dict "prefill" (include "mooncake-pd.resources.engine" (dict "root" $ "role" "prefill") | fromJson) "decode" (include "mooncake-pd.resources.engine" (dict "root" $ "role" "decode") | fromJson) }}
{{- $resourceSets := dict "prefill.resources" $engines.prefill "decode.resources" $engines.decode "proxy.resources" .Values.proxy.resources "test.resources" .Values.test.resources "model.download.resources" .Values.model.download.resources "benchmark.resources" .Values.benchmark.resources }}
{{- /* The sidecars' (engine.extraContainers) under the same rules: the API server checks every
container of the engine pods alike. */ -}}
{{- range $i, $container := .Values.engine.extraContainers | default list }}
{{- $_ := set $resourceSets (printf "engine.extraContainers[%d].resources" $i) ($container.resources | default dict) }}
{{- end }}
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
{{- $origin := "" }}
{{- if hasKey $engines (trimSuffix ".resources" $key) }}
{{- $role := trimSuffix ".resources" $key }}
{{- $origin = printf "%s%s" (include "mooncake-pd.resources.origin" (dict "root" $ "role" $role "kind" "requests" "name" $name)) (include "mooncake-pd.resources.origin" (dict "root" $ "role" $role "kind" "limits" "name" $name)) }}
{{- end }}
{{- $errors = append $errors (printf "%s.requests.%s: %v is above its limit %v%s; raise the limit or lower the request" $key $name $request (get $limits $name) $origin) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Hugepages (ValidateResourceRequirements -> validateResourceQuantityHugePageValue, via
helper.IsHugePageResourceValueDivisible): the name's page size a positive whole quantity, and the
amount a whole multiple of it (found by the fuzz against the local cluster: hugepages-0). */ -}}
{{- range $key, $resources := $resourceSets }}
{{- range $kind := list "requests" "limits" }}
{{- range $name, $quantity := get ($resources | default dict) $kind | default dict }}
{{- if hasPrefix "hugepages-" $name }}
{{- $size := trimPrefix "hugepages-" $name }}
{{- $sizeBytes := 0.0 }}
{{- if regexMatch "^\\+?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([KMGTPE]i|[kMGTPE]|[eE][+-]?[0-9]+)?$" $size }}{{ $sizeBytes = float64 (include "mooncake-pd.util.quantity" $size) }}{{ end }}
{{- if or (le $sizeBytes 0.0) (ne $sizeBytes (floor $sizeBytes)) }}
{{- $errors = append $errors (printf "%s.%s.%s: the page size %q is not a positive whole quantity, which the API server refuses; name hugepages by their size, e.g. hugepages-2Mi or hugepages-1Gi" $key $kind $name $size) }}
{{- else if ne (mod (int64 (ceil (float64 (include "mooncake-pd.util.quantity" $quantity)))) (int64 $sizeBytes)) 0 }}
{{- $errors = append $errors (printf "%s.%s.%s: %v is not a whole multiple of the %s page size, which the API server refuses; give a multiple (e.g. %s)" $key $kind $name $quantity $size $size) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
