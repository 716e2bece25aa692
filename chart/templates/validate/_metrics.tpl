{{/*
Rules of the monitoring objects: the PrometheusRule's alerts select the series by the labels
the PodMonitor's relabelings add (role, modelserving), so they need that PodMonitor; and every
rate()/increase() window must hold two scrapes: Prometheus drops a series whose window holds
fewer than two samples (prometheus v3.5.0 promql/functions.go extrapolatedRate: "We need either
at least two Histograms and no Floats, or at least two Floats and no Histograms to calculate a
rate. Otherwise, drop this Vector element."). A window of w at scrape interval i holds
floor(w/i) or more samples, so it needs w >= 2i; below, the alerts see nothing some or all of
the time.
*/}}
{{- define "mooncake-pd.validate.metrics" -}}
{{- $errors := list -}}
{{- $metrics := .Values.metrics }}
{{- if and $metrics.prometheusRule.enabled (not $metrics.podMonitor.enabled) }}
{{- $errors = append $errors "metrics.prometheusRule.enabled: true without metrics.podMonitor.enabled; the alerts read the engines' series with the labels role and modelserving that the chart's PodMonitor adds: set metrics.podMonitor.enabled true" }}
{{- end }}
{{- if and $metrics.prometheusRule.enabled $metrics.podMonitor.enabled }}
{{- $window := include "mooncake-pd.validate.metrics.durationMs" $metrics.prometheusRule.window | int64 }}
{{- $interval := include "mooncake-pd.validate.metrics.durationMs" $metrics.podMonitor.interval | int64 }}
{{- if lt $window (mul 2 $interval) }}
{{- $errors = append $errors (printf "metrics.prometheusRule.window: %s holds fewer than two scrapes at metrics.podMonitor.interval %s, and rate()/increase() return nothing from a window with fewer than two samples, so the alerts would never or only sometimes fire; set it to at least twice the interval (4 times tolerates a missed scrape), or scrape more often" $metrics.prometheusRule.window $metrics.podMonitor.interval) }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}

{{/* A Prometheus duration (1h30m, 90s, 500ms) in milliseconds; the schema keeps its form. */}}
{{- define "mooncake-pd.validate.metrics.durationMs" -}}
{{- $units := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 -}}
{{- $total := int64 0 -}}
{{- range $part := regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" (toString .) -1 -}}
{{- $unit := regexReplaceAll "^[0-9]+" $part "" -}}
{{- $total = add $total (mul (int64 (regexReplaceAll "[a-z]+$" $part "")) (get $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end }}
