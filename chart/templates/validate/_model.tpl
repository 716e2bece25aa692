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
