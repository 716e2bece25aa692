{{/*
The accelerator profile and engine version of the release, read from files/profiles.yaml (the
one place that says what an accelerator type, its family and an engine version decide). Every
helper here takes the root context and returns text or JSON; callers never branch on a family
or connector name, they read the profile's fields.
*/}}

{{/* The whole table as JSON, checked once per render: every row has the fields its table
requires (profiles.yaml `required`), each accelerator's family and engine version exist, each
engine version has an image for every accelerator that runs it and every connector a family
lists. A problem fails naming the row and the field. Cached on the root context, so the file
is parsed once however often the profile is read. */}}
{{- define "mooncake-pd.profile.table" -}}
{{- if not (hasKey . "mooncakePdProfileTable") -}}
{{- $file := "files/profiles.yaml" -}}
{{- $table := .Files.Get $file | fromYaml -}}
{{- if or (not $table) (hasKey $table "Error") -}}
{{- fail (printf "chart/%s: cannot read the profile table: %v" $file (get ($table | default dict) "Error")) -}}
{{- end -}}
{{- $problems := list -}}
{{- $required := $table.required | default dict -}}
{{- range $section := list "accelerators" "families" "engines" "connectors" "kthena" -}}
{{- if not (get $required $section) }}{{ $problems = append $problems (printf "required.%s: missing; list the fields every row of %s must have" $section $section) }}{{ end -}}
{{- end -}}
{{- range $name, $row := $table.accelerators | default dict -}}
{{- range $field := $required.accelerators | default list -}}
{{- if not (hasKey $row $field) }}{{ $problems = append $problems (printf "accelerators.%s.%s: missing; every accelerator needs it (required.accelerators)" $name $field) }}{{ end -}}
{{- end -}}
{{- if and $row.family (not (hasKey ($table.families | default dict) $row.family)) -}}
{{- $problems = append $problems (printf "accelerators.%s.family: %q has no row in families; add it or use one of %s" $name $row.family (keys ($table.families | default dict) | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $engine := get ($table.engines | default dict) (toString $row.engineVersion) -}}
{{- if and $row.engineVersion (not $engine) -}}
{{- $problems = append $problems (printf "accelerators.%s.engineVersion: %q has no row in engines; add it or use one of %s" $name $row.engineVersion (keys ($table.engines | default dict) | sortAlpha | join ", ")) -}}
{{- else if $engine -}}
{{- if not (hasKey ($engine.images | default dict) $name) -}}
{{- $problems = append $problems (printf "engines.%s.images.%s: missing; the engine version %s that accelerator %s runs needs its image" $row.engineVersion $name $row.engineVersion $name) -}}
{{- end -}}
{{- range $connector := (get ($table.families | default dict) (toString $row.family) | default dict).connectors | default list -}}
{{- if not (hasKey ($engine.connectors | default dict) $connector) -}}
{{- $problems = append $problems (printf "engines.%s.connectors.%s: missing; family %s lists it for accelerator %s" $row.engineVersion $connector $row.family $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $name, $row := $table.accelerators | default dict -}}
{{- if hasKey $row "hostResources" -}}
{{- $problems = concat $problems (include "mooncake-pd.resources.tableProblems" (dict "name" $name "row" $row.hostResources) | fromJsonArray) -}}
{{- end -}}
{{- end -}}
{{- range $name, $row := $table.families | default dict -}}
{{- range $field := $required.families | default list -}}
{{- if not (hasKey $row $field) }}{{ $problems = append $problems (printf "families.%s.%s: missing; every family needs it (required.families)" $name $field) }}{{ end -}}
{{- end -}}
{{- if not $row.connectors }}{{ $problems = append $problems (printf "families.%s.connectors: empty; list the KV connectors that work there, the default first" $name) }}{{ end -}}
{{- end -}}
{{- range $version, $engine := $table.engines | default dict -}}
{{- range $field := $required.engines | default list -}}
{{- if not (hasKey $engine $field) }}{{ $problems = append $problems (printf "engines.%s.%s: missing; every engine version needs it (required.engines)" $version $field) }}{{ end -}}
{{- end -}}
{{- range $connector, $row := $engine.connectors | default dict -}}
{{- range $field := $required.connectors | default list -}}
{{- if not (hasKey $row $field) }}{{ $problems = append $problems (printf "engines.%s.connectors.%s.%s: missing; every connector needs it (required.connectors)" $version $connector $field) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $version, $row := $table.kthena | default dict -}}
{{- range $field := $required.kthena | default list -}}
{{- if not (hasKey $row $field) }}{{ $problems = append $problems (printf "kthena.%s.%s: missing; every Kthena version needs it (required.kthena)" $version $field) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- if not $table.kthena }}{{ $problems = append $problems "kthena: empty; list the Kthena versions the chart renders for, the default first" }}{{ end -}}
{{- if $problems -}}
{{- fail (printf "\n\nmooncake-pd: chart/%s is incomplete:\n  - %s\n" $file (join "\n  - " $problems)) -}}
{{- end -}}
{{- $_ := set . "mooncakePdProfileTable" (toJson $table) -}}
{{- end -}}
{{- get . "mooncakePdProfileTable" -}}
{{- end }}

{{/* The profile of accelerator.type as JSON: the accelerator's row (with its `type`), its
family's fields, `engine` (the row of the release's engine version, without the images, with
its `version` and where that came from, `versionFrom`) and `image` (the engine image of this
accelerator at that version: repository and tag). An engine version the table lacks, or one
without an image for this accelerator, fails here: nothing else can be checked against it.
Worked out once per render and kept on the root context (as the table is): it depends on the
values and the table alone, and a render reads it over a hundred times (every rule group, every
pod template and script), each a merge of three table reads that cost most of a render's
template time before. */}}
{{- define "mooncake-pd.profile" -}}
{{- if not (hasKey . "mooncakePdProfile") -}}
{{- $_ := set . "mooncakePdProfile" (include "mooncake-pd.profile.render" .) -}}
{{- end -}}
{{- get . "mooncakePdProfile" -}}
{{- end }}

{{- define "mooncake-pd.profile.render" -}}
{{- $table := include "mooncake-pd.profile.table" . | fromJson -}}
{{- $type := .Values.accelerator.type -}}
{{- $row := get $table.accelerators $type -}}
{{- if not $row -}}
{{- fail (printf "accelerator.type: %q is not a known profile; use one of: %s" $type (keys $table.accelerators | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $profile := merge (dict "type" $type) $row (get $table.families $row.family) -}}
{{- $chosen := include "mooncake-pd.profile.engineVersion" . | fromJson -}}
{{- $engine := get $table.engines $chosen.version -}}
{{- $runs := include "mooncake-pd.profile.versionsFor" . | fromJsonArray -}}
{{- if not $engine -}}
{{- fail (printf "engine.version: %q (%s) is not an engine version the chart knows; use one of %s on %s (with an image of that version), or add it (docs/development.md, \"Add an engine version\")" $chosen.version $chosen.from (join ", " $runs) $type) -}}
{{- end -}}
{{- if not (hasKey $engine.images $type) -}}
{{- fail (printf "engine.version: %s (%s) has no %s image (%s); use one of %s on %s" $chosen.version $chosen.from $type $engine.description (join ", " $runs) $type) -}}
{{- end -}}
{{- $_ := set $profile "image" (get $engine.images $type) -}}
{{- $_ := set $profile "engine" (merge (dict "version" $chosen.version "versionFrom" $chosen.from) (omit $engine "images")) -}}
{{- toJson $profile -}}
{{- end }}

{{/* The engine versions with an image for accelerator.type (the ones it runs), as a JSON list. */}}
{{- define "mooncake-pd.profile.versionsFor" -}}
{{- $runs := list -}}
{{- range $version, $e := (include "mooncake-pd.profile.table" . | fromJson).engines }}
{{- if hasKey $e.images $.Values.accelerator.type }}{{ $runs = append $runs $version }}{{ end }}
{{- end -}}
{{- toJson $runs -}}
{{- end }}

{{/* The engine version a release tag names, or "" for a tag that names none (latest, a build
of your own, a release candidate). A release tag is v<major>.<minor>.<patch>, alone or with
suffixes (v0.23.0-a3, v0.23.0-a3-openeuler, v0.23.0); a post release of it (v0.23.0.post1-a3:
vLLM-Ascend's fixes on that release, its current stable on 2026-09-21) names the release's
version, whose data the chart checks it with (profiles.yaml keys engine versions by release,
and a post release changes no flag, KV-transfer key or port the chart writes). */}}
{{- define "mooncake-pd.profile.tagVersion" -}}
{{- if regexMatch "^v[0-9]+[.][0-9]+[.][0-9]+([.]post[0-9]+)?(-[a-z0-9]+)*$" (toString .) -}}
{{- regexFind "^v[0-9]+[.][0-9]+[.][0-9]+" (toString .) -}}
{{- end -}}
{{- end }}

{{/* The release a release-candidate tag leads to ("v0.23.0" of v0.23.0rc1-a3), or "". A
candidate is not a supported release: its flags and connectors are neither the release's
before nor the data of files/engines/ (read from releases' packages); the validate.engineVersion
rules refuse it unless engine.version says which release's data to check it with. */}}
{{- define "mooncake-pd.profile.tagCandidate" -}}
{{- if regexMatch "^v[0-9]+[.][0-9]+[.][0-9]+rc[0-9]+(-[a-z0-9]+)*$" (toString .) -}}
{{- regexFind "^v[0-9]+[.][0-9]+[.][0-9]+" (toString .) -}}
{{- end -}}
{{- end }}

{{/* The release's engine version and where it came from, as JSON {version, from}:
engine.version; else the version of a release tag in image.tag; else the accelerator's default
(profiles.yaml engineVersion). The validate.engineVersion rules refuse the two disagreeing, and
a tag that names no version without engine.version. */}}
{{- define "mooncake-pd.profile.engineVersion" -}}
{{- $table := include "mooncake-pd.profile.table" . | fromJson -}}
{{- $tagVersion := include "mooncake-pd.profile.tagVersion" .Values.image.tag -}}
{{- if .Values.engine.version -}}
{{- toJson (dict "version" (toString .Values.engine.version) "from" "engine.version") -}}
{{- else if $tagVersion -}}
{{- toJson (dict "version" $tagVersion "from" (printf "from image.tag %s" .Values.image.tag)) -}}
{{- else -}}
{{- $row := get $table.accelerators .Values.accelerator.type | default dict -}}
{{- toJson (dict "version" (toString $row.engineVersion) "from" (printf "the %s default" .Values.accelerator.type)) -}}
{{- end -}}
{{- end }}

{{/* A file of the engine version's data, read from its own packages (files/engines/<version>/,
SOURCE.md there): its path under chart/. (dict "root" $ "file" "serve-flags.json") */}}
{{- define "mooncake-pd.profile.engineFile" -}}
{{- printf "files/engines/%s/%s" (include "mooncake-pd.profile" .root | fromJson).engine.version .file -}}
{{- end }}

{{/* The row of kthena.version in the kthena table, as JSON ({} for a version it does not
list: the validate.rollout rules refuse it, naming the versions it has). */}}
{{- define "mooncake-pd.profile.kthena" -}}
{{- $table := include "mooncake-pd.profile.table" . | fromJson -}}
{{- toJson (get $table.kthena (toString .Values.kthena.version) | default dict) -}}
{{- end }}

{{/* The KV connector: kvTransfer.connector, or the profile's default (its family's first). */}}
{{- define "mooncake-pd.profile.connector" -}}
{{- default (first (include "mooncake-pd.profile" . | fromJson).connectors) .Values.kvTransfer.connector -}}
{{- end }}

{{/* What the engine version says of the release's connector, as JSON ({} for a connector it
does not know: the validate.accelerator rules refuse it). */}}
{{- define "mooncake-pd.profile.connectorData" -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- toJson (get $profile.engine.connectors (include "mooncake-pd.profile.connector" .) | default dict) -}}
{{- end }}

{{/* The engine image reference: repository:tag (each defaulting to the profile's), with
@digest when image.digest is set. */}}
{{- define "mooncake-pd.profile.image" -}}
{{- $default := (include "mooncake-pd.profile" . | fromJson).image -}}
{{- include "mooncake-pd.util.image" (dict "repository" (default $default.repository .Values.image.repository) "tag" (default $default.tag .Values.image.tag) "digest" .Values.image.digest) -}}
{{- end }}

{{/* The proxy image: proxy.image, else the engine image where it carries the proxy script
(profile proxyInEngineImage), else the engine version's proxyImage (the vLLM-Ascend image,
whose example proxy needs no device). */}}
{{- define "mooncake-pd.profile.proxyImage" -}}
{{- $image := .Values.proxy.image -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- if $image.repository -}}
{{- printf "%s:%s" $image.repository (default $profile.image.tag $image.tag) -}}
{{- else if $profile.proxyInEngineImage -}}
{{- include "mooncake-pd.profile.image" . -}}
{{- else -}}
{{- printf "%s:%s" $profile.engine.proxyImage.repository (default $profile.engine.proxyImage.tag $image.tag) -}}
{{- end -}}
{{- end }}

{{/* The chart's copy of the PD proxy script (a path under chart/files) where the proxy image
lacks it: the engine version's proxyScript on a family whose engine image does not carry the
proxy, unless proxy.image names another image (whose proxy.script then runs). "" otherwise. */}}
{{- define "mooncake-pd.profile.proxyScript" -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- if and (not .Values.proxy.image.repository) (not $profile.proxyInEngineImage) -}}
{{- $profile.engine.proxyScript -}}
{{- end -}}
{{- end }}

{{/* The benchmark client's image: benchmark.image, else the engine image where `vllm bench
serve` starts in it without a device (profile benchmarkInEngineImage), else the engine version's
benchmarkImage: vLLM's own image of the engines' version (in the vLLM-Ascend image `vllm` cannot
start without an NPU: its platform plugin, vllm_ascend.register, returns NPUPlatform and
vllm_ascend/utils.py imports torch_npu, which needs the driver; transformers imports torch_npu
too). */}}
{{- define "mooncake-pd.profile.benchmarkImage" -}}
{{- $image := .Values.benchmark.image -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $fallback := $profile.engine.benchmarkImage -}}
{{- if $image.repository -}}
{{- printf "%s:%s" $image.repository (default $fallback.tag $image.tag) -}}
{{- else if not $profile.benchmarkInEngineImage -}}
{{- printf "%s:%s" $fallback.repository (default $fallback.tag $image.tag) -}}
{{- else -}}
{{- include "mooncake-pd.profile.image" . -}}
{{- end -}}
{{- end }}

{{/* "true" when vLLM-Ascend's recompute scheduler is on: engine.recomputeScheduler, where auto
means on only with the vLLM-Ascend PD proxy on a profile that has the scheduler. With it on,
decode ends requests it has no KV cache for with stop reason "recomputed" for the router to
re-send (vllm_ascend/core/recompute_scheduler.py); only that proxy does
(load_balance_proxy_server_example.py), the Kthena router passes the truncated answer on. */}}
{{- define "mooncake-pd.profile.recomputeScheduler" -}}
{{- $setting := .Values.engine.recomputeScheduler -}}
{{- if kindIs "bool" $setting -}}
{{- if $setting }}true{{ end -}}
{{- else if and (eq .Values.router.type "proxy") (include "mooncake-pd.profile" . | fromJson).recomputeScheduler -}}
true
{{- end -}}
{{- end }}

{{/* The values section of the profile's family (accelerator.<family>), or {}. JSON. */}}
{{- define "mooncake-pd.profile.settings" -}}
{{- $family := (include "mooncake-pd.profile" . | fromJson).family -}}
{{- toJson (get .Values.accelerator $family | default dict) -}}
{{- end }}

{{/* RDMA between nodes (accelerator.rdma) as the engine pods get it, as JSON: {} when it is off;
else {resource, count, mountInfiniband, refusal, env}, where refusal is why the profile's family
cannot run it ("" where it can: profiles.yaml families.<family>.rdma; a family without the row
refuses it too) and env the variables every engine container gets, in order: the family's list
(a fixed value, or a scalar key of accelerator.rdma, left out where that key is empty), then
accelerator.rdma.env by name; each {name, value, from}, from naming the values key it answers
to. Kept on the root context, as the profile is. */}}
{{- define "mooncake-pd.profile.rdma" -}}
{{- if not (hasKey . "mooncakePdRdma") -}}
{{- $out := dict -}}
{{- $settings := .Values.accelerator.rdma | default dict -}}
{{- if $settings.enabled -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $row := $profile.rdma | default (dict "refusal" (printf "families.%s in chart/files/profiles.yaml has no rdma row" $profile.family) "env" list) -}}
{{- $env := list -}}
{{- range $entry := $row.env | default list -}}
{{- if hasKey $entry "value" -}}
{{- $env = append $env (dict "name" $entry.name "value" (toString $entry.value) "from" "accelerator.rdma.enabled") -}}
{{- else -}}
{{- $value := toString (get $settings (toString $entry.key) | default "") -}}
{{- if $value }}{{ $env = append $env (dict "name" $entry.name "value" $value "from" (printf "accelerator.rdma.%s" $entry.key)) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- range $name, $value := $settings.env | default dict -}}
{{- $env = append $env (dict "name" $name "value" (include "mooncake-pd.util.scalar" $value) "from" "accelerator.rdma.env") -}}
{{- end -}}
{{- $out = dict "resource" (toString $settings.resource) "count" (int ($settings.count | default 1)) "mountInfiniband" (eq (toString $settings.mountInfiniband) "true") "refusal" (toString $row.refusal) "env" $env "family" $profile.family -}}
{{- end -}}
{{- $_ := set . "mooncakePdRdma" (toJson $out) -}}
{{- end -}}
{{- get . "mooncakePdRdma" -}}
{{- end }}
