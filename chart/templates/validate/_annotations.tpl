{{/*
Rules of the pod annotations the API server reads (podAnnotations, which every pod the chart
renders gets, and prefill/decode/proxy.podAnnotations, which win over it on their pods), checked
per pod as kubernetes v1.34.2 pkg/apis/core/validation/validation.go
ValidatePodSpecificAnnotations does, on Pods and on the pod templates of the proxy's
Deployment, the benchmark Job and the canary's CronJob (ValidatePodTemplateSpec), so a refusal
there fails `helm install` halfway, and inside the ModelServing it fails only Kthena's pod
creation:
- ValidateAppArmorPodAnnotations: container.apparmor.security.beta.kubernetes.io/<name> names a
  container (init or regular) of that pod ("container not found"), and its value is
  runtime/default, unconfined, localhost/<profile> or empty (ValidateAppArmorProfileFormat).
- controller.kubernetes.io/pod-deletion-cost is a 32-bit integer, written without '+' or leading
  zeros ("must be a 32bit integer": pkg/apis/core/helper/helpers.go
  GetDeletionCostFromPodAnnotations, strconv.ParseInt(value, 10, 32)); PodDeletionCost is on
  by default (pkg/features/kube_features.go).
Called by mooncake-pd.validate.pods; returns its messages as a JSON list.
*/}}
{{- define "mooncake-pd.validate.pods.annotations" -}}
{{- $errors := list -}}
{{- $apparmor := "container.apparmor.security.beta.kubernetes.io/" -}}
{{- $cost := "controller.kubernetes.io/pod-deletion-cost" -}}
{{- /* The pods the chart renders: what they are called in a message, their own annotations'
values key, and their containers (the engine pods' read back from their rendered templates; the
others' as chart/templates/proxy.yaml, tests/test-chat.yaml, benchmark.yaml and kv-canary.yaml
name them). */ -}}
{{- $pods := list -}}
{{- range $role := list "prefill" "decode" }}
{{- $spec := (include "mooncake-pd.podtemplate.engine" (dict "root" $ "role" $role "worker" false) | fromYaml).spec }}
{{- $names := list }}
{{- range concat ($spec.initContainers | default list) ($spec.containers | default list) }}{{ $names = append $names (toString .name) }}{{ end }}
{{- $pods = append $pods (dict "pod" (printf "%s engine" $role) "own" (printf "%s.podAnnotations" $role) "containers" $names) }}
{{- end -}}
{{- if eq .Values.router.type "proxy" }}
{{- $pods = append $pods (dict "pod" "proxy" "own" "proxy.podAnnotations" "containers" (list "proxy")) }}
{{- end -}}
{{- if and .Values.test.enabled (ne .Values.router.type "none") }}
{{- $pods = append $pods (dict "pod" "helm test" "own" "" "containers" (ternary (list "chat" "kv-canary") (list "chat") (eq (include "mooncake-pd.canary.inTestPod" .) "true"))) }}
{{- end -}}
{{- if .Values.benchmark.enabled }}
{{- $pods = append $pods (dict "pod" "benchmark" "own" "" "containers" (list "bench")) }}
{{- end -}}
{{- if include "mooncake-pd.canary.cronJob" . }}
{{- $pods = append $pods (dict "pod" "KV canary CronJob" "own" "" "containers" (list "kv-canary")) }}
{{- end -}}
{{- /* AppArmor: per annotation (as the values key that set it), the pods that lack its container. */ -}}
{{- $lacking := dict -}}
{{- $found := dict -}}
{{- range $pod := $pods }}
{{- $own := dict }}
{{- if $pod.own }}
{{- $map := $.Values }}
{{- range $part := splitList "." $pod.own }}{{ $map = get $map $part }}{{ end }}
{{- $own = $map | default dict }}
{{- end }}
{{- $merged := merge (deepCopy $own) (deepCopy ($.Values.podAnnotations | default dict)) }}
{{- range $key := keys $merged | sortAlpha }}
{{- if hasPrefix $apparmor $key }}
{{- $where := printf "%s.%s" (ternary $pod.own "podAnnotations" (hasKey $own $key)) $key }}
{{- $container := trimPrefix $apparmor $key }}
{{- if not (has $container $pod.containers) }}
{{- $_ := set $lacking $where (append (get $lacking $where | default list) (printf "%s (its containers: %s)" $pod.pod (join ", " $pod.containers))) }}
{{- end }}
{{- $_ := set $found $where (toString (get $merged $key)) }}
{{- end }}
{{- end }}
{{- end -}}
{{- range $where := keys $lacking | sortAlpha }}
{{- $container := regexReplaceAll "^.*/" $where "" }}
{{- $errors = append $errors (printf "%s: names container %q, which these pods lack: %s; the API server refuses a pod whose AppArmor annotation names a container it does not have; set it in the podAnnotations of the pod whose container it names (prefill, decode or proxy), or use that container's securityContext.appArmorProfile" $where $container (join "; " (get $lacking $where))) }}
{{- end -}}
{{- range $where := keys $found | sortAlpha }}
{{- $profile := get $found $where }}
{{- if not (or (eq $profile "") (eq $profile "runtime/default") (eq $profile "unconfined") (hasPrefix "localhost/" $profile)) }}
{{- $errors = append $errors (printf "%s: %q is not an AppArmor profile, which the API server refuses; use runtime/default, unconfined or localhost/<profile loaded on the node>" $where $profile) }}
{{- end }}
{{- end -}}
{{- /* pod-deletion-cost: in each map that sets it. */ -}}
{{- range $key := list "podAnnotations" "prefill.podAnnotations" "decode.podAnnotations" "proxy.podAnnotations" }}
{{- $map := $.Values }}
{{- range $part := splitList "." $key }}{{ $map = get $map $part }}{{ end }}
{{- $map = $map | default dict }}
{{- if hasKey $map $cost }}
{{- $value := toString (get $map $cost) }}
{{- $ok := regexMatch "^(0|[1-9][0-9]*|-[0-9]+)$" $value }}
{{- if $ok }}
{{- $magnitude := regexReplaceAll "^-0*" $value "" }}
{{- $ok = and (le (len $magnitude) 10) (le (int64 (default "0" $magnitude)) (ternary 2147483648 2147483647 (hasPrefix "-" $value))) }}
{{- end }}
{{- if not $ok }}
{{- $errors = append $errors (printf "%s.%s: %q is not a 32-bit integer, which the API server refuses; use a whole number from -2147483648 to 2147483647, without '+' or leading zeros (pods of lower cost are removed first on scale-down)" $key $cost $value) }}
{{- end }}
{{- end }}
{{- end -}}
{{- toJson $errors -}}
{{- end }}
