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
end in -a3): the tag belongs to the accelerator whose suffix it ends in, else to the one
without a suffix. */ -}}
{{- $tag := .Values.image.tag }}
{{- if and (not .Values.image.repository) $tag $profile.imageTag }}
{{- $owner := "" }}
{{- $plain := "" }}
{{- $suffixes := list }}
{{- range $name, $row := $table.accelerators }}
{{- if and (eq $row.family $profile.family) $row.imageTag }}
{{- if not $row.imageTag.suffix }}{{ $plain = $name }}
{{- else }}
{{- $suffixes = append $suffixes $row.imageTag.suffix }}
{{- if hasSuffix $row.imageTag.suffix $tag }}{{ $owner = $name }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- $owner = default $plain $owner }}
{{- if and $owner (ne $owner $profile.type) }}
{{- $hint := ternary (printf "a tag ending in %s" $profile.imageTag.suffix) (printf "a tag without %s" (join " or " $suffixes)) (ne $profile.imageTag.suffix "") }}
{{- $errors = append $errors (printf "image.tag: %q is the %s, but accelerator.type is %s; use %s, or leave image.tag empty for the profile's" $tag (get $table.accelerators $owner).imageTag.name $profile.type $hint) }}
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
{{- toJson $errors -}}
{{- end }}
