"""What preflight's checks share: the findings report (key: problem; fix), its errors, the Api they
ask the cluster through, and the kinds and names they look for."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from mooncake_pd.errors import FAILED, MooncakePdError

KTHENA_VERSION_ANNOTATION = "mooncake-pd/kthena-version"


MODELSERVING_CRD = "modelservings.workload.serving.volcano.sh"


PODGROUP = ("scheduling.volcano.sh/v1beta1", "PodGroup")


QUEUE = ("scheduling.volcano.sh/v1beta1", "Queue")


QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


RBAC_FILE = "examples/rbac/mooncake-pd-preflight.yaml"


MANAGER = "mooncake-pd-preflight"


# The values key that renders each kind the cluster must serve, what installs it, and how.
INSTALLS = {
    "ModelServing": ("kthena.version", "Kthena", "install Kthena (README, 'Install Kthena')"),
    "ModelServer": ("router.type", "Kthena's router CRDs", "install Kthena with its router, or set router.type=proxy"),
    "ModelRoute": ("router.type", "Kthena's router CRDs", "install Kthena with its router, or set router.type=proxy"),
    "AutoscalingPolicy": ("autoscaling.enabled", "Kthena", "install Kthena, or set autoscaling.enabled=false"),
    "PodMonitor": (
        "metrics.podMonitor.enabled",
        "the Prometheus Operator",
        "install the Prometheus Operator (kube-prometheus-stack), or set metrics.podMonitor.enabled=false",
    ),
    "PrometheusRule": (
        "metrics.prometheusRule.enabled",
        "the Prometheus Operator",
        "install the Prometheus Operator (kube-prometheus-stack), or set metrics.prometheusRule.enabled=false",
    ),
}


# The values key of each rendered workload whose pods a controller creates.
WORKLOAD_KEYS = {"Deployment": "proxy", "Job": "benchmark", "CronJob": "test.kvCanary.cronJob", "Pod": "test"}


# Pod Security's baseline checks, as their messages name them (kubernetes v1.34.2
# staging/src/k8s.io/pod-security-admission/policy/check_*.go): a pod refused on one of them
# needs `privileged`; one refused on restricted checks only, `baseline`.
BASELINE_CHECKS = (
    "host namespaces",
    "hostPath volumes",
    "privileged",
    "non-default capabilities",
    "hostPort",
    "procMount",
    "seLinuxOptions",
    "forbidden sysctls",
    "forbidden AppArmor profile",
)


SCHEDULER_FLAG = re.compile(r"^--scheduler-name(?:=(?P<value>.*))?$")


class PreflightError(MooncakePdError):
    """No cluster, or the cluster cannot be asked at all (exit 2)."""


class Forbidden(MooncakePdError):
    """The user may not read what a check needs (HTTP 403). The checks turn it into an `RBAC:`
    finding; one that escaped them would be a failed check."""

    exit_code = FAILED


@dataclass(frozen=True)
class Finding:
    key: str
    problem: str
    fix: str

    def line(self) -> str:
        return f"{self.key}: {self.problem}; {self.fix}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    groups_fit: int | None = None

    @property
    def ok(self) -> bool:
        return not self.findings

    def lines(self) -> list[str]:
        return [f.line() for f in self.findings]

    def to_json(self) -> str:
        return json.dumps(
            {
                "ok": self.ok,
                "findings": [{**asdict(f), "line": f.line()} for f in self.findings],
                "notes": self.notes,
                "servingGroupsThatFit": self.groups_fit,
            },
            indent=2,
        )


class Api(Protocol):
    """What the checks ask of the cluster. get/list raise Forbidden on 403."""

    def served(self, api_version: str, kind: str) -> bool: ...

    def dry_run(self, obj: dict[str, Any]) -> str | None:
        """None when admitted, else the API server's message."""
        ...

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]: ...
