{{/*
Rules of the engines' settings: env and vllm serve flags the chart derives itself (set their
values key instead), vLLM's own options of the profile's engine version, and the recompute
scheduler.
*/}}
{{- define "mooncake-pd.validate.engine" -}}
{{- $errors := list -}}
{{- $table := include "mooncake-pd.profile.table" . | fromJson -}}
{{- $profile := include "mooncake-pd.profile" . | fromJson -}}
{{- $roles := list "prefill" "decode" -}}
{{- /* Derived settings the chart owns: the values key to set instead ("(source)" for what
comes from the pod or Kthena; <role> is the role's own key). */ -}}
{{- $ownedArgs := dict
  "model" "model.path" "host" "(the pod IP)" "port" "<role>.port"
  "data-parallel-size" "<role>.parallelism.data" "data-parallel-size-local" "<role>.parallelism.dataLocal"
  "data-parallel-address" "(the pod IP)" "data-parallel-rpc-port" "<role>.dataParallelRpcPort"
  "tensor-parallel-size" "<role>.parallelism.tensor" "served-model-name" "model.servedName"
  "max-model-len" "model.maxModelLen" "hf-overrides" "model.hfOverrides"
  "kv-transfer-config" "kvTransfer and <role>.kvPort" "headless" "<role>.workerReplicas (workers run headless)"
  "data-parallel-start-rank" "<role>.workerReplicas and <role>.parallelism.dataLocal"
  "pipeline-parallel-size" "(the chart: its device count and Mooncake port ranges assume pipeline parallel 1; use tensor and data parallel)" -}}
{{- $ownedEnv := dict
  "MOONCAKE_ENGINE_ID" "(Kthena's group and role labels)"
  "ROLE" "<role>.name" "GROUP_NAME" "(Kthena's group label)" "ROLE_ID" "(Kthena's role-id label)"
  "ENGINE_ID" "(the pod name)" "POD_IP" "(the pod IP)" "NODE_IP" "(the node IP)" "MODEL_LOCATION" "model.path"
  "TP_SIZE" "<role>.parallelism.tensor" "DP_SIZE" "<role>.parallelism.data"
  "GROUP_SIZE" "(Kthena: <role>.workerReplicas + 1)" "ENTRY_ADDRESS" "(Kthena: the entry pod)" "WORKER_INDEX" "(Kthena: the pod's index)"
  "MOONCAKE_PD_ROOT" "(the node: the preflight reads the node's own files)"
  "VLLM_HOST_IP" "(the pod IP)" -}}
{{- /* ... and every variable a profile derives: NIC sockets, its values section's variables,
the connectors' side-channel variables (profiles.yaml), whichever profile is chosen. */ -}}
{{- range $family, $row := $table.families }}
{{- range $row.nic.addressEnv }}{{ $_ := set $ownedEnv . "(the pod IP)" }}{{ end }}
{{- range $row.nic.interfaceEnv }}{{ $_ := set $ownedEnv . "network.interface" }}{{ end }}
{{- range $name, $key := $row.valuesEnv }}{{ $_ := set $ownedEnv $name (printf "accelerator.%s.%s" $family $key) }}{{ end }}
{{- end }}
{{- range $version, $engine := $table.engines }}
{{- range $connector, $row := $engine.connectors }}
{{- with $row.portEnv }}{{ $_ := set $ownedEnv . "<role>.kvPort" }}{{ end }}
{{- with $row.hostEnv }}{{ $_ := set $ownedEnv . "(the pod IP)" }}{{ end }}
{{- end }}
{{- end }}
{{- /* Every env map that reaches a start script: (where, the role it belongs to or "", the
map); a family's values section reaches them where its profile says so (settingsEnv). */ -}}
{{- $sections := list }}
{{- range $family, $row := $table.families }}
{{- if $row.settingsEnv }}{{ $sections = append $sections $family }}{{ end }}
{{- end }}
{{- $envMaps := list (list "engine.env" "" .Values.engine.env) }}
{{- range $family := $sections }}
{{- $envMaps = append $envMaps (list (printf "accelerator.%s.env" $family) "" ((get $.Values.accelerator $family | default dict).env | default dict)) }}
{{- end }}
{{- range $role := $roles }}
{{- $envMaps = append $envMaps (list (printf "%s.env" $role) $role (index $.Values $role).env) }}
{{- range $family := $sections }}
{{- $envMaps = append $envMaps (list (printf "accelerator.%s.roleEnv.%s" $family $role) $role (get ((get $.Values.accelerator $family | default dict).roleEnv | default dict) $role)) }}
{{- end }}
{{- end }}
{{- /* Variables the release's engine version no longer reads, and what replaced them
(profiles.yaml connectors' obsoleteEnv: VLLM_NIXL_ABORT_REQUEST_TIMEOUT on vLLM-Ascend >= v0.18.0). */ -}}
{{- $obsolete := (include "mooncake-pd.profile.connectorData" . | fromJson).obsoleteEnv | default dict }}
{{- range $entry := $envMaps }}
{{- $where := index $entry 0 }}
{{- $role := index $entry 1 }}
{{- range $k, $_ := index $entry 2 | default dict }}
{{- if hasKey $obsolete $k }}
{{- $errors = append $errors (printf "%s.%s: %s with %s no longer reads it (engine.version %s, %s); use %s" $where $k (include "mooncake-pd.profile.connector" $) (default (printf "vLLM %s" $profile.engine.vllm) (and $profile.engine.vllmAscend (printf "vLLM-Ascend %s" $profile.engine.version))) $profile.engine.version $profile.engine.versionFrom (get $obsolete $k)) }}
{{- end }}
{{- if hasKey $ownedEnv $k }}
{{- $owner := ternary (replace "<role>" $role (get $ownedEnv $k)) (get $ownedEnv $k) (ne $role "") }}
{{- $errors = append $errors (printf "%s.%s: the chart derives %s; %s" $where $k $k (include "mooncake-pd.validate.ownerFix" $owner)) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* The recompute scheduler is engine.recomputeScheduler, tied to the router. */ -}}
{{- if eq (toString .Values.engine.recomputeScheduler) "true" }}
{{- if ne .Values.router.type "proxy" }}
{{- $errors = append $errors (printf "engine.recomputeScheduler: true needs router.type proxy (now %s): decode hands requests it has no KV cache for back with stop reason \"recomputed\", and only the vLLM-Ascend PD proxy re-sends them; the Kthena router passes the truncated answer to the client. Use auto or false" .Values.router.type) }}
{{- else if not $profile.recomputeScheduler }}
{{- $errors = append $errors (printf "engine.recomputeScheduler: true is a vLLM-Ascend setting, but accelerator.type is %s; use auto or false" .Values.accelerator.type) }}
{{- end }}
{{- end }}
{{- /* vllm serve flags in args (and the guide's in <role>.guideArgs): the chart's own (set
their values key instead), and vLLM's own options of the engine version (a misspelt flag fails
at start). */ -}}
{{- $serveOptions := include "mooncake-pd.vllm.options" (dict "root" $ "list" "serve-flags.json") | fromJson }}
{{- $serveNegatives := include "mooncake-pd.vllm.negatives" (dict "root" $ "list" "serve-flags.json") | fromJson }}
{{- range $path := list "engine.args" "prefill.args" "decode.args" "prefill.guideArgs" "decode.guideArgs" }}
{{- $section := first (splitList "." $path) }}
{{- $args := get (index $.Values $section) (last (splitList "." $path)) | default dict }}
{{- $additional := get $args "additional-config" }}
{{- if and (kindIs "map" $additional) (hasKey $additional "recompute_scheduler_enable") }}
{{- $errors = append $errors (printf "%s.additional-config.recompute_scheduler_enable: the chart sets it from engine.recomputeScheduler (auto: on with the vLLM-Ascend PD proxy); set that instead and remove this key" $path) }}
{{- end }}
{{- range $k, $val := $args }}
{{- if hasKey $ownedArgs $k }}
{{- $owner := ternary (get $ownedArgs $k) (replace "<role>" $section (get $ownedArgs $k)) (eq $section "engine") }}
{{- $errors = append $errors (printf "%s.%s: the chart derives --%s; %s" $path $k $k (include "mooncake-pd.validate.ownerFix" $owner)) }}
{{- else }}
{{- with include "mooncake-pd.vllm.optionProblem" (dict "where" $path "key" $k "value" $val "options" $serveOptions "negatives" $serveNegatives "command" "vllm serve" "version" $profile.engine.vllm) }}
{{- $errors = append $errors . }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- /* A restarted prefill that waits before its engine starts (profiles.yaml restartQuietSeconds)
must not be restarted by kubelet while it waits: the probe that judges a starting container
(startupProbe, else livenessProbe) must allow longer, or the container restarts forever.
Kubernetes' defaults where a field is unset: initialDelaySeconds 0, periodSeconds 10,
failureThreshold 3 (k8s.io/api core/v1 types.go, Probe). */ -}}
{{- $quiet := int (include "mooncake-pd.script.restartQuietSeconds" (dict "root" $ "role" "prefill")) }}
{{- if gt $quiet 0 }}
{{- $name := ternary "startupProbe" "livenessProbe" (not (empty .Values.engine.startupProbe)) }}
{{- with get .Values.engine $name }}
{{- $period := int (.periodSeconds | default 10) }}
{{- $allowed := add (int (.initialDelaySeconds | default 0)) (mul $period (int (.failureThreshold | default 3))) }}
{{- if le (int $allowed) $quiet }}
{{- $errors = append $errors (printf "engine.%s: kubelet restarts an engine that has not answered within %d s (initialDelaySeconds + periodSeconds x failureThreshold), but a restarted prefill waits %d s before its engine starts (%s at engine.version %s: profiles.yaml restartQuietSeconds; docs/failure-modes.md, \"With Mooncake\"), so it would be restarted forever; allow the wait and the model's load, e.g. failureThreshold %d at periodSeconds %d" $name (int $allowed) $quiet (include "mooncake-pd.profile.connector" $) $profile.engine.version (int (div (add $quiet 600 $period -1) $period)) $period) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}

{{/* The fix for a setting the chart owns: "set <key> instead and remove this key", or for one
that comes from the pod or Kthena, "(source)", "it comes from <source>; remove this key". */}}
{{- define "mooncake-pd.validate.ownerFix" -}}
{{- if hasPrefix "(" . -}}
{{- printf "it comes from %s; remove this key" (trimSuffix ")" (trimPrefix "(" .)) -}}
{{- else -}}
{{- printf "set %s instead and remove this key" . -}}
{{- end -}}
{{- end }}
