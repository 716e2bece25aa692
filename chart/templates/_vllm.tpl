{{/*
vLLM's command line: its option lists, KVTransferConfig and metric names (per engine version,
files/engines/<version>/),
flag maps as command-line words, and a role's `vllm serve` flags.
*/}}

{{/* The options of a vLLM command of the release's engine version, read from its own parser
(files/engines/<version>/SOURCE.md), as JSON: name without "--" (every spelling, --no-x
included) -> kind (bool, value, list). (dict "root" $ "list" "serve-flags.json") or
"bench-serve-flags.json". Read once per render and kept on the root context, as the negatives
are: the file is 12-50 KB of JSON, and a read of it costs about twice the rest of a start script. */}}
{{- define "mooncake-pd.vllm.options" -}}
{{- $file := include "mooncake-pd.profile.engineFile" (dict "root" .root "file" .list) -}}
{{- $key := printf "mooncakePdVllmOptions-%s" $file -}}
{{- if not (hasKey .root $key) -}}
{{- $_ := set .root $key (include "mooncake-pd.vllm.optionsRead" (dict "root" .root "file" $file)) -}}
{{- end -}}
{{- get .root $key -}}
{{- end }}

{{- define "mooncake-pd.vllm.optionsRead" -}}
{{- $file := .file -}}
{{- $data := .root.Files.Get $file | fromJson -}}
{{- if not $data.flags }}{{ fail (printf "chart/%s: cannot read vLLM's option list" $file) }}{{ end -}}
{{- $names := dict -}}
{{- range $flag := $data.flags }}
{{- range $option := $flag.options }}
{{- if hasPrefix "--" $option }}{{ $_ := set $names (trimPrefix "--" $option) $flag.kind }}{{ end }}
{{- end }}
{{- end }}
{{- toJson $names -}}
{{- end }}

{{/* How vLLM's parser spells "off" for each two-way flag of a command of the release's engine
version: name -> the other long spelling, without "--" (enable-prefix-caching ->
no-enable-prefix-caching in 0.13, disable-prefix-caching in 0.33). JSON. (dict "root" $ "list"
"serve-flags.json"). Read once per render and kept on the root context: every start script
and the option rules need it. */}}
{{- define "mooncake-pd.vllm.negatives" -}}
{{- $file := include "mooncake-pd.profile.engineFile" (dict "root" .root "file" .list) -}}
{{- $key := printf "mooncakePdVllmNegatives-%s" $file -}}
{{- if not (hasKey .root $key) -}}
{{- $_ := set .root $key (include "mooncake-pd.vllm.negativesRead" (dict "root" .root "file" $file)) -}}
{{- end -}}
{{- get .root $key -}}
{{- end }}

{{- define "mooncake-pd.vllm.negativesRead" -}}
{{- $file := .file -}}
{{- $negatives := dict -}}
{{- range $flag := (.root.Files.Get $file | fromJson).flags }}
{{- $longs := list }}
{{- range $option := $flag.options }}{{ if hasPrefix "--" $option }}{{ $longs = append $longs (trimPrefix "--" $option) }}{{ end }}{{ end }}
{{- if and (eq $flag.kind "bool") (eq (len $longs) 2) }}
{{- $_ := set $negatives (index $longs 0) (index $longs 1) }}
{{- $_ := set $negatives (index $longs 1) (index $longs 0) }}
{{- end }}
{{- end }}
{{- toJson $negatives -}}
{{- end }}

{{/* The metric families the release's engine version registers that the chart reads: name ->
type, as JSON (files/engines/<version>/metrics.txt). */}}
{{- define "mooncake-pd.vllm.metrics" -}}
{{- $file := include "mooncake-pd.profile.engineFile" (dict "root" . "file" "metrics.txt") -}}
{{- $out := dict -}}
{{- range $line := .Files.Lines $file -}}
{{- $fields := splitList " " (trim $line) -}}
{{- if and (eq (len $fields) 2) (not (hasPrefix "#" $line)) -}}
{{- $_ := set $out (index $fields 0) (index $fields 1) -}}
{{- end -}}
{{- end -}}
{{- if not $out }}{{ fail (printf "chart/%s: cannot read vLLM's metric list" $file) }}{{ end -}}
{{- $out | toJson -}}
{{- end }}

{{/* KVTransferConfig of the release's engine version (files/engines/<version>/
kv-transfer-config.json): {fields: name -> {default}, extra: forbid|ignore|allow}. */}}
{{- define "mooncake-pd.vllm.kvTransferConfig" -}}
{{- $file := include "mooncake-pd.profile.engineFile" (dict "root" . "file" "kv-transfer-config.json") -}}
{{- $data := .Files.Get $file | fromJson -}}
{{- if not $data.fields }}{{ fail (printf "chart/%s: cannot read KVTransferConfig's fields" $file) }}{{ end -}}
{{- toJson $data -}}
{{- end }}

{{/* What vLLM's parser would refuse in one args key (from mooncake-pd.vllm.options), or
nothing: an unknown flag, a value on a flag that takes none, none on one that needs it, false on
a flag without an "off" spelling. (dict "where" "prefill.args" "key" $k "value" $v "options"
$options "negatives" $negatives "command" "vllm serve" "version" "0.13.0") */}}
{{- define "mooncake-pd.vllm.optionProblem" -}}
{{- $name := replace "_" "-" .key -}}
{{- $kind := get .options $name -}}
{{- $val := .value -}}
{{- if not $kind -}}
{{- printf "%s.%s: not an option of %s in vLLM %s; check its spelling (`mooncake-pd render` suggests the nearest)" .where .key .command .version -}}
{{- else if and (eq $kind "bool") (not (or (kindIs "bool" $val) (kindIs "invalid" $val))) -}}
{{- printf "%s.%s: --%s takes no value; use true or false" .where .key $name -}}
{{- else if and (eq $kind "bool") (kindIs "bool" $val) (not $val) (not (hasKey .negatives $name)) -}}
{{- printf "%s.%s: vLLM %s has no way to turn --%s off; remove the key (or null it to drop a shared one)" .where .key .version $name -}}
{{- else if and (ne $kind "bool") (kindIs "bool" $val) -}}
{{- printf "%s.%s: --%s takes a value, not %v" .where .key $name $val -}}
{{- end -}}
{{- end }}

{{/* Command-line words of a flag map, one list per flag (the flag, then its values): true ->
[--k], false -> vLLM's "off" spelling of k (.negatives, mooncake-pd.vllm.negatives; --no-k
where it lists none), map -> [--k, JSON], list -> [--k, v...], null -> nothing. JSON.
(dict "flags" $map "negatives" $negatives) */}}
{{- define "mooncake-pd.vllm.flagWords" -}}
{{- $words := list -}}
{{- $negatives := .negatives | default dict -}}
{{- range $k, $val := .flags }}
{{- if kindIs "bool" $val }}
{{- $words = append $words (list (printf "--%s" (ternary $k (get $negatives $k | default (printf "no-%s" $k)) $val))) }}
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
its values single-quoted. (dict "flags" $map "negatives" $negatives "indent" 2) */}}
{{- define "mooncake-pd.vllm.argLines" -}}
{{- $pad := repeat (int .indent) " " -}}
{{- range $words := include "mooncake-pd.vllm.flagWords" (dict "flags" .flags "negatives" .negatives) | fromJsonArray }}
{{ $pad }}{{ first $words }}{{ range rest $words }} {{ include "mooncake-pd.util.shellQuote" . }}{{ end }} \
{{- end }}
{{- end }}

{{/* A role's vllm serve flags: its guide flags where the release accepts them under engine.args
overlaid by <role>.args (mooncake-pd.vllm.guideArgs), with the recompute scheduler merged into
--additional-config on the roles the engine version applies it to (profiles.yaml
recomputeSchedulerRoles: both at v0.13.0, decode alone from v0.23.0). JSON map.
Context: (dict "root" $ "role" "prefill"). */}}
{{- define "mooncake-pd.vllm.serveArgs" -}}
{{- $args := (include "mooncake-pd.vllm.guideArgs" . | fromJson).args -}}
{{- $roles := (include "mooncake-pd.profile" .root | fromJson).engine.recomputeSchedulerRoles -}}
{{- if and (include "mooncake-pd.profile.recomputeScheduler" .root) (has .role $roles) }}
{{- $additional := deepCopy (get $args "additional-config" | default dict) }}
{{- $_ := set $additional "recompute_scheduler_enable" true }}
{{- $_ := set $args "additional-config" $additional }}
{{- end }}
{{- toJson $args -}}
{{- end }}

{{/* A role's flags before the recompute scheduler, as JSON {args, dropped}. <role>.guideArgs
holds the vendor guide's flags that not every release accepts (decode's
finegrained_tp_config.lmhead_tensor_parallel_size); they are kept apart from <role>.args so
that the chart can tell its defaults from your settings, which helm's merge of your values over
the chart's would hide. args: guideArgs with your flags (engine.args overlaid by <role>.args)
laid over them as helm lays values over defaults (mooncake-pd.vllm.mergeFlags: key by key
inside a map value, your null removes the guide's key), less each value of the guide's that the
release refuses and yours did not set; dropped: those, as "<role>.guideArgs.<path>: why" (the
ModelServing's annotation mooncake-pd/dropped-guide-args, NOTES and `mooncake-pd render`'s
summary list them). The same value set in <role>.args is yours, and the validate rules refuse
it. What a release refuses of the guide's: finegrained_tp_config sizes
(mooncake-pd.vllm.finegrainedProblem); a new refusal of a guide flag goes here too. Kept on the
root context per role (the start scripts and three rule groups read it). (dict "root" $ "role"
"decode") */}}
{{- define "mooncake-pd.vllm.guideArgs" -}}
{{- $key := printf "mooncakePdGuideArgs-%s" .role -}}
{{- if not (hasKey .root $key) -}}
{{- $_ := set .root $key (include "mooncake-pd.vllm.guideArgsRender" .) -}}
{{- end -}}
{{- get .root $key -}}
{{- end }}

{{- define "mooncake-pd.vllm.guideArgsRender" -}}
{{- $values := index .root.Values .role -}}
{{- $guide := $values.guideArgs | default dict -}}
{{- $user := include "mooncake-pd.util.overlay" (dict "base" .root.Values.engine.args "over" $values.args) | fromJson -}}
{{- $args := include "mooncake-pd.vllm.mergeFlags" (dict "base" $guide "over" $user "top" true) | fromJson -}}
{{- $dropped := list -}}
{{- $merged := get $args "additional-config" -}}
{{- $guideSizes := dict -}}
{{- $userAdditional := get $user "additional-config" -}}
{{- $userSizes := dict -}}
{{- if kindIs "map" (get $guide "additional-config") }}{{ $guideSizes = get (get $guide "additional-config") "finegrained_tp_config" }}{{ end -}}
{{- if kindIs "map" $userAdditional }}{{ $userSizes = get $userAdditional "finegrained_tp_config" }}{{ end -}}
{{- if and (kindIs "map" $guideSizes) (kindIs "map" $merged) (kindIs "map" (get $merged "finegrained_tp_config")) }}
{{- $sizes := get $merged "finegrained_tp_config" }}
{{- range $k, $size := $guideSizes }}
{{- $yours := and (kindIs "map" $userSizes) (hasKey $userSizes $k) }}
{{- if and (not $yours) (hasKey $sizes $k) (kindIs "float64" $size) (gt (int $size) 0) }}
{{- $problem := include "mooncake-pd.vllm.finegrainedProblem" (dict "root" $.root "role" $.role "size" $size) | fromJson }}
{{- if $problem.reason }}
{{- $_ := unset $sizes $k }}
{{- $dropped = append $dropped (printf "%s.guideArgs.additional-config.finegrained_tp_config.%s: %s" $.role $k $problem.reason) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* A map the drops emptied goes too, unless yours set it (an empty one is yours). */ -}}
{{- if and (not $sizes) (not (and (kindIs "map" $userAdditional) (hasKey $userAdditional "finegrained_tp_config"))) }}
{{- $_ := unset $merged "finegrained_tp_config" }}
{{- end }}
{{- if and (not $merged) (not (hasKey $user "additional-config")) }}
{{- $_ := unset $args "additional-config" }}
{{- end }}
{{- end }}
{{- toJson (dict "args" $args "dropped" $dropped) -}}
{{- end }}

{{/* What the release refuses of both roles' guideArgs and the chart therefore dropped
(mooncake-pd.vllm.guideArgs), as a JSON list of "<role>.guideArgs.<path>: why". */}}
{{- define "mooncake-pd.vllm.droppedGuideArgs" -}}
{{- $dropped := list -}}
{{- range $role := list "prefill" "decode" }}
{{- $dropped = concat $dropped (include "mooncake-pd.vllm.guideArgs" (dict "root" $ "role" $role) | fromJson).dropped }}
{{- end }}
{{- toJson $dropped -}}
{{- end }}

{{/* .over laid on .base as helm lays your values over a chart's defaults: a map over a map
merges key by key, a null over a key the map has removes it, anything else replaces. At the top
of a flag map ("top" true) a null stays: the chart writes nothing for a null flag
(mooncake-pd.vllm.flagWords), as for one a role's args remove from engine.args. JSON.
(dict "base" $guide "over" $yours "top" true) */}}
{{- define "mooncake-pd.vllm.mergeFlags" -}}
{{- $out := dict -}}
{{- range $k, $v := .base | default dict }}{{ $_ := set $out $k $v }}{{ end -}}
{{- range $k, $v := .over | default dict }}
{{- $b := get $out $k }}
{{- if and (kindIs "map" $v) (kindIs "map" $b) }}
{{- $_ := set $out $k (include "mooncake-pd.vllm.mergeFlags" (dict "base" $b "over" $v) | fromJson) }}
{{- else if and (kindIs "invalid" $v) (not $.top) (hasKey $out $k) }}
{{- $_ := unset $out $k }}
{{- else }}
{{- $_ := set $out $k $v }}
{{- end }}
{{- end }}
{{- toJson $out -}}
{{- end }}

{{/* Why the release refuses a finegrained_tp_config size (lmhead_tensor_parallel_size, ...) in
a role's --additional-config, as JSON {kind, reason}, {} where it accepts it. Only where the
engines read --additional-config (vLLM-Ascend, on a family with additionalConfig):
- moe: from vLLM-Ascend v0.23.0 only a mixture-of-experts model may set one (profiles.yaml
  finegrainedTpModels; VA@v0.23.0 vllm_ascend/ascend_config.py ~590, "The finegrained tp sizes
  can be enabled only for MOE models", AssertionError at start), and model.moe is false;
- divide: the size does not divide the role's data parallel size (FinegrainedTPConfig in
  vllm_ascend/ascend_config.py at every tag, AssertionError at start).
The validate.engineVersion rules refuse yours with it; mooncake-pd.vllm.guideArgs drops the
guide's. (dict "root" $ "role" "decode" "size" 2) */}}
{{- define "mooncake-pd.vllm.finegrainedProblem" -}}
{{- $profile := include "mooncake-pd.profile" .root | fromJson -}}
{{- $engine := $profile.engine -}}
{{- $data := int (index .root.Values .role).parallelism.data -}}
{{- if not (and $engine.vllmAscend $profile.additionalConfig) -}}
{}
{{- else if and (eq $engine.finegrainedTpModels "moe") (not .root.Values.model.moe) -}}
{{- toJson (dict "kind" "moe" "reason" (printf "vLLM-Ascend %s enables finegrained TP only for mixture-of-experts models (\"The finegrained tp sizes can be enabled only for MOE models\" at start), and model.moe is false" $engine.vllmAscend)) -}}
{{- else if ne 0 (mod $data (int .size)) -}}
{{- toJson (dict "kind" "divide" "reason" (printf "%d does not divide %s.parallelism.data (%d), which vLLM-Ascend requires (AssertionError at start)" (int .size) .role $data)) -}}
{{- else -}}
{}
{{- end -}}
{{- end }}
