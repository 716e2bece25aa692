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
{{- toJson $errors -}}
{{- end }}
