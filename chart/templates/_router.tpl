{{/*
Where clients reach the release: the PD proxy's Service or the Kthena router.
*/}}

{{/* The base URL of the release's router: the proxy Service or the Kthena router. */}}
{{- define "mooncake-pd.router.url" -}}
{{- if eq .Values.router.type "kthena" -}}
{{- printf "http://kthena-router.%s.svc:%d" .Values.router.kthena.namespace (int .Values.router.kthena.servicePort) -}}
{{- else -}}
{{- printf "http://%s-proxy.%s.svc:%d" (include "mooncake-pd.names.fullname" .) .Release.Namespace (int .Values.proxy.port) -}}
{{- end -}}
{{- end }}

{{/* The URL clients use for chat completions. */}}
{{- define "mooncake-pd.router.chatURL" -}}
{{- printf "%s/v1/chat/completions" (include "mooncake-pd.router.url" .) -}}
{{- end }}

{{/* Every prefill and decode instance behind its replica Service (services-replicas.yaml), as
JSON: {"prefill": [{"name", "host", "port"}], "decode": [...]}, serving groups in order. The
proxy's host lists and the KV canary's pairs. */}}
{{- define "mooncake-pd.router.replicaEndpoints" -}}
{{- $endpoints := dict -}}
{{- range $role := list "prefill" "decode" -}}
{{- $v := index $.Values $role -}}
{{- $instances := list -}}
{{- range $group := until (int $.Values.servingGroups) -}}
{{- range $replica := until (int $v.replicas) -}}
{{- $svc := include "mooncake-pd.names.replicaService" (dict "root" $ "group" $group "roleName" $v.name "replica" $replica) -}}
{{- $instances = append $instances (dict "name" $svc "host" (printf "%s.%s.svc" $svc $.Release.Namespace) "port" (int $v.port)) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $endpoints $role $instances -}}
{{- end -}}
{{- toJson $endpoints -}}
{{- end }}
