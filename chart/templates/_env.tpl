{{/*
Environment shared by containers.
*/}}

{{/* Env of every CPU-only Python container the chart starts in the vLLM-Ascend image (proxy,
model download, helm test, benchmark). torch auto-loads the installed torch_npu backend on
`import torch` (torch/__init__.py _import_device_backends), and torch_npu cannot load without the
Ascend driver, which only accelerator pods mount: "RuntimeError: Failed to load the backend
extension: torch_npu". vllm and modelscope import torch. */}}
{{- define "mooncake-pd.env.cpuPython" -}}
- name: TORCH_DEVICE_BACKEND_AUTOLOAD
  value: "0"
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- end }}

{{/* Env of the engine containers with accelerator.rdma on (nothing when off): the variables of
mooncake-pd.profile.rdma (NCCL_IB_DISABLE=0 and the NCCL/UCX variables taken from values, the
profile's list), then MOONCAKE_PD_RDMA, which tells the preflight to check the node's RDMA
devices and which values key gives them. Container env, not start-script exports: the start
script's exports come after and would win, so validate.accelerator refuses engine.env and
<role>.env naming one of these. Context: the root. */}}
{{- define "mooncake-pd.env.rdma" -}}
{{- $rdma := include "mooncake-pd.profile.rdma" . | fromJson -}}
{{- if $rdma -}}
{{- range $rdma.env }}
- name: {{ .name }}
  value: {{ .value | toJson }}
{{- end }}
- name: MOONCAKE_PD_RDMA
  value: {{ dict "resource" $rdma.resource "mountInfiniband" $rdma.mountInfiniband | toJson | toJson }}
{{- end -}}
{{- end }}

{{/* The env names the engine pod template sets itself (mooncake-pd.podtemplate.engine, before
any accelerator.rdma variable), for the rules that keep values from naming them. JSON list. */}}
{{- define "mooncake-pd.env.engineOwn" -}}
{{- toJson (list "ROLE" "GROUP_NAME" "ROLE_ID" "ENGINE_ID" "POD_IP" "NODE_IP" "MODEL_LOCATION" "TP_SIZE" "DP_SIZE" "MOONCAKE_PD_RDMA" "VLLM_API_KEY") -}}
{{- end }}

{{/* The engines' API key (engine.apiKeySecret) as the variable `name`, from its Secret: VLLM_API_KEY in
the engines (vLLM reads it where --api-key is unset: vllm/entrypoints/openai/api_server.py
v0.13.0 ~1021), OPENAI_API_KEY in the chart's clients (what vLLM-Ascend's proxy and `vllm bench
serve` send as `Authorization: Bearer`, and chat_check.py and kv_canary.py too). Nothing without
a key. (dict "root" $ "name" NAME) */}}
{{- define "mooncake-pd.env.apiKey" -}}
{{- with .root.Values.engine.apiKeySecret.name }}
- name: {{ $.name }}
  valueFrom:
    secretKeyRef:
      name: {{ . | toJson }}
      key: {{ $.root.Values.engine.apiKeySecret.key | toJson }}
{{- end }}
{{- end }}
