{{/*
Rules of the model and paths: where the model comes from, that the engines find it, and paths
that neither escape with ".." nor shadow the chart's own mounts.
*/}}
{{- define "mooncake-pd.validate.model" -}}
{{- $errors := list -}}
{{- $table := include "mooncake-pd.profile.table" . | fromJson -}}
{{- $storage := .Values.model.storage }}
{{- if and (eq $storage.type "pvc") (not $storage.claimName) }}
{{- $errors = append $errors "model.storage.claimName: model.storage.type pvc needs the name of the claim that holds the model" }}
{{- end }}
{{- if and (eq $storage.type "download") (not .Values.model.download.repo) }}
{{- $errors = append $errors "model.download.repo: model.storage.type download needs the hub repository id, e.g. deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" }}
{{- end }}
{{- if and (eq $storage.type "download") (eq .Values.model.download.hub "huggingface") .Values.model.download.repo }}
{{- with include "mooncake-pd.validate.model.hfRepoIdProblem" (toString .Values.model.download.repo) }}
{{- $errors = append $errors (printf "model.download.repo: %q %s, so the download init container would stop at once (huggingface_hub HFValidationError); give the id as shown on the model's Hugging Face page, e.g. deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" (toString $.Values.model.download.repo) .) }}
{{- end }}
{{- end }}
{{- if not (hasPrefix (printf "%s/" (trimSuffix "/" $storage.mountPath)) .Values.model.path) }}
{{- $errors = append $errors (printf "model.path: %q is not inside model.storage.mountPath %q; the engines would not find the model" .Values.model.path $storage.mountPath) }}
{{- end }}
{{- /* No ".." (a hostPath could escape what the user meant). */ -}}
{{- $pathKeys := dict "model.path" .Values.model.path "model.storage.mountPath" $storage.mountPath "model.storage.hostPath" $storage.hostPath }}
{{- range $key, $path := .Values.hostFiles }}{{ $_ := set $pathKeys (printf "hostFiles.%s" $key) $path }}{{ end }}
{{- range $key, $path := $pathKeys }}
{{- if regexMatch "(^|/)\\.\\.(/|$)" (toString $path) }}
{{- $errors = append $errors (printf "%s: %q contains \"..\"; give the path without it" $key $path) }}
{{- end }}
{{- end }}
{{- /* The model volume must not shadow the chart's own mounts (the kubelet would hide one under
the other): those of every pod, and every profile's host files. */ -}}
{{- $chartMounts := list "/dev/shm" "/workspace" }}
{{- range $family, $row := $table.families }}
{{- range $row.hostMounts }}{{ $chartMounts = append $chartMounts .mountPath }}{{ end }}
{{- end }}
{{- $chartMounts = append $chartMounts "/tmp" }}
{{- $mount := trimSuffix "/" $storage.mountPath }}
{{- range $chartMount := $chartMounts }}
{{- if or (eq $mount "") (eq $mount $chartMount) (hasPrefix (printf "%s/" $mount) $chartMount) (hasPrefix (printf "%s/" $chartMount) $mount) }}
{{- $errors = append $errors (printf "model.storage.mountPath: %q would shadow (or sit inside) the chart's mount %s; mount the model elsewhere, e.g. /models" $storage.mountPath $chartMount) }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}

{{/* Why huggingface_hub refuses a repo id, or nothing (huggingface_hub v0.36.2
src/huggingface_hub/utils/_validators.py validate_repo_id, which hf_hub_download and
snapshot_download run on their repo_id, @validate_hf_hub_args): at most one "/", REPO_ID_REGEX
(word characters, "-", "." with a word character at each end of the namespace and the name, a
name of 1 to 96 characters), no "--" or "..", no ".git" at the end. RE2's \w and \b are ASCII;
the schema keeps both keys ASCII. ModelScope's client checks none of this (modelscope 1.33.0
hub/utils/utils.py model_id_to_group_owner_name only splits at "/"). */}}
{{- define "mooncake-pd.validate.model.hfRepoIdProblem" -}}
{{- if gt (len (splitList "/" .)) 2 -}}
is not in the form name or namespace/name
{{- else if not (regexMatch "^(\\b[\\w\\-.]+\\b/)?\\b[\\w\\-.]{1,96}\\b$" .) -}}
is not a Hugging Face repo id: letters, digits, "-", "_" and "." only, the namespace and the name each starting and ending with a letter, digit or "_", the name at most 96 characters
{{- else if or (contains "--" .) (contains ".." .) -}}
contains "--" or "..", which Hugging Face repo ids cannot
{{- else if hasSuffix ".git" . -}}
ends in ".git", which Hugging Face repo ids cannot
{{- end -}}
{{- end }}
