{{/*
What the engine pods ask of the node, and the Pod Security Standard level that admits them
(https://kubernetes.io/docs/concepts/security/pod-security-standards/).
*/}}

{{/* "true" when the engine pods run on the node's network: engine.hostNetwork, or (null) the
profile's default (profiles.yaml families.<family>.hostNetwork). */}}
{{- define "mooncake-pd.security.hostNetwork" -}}
{{- $setting := .Values.engine.hostNetwork -}}
{{- if kindIs "invalid" $setting -}}
{{- if (include "mooncake-pd.profile" . | fromJson).hostNetwork.default }}true{{ end -}}
{{- else if $setting }}true{{ end -}}
{{- end }}

{{/* Why the engine pods need the Pod Security level `privileged`, as a JSON list ([] when
`baseline` admits them): the baseline policy forbids host namespaces, hostPath volumes,
privileged containers and added capabilities beyond its list. The proxy, helm-test and benchmark
pods meet `restricted` with the chart's defaults. */}}
{{- define "mooncake-pd.security.privilegedBecause" -}}
{{- $v := .Values -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $reasons := list -}}
{{- if include "mooncake-pd.security.hostNetwork" . }}{{ $reasons = append $reasons "host network (engine.hostNetwork)" }}{{ end -}}
{{- if $profile.hostMounts }}{{ $reasons = append $reasons (printf "hostPath mounts of %s's host files (hostFiles)" $profile.type) }}{{ end -}}
{{- if eq $v.model.storage.type "hostPath" }}{{ $reasons = append $reasons "a hostPath model (model.storage.type)" }}{{ end -}}
{{- range $v.engine.extraVolumes | default list }}{{ if hasKey . "hostPath" }}{{ $reasons = append $reasons (printf "the hostPath volume %s (engine.extraVolumes)" .name) }}{{ end }}{{ end -}}
{{- if (($v.engine.securityContext | default dict).privileged) }}{{ $reasons = append $reasons "privileged containers (engine.securityContext)" }}{{ end -}}
{{- $rdma := include "mooncake-pd.profile.rdma" . | fromJson -}}
{{- if $rdma.mountInfiniband }}{{ $reasons = append $reasons "the hostPath /dev/infiniband (accelerator.rdma.mountInfiniband)" }}{{ end -}}
{{- if $rdma }}{{ $reasons = append $reasons "the capability IPC_LOCK (accelerator.rdma)" }}{{ end -}}
{{- $baselineCaps := list "AUDIT_WRITE" "CHOWN" "DAC_OVERRIDE" "FOWNER" "FSETID" "KILL" "MKNOD" "NET_BIND_SERVICE" "SETFCAP" "SETGID" "SETPCAP" "SETUID" "SYS_CHROOT" -}}
{{- range ((($v.engine.securityContext | default dict).capabilities | default dict).add | default list) }}{{ if not (has (toString .) $baselineCaps) }}{{ $reasons = append $reasons (printf "the capability %s (engine.securityContext)" .) }}{{ end }}{{ end -}}
{{- $safeSysctls := list "kernel.shm_rmid_forced" "net.ipv4.ip_local_port_range" "net.ipv4.ip_unprivileged_port_start" "net.ipv4.tcp_syncookies" "net.ipv4.ping_group_range" "net.ipv4.ip_local_reserved_ports" "net.ipv4.tcp_keepalive_time" "net.ipv4.tcp_fin_timeout" "net.ipv4.tcp_keepalive_intvl" "net.ipv4.tcp_keepalive_probes" -}}
{{- range (($v.engine.podSecurityContext | default dict).sysctls | default list) }}{{ if not (has (toString .name) $safeSysctls) }}{{ $reasons = append $reasons (printf "the sysctl %s (engine.podSecurityContext)" .name) }}{{ end }}{{ end -}}
{{- range $context := list ($v.engine.podSecurityContext | default dict) ($v.engine.securityContext | default dict) -}}
{{- if eq (toString ($context.seccompProfile | default dict).type) "Unconfined" }}{{ $reasons = append $reasons "seccomp Unconfined (engine security contexts)" }}{{ end -}}
{{- end -}}
{{- toJson (uniq $reasons) -}}
{{- end }}

{{/* The Pod Security level the release's namespace must allow: privileged or baseline. */}}
{{- define "mooncake-pd.security.level" -}}
{{- if include "mooncake-pd.security.privilegedBecause" . | fromJsonArray }}privileged{{ else }}baseline{{ end -}}
{{- end }}

{{/* The engine container's securityContext, as JSON: engine.securityContext, with IPC_LOCK added
to capabilities.add where accelerator.rdma is on. RDMA registers (pins) the memory it moves, and
that pinned memory counts against RLIMIT_MEMLOCK unless the process holds CAP_IPC_LOCK (Linux
mlock(2), getrlimit(2)); the RDMA device plugins' own test pods add it
(Mellanox/k8s-rdma-shared-dev-plugin v1.5.3 example/test-hca-pod.yaml; Mellanox/network-operator
v26.4.1 example/sriov-network/sriov-network-pod1.yaml). The capability is outside Pod Security
baseline's list (privilegedBecause says so). An explicit drop of IPC_LOCK would win over the add
(containerd v2.3.4 internal/cri/opts/spec_opts.go WithCapabilities: drops after adds):
validate.accelerator refuses it. */}}
{{- define "mooncake-pd.security.engineContext" -}}
{{- $context := deepCopy (.Values.engine.securityContext | default dict) -}}
{{- if include "mooncake-pd.profile.rdma" . | fromJson -}}
{{- $capabilities := get $context "capabilities" | default dict -}}
{{- $add := get $capabilities "add" | default list -}}
{{- if not (has "IPC_LOCK" $add) }}{{ $add = append $add "IPC_LOCK" }}{{ end -}}
{{- $_ := set $capabilities "add" $add -}}
{{- $_ := set $context "capabilities" $capabilities -}}
{{- end -}}
{{- toJson $context -}}
{{- end }}
