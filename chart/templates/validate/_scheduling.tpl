{{/*
Rules of tolerations that the API server states and OpenAPI does not (k8s.io/kubernetes v1.34.2
pkg/apis/core/validation/validation.go, ValidateTolerations): an empty key matches every taint
only with operator Exists, Exists takes no value, and tolerationSeconds belongs to effect
NoExecute. Found by applying fuzzed values to the API server (tests/test_cluster_admission.py);
keys, values, operators and effects themselves are typed in values.schema.json.
*/}}
{{- define "mooncake-pd.validate.scheduling" -}}
{{- $errors := list -}}
{{- range $component := list "prefill" "decode" "proxy" "benchmark" "test" }}
{{- range $i, $toleration := (index $.Values $component).tolerations | default list }}
{{- $key := printf "%s.tolerations[%d]" $component $i }}
{{- $operator := toString ($toleration.operator | default "Equal") }}
{{- if and (not $toleration.key) (ne $operator "Exists") }}
{{- $errors = append $errors (printf "%s.operator: %s with no key, which the API server refuses; give the taint's key, or operator Exists to tolerate every taint" $key $operator) }}
{{- end }}
{{- if and (eq $operator "Exists") $toleration.value }}
{{- $errors = append $errors (printf "%s.value: %q with operator Exists, which the API server refuses; drop the value, or use operator Equal" $key (toString $toleration.value)) }}
{{- end }}
{{- if and (hasKey $toleration "tolerationSeconds") (not (kindIs "invalid" $toleration.tolerationSeconds)) (ne (toString $toleration.effect) "NoExecute") }}
{{- $errors = append $errors (printf "%s.tolerationSeconds: set with effect %q, which the API server refuses; tolerationSeconds needs effect NoExecute" $key (toString ($toleration.effect | default ""))) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
