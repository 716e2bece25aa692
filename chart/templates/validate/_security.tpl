{{/*
Rules of container security contexts that the API server states and OpenAPI does not
(k8s.io/kubernetes v1.34.2 pkg/apis/core/validation/validation.go, ValidateSecurityContext):
allowPrivilegeEscalation false (every component's default here) contradicts privileged true
and the capability CAP_SYS_ADMIN. Found by applying fuzzed values to the API server
(tests/test_cluster_admission.py).
*/}}
{{- define "mooncake-pd.validate.security" -}}
{{- $errors := list -}}
{{- range $component := list "engine" "proxy" "test" "benchmark" }}
{{- $context := (index $.Values $component).securityContext | default dict }}
{{- $key := printf "%s.securityContext" $component }}
{{- if eq (toString (get $context "allowPrivilegeEscalation")) "false" }}
{{- if eq (toString (get $context "privileged")) "true" }}
{{- $errors = append $errors (printf "%s: privileged true with allowPrivilegeEscalation false, which the API server refuses; set %s.allowPrivilegeEscalation to true alongside privileged" $key $key) }}
{{- end }}
{{- range $capability := ((get $context "capabilities") | default dict).add | default list }}
{{- if eq (toString $capability) "CAP_SYS_ADMIN" }}
{{- $errors = append $errors (printf "%s.capabilities.add: CAP_SYS_ADMIN with allowPrivilegeEscalation false, which the API server refuses; set %s.allowPrivilegeEscalation to true alongside it" $key $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Sysctls (validateSysctls, ValidateHostSysctl): each name once, and none of the network
namespace on the engines, which run on the host network. */ -}}
{{- range $component := list "engine" "proxy" "test" "benchmark" }}
{{- $seen := dict }}
{{- range $i, $sysctl := ((index $.Values $component).podSecurityContext | default dict).sysctls | default list }}
{{- $key := printf "%s.podSecurityContext.sysctls[%d].name" $component $i }}
{{- $name := toString $sysctl.name }}
{{- if hasKey $seen $name }}
{{- $errors = append $errors (printf "%s: %q is set twice, which the API server refuses; set each sysctl once" $key $name) }}
{{- end }}
{{- $_ := set $seen $name true }}
{{- if and (eq $component "engine") (or (hasPrefix "net." $name) (hasPrefix "net/" $name)) (include "mooncake-pd.security.hostNetwork" $) }}
{{- $errors = append $errors (printf "%s: %q is a network-namespace sysctl, which the API server refuses on the engines' host-network pods (engine.hostNetwork); set it on the nodes instead" $key $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- $hostNetwork := (include "mooncake-pd.profile" $ | fromJson).hostNetwork }}
{{- if and (eq (toString $.Values.engine.hostNetwork) "false") $hostNetwork.required }}
{{- $errors = append $errors (printf "engine.hostNetwork: false on accelerator.type %s, but %s; leave it null (on)" $.Values.accelerator.type $hostNetwork.required) }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
