{{/*
Rules of the sidecars (engine.extraContainers) that the API server checks on the Pod Kthena
creates from a ModelServing, where a refusal shows only as Kthena's failed pod creation (k8s.io/
kubernetes v1.34.2 pkg/apis/core/validation/validation.go validateContainers ->
validateContainerCommon): an image (validateContainers: "image: Required value") the kubelet
can parse (InvalidImageName otherwise: the API server admits it), port names
that are IANA service names (validateContainerPorts -> ValidatePortName -> IsValidPortName: at
most 15 characters, lowercase letters, digits and '-', a letter among them, no '-' at either end
or twice in a row) and unique within the container, and env entries as ValidateEnv ->
validateEnvVarValueFrom has them (a value or one source, not both; a fieldRef to one of the
fields the env downward API offers, validEnvDownwardAPIFieldPathExpressions, or one label or
annotation by key: metadata.labels['key'], never the whole map). The engine containers' own
checks reach the sidecars in their groups: requests and limits (validate.resources), security
context pairs (validate.security), names, mounts and ports against the engine's
(validate.pods).
*/}}
{{- define "mooncake-pd.validate.sidecars" -}}
{{- $errors := list -}}
{{- /* An image reference as the kubelet parses it (github.com/distribution/reference regexp.go,
which ParseNormalizedNamed applies): [domain[:port]/]path[:tag][@digest], each path component
lowercase; a first component with an upper-case letter counts as a domain, as there. */ -}}
{{- $component := "[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*" -}}
{{- $domain := "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:[.](?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?" -}}
{{- $reference := printf "^(?:%s/)?%s(?:/%s)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$" $domain $component $component -}}
{{- $envFields := list "metadata.name" "metadata.namespace" "metadata.uid" "spec.nodeName" "spec.serviceAccountName" "status.hostIP" "status.hostIPs" "status.podIP" "status.podIPs" -}}
{{- range $i, $container := .Values.engine.extraContainers | default list }}
{{- $key := printf "engine.extraContainers[%d]" $i }}
{{- if not $container.image }}
{{- $errors = append $errors (printf "%s.image: not set, and the API server refuses a container without an image (the pod is never created); give the sidecar's image" $key) }}
{{- else if not (regexMatch $reference (toString $container.image)) }}
{{- $errors = append $errors (printf "%s.image: %q is not an image reference the kubelet can parse (distribution/reference: lowercase repository path, optional :tag and @digest), so the pod never starts (InvalidImageName); write the repository in lowercase, e.g. %q" $key (toString $container.image) (lower (toString $container.image))) }}
{{- end }}
{{- $names := dict }}
{{- range $j, $port := $container.ports | default list }}
{{- with $port.name }}
{{- $name := toString . }}
{{- if or (gt (len $name) 15) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name)) (contains "--" $name) (not (regexMatch "[a-z]" $name)) }}
{{- $errors = append $errors (printf "%s.ports[%d].name: %q is not an IANA service name (at most 15 characters, lowercase letters, digits and '-', at least one letter, no '-' at either end or twice in a row), which the API server refuses for a port name; rename it, e.g. %q" $key $j $name (regexReplaceAll "-+" (regexReplaceAll "[^a-z0-9-]+" (lower $name) "-") "-" | trunc 15 | trimAll "-" | default "port")) }}
{{- end }}
{{- if hasKey $names $name }}
{{- $errors = append $errors (printf "%s.ports[%d].name: %q is also the name of ports[%d], which the API server refuses within a container; give each port its own name" $key $j $name (get $names $name)) }}
{{- end }}
{{- $_ := set $names $name $j }}
{{- end }}
{{- end }}
{{- range $j, $env := $container.env | default list }}
{{- $where := printf "%s.env[%d]" $key $j }}
{{- if not $env.name }}
{{- $errors = append $errors (printf "%s.name: empty, which the API server refuses; name the variable" $where) }}
{{- end }}
{{- with $env.valueFrom }}
{{- $sources := list }}
{{- range $source := list "fieldRef" "resourceFieldRef" "configMapKeyRef" "secretKeyRef" "fileKeyRef" }}{{ if get $env.valueFrom $source }}{{ $sources = append $sources $source }}{{ end }}{{ end }}
{{- if $env.value }}
{{- $errors = append $errors (printf "%s: both value and valueFrom, which the API server refuses (\"may not be specified when `value` is not empty\"); keep one" $where) }}
{{- end }}
{{- if ne (len $sources) 1 }}
{{- $errors = append $errors (printf "%s.valueFrom: %s, and the API server requires exactly one source (fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef or fileKeyRef); keep one" $where (ternary "no source" (printf "%d sources (%s)" (len $sources) (join ", " $sources)) (eq (len $sources) 0))) }}
{{- end }}
{{- with .fieldRef }}
{{- $path := toString .fieldPath }}
{{- if not (or (has $path $envFields) (regexMatch "^metadata[.](labels|annotations)\\['[^']+'\\]$" $path)) }}
{{- $hint := ternary (printf "; name one key: %s['<key>']" $path) "" (has $path (list "metadata.labels" "metadata.annotations")) | default "; read one of those" }}
{{- $errors = append $errors (printf "%s.valueFrom.fieldRef.fieldPath: %q is not a field the API server lets an env variable read (%s, metadata.labels['<key>'], metadata.annotations['<key>']; a whole map only through a downwardAPI volume)%s" $where $path (join ", " $envFields) $hint) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors -}}
{{- end }}
