{{/*
Rules of autoscaling (Kthena AutoscalingPolicy; kthena@3cc0572, webhook rules in
pkg/autoscaler/webhook/autoscalingpolicy_validator.go): the router that follows new pods,
bounds, metrics the engine version exports, the ratio band and Kthena's duration limits.
*/}}
{{- define "mooncake-pd.validate.autoscaling" -}}
{{- $errors := list -}}
{{- $engine := (include "mooncake-pd.profile" . | fromJson).engine -}}
{{- $auto := .Values.autoscaling }}
{{- if $auto.enabled }}
{{- if ne .Values.router.type "kthena" }}
{{- $errors = append $errors (printf "autoscaling.enabled: needs router.type kthena (now %s): the PD proxy's host list is fixed at render, so replicas the autoscaler adds would never get traffic; the Kthena router finds new pods by their labels. Set router.type kthena (and decode.port to prefill.port) or autoscaling.enabled false" .Values.router.type) }}
{{- end }}
{{- if ne (int .Values.servingGroups) 1 }}
{{- $errors = append $errors (printf "servingGroups: %d with autoscaling.enabled; Kthena sums a role's metric over the pods of every serving group but sets the replicas of each group, so targets would be off by the number of groups; use servingGroups 1 (the autoscaler scales the roles inside it)" (int .Values.servingGroups)) }}
{{- end }}
{{- $metricTypes := include "mooncake-pd.vllm.metrics" . | fromJson }}
{{- $metricFile := include "mooncake-pd.profile.engineFile" (dict "root" $ "file" "metrics.txt") }}
{{- $usesQuery := false }}
{{- range $role := list "prefill" "decode" }}
{{- $r := index $auto $role }}
{{- $key := printf "autoscaling.%s" $role }}
{{- if lt (int $r.minReplicas) 1 }}
{{- $errors = append $errors (printf "%s.minReplicas: 0 is refused: a role at 0 replicas has no pod for a pod metric source to scrape, so Kthena would never scale it up again (only Prometheus sources can, with both ratio roles at 0 together, and the router would have no pod to send to); use at least 1" $key) }}
{{- end }}
{{- if gt (int $r.minReplicas) (int $r.maxReplicas) }}
{{- $errors = append $errors (printf "%s.minReplicas: %d is above %s.maxReplicas (%d); Kthena refuses it; lower minReplicas or raise maxReplicas" $key (int $r.minReplicas) $key (int $r.maxReplicas)) }}
{{- end }}
{{- $names := dict }}
{{- range $i, $m := $r.metrics }}
{{- $where := printf "%s.metrics[%d]" $key $i }}
{{- if hasKey $names $m.name }}
{{- $errors = append $errors (printf "%s.name: %q is listed twice for %s; Kthena refuses duplicate metric names" $where $m.name $role) }}
{{- end }}
{{- $_ := set $names $m.name true }}
{{- if le (float64 (include "mooncake-pd.util.quantity" $m.targetValue)) 0.0 }}
{{- $errors = append $errors (printf "%s.targetValue: %v must be above 0 (it is the value per replica that desired replicas divide by; Kthena refuses 0 and below)" $where $m.targetValue) }}
{{- end }}
{{- if $m.query }}
{{- $usesQuery = true }}
{{- /* One sample: Kthena v1.0.0 pkg/autoscaler/autoscaler/metric_collector.go
fetchPrometheusMetric takes a scalar or a vector of exactly one sample ("prometheus query must
return a single sample vector, got %d") and otherwise logs a warning and skips the metric. */ -}}
{{- with include "mooncake-pd.validate.autoscaling.singleSeries" (dict "text" $m.query "allowed" list) }}
{{- $errors = append $errors (printf "%s.query: can return more than one series (%s), one per pod or DP rank, and Kthena v1.0.0's autoscaler takes only a scalar or a one-sample vector (metric_collector.go fetchPrometheusMetric) and otherwise skips the metric, so %s would never scale on it; aggregate the whole query to one series, e.g. sum(...) or max(...) without by" $where . $role) }}
{{- end }}
{{- /* Range windows against the PodMonitor's scrape interval (validate/_metrics.tpl). */ -}}
{{- $interval := include "mooncake-pd.validate.metrics.durationMs" $.Values.metrics.podMonitor.interval | int64 }}
{{- range $range := regexFindAll "\\[\\s*([0-9]+(ms|s|m|h|d|w|y))+\\s*\\]" $m.query -1 | uniq }}
{{- if lt (include "mooncake-pd.validate.metrics.durationMs" $range | int64) (mul 2 $interval) }}
{{- $errors = append $errors (printf "%s.query: the window %s holds fewer than two scrapes at metrics.podMonitor.interval %s, and rate()/increase() return nothing from a window with fewer than two samples (prometheus v3.5.0 promql/functions.go extrapolatedRate), so Kthena would read no value; make it at least twice the interval (4 times tolerates a missed scrape)" $where $range $.Values.metrics.podMonitor.interval) }}
{{- end }}
{{- end }}
{{- range $used := regexFindAll "vllm:[a-zA-Z0-9_:]+" $m.query -1 | uniq }}
{{- $family := regexReplaceAll "_(bucket|sum|count)$" $used "" }}
{{- if not (or (hasKey $metricTypes $used) (eq (get $metricTypes $family | default "") "histogram")) }}
{{- $errors = append $errors (printf "%s.query: %s is not a metric vLLM %s engines export (chart/%s: %s)" $where $used $engine.vllm $metricFile (keys $metricTypes | sortAlpha | join ", ")) }}
{{- end }}
{{- end }}
{{- else if not (hasKey $metricTypes $m.name) }}
{{- $errors = append $errors (printf "%s.name: %q is not a metric vLLM %s engines export, so Kthena would find nothing to scale on; use one of %s (chart/%s), or a Prometheus query" $where $m.name $engine.vllm (keys $metricTypes | sortAlpha | join ", ") $metricFile) }}
{{- else if eq (get $metricTypes $m.name) "counter" }}
{{- $errors = append $errors (printf "%s.name: %s is a counter: scraped from the pods Kthena would scale on its total since the engine started, which only grows; give a query with its rate, e.g. sum(rate(%s{modelserving=%q,role=%q}[2m])) (needs metrics.podMonitor.enabled and autoscaling.prometheus.url)" $where $m.name $m.name (include "mooncake-pd.names.fullname" $) (index $.Values $role).name) }}
{{- end }}
{{- end }}
{{- /* Kthena's webhook refuses minRoleReplicas above a role's replicas: the role starts at 1
(replicas left out, the CRD's default) and the autoscaler's own patches would be refused below it. */}}
{{- with get ($.Values.gangPolicy.minRoleReplicas | default dict) (index $.Values $role).name }}
{{- if gt (int .) 1 }}
{{- $errors = append $errors (printf "gangPolicy.minRoleReplicas.%s: %d with autoscaling.enabled; the role starts at 1 replica (the chart leaves replicas to the autoscaler, the CRD defaults them to 1) and Kthena refuses minRoleReplicas above a role's replicas; use 1 or leave it out" (index $.Values $role).name (int .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $usesQuery }}
{{- if not (regexMatch "^https?://[^\\s/?#]+(/[^\\s]*)?$" $auto.prometheus.url) }}
{{- $errors = append $errors (printf "autoscaling.prometheus.url: %q is not an http(s) URL; metrics with a query need the Prometheus HTTP API's base URL, e.g. http://prometheus-operated.monitoring.svc:9090" $auto.prometheus.url) }}
{{- end }}
{{- if not .Values.metrics.podMonitor.enabled }}
{{- $errors = append $errors "metrics.podMonitor.enabled: false, but autoscaling metrics with a query read the engines' metrics from Prometheus; set it true so that Prometheus scrapes them (with the labels modelserving, role and serving_group the queries select on)" }}
{{- end }}
{{- end }}
{{- /* Ratio: minRatio <= maxRatio, both > 0 (validator:290-310), and reachable: some prefill
count p and decode count d inside their bounds with minRatio <= p/d <= maxRatio (Kthena's
webhook checks only the corners; a band between two integer ratios can never be met). */}}
{{- $ratio := include "mooncake-pd.autoscaling.ratio" . | fromJson }}
{{- $lo := float64 $ratio.minValue }}
{{- $hi := float64 $ratio.maxValue }}
{{- if le $lo 0.0 }}
{{- $errors = append $errors (printf "autoscaling.ratio.minRatio: %s must be above 0 (prefill replicas / decode replicas with both roles at 1 or more)" $ratio.min) }}
{{- else if gt $lo $hi }}
{{- $errors = append $errors (printf "autoscaling.ratio.minRatio: %s is above autoscaling.ratio.maxRatio (%s); Kthena refuses it; swap them" $ratio.min $ratio.max) }}
{{- else if and (le (int $auto.prefill.minReplicas) (int $auto.prefill.maxReplicas)) (le (int $auto.decode.minReplicas) (int $auto.decode.maxReplicas)) }}
{{- $p := $auto.prefill }}
{{- $d := $auto.decode }}
{{- $reachable := false }}
{{- range $dn := untilStep (int $d.minReplicas) (add (int $d.maxReplicas) 1 | int) 1 }}
{{- $first := max (int $p.minReplicas) (int (floor (mulf $lo $dn))) }}
{{- range $pn := list $first (add $first 1) }}
{{- $q := divf $pn $dn }}
{{- if and (ge $q $lo) (le $q $hi) (le $pn (int $p.maxReplicas)) (ge $pn (int $p.minReplicas)) }}{{ $reachable = true }}{{ end }}
{{- end }}
{{- end }}
{{- if not $reachable }}
{{- $errors = append $errors (printf "autoscaling.ratio: prefill/decode between %s and %s cannot be met with prefill %d-%d and decode %d-%d replicas (autoscaling.prefill and autoscaling.decode min/maxReplicas); widen the band (bandPercent, minRatio, maxRatio) or the bounds" $ratio.min $ratio.max (int $p.minReplicas) (int $p.maxReplicas) (int $d.minReplicas) (int $d.maxReplicas)) }}
{{- end }}
{{- end }}
{{- /* Periods, windows and holds: at most 30 minutes (validator:324-419). */}}
{{- $b := $auto.behavior }}
{{- $durations := dict "autoscaling.behavior.scaleUp.stablePolicy.period" $b.scaleUp.stablePolicy.period "autoscaling.behavior.scaleUp.stablePolicy.stabilizationWindow" $b.scaleUp.stablePolicy.stabilizationWindow "autoscaling.behavior.scaleUp.panicPolicy.period" $b.scaleUp.panicPolicy.period "autoscaling.behavior.scaleUp.panicPolicy.panicModeHold" $b.scaleUp.panicPolicy.panicModeHold "autoscaling.behavior.scaleDown.period" $b.scaleDown.period "autoscaling.behavior.scaleDown.stabilizationWindow" $b.scaleDown.stabilizationWindow }}
{{- range $k, $text := $durations }}
{{- $seconds := mul (int (trimSuffix "m" (trimSuffix "s" $text))) (ternary 60 1 (hasSuffix "m" $text)) }}
{{- if gt $seconds 1800 }}
{{- $errors = append $errors (printf "%s: %s is above 30m, which Kthena's webhook refuses; use at most 30m" $k $text) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}

{{/*
A PromQL expression at its top level: {"skel": the text outside parentheses, each parenthesized
group as "(#N)", label matchers as "{}" and ranges as "[]"; "groups": the groups' texts}. Quotes
are skipped whole.
*/}}
{{- define "mooncake-pd.validate.autoscaling.promqlSkeleton" -}}
{{- $s := dict "skel" "" "group" "" "depth" 0 "close" "" "quote" "" "escape" false -}}
{{- $groups := list -}}
{{- range $c := splitList "" (toString .) -}}
{{- if $s.escape -}}
{{- $_ := set $s "escape" false -}}{{- if gt (int $s.depth) 0 }}{{ $_ := set $s "group" (printf "%s%s" $s.group $c) }}{{ end -}}
{{- else if $s.quote -}}
{{- if eq $c "\\" }}{{ $_ := set $s "escape" true }}{{ else if eq $c $s.quote }}{{ $_ := set $s "quote" "" }}{{ end -}}
{{- if gt (int $s.depth) 0 }}{{ $_ := set $s "group" (printf "%s%s" $s.group $c) }}{{ end -}}
{{- else if $s.close -}}
{{- /* inside {...} or [...] at the top level */ -}}
{{- if has $c (list "\"" "'" "`") }}{{ $_ := set $s "quote" $c }}{{ else if eq $c $s.close }}{{ $_ := set $s "close" "" }}{{ end -}}
{{- else if eq (int $s.depth) 0 -}}
{{- if eq $c "(" }}{{ $_ := set $s "depth" 1 }}{{ $_ := set $s "group" "" -}}
{{- else if eq $c "{" }}{{ $_ := set $s "close" "}" }}{{ $_ := set $s "skel" (printf "%s{}" $s.skel) -}}
{{- else if eq $c "[" }}{{ $_ := set $s "close" "]" }}{{ $_ := set $s "skel" (printf "%s[]" $s.skel) -}}
{{- else if has $c (list "\"" "'" "`") }}{{ $_ := set $s "quote" $c }}{{ $_ := set $s "skel" (printf "%s%s" $s.skel $c) -}}
{{- else }}{{ $_ := set $s "skel" (printf "%s%s" $s.skel $c) }}{{ end -}}
{{- else -}}
{{- if eq $c "(" }}{{ $_ := set $s "depth" (add1 (int $s.depth)) }}{{ else if eq $c ")" }}{{ $_ := set $s "depth" (sub (int $s.depth) 1) }}{{ else if has $c (list "\"" "'" "`") }}{{ $_ := set $s "quote" $c }}{{ end -}}
{{- if gt (int $s.depth) 0 }}{{ $_ := set $s "group" (printf "%s%s" $s.group $c) -}}
{{- else }}{{ $_ := set $s "skel" (printf "%s(#%d)" $s.skel (len $groups)) }}{{ $groups = append $groups $s.group }}{{ end -}}
{{- end -}}
{{- end -}}
{{- dict "skel" $s.skel "groups" $groups | toJson -}}
{{- end }}

{{/*
Why a PromQL expression can return more than one series, or nothing when it returns at most
one: {"text", "allowed": labels an aggregation may keep (histogram_quantile's "le")}. Accepted
operands, joined by any binary operator: numbers; scalar(), vector(), time(), absent(); an
aggregation (sum, avg, min, max, count, group, stddev, stdvar, quantile) without `by` or with
`by` only the allowed labels; histogram_quantile(φ, an aggregation by (le)); math functions of
such an operand; a parenthesized one. Everything else (a selector, rate(), topk(), `without`,
label_replace(), ...) keeps a series per pod or DP rank. Conservative: a query that returns one
series in ways this does not follow is refused too.
*/}}
{{- define "mooncake-pd.validate.autoscaling.singleSeries" -}}
{{- $p := include "mooncake-pd.validate.autoscaling.promqlSkeleton" .text | fromJson -}}
{{- $allowed := .allowed -}}
{{- $skel := regexReplaceAll "\\b(bool|on|ignoring|group_left|group_right)\\s*(\\(#[0-9]+\\))?" $p.skel " " -}}
{{- $skel = regexReplaceAll "\\boffset\\s+-?[0-9a-z]+" $skel " " -}}
{{- $reason := "" -}}
{{- $agg := "^(sum|avg|min|max|count|group|stddev|stdvar|quantile)\\s*(?:(by|without)\\s*\\(#([0-9]+)\\))?\\s*\\(#[0-9]+\\)\\s*(?:(by|without)\\s*\\(#([0-9]+)\\))?$" -}}
{{- range $operand := regexSplit "==|!=|<=|>=|<|>|\\+|-|\\*|/|%|\\^|\\band\\b|\\bor\\b|\\bunless\\b" $skel -1 -}}
{{- $o := trim $operand -}}
{{- if or $reason (not $o) (regexMatch "^([0-9.]+([eE][0-9]*)?|Inf|NaN|inf|nan)$" $o) (regexMatch "^(scalar|vector|time|absent)\\s*\\(#[0-9]+\\)$" $o) -}}
{{- else if regexMatch "^\\(#[0-9]+\\)$" $o -}}
{{- $reason = include "mooncake-pd.validate.autoscaling.singleSeries" (dict "text" (index $p.groups (atoi (regexReplaceAll "[^0-9]" $o ""))) "allowed" $allowed) -}}
{{- else if regexMatch $agg $o -}}
{{- $keyword := printf "%s%s" (regexReplaceAll $agg $o "${2}") (regexReplaceAll $agg $o "${4}") -}}
{{- $group := printf "%s%s" (regexReplaceAll $agg $o "${3}") (regexReplaceAll $agg $o "${5}") -}}
{{- if eq $keyword "without" -}}
{{- $reason = printf "%s ... without (...) keeps every other label" (regexReplaceAll $agg $o "${1}") -}}
{{- else if eq $keyword "by" -}}
{{- range $label := splitList "," (index $p.groups (atoi $group)) -}}
{{- if and (trim $label) (not (has (trim $label) $allowed)) (not $reason) -}}
{{- $reason = printf "%s by (%s) keeps a series per %s" (regexReplaceAll $agg $o "${1}") (trim (index $p.groups (atoi $group))) (trim $label) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- else if regexMatch "^(histogram_quantile|abs|ceil|floor|round|exp|ln|log2|log10|sqrt|sgn|clamp|clamp_min|clamp_max)\\s*\\(#[0-9]+\\)$" $o -}}
{{- $function := regexReplaceAll "\\s*\\(#[0-9]+\\)$" $o "" -}}
{{- $inner := include "mooncake-pd.validate.autoscaling.promqlSkeleton" (index $p.groups (atoi (regexReplaceAll "[^0-9]" $o ""))) | fromJson -}}
{{- $arguments := splitList "," $inner.skel -}}
{{- $argument := ternary (rest $arguments | join ",") (first $arguments) (eq $function "histogram_quantile") -}}
{{- range $i, $g := $inner.groups }}{{ $argument = replace (printf "(#%d)" $i) (printf "(%s)" $g) $argument }}{{ end -}}
{{- $reason = include "mooncake-pd.validate.autoscaling.singleSeries" (dict "text" $argument "allowed" (ternary (list "le") $allowed (eq $function "histogram_quantile"))) -}}
{{- else -}}
{{- $shown := replace "{}" "{...}" (replace "[]" "[...]" $o) -}}
{{- range $i, $g := $p.groups }}{{ $shown = replace (printf "(#%d)" $i) (printf "(%s)" $g) $shown }}{{ end -}}
{{- $reason = printf "%s is not aggregated to one series" $shown -}}
{{- end -}}
{{- end -}}
{{- $reason -}}
{{- end }}
