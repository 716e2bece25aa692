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
{{- end }}
{{- toJson $errors -}}
{{- end }}
