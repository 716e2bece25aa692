{{/*
Kthena autoscaling: what the AutoscalingPolicy and the rules share.
*/}}

{{/*
The ratio band of autoscaling.ratio as JSON {min, max} (decimal strings for the policy) and
{minValue, maxValue} (floats for the checks in validate-values.yaml): the given minRatio/maxRatio,
or prefill.replicas / decode.replicas -/+ bandPercent percent, in thousandths (floor for the
lower bound, ceil for the upper: the rendered ratio always lies inside the band).
*/}}
{{- define "mooncake-pd.autoscaling.ratio" -}}
{{- $r := .Values.autoscaling.ratio -}}
{{- $p := int .Values.prefill.replicas -}}
{{- $d := max 1 (int .Values.decode.replicas) -}}
{{- $b := int $r.bandPercent -}}
{{- $minMilli := max 1 (div (mul 10 $p (sub 100 $b)) $d) -}}
{{- $maxMilli := div (add (mul 10 $p (add 100 $b)) (sub $d 1)) $d -}}
{{- $min := $r.minRatio | default (printf "%d.%03d" (div $minMilli 1000) (mod $minMilli 1000)) -}}
{{- $max := $r.maxRatio | default (printf "%d.%03d" (div $maxMilli 1000) (mod $maxMilli 1000)) -}}
{{- dict "min" $min "max" $max "minValue" (float64 $min) "maxValue" (float64 $max) | toJson -}}
{{- end }}

{{/* "true" when some autoscaling metric is read from the pods (no query): Kthena's autoscaler
then scrapes the engines' serving port itself. */}}
{{- define "mooncake-pd.autoscaling.podMetrics" -}}
{{- range $role := list "prefill" "decode" -}}
{{- range $m := (index $.Values.autoscaling $role).metrics -}}
{{- if not $m.query }}true{{ end -}}
{{- end -}}
{{- end -}}
{{- end }}
