{{/*
Rules of the escape hatches (labels, annotations, extra volumes, mounts and containers, spread
constraints, the proxy's PodDisruptionBudget), checked on what the chart renders: the engine
pod templates are rendered here and read back, so that a user's volume, mount, container or
port is compared with the chart's own as they will be in the pod. The API server refuses a pod
with two volumes or containers of one name, a mount of a volume the pod lacks, or a mount path
used twice (k8s.io/kubernetes v1.34.2 pkg/apis/core/validation/validation.go ValidateVolumes,
validateContainers, ValidateVolumeMounts); inside a ModelServing that shows only as Kthena's
failed pod creation. Two containers of a pod cannot bind one port, on the host network above
all (AccumulateUniqueHostPorts). A sidecar's name is a DNS-1123 label (validateContainers ->
ValidateDNS1123Label), and on the host network a port's hostPort, where given, equals its
containerPort (validatePodHostNetworkDeps: "must match `containerPort` when `hostNetwork` is
true"). The extra volumes and mounts have their own rules (validate/_volumes.tpl), and so do
the pod annotations the API server reads (validate/_annotations.tpl).
The proxy's PodDisruptionBudget: the API server admits one that can never allow a disruption,
but then every eviction of a proxy pod is answered 429 "Cannot evict pod as it would violate
the pod's disruption budget" (kubernetes v1.34.2 pkg/registry/core/pod/storage/eviction.go
checkAndDecrement, DisruptionsAllowed 0), and `kubectl drain` retries it forever. The disruption
controller (pkg/controller/disruption/disruption.go getExpectedPodCount, updatePdbStatus) allows
currentHealthy - desiredHealthy disruptions, with desiredHealthy = replicas - maxUnavailable or
minAvailable, percentages of the replicas rounded up: none ever when maxUnavailable is 0 (or
0%), or minAvailable is at least proxy.replicas (or a percentage that rounds up to them).
*/}}
{{- define "mooncake-pd.validate.pods" -}}
{{- $errors := list -}}
{{- $reserved := include "mooncake-pd.labels.reserved" . | fromJsonArray -}}
{{- range $key := list "commonLabels" "podLabels" "prefill.podLabels" "decode.podLabels" "proxy.podLabels" }}
{{- $map := $.Values }}
{{- range $part := splitList "." $key }}{{ $map = get $map $part }}{{ end }}
{{- range $label, $_ := $map | default dict }}
{{- if or (has $label $reserved) (hasPrefix "modelserving.volcano.sh/" $label) }}
{{- $errors = append $errors (printf "%s.%s: a label the chart or Kthena sets (and selects pods by); use another key" $key $label) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key := list "podAnnotations" "prefill.podAnnotations" "decode.podAnnotations" "proxy.podAnnotations" }}
{{- $map := $.Values }}
{{- range $part := splitList "." $key }}{{ $map = get $map $part }}{{ end }}
{{- range $annotation, $_ := $map | default dict }}
{{- if or (hasPrefix "checksum/" $annotation) (hasPrefix "helm.sh/" $annotation) }}
{{- $errors = append $errors (printf "%s.%s: the chart writes checksum/* (to roll pods on a script change) and helm.sh/* annotations itself; use another key" $key $annotation) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* The sidecars' names, and their hostPorts on the host network. */ -}}
{{- $hostNetwork := include "mooncake-pd.security.hostNetwork" . -}}
{{- range $i, $container := .Values.engine.extraContainers | default list }}
{{- $cname := toString $container.name }}
{{- if and $cname (or (gt (len $cname) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $cname))) }}
{{- $errors = append $errors (printf "engine.extraContainers[%d].name: %q is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters), which the API server refuses for a container; rename it, e.g. %q" $i $cname (regexReplaceAll "[^a-z0-9-]+" (lower $cname) "-" | trunc 63 | trimAll "-" | default "sidecar")) }}
{{- end }}
{{- if $hostNetwork }}
{{- range $j, $port := $container.ports | default list }}
{{- if and $port.hostPort (ne (int64 $port.hostPort) (int64 $port.containerPort)) }}
{{- $errors = append $errors (printf "engine.extraContainers[%d].ports[%d].hostPort: %d differs from its containerPort %d, and the engine pods run on the host network (engine.hostNetwork, or the accelerator profile's default), where the API server requires the two equal; leave hostPort out (on the host network the container port is the node's port) or set it to %d" $i $j (int64 $port.hostPort) (int64 $port.containerPort) (int64 $port.containerPort)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
{{- /* Which values key added each volume, mount and container, to name it in a message. */ -}}
{{- $userVolumes := dict -}}
{{- range $i, $volume := .Values.engine.extraVolumes }}{{ $_ := set $userVolumes (toString $volume.name) (printf "engine.extraVolumes[%d].name" $i) }}{{ end -}}
{{- $userMounts := dict -}}
{{- range $i, $mount := .Values.engine.extraVolumeMounts }}{{ $_ := set $userMounts (toString $mount.mountPath) (printf "engine.extraVolumeMounts[%d]" $i) }}{{ end -}}
{{- $userContainers := dict -}}
{{- range $i, $container := .Values.engine.extraContainers }}{{ $_ := set $userContainers (toString $container.name) (printf "engine.extraContainers[%d]" $i) }}{{ end -}}
{{- range $role := list "prefill" "decode" }}
{{- range $worker := list false true }}
{{- if or (not $worker) (gt (int (index $.Values $role).workerReplicas) 0) }}
{{- $pod := include "mooncake-pd.podtemplate.engine" (dict "root" $ "role" $role "worker" $worker) | fromYaml }}
{{- $spec := $pod.spec }}
{{- $volumes := dict }}
{{- range $volume := $spec.volumes }}
{{- $name := toString $volume.name }}
{{- if hasKey $volumes $name }}
{{- $errors = append $errors (printf "%s: %q is already a volume of the engine pods (%s); rename it" (get $userVolumes $name | default "engine.extraVolumes") $name (keys $volumes | sortAlpha | join ", ")) }}
{{- end }}
{{- $_ := set $volumes $name true }}
{{- end }}
{{- $containers := dict }}
{{- $ports := dict }}
{{- $initCount := len ($spec.initContainers | default list) }}
{{- range $index, $container := concat ($spec.initContainers | default list) $spec.containers }}
{{- $cname := toString $container.name }}
{{- if hasKey $containers $cname }}
{{- $errors = append $errors (printf "%s.name: %q is also a container of the engine pods; give the sidecar another name" (get $userContainers $cname | default "engine.extraContainers") $cname) }}
{{- end }}
{{- $_ := set $containers $cname true }}
{{- $paths := dict }}
{{- range $mount := $container.volumeMounts | default list }}
{{- $where := ternary (get $userMounts (toString $mount.mountPath) | default "engine.extraVolumeMounts") (printf "%s (container %s)" (get $userContainers $cname | default "engine.extraContainers") $cname) (eq $cname $role) }}
{{- if not (hasKey $volumes (toString $mount.name)) }}
{{- $errors = append $errors (printf "%s.name: %q is no volume of the engine pods; add it to engine.extraVolumes or mount one of %s" $where (toString $mount.name) (keys $volumes | sortAlpha | join ", ")) }}
{{- end }}
{{- if hasKey $paths (toString $mount.mountPath) }}
{{- $errors = append $errors (printf "%s.mountPath: %q is already a mount of %s; choose another path" $where (toString $mount.mountPath) (ternary "the engine container" (printf "container %s" $cname) (eq $cname $role))) }}
{{- end }}
{{- $_ := set $paths (toString $mount.mountPath) true }}
{{- end }}
{{- if ge $index $initCount }}
{{- range $port := $container.ports | default list }}
{{- $id := printf "%v/%s" $port.containerPort (toString ($port.protocol | default "TCP")) }}
{{- if hasKey $ports $id }}
{{- $errors = append $errors (printf "%s.ports: %s is also bound by container %s of the engine pods; they share one network, so use another port" (get $userContainers $cname | default "engine.extraContainers") $id (get $ports $id)) }}
{{- end }}
{{- $_ := set $ports $id $cname }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Each message once, though the same extra item reaches every engine pod template. */ -}}
{{- $unique := list -}}
{{- range $errors }}{{ if not (has . $unique) }}{{ $unique = append $unique . }}{{ end }}{{ end -}}
{{- $errors = $unique -}}
{{- range $component := list "prefill" "decode" "proxy" }}
{{- $seen := dict }}
{{- range $i, $constraint := (index $.Values $component).topologySpreadConstraints | default list }}
{{- $id := printf "%s/%s" (toString $constraint.topologyKey) (toString $constraint.whenUnsatisfiable) }}
{{- if hasKey $seen $id }}
{{- $errors = append $errors (printf "%s.topologySpreadConstraints[%d]: topologyKey %s with whenUnsatisfiable %s is also constraint [%d], which the API server refuses; merge the two" $component $i (toString $constraint.topologyKey) (toString $constraint.whenUnsatisfiable) (get $seen $id)) }}
{{- end }}
{{- $_ := set $seen $id $i }}
{{- $selectorKeys := keys (($constraint.labelSelector | default dict).matchLabels | default dict) }}
{{- range (($constraint.labelSelector | default dict).matchExpressions | default list) }}{{ $selectorKeys = append $selectorKeys (toString .key) }}{{ end }}
{{- range $labelKey := $constraint.matchLabelKeys | default list }}
{{- if has $labelKey $selectorKeys }}
{{- $errors = append $errors (printf "%s.topologySpreadConstraints[%d].matchLabelKeys: %q is also a key of its labelSelector, which the API server refuses; keep it in one of the two" $component $i $labelKey) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.proxy.podDisruptionBudget }}
{{- $replicas := int $.Values.proxy.replicas }}
{{- if and .enabled (kindIs "invalid" .maxUnavailable) (kindIs "invalid" .minAvailable) }}
{{- $errors = append $errors "proxy.podDisruptionBudget: enabled with neither maxUnavailable nor minAvailable; set one (maxUnavailable 1 keeps drains possible with one proxy)" }}
{{- else if and .enabled (not (kindIs "invalid" .maxUnavailable)) (not (kindIs "invalid" .minAvailable)) }}
{{- $errors = append $errors "proxy.podDisruptionBudget: both maxUnavailable and minAvailable set, which the API server refuses; set the other to null" }}
{{- else if .enabled }}
{{- $drains := "node drains then wait forever (the API server refuses every eviction of a proxy pod with 429)" }}
{{- if not (kindIs "invalid" .maxUnavailable) }}
{{- $max := toString .maxUnavailable }}
{{- if eq (regexReplaceAll "%$" $max "" | atoi) 0 }}
{{- $errors = append $errors (printf "proxy.podDisruptionBudget.maxUnavailable: %s lets no proxy pod be disrupted, which blocks every node drain: %s; set it to 1 or more" $max $drains) }}
{{- end }}
{{- else }}
{{- $min := toString .minAvailable }}
{{- $desired := int (regexReplaceAll "%$" $min "" | atoi) }}
{{- if hasSuffix "%" $min }}
{{- /* Rounded up: ceil(percent * replicas / 100). */ -}}
{{- $desired = div (add (mul $desired $replicas) 99) 100 }}
{{- end }}
{{- if ge (int $desired) $replicas }}
{{- $errors = append $errors (printf "proxy.podDisruptionBudget.minAvailable: %s with proxy.replicas %d blocks every node drain (%d must stay available): %s; lower it below proxy.replicas, raise proxy.replicas, or use maxUnavailable 1 (minAvailable null)" $min $replicas (int $desired) $drains) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .enabled (ne $.Values.router.type "proxy") }}
{{- $errors = append $errors (printf "proxy.podDisruptionBudget.enabled: true with router.type %s, which runs no proxy; turn it off" $.Values.router.type) }}
{{- end }}
{{- end }}
{{- $errors = concat $errors (include "mooncake-pd.validate.pods.volumes" . | fromJsonArray) (include "mooncake-pd.validate.pods.annotations" . | fromJsonArray) }}
{{- toJson $errors -}}
{{- end }}
