{{/*
Rules that change with the engine version (profiles.yaml engines.<version>, and what its own
packages say in files/engines/<version>/): the version against image.tag, the KV-transfer keys
its KVTransferConfig has, the connector module path it imports, --additional-config keys and
where they apply, --api-server-count beside --headless. Each message names engine.version and
where the version came from.
*/}}
{{- define "mooncake-pd.validate.engineVersion" -}}
{{- $errors := list -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $engine := $profile.engine -}}
{{- $version := $engine.version -}}
{{- $at := printf "engine.version %s (%s)" $version $engine.versionFrom -}}
{{- $tag := toString .Values.image.tag -}}
{{- $tagVersion := include "mooncake-pd.profile.tagVersion" $tag -}}
{{- /* The image runs one version: a release tag and engine.version must agree, and a tag that
names no release leaves the chart nothing to check against but engine.version. */ -}}
{{- if and .Values.engine.version $tagVersion (ne $tagVersion (toString .Values.engine.version)) }}
{{- $errors = append $errors (printf "image.tag: %s is the %s image, but engine.version is %s; set engine.version to %s (or empty: the tag then selects it), or use a %s tag" $tag $tagVersion .Values.engine.version $tagVersion .Values.engine.version) }}
{{- else if and $tag (not $tagVersion) (not .Values.engine.version) }}
{{- $runs := include "mooncake-pd.profile.versionsFor" . | fromJsonArray }}
{{- with include "mooncake-pd.profile.tagCandidate" $tag }}
{{- /* A release candidate (v0.23.0rc1-a3) is refused by name: it looks like a release, but the
chart has no data of it (files/engines/ holds releases'). engine.version accepts it as a build
of your own, checked with that release's data. */ -}}
{{- $errors = append $errors (printf "image.tag: %q is a release candidate of %s, not a release the chart supports (it checks flags, KV-transfer keys and ports with data read from releases' packages); use the release's tag (%s; the chart knows %s on %s), or set engine.version to the release whose flags that image takes to run it as a build of your own" $tag . (regexReplaceAll "^(v[0-9]+[.][0-9]+[.][0-9]+)rc[0-9]+" $tag "${1}") (join ", " $runs) $profile.type) }}
{{- else }}
{{- $errors = append $errors (printf "engine.version: required with image.tag %q, which names no release (v<major>.<minor>.<patch>[.postN][-suffix]): the chart checks flags, KV-transfer keys and ports against the engine version; set engine.version to the vLLM(-Ascend) release that image runs, one of %s on %s" $tag (join ", " $runs) $profile.type) }}
{{- end }}
{{- end }}
{{- /* KVTransferConfig of this version: a top-level field it lacks is refused at start where
it forbids other keys (vLLM >= 0.18: extra="forbid"), and ignored where it does not. */ -}}
{{- $kvConfig := include "mooncake-pd.vllm.kvTransferConfig" . | fromJson }}
{{- $kvFile := include "mooncake-pd.profile.engineFile" (dict "root" $ "file" "kv-transfer-config.json") }}
{{- range $key, $field := include "mooncake-pd.kvtransfer.fieldNames" . | fromJson }}
{{- if and (not (kindIs "invalid" (get $.Values.kvTransfer $key))) (not (hasKey $kvConfig.fields $field)) }}
{{- $fate := ternary "refuses the key at start (extra fields forbidden)" "ignores it" (eq $kvConfig.extra "forbid") }}
{{- $errors = append $errors (printf "kvTransfer.%s: vLLM %s's KVTransferConfig has no %s (chart/%s), so it %s; %s; set kvTransfer.%s to null" $key $engine.vllm $field $kvFile $fate $at $key) }}
{{- end }}
{{- end }}
{{- /* The connector module: where vLLM imports kv_connector_module_path before its registry
(>= 0.23), a vLLM-Ascend module this version does not have fails the start
(ModuleNotFoundError); the module of every connector it registers is in vllm-ascend.json. */ -}}
{{- $ascendFile := include "mooncake-pd.profile.engineFile" (dict "root" $ "file" "vllm-ascend.json") }}
{{- $ascend := dict }}
{{- /* Only where the family's engines read --additional-config (vLLM-Ascend). */ -}}
{{- if and $engine.vllmAscend $profile.additionalConfig }}{{ $ascend = .Files.Get $ascendFile | fromJson }}{{ end }}
{{- $modulePath := .Values.kvTransfer.modulePath }}
{{- if and $modulePath $engine.modulePathFirst (hasPrefix "vllm_ascend." $modulePath) $ascend }}
{{- $modules := list }}
{{- range $name, $target := $ascend.connectors }}{{ $modules = append $modules (first (splitList ":" $target)) }}{{ end }}
{{- if not (has $modulePath $modules) }}
{{- $connector := include "mooncake-pd.profile.connector" . }}
{{- $errors = append $errors (printf "kvTransfer.modulePath: %s is not a module of vLLM-Ascend %s (its %s is %s, chart/%s), and vLLM %s imports kv_connector_module_path before its registry: ModuleNotFoundError at start; %s; leave kvTransfer.modulePath empty (the registry finds %s)" $modulePath $engine.vllmAscend $connector (default "not registered" (get $ascend.connectors $connector)) $ascendFile $engine.vllm $at $connector) }}
{{- end }}
{{- end }}
{{- /* --additional-config, role by role as the chart renders it: keys this vLLM-Ascend reads
(it ignores any other silently), and finegrained_tp_config's sizes, which must divide the
role's data parallel size and, from v0.23.0, need a mixture-of-experts model. */ -}}
{{- range $role := list "prefill" "decode" }}
{{- $args := include "mooncake-pd.vllm.serveArgs" (dict "root" $ "role" $role) | fromJson }}
{{- $additional := get $args "additional-config" }}
{{- if and (kindIs "map" $additional) $ascend }}
{{- range $k, $_ := $additional }}
{{- if and (ne $k "recompute_scheduler_enable") (not (has $k $ascend.additionalConfigKeys)) }}
{{- $errors = append $errors (printf "%s.args.additional-config.%s: not a key vLLM-Ascend %s reads (chart/%s), so it would be ignored without a word; %s; correct or remove it" $role $k $engine.vllmAscend $ascendFile $at) }}
{{- end }}
{{- end }}
{{- range $k, $size := get $additional "finegrained_tp_config" | default dict }}
{{- if and (kindIs "float64" $size) (gt (int $size) 0) }}
{{- $where := printf "%s.args.additional-config.finegrained_tp_config.%s" $role $k }}
{{- $problem := include "mooncake-pd.vllm.finegrainedProblem" (dict "root" $ "role" $role "size" $size) | fromJson }}
{{- if eq (toString $problem.kind) "moe" }}
{{- $errors = append $errors (printf "%s: %s; %s; remove it (%s.args.additional-config.finegrained_tp_config: null), or set model.moe true if the model is one" $where $problem.reason $at $role) }}
{{- else if eq (toString $problem.kind) "divide" }}
{{- $errors = append $errors (printf "%s: %s; use a divisor of %d" $where $problem.reason (int (index $.Values $role).parallelism.data)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Workers run --headless; from vLLM 0.18 --api-server-count >= 1 beside it is refused
(entrypoints/cli/serve.py "cannot be used with --headless"). */ -}}
{{- if and (eq $engine.headlessApiServerCount "refused") (gt (int (index $.Values $role).workerReplicas) 0) }}
{{- $count := get $args "api-server-count" }}
{{- if and (not (kindIs "invalid" $count)) (gt (int $count) 0) }}
{{- $errors = append $errors (printf "%s.args.api-server-count: %v reaches the role's headless workers (workerReplicas %d), and vLLM %s refuses --api-server-count with --headless at start; %s; remove it (vLLM >= 0.18 defaults it to the DP size on the entry pod)" $role $count (int (index $.Values $role).workerReplicas) $engine.vllm $at) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Numeric bounds and choices of single options (files/engines/<version>/serve-flags.json,
read from the version's own packages), and the cross-field rules vLLM and vLLM-Ascend check
at start (files/engines/rules.yaml). */ -}}
{{- $errors = concat $errors (include "mooncake-pd.validate.engineOptionLimits" . | fromJsonArray) }}
{{- $errors = concat $errors (include "mooncake-pd.validate.engineRules" . | fromJsonArray) }}
{{- toJson (uniq $errors) -}}
{{- end }}

{{/* Every args value outside the numeric bounds vLLM's config field declares for its flag
(pydantic Field(gt=0, le=1) and the like, as `mooncake-pd engines generate` read them into
serve-flags.json "bounds") or not among the choices of vLLM's parser for it, in engine.args,
<role>.args and <role>.guideArgs, each naming the engine version. JSON list. */}}
{{- define "mooncake-pd.validate.engineOptionLimits" -}}
{{- $errors := list -}}
{{- $engine := (include "mooncake-pd.profile" . | fromJson).engine -}}
{{- $at := printf "engine.version %s (%s)" $engine.version $engine.versionFrom -}}
{{- $file := include "mooncake-pd.profile.engineFile" (dict "root" $ "file" "serve-flags.json") -}}
{{- $limits := dict -}}
{{- range $flag := (.Files.Get $file | fromJson).flags }}
{{- if and (ne $flag.kind "bool") (or $flag.bounds $flag.choices) }}
{{- range $option := $flag.options }}{{ if hasPrefix "--" $option }}{{ $_ := set $limits (trimPrefix "--" $option) $flag }}{{ end }}{{ end }}
{{- end }}
{{- end }}
{{- range $path := list "engine.args" "prefill.args" "decode.args" "prefill.guideArgs" "decode.guideArgs" }}
{{- $section := first (splitList "." $path) }}
{{- $args := get (index $.Values $section) (last (splitList "." $path)) | default dict }}
{{- range $k, $val := $args }}
{{- $flag := get $limits (replace "_" "-" $k) }}
{{- if and $flag (not (kindIs "invalid" $val)) (not (kindIs "bool" $val)) (not (kindIs "map" $val)) }}
{{- with $flag.bounds }}
{{- $number := include "mooncake-pd.validate.engineNumber" $val }}
{{- if $number }}
{{- $n := float64 $number }}
{{- $phrases := list }}
{{- $inside := true }}
{{- if hasKey . "gt" }}{{ $phrases = append $phrases (printf "above %v" .gt) }}{{ if not (gt $n (float64 .gt)) }}{{ $inside = false }}{{ end }}{{ end }}
{{- if hasKey . "ge" }}{{ $phrases = append $phrases (printf "at least %v" .ge) }}{{ if not (ge $n (float64 .ge)) }}{{ $inside = false }}{{ end }}{{ end }}
{{- if hasKey . "lt" }}{{ $phrases = append $phrases (printf "below %v" .lt) }}{{ if not (lt $n (float64 .lt)) }}{{ $inside = false }}{{ end }}{{ end }}
{{- if hasKey . "le" }}{{ $phrases = append $phrases (printf "at most %v" .le) }}{{ if not (le $n (float64 .le)) }}{{ $inside = false }}{{ end }}{{ end }}
{{- if not $inside }}
{{- $parts := splitList "." .field }}
{{- $where := printf "%s.py %s" (join "/" (initial (initial $parts))) (join "." (slice $parts (sub (len $parts) 2))) }}
{{- $errors = append $errors (printf "%s.%s: %s is not %s, which vLLM %s requires of --%s (%s; it refuses the value at start); %s; use a value %s" $path $k (include "mooncake-pd.util.scalar" $val) (join " and " $phrases) $engine.vllm (replace "_" "-" $k) $where $at (join " and " $phrases)) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $flag.choices }}
{{- $choices := . }}
{{- range $item := ternary $val (list $val) (kindIs "slice" $val) }}
{{- $text := include "mooncake-pd.util.scalar" $item }}
{{- if not (has $text $choices) }}
{{- $errors = append $errors (printf "%s.%s: %q is not a choice of --%s in vLLM %s (%s), whose parser refuses it at start; %s; use one of those" $path $k $text (replace "_" "-" $k) $engine.vllm (join ", " $choices) $at) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}

{{/* A number as text where the value is one (an int, a float, or a string vLLM's parser reads
as one: "16384", "0.95"), else nothing. */}}
{{- define "mooncake-pd.validate.engineNumber" -}}
{{- if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- toJson . -}}
{{- else if and (kindIs "string" .) (regexMatch "^[-+]?[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$" .) -}}
{{- . -}}
{{- end -}}
{{- end }}

{{/* The cross-field rules of files/engines/rules.yaml (that file says how a rule reads) that
apply to the release's engine version, held against each role's flags as its start script
passes them (mooncake-pd.vllm.serveArgs): one message per broken rule, naming the values key
that set the flag, the rule's citation and the engine version. JSON list. */}}
{{- define "mooncake-pd.validate.engineRules" -}}
{{- $errors := list -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $engine := $profile.engine -}}
{{- $at := printf "engine.version %s (%s)" $engine.version $engine.versionFrom -}}
{{- $rules := (.Files.Get "files/engines/rules.yaml" | fromYaml).rules -}}
{{- if not $rules }}{{ fail "chart/files/engines/rules.yaml: cannot read its rules" }}{{ end -}}
{{- $ascend := and $engine.vllmAscend $profile.additionalConfig -}}
{{- $negatives := include "mooncake-pd.vllm.negatives" (dict "root" $ "list" "serve-flags.json") | fromJson -}}
{{- $kvRoles := (include "mooncake-pd.profile.connectorData" . | fromJson).roles | default dict -}}
{{- range $role := list "prefill" "decode" }}
{{- /* The role's flags by their dashed names; a two-way flag in its other spelling reads as
the opposite value of the first (no-enable-chunked-prefill: true is enable-chunked-prefill
false). */ -}}
{{- $given := dict }}
{{- range $k, $v := include "mooncake-pd.vllm.serveArgs" (dict "root" $ "role" $role) | fromJson }}{{ $_ := set $given (replace "_" "-" $k) $v }}{{ end }}
{{- $flags := deepCopy $given }}
{{- range $k, $v := $given }}
{{- $other := get $negatives $k }}
{{- if and (kindIs "bool" $v) $other (not (hasKey $given $other)) }}{{ $_ := set $flags $other (not $v) }}{{ end }}
{{- end }}
{{- /* The role's env as its start script sets it. */ -}}
{{- $env := include "mooncake-pd.script.env" (dict "root" $ "role" $role) | fromJson }}
{{- $context := dict "root" $ "role" $role "flags" $flags "env" $env "kvRole" (get $kvRoles $role | default "") }}
{{- range $rule := $rules }}
{{- if and (hasKey $rule.versions $engine.version) (or (not $rule.ascend) $ascend) }}
{{- $applies := true }}
{{- $seen := dict "{role}" $role "{kvRole}" (get $context "kvRole") }}
{{- range $condition := $rule.when }}
{{- if $applies }}
{{- $left := include "mooncake-pd.validate.engineRuleOperand" (merge (dict "operand" (index $condition 0) "defaults" $rule.defaults) $context) | fromJson }}
{{- $right := include "mooncake-pd.validate.engineRuleOperand" (merge (dict "operand" (index $condition 2) "defaults" $rule.defaults) $context) | fromJson }}
{{- if and $left.set $right.set (include "mooncake-pd.validate.engineRuleHolds" (dict "left" $left.value "op" (index $condition 1) "right" $right.value)) }}
{{- $_ := set $seen (printf "{%s}" (index $condition 0)) (include "mooncake-pd.validate.engineValue" $left.value) }}
{{- $_ := set $seen (printf "{%s}" (index $condition 2)) (include "mooncake-pd.validate.engineValue" $right.value) }}
{{- else }}
{{- $applies = false }}
{{- end }}
{{- end }}
{{- end }}
{{- if $applies }}
{{- $text := printf "%s (%s); %s; %s" $rule.problem (get $rule.versions $engine.version) $at $rule.fix }}
{{- range $placeholder, $value := $seen }}{{ $text = replace $placeholder $value $text }}{{ end }}
{{- $key := include "mooncake-pd.validate.engineRuleKey" (dict "root" $ "role" $role "operand" $rule.key) }}
{{- $errors = append $errors (replace "<role>" $role (printf "%s: %s" $key $text)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}

{{/* One operand of a rule (files/engines/rules.yaml) as JSON {set, value}: args.<flag>[.<key>]
from .flags, env.<NAME> from .env (as text), values.<path> (<role> the role) from the values,
role, kvRole, or the operand itself; unset ones take .defaults' value where it has one.
(dict "root" $ "role" "decode" "flags" $flags "env" $env "kvRole" "kv_consumer" "operand"
"args.max-num-seqs" "defaults" $map) */}}
{{- define "mooncake-pd.validate.engineRuleOperand" -}}
{{- $operand := .operand -}}
{{- $found := dict "set" true "value" $operand -}}
{{- if and (kindIs "string" $operand) (hasPrefix "env." $operand) -}}
{{- $name := trimPrefix "env." $operand -}}
{{- if and (hasKey .env $name) (not (kindIs "invalid" (get .env $name))) -}}
{{- $found = dict "set" true "value" (toString (get .env $name)) -}}
{{- else if hasKey (.defaults | default dict) $operand -}}
{{- $found = dict "set" true "value" (get .defaults $operand) -}}
{{- else -}}
{{- $found = dict "set" false -}}
{{- end -}}
{{- else if and (kindIs "string" $operand) (or (hasPrefix "args." $operand) (hasPrefix "values." $operand)) -}}
{{- $fromArgs := hasPrefix "args." $operand -}}
{{- $current := ternary .flags .root.Values $fromArgs -}}
{{- $set := true -}}
{{- /* Flag names and the keys of vLLM's JSON flags hold no dot. */ -}}
{{- range $part := splitList "." (replace "<role>" .role (ternary (trimPrefix "args." $operand) (trimPrefix "values." $operand) $fromArgs)) -}}
{{- if and $set (kindIs "map" $current) (hasKey $current $part) (not (kindIs "invalid" (get $current $part))) -}}
{{- $current = get $current $part -}}
{{- else -}}
{{- $set = false -}}
{{- end -}}
{{- end -}}
{{- if $set -}}
{{- $found = dict "set" true "value" $current -}}
{{- else if hasKey (.defaults | default dict) $operand -}}
{{- $found = dict "set" true "value" (get .defaults $operand) -}}
{{- else -}}
{{- $found = dict "set" false -}}
{{- end -}}
{{- else if eq (toString $operand) "role" -}}
{{- $found = dict "set" true "value" .role -}}
{{- else if eq (toString $operand) "kvRole" -}}
{{- $found = dict "set" (ne .kvRole "") "value" .kvRole -}}
{{- end -}}
{{- toJson $found -}}
{{- end }}

{{/* Whether [left op right] holds: contains asks whether the left's text holds the right's; else
numbers (numeric strings too) compare as numbers, anything else only by eq/ne as text. "true" or nothing. (dict "left" 1 "op" "gt" "right" 0) */}}
{{- define "mooncake-pd.validate.engineRuleHolds" -}}
{{- $l := include "mooncake-pd.validate.engineNumber" .left -}}
{{- $r := include "mooncake-pd.validate.engineNumber" .right -}}
{{- $op := .op -}}
{{- if eq $op "contains" -}}
{{- if contains (toString .right) (toString .left) }}true{{ end -}}
{{- else if and $l $r -}}
{{- $a := float64 $l }}{{ $b := float64 $r -}}
{{- if or (and (eq $op "eq") (eq $a $b)) (and (eq $op "ne") (ne $a $b)) (and (eq $op "lt") (lt $a $b)) (and (eq $op "le") (le $a $b)) (and (eq $op "gt") (gt $a $b)) (and (eq $op "ge") (ge $a $b)) }}true{{ end -}}
{{- else if and (eq $op "eq") (eq (toString .left) (toString .right)) -}}
true
{{- else if and (eq $op "ne") (ne (toString .left) (toString .right)) -}}
true
{{- else if not (has $op (list "eq" "ne" "lt" "le" "gt" "ge" "contains")) -}}
{{- fail (printf "chart/files/engines/rules.yaml: unknown operator %q" $op) -}}
{{- end -}}
{{- end }}

{{/* A value as a message shows it: a whole number without a fraction or exponent. */}}
{{- define "mooncake-pd.validate.engineValue" -}}
{{- $number := include "mooncake-pd.validate.engineNumber" . -}}
{{- if and $number (eq (float64 $number) (float64 (int64 (float64 $number)))) -}}
{{- int64 (float64 $number) -}}
{{- else -}}
{{- include "mooncake-pd.util.scalar" . -}}
{{- end -}}
{{- end }}

{{/* The values key a rule's operand names: args.<flag>[.<key>] as the key that set it (the
role's args, else engine.args, else the role's guideArgs; the role's args where the chart set
it), env.<NAME> as the env map that set it, values.<path> as itself. (dict "root" $ "role"
"decode" "operand" "args.max-num-seqs") */}}
{{- define "mooncake-pd.validate.engineRuleKey" -}}
{{- if hasPrefix "args." .operand -}}
{{- $path := splitList "." (trimPrefix "args." .operand) -}}
{{- $values := index .root.Values .role -}}
{{- $where := "" -}}
{{- range $section := list (list "args" $values.args) (list "engine.args" $.root.Values.engine.args) (list "guideArgs" $values.guideArgs) -}}
{{- if not $where -}}
{{- $current := index $section 1 | default dict -}}
{{- $found := true -}}
{{- range $i, $part := $path -}}
{{- $key := $part -}}
{{- if eq $i 0 }}{{ range $k, $_ := $current }}{{ if eq (replace "_" "-" $k) $part }}{{ $key = $k }}{{ end }}{{ end }}{{ end -}}
{{- if and $found (kindIs "map" $current) (hasKey $current $key) }}{{ $current = get $current $key }}{{ else }}{{ $found = false }}{{ end -}}
{{- end -}}
{{- if $found }}{{ $where = ternary (index $section 0) (printf "%s.%s" $.role (index $section 0)) (eq (index $section 0) "engine.args") }}{{ end -}}
{{- end -}}
{{- end -}}
{{- printf "%s.%s" (default (printf "%s.args" .role) $where) (join "." $path) -}}
{{- else if hasPrefix "env." .operand -}}
{{- $name := trimPrefix "env." .operand -}}
{{- $family := (include "mooncake-pd.profile" .root | fromJson).family -}}
{{- $settings := get .root.Values.accelerator $family | default dict -}}
{{- $where := printf "accelerator.%s.env" $family -}}
{{- if hasKey ((index .root.Values .role).env | default dict) $name }}{{ $where = printf "%s.env" .role }}
{{- else if hasKey (get ($settings.roleEnv | default dict) .role | default dict) $name }}{{ $where = printf "accelerator.%s.roleEnv.%s" $family .role }}
{{- else if hasKey (.root.Values.engine.env | default dict) $name }}{{ $where = "engine.env" }}{{ end -}}
{{- printf "%s.%s" $where $name -}}
{{- else -}}
{{- replace "<role>" .role (trimPrefix "values." .operand) -}}
{{- end -}}
{{- end }}
