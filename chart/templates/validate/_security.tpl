{{/*
Rules of container security contexts that the API server states and OpenAPI does not
(k8s.io/kubernetes v1.34.2 pkg/apis/core/validation/validation.go, ValidateSecurityContext):
allowPrivilegeEscalation false (every component's default here) contradicts privileged true
and the capability CAP_SYS_ADMIN. Found by applying fuzzed values to the API server
(tests/test_cluster_admission.py).
*/}}
{{- define "mooncake-pd.validate.security" -}}
{{- $errors := list -}}
{{- /* Each component's container security context, and each sidecar's (engine.extraContainers),
which the API server checks alike. */ -}}
{{- $contexts := list }}
{{- range $component := list "engine" "proxy" "test" "benchmark" }}
{{- $contexts = append $contexts (list (printf "%s.securityContext" $component) ((index $.Values $component).securityContext | default dict)) }}
{{- end }}
{{- range $i, $container := .Values.engine.extraContainers | default list }}
{{- $contexts = append $contexts (list (printf "engine.extraContainers[%d].securityContext" $i) ($container.securityContext | default dict)) }}
{{- end }}
{{- range $pair := $contexts }}
{{- $key := index $pair 0 }}
{{- $context := index $pair 1 }}
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
{{- $errors = concat $errors (include "mooncake-pd.validate.security.networkPolicy" $ | fromJsonArray) }}
{{- $errors = concat $errors (include "mooncake-pd.validate.security.apiKey" $ | fromJsonArray) }}
{{- toJson $errors -}}
{{- end }}

{{/*
The engines' key by reference only (engine.apiKeySecret): as engine.env or <role>.env it would be
a start-script export, written into the scripts ConfigMap; as --api-key in args, in the pod spec
and every process listing of the node.
*/}}
{{- define "mooncake-pd.validate.security.apiKey" -}}
{{- $errors := list -}}
{{- range $where := list "engine" "prefill" "decode" }}
{{- $values := index $.Values $where }}
{{- range $name := list "VLLM_API_KEY" "OPENAI_API_KEY" }}
{{- if hasKey ($values.env | default dict) $name }}
{{- $errors = append $errors (printf "%s.env.%s: a key here is written into the scripts ConfigMap in clear; put it in a Secret and set engine.apiKeySecret.name (and .key)" $where $name) }}
{{- end }}
{{- end }}
{{- if hasKey ($values.args | default dict) "api-key" }}
{{- $errors = append $errors (printf "%s.args.api-key: a key as a flag shows in the pod spec and every process listing; put it in a Secret and set engine.apiKeySecret.name (and .key)" $where) }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}

{{/*
NetworkPolicy ipBlocks (k8s.io/kubernetes v1.34.2 pkg/apis/networking/validation/validation.go,
ValidateIPBlock): each `except` must be a strict subset of its `cidr` (a longer prefix inside
it), or the API server refuses the NetworkPolicy. Whether each is a CIDR at all is the schema's
pattern (values.schema.json, IPBlock); v1.34.2 parses them with netutils.ParseCIDRSloppy, the
StrictIPCIDRValidation gate being off (pkg/features/kube_features.go), so host bits after the
prefix are masked, as here.
*/}}
{{- define "mooncake-pd.validate.security.networkPolicy" -}}
{{- $errors := list -}}
{{- if .Values.networkPolicy.enabled }}
{{- range $list := list "extraIngress" "proxyFrom" "prometheusFrom" }}
{{- range $i, $peer := (index $.Values.networkPolicy $list) | default list }}
{{- with $peer.ipBlock }}
{{- $cidr := include "mooncake-pd.validate.security.cidrBits" (toString .cidr) | fromJson }}
{{- range $j, $except := .except | default list }}
{{- $e := include "mooncake-pd.validate.security.cidrBits" (toString $except) | fromJson }}
{{- $n := int $cidr.len }}
{{- if or (ne $cidr.v6 $e.v6) (ge $n (int $e.len)) (ne (substr 0 $n $cidr.bits) (substr 0 $n $e.bits)) }}
{{- $errors = append $errors (printf "networkPolicy.%s[%d].ipBlock.except[%d]: %q is not a strict subset of the ipBlock's cidr %q, which the API server refuses (ValidateIPBlock: must be a strict subset of `cidr`); give a block inside %s with a longer prefix, widen cidr, or drop the entry" $list $i $j (toString $except) (toString $peer.ipBlock.cidr) (toString $peer.ipBlock.cidr)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}

{{/* The network bits of a CIDR as parsed by Go's net.ParseCIDR (IPv4, IPv6 with "::" and an
IPv4 tail): {"bits": "0101...", "len": prefix length, "v6": bool}. Input is schema-checked. */}}
{{- define "mooncake-pd.validate.security.cidrBits" -}}
{{- $parts := splitList "/" . -}}
{{- $ip := first $parts -}}
{{- $bits := "" -}}
{{- $v6 := contains ":" $ip -}}
{{- if not $v6 -}}
{{- range splitList "." $ip }}{{ $bits = printf "%s%08b" $bits (atoi .) }}{{ end -}}
{{- else -}}
{{- $ip = lower $ip -}}
{{- if contains "." $ip -}}
{{- $segments := splitList ":" $ip -}}
{{- $o := splitList "." (last $segments) -}}
{{- $ip = printf "%s:%02x%02x:%02x%02x" (join ":" (initial $segments)) (atoi (index $o 0)) (atoi (index $o 1)) (atoi (index $o 2)) (atoi (index $o 3)) -}}
{{- end -}}
{{- $groups := list -}}
{{- if contains "::" $ip -}}
{{- $halves := splitList "::" $ip -}}
{{- $left := list -}}{{- if first $halves }}{{ $left = splitList ":" (first $halves) }}{{ end -}}
{{- $right := list -}}{{- if last $halves }}{{ $right = splitList ":" (last $halves) }}{{ end -}}
{{- $groups = $left -}}
{{- range until (int (sub 8 (add (len $left) (len $right)))) }}{{ $groups = append $groups "0" }}{{ end -}}
{{- $groups = concat $groups $right -}}
{{- else -}}
{{- $groups = splitList ":" $ip -}}
{{- end -}}
{{- $nibbles := dict "0" "0000" "1" "0001" "2" "0010" "3" "0011" "4" "0100" "5" "0101" "6" "0110" "7" "0111" "8" "1000" "9" "1001" "a" "1010" "b" "1011" "c" "1100" "d" "1101" "e" "1110" "f" "1111" -}}
{{- range $g := $groups -}}
{{- range $c := splitList "" (printf "%s%s" (repeat (int (sub 4 (len $g))) "0") $g) }}{{ $bits = printf "%s%s" $bits (get $nibbles $c) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- dict "bits" $bits "len" (atoi (last $parts)) "v6" $v6 | toJson -}}
{{- end }}
