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
