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
{{- toJson $errors -}}
{{- end }}
