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
- ValidateSeccompPodAnnotations, ValidateSeccompProfile: seccomp.security.alpha.kubernetes.io/pod
  and container.seccomp.security.alpha.kubernetes.io/<name> are runtime/default, docker/default,
  unconfined or localhost/<relative path without ..> ("must be a valid seccomp profile").
- A seccomp annotation and the securityContext field it stands for agree
  (validateSeccompAnnotationsAndFields): Unconfined / unconfined, RuntimeDefault /
  runtime/default or docker/default, Localhost / localhost/<its localhostProfile>. The proxy,
  helm-test, benchmark and canary pods set seccompProfile RuntimeDefault by default. (The
  AppArmor counterpart needs appArmorProfile, which the values' Kubernetes 1.27 types lack.)
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
{{- $seccompPod := "seccomp.security.alpha.kubernetes.io/pod" -}}
{{- $seccompContainer := "container.seccomp.security.alpha.kubernetes.io/" -}}
{{- /* The pods the chart renders: what they are called in a message, their own annotations'
values key, their pod securityContext and their containers' by name (the engine pods' read back
from their rendered templates; the others' from the values as chart/templates/proxy.yaml,
tests/test-chat.yaml, benchmark.yaml and kv-canary.yaml write them). */ -}}
{{- $pods := list -}}
{{- range $role := list "prefill" "decode" }}
{{- $spec := (include "mooncake-pd.podtemplate.engine" (dict "root" $ "role" $role "worker" false) | fromYaml).spec }}
{{- $contexts := dict }}
{{- range concat ($spec.initContainers | default list) ($spec.containers | default list) }}{{ $_ := set $contexts (toString .name) (.securityContext | default dict) }}{{ end }}
{{- $pods = append $pods (dict "pod" (printf "%s engine" $role) "own" (printf "%s.podAnnotations" $role) "podContext" ($spec.securityContext | default dict) "contexts" $contexts) }}
{{- end -}}
{{- if eq .Values.router.type "proxy" }}
{{- $pods = append $pods (dict "pod" "proxy" "own" "proxy.podAnnotations" "podContext" .Values.proxy.podSecurityContext "contexts" (dict "proxy" .Values.proxy.securityContext)) }}
{{- end -}}
{{- if and .Values.test.enabled (ne .Values.router.type "none") }}
{{- $contexts := dict "chat" .Values.test.securityContext }}
{{- if include "mooncake-pd.canary.inTestPod" . }}{{ $_ := set $contexts "kv-canary" .Values.test.securityContext }}{{ end }}
{{- $pods = append $pods (dict "pod" "helm test" "own" "" "podContext" .Values.test.podSecurityContext "contexts" $contexts) }}
{{- end -}}
{{- if .Values.benchmark.enabled }}
{{- $pods = append $pods (dict "pod" "benchmark" "own" "" "podContext" .Values.benchmark.podSecurityContext "contexts" (dict "bench" .Values.benchmark.securityContext)) }}
{{- end -}}
{{- if include "mooncake-pd.canary.cronJob" . }}
{{- $pods = append $pods (dict "pod" "KV canary CronJob" "own" "" "podContext" .Values.test.podSecurityContext "contexts" (dict "kv-canary" .Values.test.securityContext)) }}
{{- end -}}
{{- /* Per annotation (as the values key that set it): the pods that lack its (AppArmor)
container, and those whose securityContext sets another (seccomp) profile. */ -}}
{{- $lacking := dict -}}
{{- $conflicts := dict -}}
{{- $found := dict -}}
{{- range $pod := $pods }}
{{- $containers := keys $pod.contexts | sortAlpha }}
{{- $own := dict }}
{{- if $pod.own }}
{{- $map := $.Values }}
{{- range $part := splitList "." $pod.own }}{{ $map = get $map $part }}{{ end }}
{{- $own = $map | default dict }}
{{- end }}
{{- $merged := merge (deepCopy $own) (deepCopy ($.Values.podAnnotations | default dict)) }}
{{- range $key := keys $merged | sortAlpha }}
{{- $where := printf "%s.%s" (ternary $pod.own "podAnnotations" (hasKey $own $key)) $key }}
{{- $value := toString (get $merged $key) }}
{{- /* The seccomp field the annotation must agree with: (kind, profile, where it is set). */ -}}
{{- $field := list }}
{{- if hasPrefix $apparmor $key }}
{{- $container := trimPrefix $apparmor $key }}
{{- $_ := set $found $where (list "apparmor" $value) }}
{{- if not (has $container $containers) }}
{{- $_ := set $lacking $where (append (get $lacking $where | default list) (printf "%s (its containers: %s)" $pod.pod (join ", " $containers))) }}
{{- end }}
{{- else if eq $key $seccompPod }}
{{- $_ := set $found $where (list "seccomp" $value) }}
{{- $field = list "seccomp" ($pod.podContext | default dict).seccompProfile "the pod's seccompProfile" }}
{{- else if hasPrefix $seccompContainer $key }}
{{- $_ := set $found $where (list "seccomp" $value) }}
{{- $field = list "seccomp" ((get $pod.contexts (trimPrefix $seccompContainer $key)) | default dict).seccompProfile "the container's seccompProfile" }}
{{- end }}
{{- if and $field (index $field 1) }}
{{- $profile := index $field 1 }}
{{- $type := toString $profile.type }}
{{- $match := or (and (eq $type "Unconfined") (eq $value "unconfined")) (and (eq $type "RuntimeDefault") (or (eq $value "runtime/default") (eq $value "docker/default"))) (and (eq $type "Localhost") (eq $value (printf "localhost/%s" (toString $profile.localhostProfile)))) }}
{{- if not $match }}
{{- $_ := set $conflicts $where (append (get $conflicts $where | default list) (printf "%s (%s %s)" $pod.pod (index $field 2) $type)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
{{- range $where := keys $lacking | sortAlpha }}
{{- $container := regexReplaceAll "^.*/" $where "" }}
{{- $errors = append $errors (printf "%s: names container %q, which these pods lack: %s; the API server refuses a pod whose AppArmor annotation names a container it does not have; set it in the own podAnnotations of the component whose container it names (prefill.podAnnotations, decode.podAnnotations or proxy.podAnnotations)" $where $container (join "; " (get $lacking $where))) }}
{{- end -}}
{{- range $where := keys $conflicts | sortAlpha }}
{{- $errors = append $errors (printf "%s: %q disagrees with the securityContext of %s, and the API server refuses a pod whose annotation and field differ; drop the annotation (the securityContext field is what the kubelet applies) or set the field to match" $where (index (get $found $where) 1) (join "; " (uniq (get $conflicts $where)))) }}
{{- end -}}
{{- range $where := keys $found | sortAlpha }}
{{- $kind := index (get $found $where) 0 }}
{{- $profile := index (get $found $where) 1 }}
{{- if eq $kind "apparmor" }}
{{- if not (or (eq $profile "") (eq $profile "runtime/default") (eq $profile "unconfined") (hasPrefix "localhost/" $profile)) }}
{{- $errors = append $errors (printf "%s: %q is not an AppArmor profile, which the API server refuses; use runtime/default, unconfined or localhost/<profile loaded on the node>" $where $profile) }}
{{- end }}
{{- else if not (or (eq $profile "runtime/default") (eq $profile "docker/default") (eq $profile "unconfined") (and (hasPrefix "localhost/" $profile) (not (has ".." (splitList "/" (trimPrefix "localhost/" $profile)))) (not (hasPrefix "/" (trimPrefix "localhost/" $profile))))) }}
{{- $errors = append $errors (printf "%s: %q is not a seccomp profile, which the API server refuses; use runtime/default, unconfined or localhost/<relative path of a profile on the node>, or better the securityContext.seccompProfile field" $where $profile) }}
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
