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
