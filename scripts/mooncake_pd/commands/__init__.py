"""One module per `mooncake-pd` command: its `register(sub)` declares the command's options next
to `run(args)`, the code that carries it out. Only the module of the command being run is
imported (`load`): the others bring in kubernetes-validate, the Kubernetes client or the autoscaler
model, and a command should not wait for them."""

from __future__ import annotations

import importlib
from types import ModuleType

# Each command's one line in `mooncake-pd --help`, in the order listed there.
SUMMARIES = {
    "render": "render the chart, validate every object, write the manifests and print a summary",
    "generate": "write a checked values file for a model from its config.json",
    "update": "rewrite the model-derived keys of a values file, keeping comments and every other key",
    "verify": "check a live release: pods ready, a chat request answered, its KV cache moved (logs or metrics)",
    "preflight": "before helm install: dry-run the release on your cluster, check CRDs, scheduler and fit",
    "bench": "report a release's benchmark (TTFT, TPOT, throughput), save it, compare runs",
    "golden": "regenerate tests/golden/ from the chart defaults and every values/ file",
    "schema": "type the chart's pass-through Kubernetes fields in values.schema.json (Kubernetes v1.34.2's OpenAPI)",
    "docs": "regenerate the values reference docs/values.md from chart/values.schema.json",
    "chartcheck": "check Chart.yaml and that a chart change bumps its version (as ct lint does)",
    "autoscale": "model Kthena's autoscaler offline (simulate)",
    "engines": "read an engine version's option lists, configs and metrics from its own packages",
}
# Commands that write or check the repository's own files: a checkout has them, an installed
# tool does not (`golden` would write into its site-packages).
DEVELOPER = frozenset({"golden", "schema", "docs", "chartcheck", "engines"})


def load(name: str) -> ModuleType:
    """The module of command `name`."""
    return importlib.import_module(f"mooncake_pd.commands.{name}")
