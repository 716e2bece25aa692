{{/*
Generic helpers: quoting, scalars, maps and quantities. None reads .Values.
*/}}

{{/* Single-quote a string for bash so that it arrives literally ('\'' for each quote). */}}
{{- define "mooncake-pd.util.shellQuote" -}}
{{- printf "'%s'" (replace "'" "'\\''" (toString .)) -}}
{{- end }}

{{/* A scalar as text: strings as they are, numbers and booleans as JSON (no 1e+06). */}}
{{- define "mooncake-pd.util.scalar" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end }}

{{/* Shared settings overlaid by a role's: the role's keys win, null included. JSON map.
(dict "base" $map "over" $map) */}}
{{- define "mooncake-pd.util.overlay" -}}
{{- $out := dict -}}
{{- range $k, $v := (.base | default dict) }}{{ $_ := set $out $k $v }}{{ end -}}
{{- range $k, $v := (.over | default dict) }}{{ $_ := set $out $k $v }}{{ end -}}
{{- toJson $out -}}
{{- end }}

{{/* An image reference: repository:tag, with @digest when a digest is given.
(dict "repository" $r "tag" $t "digest" $d) */}}
{{- define "mooncake-pd.util.image" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- with .digest }}@{{ . }}{{ end -}}
{{- end }}

{{/* A Kubernetes quantity ("350Gi", "500m", "1e3", 8) as a plain number (float, as text), for
comparing requests with limits. The schema has checked the grammar. */}}
{{- define "mooncake-pd.util.quantity" -}}
{{- $text := toString . -}}
{{- $number := regexFind "^[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" $text -}}
{{- $suffix := trimPrefix $number $text -}}
{{- $factors := dict "" 1.0 "n" 0.000000001 "u" 0.000001 "m" 0.001 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "P" 1000000000000000.0 "E" 1000000000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- $value := float64 (default "0" $number) -}}
{{- if hasKey $factors $suffix -}}
{{- $value = mulf $value (get $factors $suffix) -}}
{{- else if regexMatch "^[eE][+-]?[0-9]+$" $suffix -}}
{{- $exponent := int (substr 1 (len $suffix) $suffix) -}}
{{- range until (int (max $exponent (sub 0 $exponent))) }}{{ $value = ternary (mulf $value 10.0) (divf $value 10.0) (ge $exponent 0) }}{{ end -}}
{{- end -}}
{{- $value -}}
{{- end }}
