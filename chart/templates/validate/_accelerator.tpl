{{/*
Rules of the accelerator profile (files/profiles.yaml): the image for this accelerator, device
counts the chart derives, host memory for a KV cache kept there. Each rule group returns its
messages ("key: problem; fix") as a JSON list; validate-values.yaml collects them all.
*/}}
{{- define "mooncake-pd.validate.accelerator" -}}
{{- $errors := list -}}
{{- $table := include "mooncake-pd.profile.table" . | fromJson -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $settings := include "mooncake-pd.profile.settings" . | fromJson -}}
{{- /* The engine image's tag tells some accelerators of a family apart (vLLM-Ascend's A3 images
carry -a3: v0.23.0-a3, v0.23.0-a3-openeuler, v0.23.0.post1-a3; its A2 images none). A tag
carries an accelerator's variant where it holds that accelerator's imageTag.suffix as a
dash-separated part (profiles.yaml accelerators.*.imageTag). Which image a tag is:
- in the family's own repositories (image.repository empty or one the engines table lists for
  an accelerator of the family, quay.io/ascend/vllm-ascend), the vendor's naming holds: a tag
  belongs to the accelerator whose variant it carries, else to the one without a suffix (so
  v0.23.0 there is the A2 image);
- in another repository (a private mirror, a build of your own) its tags are its own: only a tag
  carrying another accelerator's variant is refused; one carrying none is accepted.
`mooncake-pd generate --image repo:tag` sets image.repository, so the vendor's repository must
be checked as the empty one is. */ -}}
{{- $tag := toString .Values.image.tag }}
{{- if and $tag $profile.imageTag }}
{{- $vendor := list }}
{{- range $version, $engine := $table.engines }}
{{- range $name, $image := $engine.images }}
{{- if eq (get $table.accelerators $name | default dict).family $profile.family }}{{ $vendor = append $vendor $image.repository }}{{ end }}
{{- end }}
{{- end }}
{{- $repository := toString .Values.image.repository }}
{{- $ownNaming := or (not $repository) (has $repository $vendor) }}
{{- $owner := "" }}
{{- $plain := "" }}
{{- $suffixes := list }}
{{- range $name, $row := $table.accelerators }}
{{- if and (eq $row.family $profile.family) $row.imageTag }}
{{- if not $row.imageTag.suffix }}{{ $plain = $name }}
{{- else }}
{{- $suffixes = append $suffixes $row.imageTag.suffix }}
{{- if contains (printf "%s-" $row.imageTag.suffix) (printf "-%s-" $tag) }}{{ $owner = $name }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- if $ownNaming }}{{ $owner = default $plain $owner }}{{ end }}
{{- if and $owner (ne $owner $profile.type) }}
{{- $hint := ternary (printf "a tag ending in %s" $profile.imageTag.suffix) (printf "a tag without %s" (join " or " $suffixes)) (ne $profile.imageTag.suffix "") }}
{{- $of := ternary "" (printf " of %s" $repository) (not $repository) }}
{{- $errors = append $errors (printf "image.tag: %q%s is the %s, but accelerator.type is %s; use %s, or leave image.tag empty for the profile's" $tag $of (get $table.accelerators $owner).imageTag.name $profile.type $hint) }}
{{- end }}
{{- end }}
{{- /* The chart requests each role's devices itself (tensor x dataLocal), and one pod cannot
have more than its node. */ -}}
{{- range $role := list "prefill" "decode" }}
{{- $v := index $.Values $role }}
{{- $p := $v.parallelism }}
{{- $devices := int (include "mooncake-pd.parallelism.devicesPerPod" $v) }}
{{- if and $profile.devicesPerNode (gt $devices (int $profile.devicesPerNode)) }}
{{- $errors = append $errors (printf "%s.parallelism: tensor x dataLocal = %d x %d = %d devices per pod, above the %d devices of an %s node; lower tensor or dataLocal" $role (int $p.tensor) (int (include "mooncake-pd.parallelism.dataLocal" $v)) $devices (int $profile.devicesPerNode) $profile.type) }}
{{- end }}
{{- range $kind := list "requests" "limits" }}
{{- if and $profile.resourceName (hasKey (get ($v.resources | default dict) $kind | default dict) $profile.resourceName) }}
{{- $errors = append $errors (printf "%s.resources.%s.%s: the chart derives the device count from %s.parallelism (tensor x dataLocal); remove this key" $role $kind $profile.resourceName $role) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* A profile whose engine keeps its KV cache in host memory (vLLM's CPU build,
VLLM_CPU_KVCACHE_SPACE) allocates it on top of the weights: a limit at or below it is an engine
the kernel kills at start. */ -}}
{{- with $profile.hostKvCacheKey }}
{{- $key := . }}
{{- $gib := get $settings $key }}
{{- $kvBytes := mulf (float64 $gib) 1073741824.0 }}
{{- range $role := list "prefill" "decode" }}
{{- $limit := (include "mooncake-pd.resources.engine" (dict "root" $ "role" $role) | fromJson).limits }}
{{- if and (hasKey $limit "memory") (le (float64 (include "mooncake-pd.util.quantity" $limit.memory)) $kvBytes) }}
{{- $errors = append $errors (printf "%s.resources.limits.memory: %v%s is not above accelerator.%s.%s (%vGi), the KV cache the engine allocates on top of the weights; raise the limit or lower %s" $role $limit.memory (include "mooncake-pd.resources.origin" (dict "root" $ "role" $role "kind" "limits" "name" "memory")) $profile.family $key $gib $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* RDMA between nodes (accelerator.rdma, mooncake-pd.profile.rdma): what cannot work. */ -}}
{{- $rdma := include "mooncake-pd.profile.rdma" . | fromJson }}
{{- if $rdma }}
{{- $context := .Values.engine.securityContext | default dict }}
{{- if $rdma.refusal }}
{{- $errors = append $errors (printf "accelerator.rdma.enabled: true on accelerator.type %s, but %s; set it to false" $profile.type $rdma.refusal) }}
{{- else }}
{{- /* The devices: a device plugin gives the pod /dev/infiniband's uverbs, umad and rdma_cm
(Mellanox/k8s-rdma-shared-dev-plugin v1.5.3 pkg/resources/rdma_device_spec.go); a hostPath
mount only shows the nodes: containerd denies every device to a container (v2.3.4
pkg/oci/spec.go, the default devices cgroup rule) but the ones the kubelet passes from device
plugins (internal/cri/opts/spec_linux_opts.go WithDevices), or all when privileged
(pkg/oci/spec_opts.go WithPrivileged). */ -}}
{{- if and (not $rdma.resource) (not $rdma.mountInfiniband) }}
{{- $errors = append $errors "accelerator.rdma.resource: empty with mountInfiniband false, so nothing gives the engine pods the RDMA devices (/dev/infiniband); set the RDMA device plugin's resource (kubectl describe node, Allocatable: rdma/rdma_shared_device_a, nvidia.com/hostdev), or mountInfiniband true with privileged engines" }}
{{- end }}
{{- if and $rdma.mountInfiniband (ne (toString $context.privileged) "true") }}
{{- $errors = append $errors "accelerator.rdma.mountInfiniband: true without engine.securityContext.privileged true; the container runtime lets a container open only the devices a device plugin gave it (or all when privileged), so the mounted /dev/infiniband cannot be opened. Use the RDMA device plugin (accelerator.rdma.resource, mountInfiniband false), or set engine.securityContext.privileged true (and allowPrivilegeEscalation true)" }}
{{- end }}
{{- if and $rdma.resource (eq $rdma.resource (toString $profile.resourceName)) }}
{{- $errors = append $errors (printf "accelerator.rdma.resource: %s is the accelerator's own device resource; give the RDMA device plugin's (rdma/rdma_shared_device_a, nvidia.com/hostdev)" $rdma.resource) }}
{{- end }}
{{- range $role := list "prefill" "decode" }}
{{- range $kind := list "requests" "limits" }}
{{- if and $rdma.resource (hasKey (get ((index $.Values $role).resources | default dict) $kind | default dict) $rdma.resource) }}
{{- $errors = append $errors (printf "%s.resources.%s.%s: the chart requests it from accelerator.rdma.count with RDMA on; remove this key" $role $kind $rdma.resource) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* IPC_LOCK (mooncake-pd.security.engineContext): containerd applies a container's dropped
capabilities after its added ones (v2.3.4 internal/cri/opts/spec_opts.go WithCapabilities), so
an explicit drop of IPC_LOCK removes it again. */ -}}
{{- range $capability := (($context.capabilities | default dict).drop | default list) }}
{{- if has (upper (toString $capability)) (list "IPC_LOCK" "CAP_IPC_LOCK") }}
{{- $errors = append $errors (printf "engine.securityContext.capabilities.drop: %s with accelerator.rdma on, which adds IPC_LOCK to pin the memory RDMA moves (the drop wins, and registering memory beyond the memlock limit fails); remove it from drop" $capability) }}
{{- end }}
{{- end }}
{{- /* UCX needs a GPU transport to move GPU memory (openucx/ucx v1.20.1 docs/source/faq.md,
"Which transports does UCX use?": applications using GPU memory must also specify GPU
transports); the KV buffer is in GPU memory where kvTransfer.bufferDevice (or the profile's
default, else vLLM's) is cuda. */ -}}
{{- $buffer := toString (default "cuda" (default $profile.kvBufferDevices.default .Values.kvTransfer.bufferDevice)) }}
{{- range $entry := $rdma.env }}
{{- if and (eq $entry.name "UCX_TLS") (not (hasPrefix "^" $entry.value)) (eq $buffer "cuda") }}
{{- $gpu := false }}
{{- range $tl := splitList "," $entry.value }}{{ if has (trim $tl) (list "all" "cuda" "cuda_copy" "cuda_ipc" "gdr_copy") }}{{ $gpu = true }}{{ end }}{{ end }}
{{- if not $gpu }}
{{- $errors = append $errors (printf "%s: %q has no GPU transport, but NIXL moves the KV cache from GPU memory (kvTransfer.bufferDevice); add cuda (e.g. %s,cuda), or leave it empty for UCX's choice" $entry.from $entry.value $entry.value) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* The variables it sets are container env, which the start script's exports override:
engine.env and <role>.env may not name them, and accelerator.rdma.env may not name what the
chart sets otherwise. */ -}}
{{- $sets := dict }}
{{- range $entry := $rdma.env }}{{ $_ := set $sets $entry.name $entry.from }}{{ end }}
{{- range $where, $map := dict "engine.env" .Values.engine.env "prefill.env" .Values.prefill.env "decode.env" .Values.decode.env }}
{{- range $name, $_ := $map | default dict }}
{{- if hasKey $sets $name }}
{{- $errors = append $errors (printf "%s.%s: accelerator.rdma sets %s for the engines (from %s), and this start-script export would silently override it; set it there, or remove it here" $where $name $name (get $sets $name)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $owned := dict }}
{{- range $entry := $profile.rdma.env | default list }}{{ $_ := set $owned $entry.name (ternary (printf "accelerator.rdma.%s" (toString $entry.key)) "accelerator.rdma.enabled (fixed)" (hasKey $entry "key")) }}{{ end }}
{{- range $profile.nic.addressEnv }}{{ $_ := set $owned . "(the pod IP)" }}{{ end }}
{{- range $profile.nic.interfaceEnv }}{{ $_ := set $owned . "network.interface" }}{{ end }}
{{- range include "mooncake-pd.env.engineOwn" . | fromJsonArray }}{{ $_ := set $owned . "(the pod template)" }}{{ end }}
{{- range $name, $_ := .Values.accelerator.rdma.env | default dict }}
{{- if hasKey $owned $name }}
{{- $errors = append $errors (printf "accelerator.rdma.env.%s: the chart sets %s from %s; remove it here%s" $name $name (get $owned $name) (ternary (printf " and set %s" (get $owned $name)) "" (hasPrefix "accelerator.rdma." (get $owned $name)))) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
