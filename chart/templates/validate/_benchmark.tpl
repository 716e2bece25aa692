{{/*
Rules of the benchmark Job: a router to measure, a tokenizer and data set it can read, a
workload the engines accept, and `vllm bench serve` flags of the engine version.
*/}}
{{- define "mooncake-pd.validate.benchmark" -}}
{{- $errors := list -}}
{{- $storage := .Values.model.storage }}
{{- $bench := .Values.benchmark }}
{{- if $bench.enabled }}
{{- if and (eq .Values.router.type "none") (not $bench.baseUrl) }}
{{- $errors = append $errors "benchmark.baseUrl: router.type none deploys no router to benchmark; set the URL of yours, e.g. http://my-router.llm.svc:8080" }}
{{- end }}
{{- if and (not $bench.tokenizer) (eq $storage.type "download") (not $storage.claimName) }}
{{- $errors = append $errors "benchmark.tokenizer: the model is downloaded into each engine pod's emptyDir, so the benchmark Job cannot read it; set a Hugging Face repo id, or download into a claim (model.storage.claimName)" }}
{{- end }}
{{- if eq $bench.workload.dataset "sharegpt" }}
{{- if not (hasPrefix (printf "%s/" (trimSuffix "/" $storage.mountPath)) $bench.workload.sharegptPath) }}
{{- $errors = append $errors (printf "benchmark.workload.sharegptPath: %q must be a file inside model.storage.mountPath %q (the model volume is what the Job mounts)" $bench.workload.sharegptPath $storage.mountPath) }}
{{- end }}
{{- end }}
{{- if and (eq $bench.workload.dataset "random") (gt (add (int $bench.workload.inputLen) (int $bench.workload.outputLen)) (int64 .Values.model.maxModelLen)) }}
{{- $errors = append $errors (printf "benchmark.workload: inputLen + outputLen = %d + %d is above model.maxModelLen (%d); the engines would refuse every request (HTTP 400); lower them or raise model.maxModelLen" (int $bench.workload.inputLen) (int $bench.workload.outputLen) (int64 .Values.model.maxModelLen)) }}
{{- end }}
{{- /* With --random-range-ratio r and --random-prefix-len p, the longest request asks for up to
p + ceil(inputLen x (1 + r)) prompt and ceil(outputLen x (1 + r)) output tokens (vllm v0.13.0
vllm/benchmarks/datasets.py RandomDataset.get_sampling_params: input_high, output_high; the
prefix is added to each prompt); the engines refuse those above model.maxModelLen. */ -}}
{{- $args := $bench.args | default dict }}
{{- $ratio := toString (coalesce (get $args "random-range-ratio") (get $args "random_range_ratio") 0) }}
{{- $prefix := toString (coalesce (get $args "random-prefix-len") (get $args "random_prefix_len") 0) }}
{{- if and (eq $bench.workload.dataset "random") (regexMatch "^[0-9]*\\.?[0-9]+$" $ratio) (regexMatch "^[0-9]+$" $prefix) (or (ne $ratio "0") (ne $prefix "0")) }}
{{- $longestIn := add (int $prefix) (int (ceil (mulf (int $bench.workload.inputLen) (addf 1 (float64 $ratio))))) }}
{{- $longestOut := int (ceil (mulf (int $bench.workload.outputLen) (addf 1 (float64 $ratio)))) }}
{{- if and (lt (float64 $ratio) 1.0) (le (add (int $bench.workload.inputLen) (int $bench.workload.outputLen)) (int64 .Values.model.maxModelLen)) (gt (add $longestIn $longestOut) (int64 .Values.model.maxModelLen)) }}
{{- $errors = append $errors (printf "benchmark.args: with random-range-ratio %s and random-prefix-len %s the longest request asks for %d prompt + %d output tokens, above model.maxModelLen (%d); the engines would refuse those requests (HTTP 400), and the run would count them as failed; lower inputLen/outputLen or the ratio, or raise model.maxModelLen" $ratio $prefix $longestIn $longestOut (int64 .Values.model.maxModelLen)) }}
{{- end }}
{{- end }}
{{- if ge (int $bench.readyTimeoutSeconds) (int $bench.activeDeadlineSeconds) }}
{{- $errors = append $errors (printf "benchmark.readyTimeoutSeconds: %d leaves no time for the run within benchmark.activeDeadlineSeconds (%d); the Job would be killed while waiting; lower it or raise activeDeadlineSeconds" (int $bench.readyTimeoutSeconds) (int $bench.activeDeadlineSeconds)) }}
{{- end }}
{{- if and (hasPrefix "/" $bench.tokenizer) (not (hasPrefix (printf "%s/" (trimSuffix "/" $storage.mountPath)) $bench.tokenizer)) }}
{{- $errors = append $errors (printf "benchmark.tokenizer: %q is a path outside model.storage.mountPath %q, the only volume the Job mounts; give a path inside it or a Hugging Face repo id" $bench.tokenizer $storage.mountPath) }}
{{- end }}
{{- if and $bench.tokenizer (not (hasPrefix "/" $bench.tokenizer)) }}
{{- with include "mooncake-pd.validate.model.hfRepoIdProblem" (toString $bench.tokenizer) }}
{{- $errors = append $errors (printf "benchmark.tokenizer: %q %s, so the benchmark's tokenizer load (transformers through huggingface_hub) would stop at once; give a Hugging Face repo id such as Qwen/Qwen2.5-7B-Instruct, or a path inside model.storage.mountPath" (toString $bench.tokenizer) .) }}
{{- end }}
{{- end }}
{{- $rate := toString $bench.workload.requestRate }}
{{- if and (ne $rate "inf") (not (regexMatch "^[0-9]*\\.?[0-9]+$" $rate)) }}
{{- $errors = append $errors (printf "benchmark.workload.requestRate: %q is not a number of requests per second or \"inf\"" $rate) }}
{{- else if and (ne $rate "inf") (eq (float64 $rate) 0.0) }}
{{- $errors = append $errors "benchmark.workload.requestRate: 0 requests per second sends nothing; use a positive number or \"inf\"" }}
{{- end }}
{{- $benchOptions := include "mooncake-pd.vllm.options" (dict "root" $ "list" "bench-serve-flags.json") | fromJson }}
{{- $benchNegatives := include "mooncake-pd.vllm.negatives" (dict "root" $ "list" "bench-serve-flags.json") | fromJson }}
{{- $benchOwned := dict "base-url" "benchmark.baseUrl" "host" "benchmark.baseUrl" "port" "benchmark.baseUrl" "backend" "benchmark.api" "endpoint" "benchmark.api" "model" "model.servedName" "served-model-name" "model.servedName" "tokenizer" "benchmark.tokenizer" "dataset-name" "benchmark.workload.dataset" "dataset-path" "benchmark.workload.sharegptPath" "num-prompts" "benchmark.workload.numPrompts" "request-rate" "benchmark.workload.requestRate" "max-concurrency" "benchmark.workload.maxConcurrency" "seed" "benchmark.workload.seed" "random-input-len" "benchmark.workload.inputLen" "random-output-len" "benchmark.workload.outputLen" "save-result" "(always on: mooncake-pd bench reads the result)" "result-dir" "(the chart's)" "result-filename" "(the chart's)" "ready-check-timeout-sec" "benchmark.readyTimeoutSeconds" }}
{{- range $k, $val := $bench.args }}
{{- $name := replace "_" "-" $k }}
{{- if hasKey $benchOwned $name }}
{{- $errors = append $errors (printf "benchmark.args.%s: the chart sets --%s; %s" $k $name (include "mooncake-pd.validate.ownerFix" (get $benchOwned $name))) }}
{{- else }}
{{- with include "mooncake-pd.vllm.optionProblem" (dict "where" "benchmark.args" "key" $k "value" $val "options" $benchOptions "negatives" $benchNegatives "command" "vllm bench serve" "version" (include "mooncake-pd.profile" $ | fromJson).engine.vllm) }}
{{- $errors = append $errors . }}
{{- end }}
{{- end }}
{{- end }}
{{- $errors = concat $errors (include "mooncake-pd.validate.benchmark.rules" $ | fromJsonArray) }}
{{- end }}
{{- toJson $errors -}}
{{- end }}

{{/*
benchmark.args against the checks `vllm bench serve` makes after parsing, as data in
chart/files/bench-serve-rules.yaml (each rule cites its vLLM file), for the engine version's vLLM.
*/}}
{{- define "mooncake-pd.validate.benchmark.rules" -}}
{{- $errors := list -}}
{{- $bench := .Values.benchmark -}}
{{- $vllm := (include "mooncake-pd.profile" . | fromJson).engine.vllm -}}
{{- $given := dict -}}
{{- range $k, $v := $bench.args | default dict }}{{ if not (kindIs "invalid" $v) }}{{ $_ := set $given (replace "_" "-" $k) (dict "key" $k "value" $v) }}{{ end }}{{ end -}}
{{- $dataset := $bench.workload.dataset -}}
{{- $rate := toString $bench.workload.requestRate -}}
{{- $number := "^-?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?$" -}}
{{- range $rule := (.Files.Get "files/bench-serve-rules.yaml" | fromYaml).rules -}}
{{- $applies := and (semverCompare $rule.vllm $vllm) (or (not $rule.ifDataset) (has $dataset $rule.ifDataset)) -}}
{{- range $flag, $want := $rule.when | default dict }}{{ if ne (toString (dig $flag "value" "" $given)) (toString $want) }}{{ $applies = false }}{{ end }}{{ end -}}
{{- if $applies -}}
{{- range $name := keys $given | sortAlpha -}}
{{- if or (eq $name $rule.option) (and $rule.prefix (hasPrefix $rule.option $name)) -}}
{{- $entry := get $given $name -}}
{{- $key := printf "benchmark.args.%s" $entry.key -}}
{{- $value := $entry.value -}}
{{- $scalar := toString $value -}}
{{- $because := printf "(%s; %s)" $rule.why $rule.source -}}
{{- with $rule.owner -}}
{{- $errors = append $errors (printf "%s: the chart sets the workload from %s %s; set %s instead and drop --%s" $key . $because . $name) -}}
{{- end -}}
{{- range $needed := $rule.needs | default list -}}
{{- if not (hasKey $given $needed) -}}
{{- $errors = append $errors (printf "%s: needs --%s in benchmark.args too %s; add it or drop --%s" $key $needed $because $name) -}}
{{- end -}}
{{- end -}}
{{- if and (eq (toString $rule.requestRate) "inf") (ne $rate "inf") -}}
{{- $errors = append $errors (printf "%s: needs benchmark.workload.requestRate \"inf\" (now %s) %s; set requestRate to \"inf\" or drop --%s" $key $rate $because $name) -}}
{{- else if and (eq (toString $rule.requestRate) "finite") (eq $rate "inf") -}}
{{- $errors = append $errors (printf "%s: needs a finite benchmark.workload.requestRate (now \"inf\") %s; set requestRate to requests per second or drop --%s" $key $because $name) -}}
{{- end -}}
{{- if and $rule.datasets (not (has $dataset $rule.datasets)) -}}
{{- $errors = append $errors (printf "%s: applies to --dataset-name %s, not benchmark.workload.dataset %s %s; drop it" $key (join " or " $rule.datasets) $dataset $because) -}}
{{- end -}}
{{- if regexMatch $number $scalar -}}
{{- if and (hasKey $rule "min") (lt (float64 $scalar) (float64 $rule.min)) -}}
{{- $errors = append $errors (printf "%s: %s is below %v %s; use at least %v" $key $scalar $rule.min $because $rule.min) -}}
{{- end -}}
{{- if and (hasKey $rule "above") (le (float64 $scalar) (float64 $rule.above)) -}}
{{- $errors = append $errors (printf "%s: %s must be above %v %s; use a larger value or drop it" $key $scalar $rule.above $because) -}}
{{- end -}}
{{- if and (hasKey $rule "below") (ge (float64 $scalar) (float64 $rule.below)) -}}
{{- $errors = append $errors (printf "%s: %s must be below %v %s; use a smaller value or drop it" $key $scalar $rule.below $because) -}}
{{- end -}}
{{- with $rule.notAbove -}}
{{- $other := toString (dig . "value" "" $given) -}}
{{- if and (regexMatch $number $other) (gt (float64 $scalar) (float64 $other)) -}}
{{- $errors = append $errors (printf "%s: %s is above --%s %s %s; lower it or raise --%s" $key $scalar . $other $because .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with $rule.pattern -}}
{{- $pattern := . -}}
{{- range $item := ternary $value (list $value) (kindIs "slice" $value) -}}
{{- if not (regexMatch $pattern (toString $item)) -}}
{{- $errors = append $errors (printf "%s: %q is not %s %s; write it so or drop it" $key (toString $item) $rule.form $because) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $errors -}}
{{- end }}
