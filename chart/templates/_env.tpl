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
