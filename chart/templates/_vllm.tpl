{{/*
vLLM's command line: its option lists and metric names (per engine version, profiles.yaml),
flag maps as command-line words, and a role's `vllm serve` flags.
*/}}

{{/* The options of a vLLM command of the profile's engine version, read from its own parser
(files/vllm/SOURCE.md), as JSON: name without "--" (every spelling, --no-x included) -> kind
(bool, value, list). (dict "root" $ "list" "serveOptions") or "benchOptions". */}}
{{- define "mooncake-pd.vllm.options" -}}
{{- $file := get (include "mooncake-pd.profile" .root | fromJson).engine .list -}}
{{- /* Python's json writes float('inf') defaults as Infinity, which is not JSON: only the
names and kinds are read here. */ -}}
{{- $data := .root.Files.Get (printf "files/%s" $file) | replace ": Infinity" ": null" | fromJson -}}
{{- if not $data.flags }}{{ fail (printf "chart/files/%s: cannot read vLLM's option list" $file) }}{{ end -}}
{{- $names := dict -}}
{{- range $flag := $data.flags }}
{{- range $option := $flag.options }}
{{- if hasPrefix "--" $option }}{{ $_ := set $names (trimPrefix "--" $option) $flag.kind }}{{ end }}
{{- end }}
{{- end }}
{{- toJson $names -}}
{{- end }}

{{/* The metric families the profile's engine version exports: name -> type, as JSON
(files/vllm/metrics-<version>.txt, read from real engines). */}}
{{- define "mooncake-pd.vllm.metrics" -}}
{{- $file := (include "mooncake-pd.profile" . | fromJson).engine.metrics -}}
{{- $out := dict -}}
{{- range $line := .Files.Lines (printf "files/%s" $file) -}}
{{- $fields := splitList " " (trim $line) -}}
{{- if and (eq (len $fields) 2) (not (hasPrefix "#" $line)) -}}
{{- $_ := set $out (index $fields 0) (index $fields 1) -}}
{{- end -}}
{{- end -}}
{{- if not $out }}{{ fail (printf "chart/files/%s: cannot read vLLM's metric list" $file) }}{{ end -}}
{{- $out | toJson -}}
{{- end }}

{{/* What vLLM's parser would refuse in one args key (from mooncake-pd.vllm.options), or
nothing: an unknown flag, a value on a flag that takes none, none on one that needs it, false on
a flag without a --no- form. (dict "where" "prefill.args" "key" $k "value" $v "options" $options
"command" "vllm serve" "version" "0.13.0") */}}
{{- define "mooncake-pd.vllm.optionProblem" -}}
{{- $name := replace "_" "-" .key -}}
{{- $kind := get .options $name -}}
{{- $val := .value -}}
{{- if not $kind -}}
{{- printf "%s.%s: not an option of %s in vLLM %s; check its spelling (`mooncake-pd render` suggests the nearest)" .where .key .command .version -}}
{{- else if and (eq $kind "bool") (not (or (kindIs "bool" $val) (kindIs "invalid" $val))) -}}
{{- printf "%s.%s: --%s takes no value; use true or false" .where .key $name -}}
{{- else if and (eq $kind "bool") (kindIs "bool" $val) (not $val) (not (hasKey .options (printf "no-%s" $name))) -}}
{{- printf "%s.%s: vLLM has no --no-%s; remove the key (or null it to drop a shared one)" .where .key $name -}}
{{- else if and (ne $kind "bool") (kindIs "bool" $val) -}}
{{- printf "%s.%s: --%s takes a value, not %v" .where .key $name $val -}}
{{- end -}}
{{- end }}

{{/* Command-line words of a flag map, one list per flag (the flag, then its values): true ->
[--k], false -> [--no-k], map -> [--k, JSON], list -> [--k, v...], null -> nothing. JSON. */}}
{{- define "mooncake-pd.vllm.flagWords" -}}
{{- $words := list -}}
{{- range $k, $val := . }}
{{- if kindIs "bool" $val }}
{{- $words = append $words (list (printf "--%s%s" (ternary "" "no-" $val) $k)) }}
{{- else if kindIs "map" $val }}
{{- $words = append $words (list (printf "--%s" $k) (toJson $val)) }}
{{- else if kindIs "slice" $val }}
{{- $group := list (printf "--%s" $k) }}
{{- range $val }}{{ $group = append $group (include "mooncake-pd.util.scalar" .) }}{{ end }}
{{- $words = append $words $group }}
{{- else if not (kindIs "invalid" $val) }}
{{- $words = append $words (list (printf "--%s" $k) (include "mooncake-pd.util.scalar" $val)) }}
{{- end }}
{{- end }}
{{- toJson $words -}}
{{- end }}

{{/* One command-line line per flag of a map (mooncake-pd.vllm.flagWords), each on its own line
after .indent spaces and ending with " \": the flag as it is (the schema restricts flag names),
its values single-quoted. (dict "flags" $map "indent" 2) */}}
{{- define "mooncake-pd.vllm.argLines" -}}
{{- $pad := repeat (int .indent) " " -}}
{{- range $words := include "mooncake-pd.vllm.flagWords" .flags | fromJsonArray }}
{{ $pad }}{{ first $words }}{{ range rest $words }} {{ include "mooncake-pd.util.shellQuote" . }}{{ end }} \
{{- end }}
{{- end }}

{{/* A role's vllm serve flags: engine.args overlaid by <role>.args, with the recompute
scheduler merged into --additional-config. JSON map. Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.vllm.serveArgs" -}}
{{- $args := include "mooncake-pd.util.overlay" (dict "base" .root.Values.engine.args "over" (index .root.Values .role).args) | fromJson -}}
{{- if include "mooncake-pd.profile.recomputeScheduler" .root }}
{{- $additional := deepCopy (get $args "additional-config" | default dict) }}
{{- $_ := set $additional "recompute_scheduler_enable" true }}
{{- $_ := set $args "additional-config" $additional }}
{{- end }}
{{- toJson $args -}}
{{- end }}
