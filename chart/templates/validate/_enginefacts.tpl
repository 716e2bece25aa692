{{/*
Rules read from the engine version's own packages beyond its option list
(files/engines/<version>/, `mooncake-pd engines generate`): the keys of its JSON options' config
classes (config-keys.json), the names its registries hold (registered-names.json), and the checks
`vllm serve` makes on its parsed flags before it loads anything (serve-checks.json). Each is held
against each role's flags as its start script passes them (mooncake-pd.vllm.serveArgs) and names
the values key that set the flag (mooncake-pd.validate.engineRuleKey) and the engine version.
*/}}

{{/* A role's flags by their dashed names, a two-way flag in its other spelling also read as the
opposite value of the first (no-enable-log-requests: true is enable-log-requests false), as the
rules of files/engines/rules.yaml read them. JSON. (dict "root" $ "role" "decode") */}}
{{- define "mooncake-pd.validate.engineFlags" -}}
{{- $negatives := include "mooncake-pd.vllm.negatives" (dict "root" .root "list" "serve-flags.json") | fromJson -}}
{{- $given := dict -}}
{{- range $k, $v := include "mooncake-pd.vllm.serveArgs" (dict "root" .root "role" .role) | fromJson }}{{ $_ := set $given (replace "_" "-" $k) $v }}{{ end -}}
{{- $flags := deepCopy $given -}}
{{- range $k, $v := $given }}
{{- $other := get $negatives $k }}
{{- if and (kindIs "bool" $v) $other (not (hasKey $given $other)) }}{{ $_ := set $flags $other (not $v) }}{{ end }}
{{- end -}}
{{- toJson $flags -}}
{{- end }}

{{/* A JSON option's value as a map: a map as given, JSON text of an object parsed, else nothing
(the chart passes a map as its JSON; text reaches vLLM as it is). */}}
{{- define "mooncake-pd.validate.engineJsonValue" -}}
{{- if kindIs "map" . -}}
{{- toJson . -}}
{{- else if and (kindIs "string" .) (hasPrefix "{" (trim .)) -}}
{{- trim . -}}
{{- end -}}
{{- end }}

{{/* Keys inside a JSON option (--compilation-config, --speculative-config, ...) that its vLLM
config class does not have (files/engines/<version>/config-keys.json), one level of nested config
classes included (compilation-config.pass_config): refused where the class forbids other keys
(vLLM refuses them at start) and where it ignores them (a misspelt key would be dropped without a
word), naming the known keys. --kv-transfer-config is the chart's (validate.engineVersion checks
kvTransfer's keys). JSON list. */}}
{{- define "mooncake-pd.validate.engineConfigKeys" -}}
{{- $errors := list -}}
{{- $engine := (include "mooncake-pd.profile" . | fromJson).engine -}}
{{- $at := printf "engine.version %s (%s)" $engine.version $engine.versionFrom -}}
{{- $file := include "mooncake-pd.profile.engineFile" (dict "root" $ "file" "config-keys.json") -}}
{{- $options := (.Files.Get $file | fromJson).options -}}
{{- if not $options }}{{ fail (printf "chart/%s: cannot read the config classes' keys" $file) }}{{ end -}}
{{- range $role := list "prefill" "decode" }}
{{- range $flag, $val := include "mooncake-pd.validate.engineFlags" (dict "root" $ "role" $role) | fromJson }}
{{- $class := get $options $flag }}
{{- $text := include "mooncake-pd.validate.engineJsonValue" $val }}
{{- if and $class $text (ne $flag "kv-transfer-config") }}
{{- $map := $text | fromJson }}
{{- range $key, $inner := $map }}
{{- $where := include "mooncake-pd.validate.engineRuleKey" (dict "root" $ "role" $role "operand" (printf "args.%s.%s" $flag $key)) }}
{{- if not (has $key $class.fields) }}
{{- $errors = append $errors (include "mooncake-pd.validate.engineConfigKeyProblem" (dict "where" $where "flag" $flag "key" $key "class" $class "vllm" $engine.vllm "at" $at "file" $file)) }}
{{- else if and (kindIs "map" $inner) (hasKey ($class.nested | default dict) $key) }}
{{- $nested := get $class.nested $key }}
{{- range $innerKey, $_ := $inner }}
{{- if not (has $innerKey $nested.fields) }}
{{- $errors = append $errors (include "mooncake-pd.validate.engineConfigKeyProblem" (dict "where" (printf "%s.%s" $where $innerKey) "flag" (printf "%s %s" $flag $key) "key" $innerKey "class" $nested "vllm" $engine.vllm "at" $at "file" $file)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson (uniq $errors) -}}
{{- end }}

{{- define "mooncake-pd.validate.engineConfigKeyProblem" -}}
{{- $name := last (splitList "." .class.class) -}}
{{- $fate := ternary "refuses it at start (extra fields forbidden)" "drops it without a word (extra fields ignored)" (eq .class.extra "forbid") -}}
{{- printf "%s: not a key of vLLM %s's %s (--%s; chart/%s), which %s; %s; use one of %s" .where .vllm $name .flag .file $fate .at (join ", " .class.fields) -}}
{{- end }}

{{/* Names vLLM looks up in its registries at start (files/engines/<version>/registered-names.json):
a reasoning parser (--reasoning-parser, or structured-outputs-config's reasoning_parser; the API
server's validate_api_server_args, the chat server and the structured-output manager look it up,
KeyError) it does not hold, a
tool-call parser it does not hold beside --enable-auto-tool-choice (only then does it look), and
an attention backend that is not a member of its enum (AttentionConfig parses the name, upper-cased,
at start). A --reasoning-parser-plugin or --tool-parser-plugin may register more names: with one,
that kind of name is not checked. JSON list. */}}
{{- define "mooncake-pd.validate.engineNames" -}}
{{- $errors := list -}}
{{- $engine := (include "mooncake-pd.profile" . | fromJson).engine -}}
{{- $at := printf "engine.version %s (%s)" $engine.version $engine.versionFrom -}}
{{- $file := include "mooncake-pd.profile.engineFile" (dict "root" $ "file" "registered-names.json") -}}
{{- $names := .Files.Get $file | fromJson -}}
{{- if not $names.reasoningParsers }}{{ fail (printf "chart/%s: cannot read the registered names" $file) }}{{ end -}}
{{- range $role := list "prefill" "decode" }}
{{- $flags := include "mooncake-pd.validate.engineFlags" (dict "root" $ "role" $role) | fromJson }}
{{- $key := dict "root" $ "role" $role }}
{{- /* Reasoning parser: the flag, or the key of --structured-outputs-config. */ -}}
{{- if not (get $flags "reasoning-parser-plugin") }}
{{- $found := list }}
{{- with get $flags "reasoning-parser" }}{{ $found = append $found (list "args.reasoning-parser" .) }}{{ end }}
{{- with include "mooncake-pd.validate.engineJsonValue" (get $flags "structured-outputs-config") }}
{{- with get (. | fromJson) "reasoning_parser" }}{{ $found = append $found (list "args.structured-outputs-config.reasoning_parser" .) }}{{ end }}
{{- end }}
{{- range $pair := $found }}
{{- $name := toString (index $pair 1) }}
{{- if not (has $name $names.reasoningParsers) }}
{{- $errors = append $errors (printf "%s: %q is not a reasoning parser vLLM %s registers (chart/%s), and it fails the start where vLLM looks it up (KeyError: \"invalid reasoning parser\", \"not found\"); %s; use one of %s, or name the plugin that registers it in %s.args.reasoning-parser-plugin" (include "mooncake-pd.validate.engineRuleKey" (merge (dict "operand" (index $pair 0)) $key)) $name $engine.vllm $file $at (join ", " $names.reasoningParsers) $role) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Tool-call parser: looked up only with --enable-auto-tool-choice. */ -}}
{{- $parser := get $flags "tool-call-parser" }}
{{- if and (eq (toString (get $flags "enable-auto-tool-choice")) "true") $parser (not (get $flags "tool-parser-plugin")) (not (has (toString $parser) $names.toolCallParsers)) }}
{{- $errors = append $errors (printf "%s: %q is not a tool-call parser vLLM %s registers, and with enable-auto-tool-choice its API server refuses it at start (\"invalid tool call parser\"; chart/%s); %s; use one of %s, or name the plugin that registers it in %s.args.tool-parser-plugin" (include "mooncake-pd.validate.engineRuleKey" (merge (dict "operand" "args.tool-call-parser") $key)) (toString $parser) $engine.vllm $file $at (join ", " $names.toolCallParsers) $role) }}
{{- end }}
{{- /* Attention backend: the flag, or the key of --attention-config. */ -}}
{{- $backends := list }}
{{- with get $flags "attention-backend" }}{{ $backends = append $backends (list "args.attention-backend" .) }}{{ end }}
{{- with include "mooncake-pd.validate.engineJsonValue" (get $flags "attention-config") }}
{{- with get (. | fromJson) "backend" }}{{ $backends = append $backends (list "args.attention-config.backend" .) }}{{ end }}
{{- end }}
{{- range $pair := $backends }}
{{- $name := toString (index $pair 1) }}
{{- if not (or (has (upper $name) $names.attentionBackends) (has (lower $name) ($names.attentionBackendWords | default list))) }}
{{- $errors = append $errors (printf "%s: %q is not an attention backend of vLLM %s (its AttentionBackendEnum; chart/%s), which refuses it at start; %s; use one of %s, or remove it (vLLM then selects one)" (include "mooncake-pd.validate.engineRuleKey" (merge (dict "operand" (index $pair 0)) $key)) $name $engine.vllm $file $at (join ", " (concat $names.attentionBackends ($names.attentionBackendWords | default list)))) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson (uniq $errors) -}}
{{- end }}

{{/* The checks `vllm serve` makes on its parsed flags before it loads anything
(validate_parsed_serve_args; files/engines/<version>/serve-checks.json): a check whose conditions
all hold for a role's flags (an unset flag holds vLLM's default) is refused as vLLM would refuse
it, naming the flag the values set and vLLM's message. JSON list. */}}
{{- define "mooncake-pd.validate.engineServeChecks" -}}
{{- $errors := list -}}
{{- $engine := (include "mooncake-pd.profile" . | fromJson).engine -}}
{{- $at := printf "engine.version %s (%s)" $engine.version $engine.versionFrom -}}
{{- $file := include "mooncake-pd.profile.engineFile" (dict "root" $ "file" "serve-checks.json") -}}
{{- $data := .Files.Get $file | fromJson -}}
{{- if not $data.source }}{{ fail (printf "chart/%s: cannot read vLLM's serve checks" $file) }}{{ end -}}
{{- range $role := list "prefill" "decode" }}
{{- $flags := include "mooncake-pd.validate.engineFlags" (dict "root" $ "role" $role) | fromJson }}
{{- range $check := $data.checks }}
{{- $holds := true }}
{{- $setBy := "" }}
{{- $words := list }}
{{- $needs := list }}
{{- $others := list }}
{{- range $c := $check.when }}
{{- if not $c.flag }}{{ $holds = false }}{{ end }}
{{- if $holds }}
{{- $set := and (hasKey $flags $c.flag) (not (kindIs "invalid" (get $flags $c.flag))) }}
{{- $value := ternary (get $flags (toString $c.flag)) (get $data.defaults $c.dest) $set }}
{{- $ok := false }}
{{- if eq $c.test "true" }}{{ $ok = not (empty $value) }}
{{- else if eq $c.test "false" }}{{ $ok = empty $value }}
{{- else }}{{ $ok = include "mooncake-pd.validate.engineRuleHolds" (dict "left" $value "op" $c.test "right" $c.value) | eq "true" }}{{ end }}
{{- if not $ok }}{{ $holds = false }}{{ end }}
{{- if and $set (not $setBy) }}{{ $setBy = $c.flag }}{{ end }}
{{- if eq $c.test "false" }}{{ $needs = append $needs (printf "%s.args.%s" $role $c.flag) }}{{ end }}
{{- if and $set (ne $c.flag $setBy) }}{{ $others = append $others (printf "--%s %s" $c.flag (include "mooncake-pd.validate.engineValue" $value)) }}{{ end }}
{{- if not $set }}{{ $others = append $others (printf "--%s unset" $c.flag) }}{{ end }}
{{- end }}
{{- end }}
{{- if and $holds $setBy }}
{{- $where := include "mooncake-pd.validate.engineRuleKey" (dict "root" $ "role" $role "operand" (printf "args.%s" $setBy)) }}
{{- $flagsNamed := list }}
{{- range $c := $check.when }}{{ $flagsNamed = append $flagsNamed (printf "--%s" $c.flag) }}{{ end }}
{{- $fix := printf "change one of %s" (join ", " $flagsNamed) }}
{{- if eq (len $check.when) 1 }}{{ $fix = printf "use a value vLLM accepts (%s)" $check.message }}
{{- else if $needs }}{{ $fix = printf "set %s as well, or remove %s" (join " and " $needs) $where }}
{{- else }}{{ $fix = printf "remove one of %s" (join ", " $flagsNamed) }}{{ end }}
{{- $with := ternary "" (printf " with %s" (join ", " $others)) (empty $others) }}
{{- $errors = append $errors (printf "%s: %s%s, and vLLM %s refuses that at start (%q; %s ~%v); %s; %s" $where (include "mooncake-pd.validate.engineValue" (get $flags $setBy)) $with $engine.vllm $check.message $data.source $check.line $at $fix) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson (uniq $errors) -}}
{{- end }}
