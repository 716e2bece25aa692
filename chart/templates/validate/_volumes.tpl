{{/*
Rules of the engine pods' extra volumes and mounts (engine.extraVolumes, engine.extraVolumeMounts,
engine.extraContainers[].volumeMounts) that the API server checks on the Pod Kthena creates from
the ModelServing's role templates: the ModelServing itself is admitted, so without these the
release installs and its pods are never created. Each rule is kubernetes v1.34.2
pkg/apis/core/validation/validation.go:
- ValidateVolumes: a volume's name is a DNS-1123 label (IsDNS1123Label).
- validateSecretVolumeSource, validateConfigMapVolumeSource, validateKeyToPath,
  validateDownwardAPIVolumeSource (and its files), validateProjectedVolumeSource: every
  defaultMode and items[].mode is between 0 and 0777 (511): "must be a number between 0 and 0777
  (octal), both inclusive". YAML reads 0644 as octal (420); 644 is decimal, 0o1204.
- validateHostPathType: hostPath.type is one of supportedHostPathTypes, exactly (case matters):
  "", DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice, BlockDevice.
- validateMountPropagation (from ValidateVolumeMounts): mountPropagation is Bidirectional,
  HostToContainer or None, and Bidirectional only on a privileged container.
Called by mooncake-pd.validate.pods; returns its messages as a JSON list.
*/}}
{{- define "mooncake-pd.validate.pods.volumes" -}}
{{- $errors := list -}}
{{- $dns1123 := "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" -}}
{{- range $i, $volume := .Values.engine.extraVolumes | default list }}
{{- $name := toString $volume.name }}
{{- if and $name (or (gt (len $name) 63) (not (regexMatch $dns1123 $name))) }}
{{- $suggestion := regexReplaceAll "[^a-z0-9-]+" (lower $name) "-" | trunc 63 | trimAll "-" | default "cache" }}
{{- $errors = append $errors (printf "engine.extraVolumes[%d].name: %q is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters), which the API server refuses for a volume of the pods Kthena creates; rename it (and its mounts), e.g. %q" $i $name $suggestion) }}
{{- end }}
{{- /* Every mode of the volume: (where, value). */}}
{{- $modes := list }}
{{- range $source := list "secret" "configMap" "downwardAPI" "projected" }}
{{- with get $volume $source }}
{{- if not (kindIs "invalid" .defaultMode) }}{{ $modes = append $modes (list (printf "%s.defaultMode" $source) .defaultMode) }}{{ end }}
{{- range $j, $item := .items | default list }}
{{- if not (kindIs "invalid" $item.mode) }}{{ $modes = append $modes (list (printf "%s.items[%d].mode" $source $j) $item.mode) }}{{ end }}
{{- end }}
{{- range $k, $projection := .sources | default list }}
{{- range $inner := list "secret" "configMap" "downwardAPI" }}
{{- range $j, $item := (get $projection $inner | default dict).items | default list }}
{{- if not (kindIs "invalid" $item.mode) }}{{ $modes = append $modes (list (printf "%s.sources[%d].%s.items[%d].mode" $source $k $inner $j) $item.mode) }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $mode := $modes }}
{{- $value := int64 (index $mode 1) }}
{{- if or (lt $value 0) (gt $value 511) }}
{{- $digits := toString $value }}
{{- $fix := "write the mode in octal with its leading 0 (e.g. 0644) or in decimal (420)" }}
{{- if regexMatch "^[0-7]{1,3}$" $digits }}
{{- $octal := 0 }}
{{- range $digit := splitList "" $digits }}{{ $octal = add (mul $octal 8) (int $digit) }}{{ end }}
{{- $fix = printf "YAML reads %d as decimal: for the octal mode write 0%s (with its leading 0), or %d in decimal" $value $digits $octal }}
{{- end }}
{{- $errors = append $errors (printf "engine.extraVolumes[%d].%s: %d is outside 0..0777 (0..511 decimal), which the API server refuses; %s" $i (index $mode 0) $value $fix) }}
{{- end }}
{{- end }}
{{- with $volume.hostPath }}
{{- $types := list "" "DirectoryOrCreate" "Directory" "FileOrCreate" "File" "Socket" "CharDevice" "BlockDevice" }}
{{- if and (not (kindIs "invalid" .type)) (not (has (toString .type) $types)) }}
{{- $meant := "" }}
{{- range $types }}{{ if and . (eq (lower .) (lower (toString $volume.hostPath.type))) }}{{ $meant = printf "write %s (case matters); the types are" . }}{{ end }}{{ end }}
{{- $errors = append $errors (printf "engine.extraVolumes[%d].hostPath.type: %q is not a HostPathType, which the API server refuses; %s DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice and BlockDevice, or leave it out (no check of the path)" $i (toString .type) ($meant | default "use one of")) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Mount propagation, per container: the engine container's extra mounts and each sidecar's. */ -}}
{{- $mountSets := list (list "engine.extraVolumeMounts" (.Values.engine.extraVolumeMounts | default list) (.Values.engine.securityContext | default dict) "engine.securityContext.privileged") -}}
{{- range $i, $container := .Values.engine.extraContainers | default list }}
{{- $mountSets = append $mountSets (list (printf "engine.extraContainers[%d].volumeMounts" $i) ($container.volumeMounts | default list) ($container.securityContext | default dict) (printf "engine.extraContainers[%d].securityContext.privileged" $i)) }}
{{- end -}}
{{- range $set := $mountSets }}
{{- range $j, $mount := index $set 1 }}
{{- $propagation := $mount.mountPropagation }}
{{- if not (kindIs "invalid" $propagation) }}
{{- if not (has (toString $propagation) (list "Bidirectional" "HostToContainer" "None")) }}
{{- $errors = append $errors (printf "%s[%d].mountPropagation: %q is not a mount propagation mode, which the API server refuses; use None, HostToContainer or Bidirectional (exact case), or leave it out" (index $set 0) $j (toString $propagation)) }}
{{- else if and (eq (toString $propagation) "Bidirectional") (not (index $set 2).privileged) }}
{{- $errors = append $errors (printf "%s[%d].mountPropagation: Bidirectional on a container that is not privileged, which the API server refuses; use HostToContainer (the container sees the host's later mounts), or set %s: true" (index $set 0) $j (index $set 3)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
{{- toJson $errors -}}
{{- end }}
