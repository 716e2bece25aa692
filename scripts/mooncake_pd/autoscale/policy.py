"""Policy model: an AutoscalingPolicy as the simulator holds it, once parsing.py has given it
the API server's and Kthena's webhook defaults. Citations are `file:lines` of
volcano-sh/kthena@3cc0572, abbreviated as listed in mooncake_pd.autoscale."""

from __future__ import annotations

from dataclasses import dataclass

from mooncake_pd.errors import MooncakePdError

# A homogeneousTarget scales the ModelServing's spec.replicas: modelled as one role of this name.
HOMOGENEOUS_UNIT = "replicas"


class AutoscaleError(MooncakePdError):
    """A policy or a metric series the simulator cannot use; the message names the problem."""


@dataclass(frozen=True)
class StablePolicy:
    """types:96-119 (scaleDown, and scaleUp.stablePolicy)."""

    instances: int
    percent: int
    period_ms: int
    select_policy: str
    stabilization_window_ms: int


@dataclass(frozen=True)
class PanicPolicy:
    """types:130-148."""

    percent: int
    period_ms: int
    threshold_percent: int | None
    hold_ms: int


@dataclass(frozen=True)
class Behavior:
    scale_up: StablePolicy
    panic: PanicPolicy
    scale_down: StablePolicy


@dataclass(frozen=True)
class Metric:
    """One metric of a role: its policy key, target value and source kind ("pod" or "prometheus")."""

    name: str
    target: float
    source: str


@dataclass(frozen=True)
class Role:
    name: str
    min_replicas: int
    max_replicas: int
    metrics: tuple[Metric, ...]

    @property
    def fixed(self) -> bool:
        """dscaler:269-271: min == max (> 0) is a fixed role, never autoscaled."""
        return self.max_replicas > 0 and self.min_replicas == self.max_replicas


@dataclass(frozen=True)
class RatioConstraint:
    numerator: str
    denominator: str
    min_ratio: float
    max_ratio: float


@dataclass(frozen=True)
class Policy:
    """target is "disaggregated" (roles of one ModelServing) or "homogeneous" (its spec.replicas,
    modelled as one unit named `replicas`)."""

    target: str
    tolerance_percent: int
    behavior: Behavior
    roles: tuple[Role, ...]
    ratio: RatioConstraint | None = None

    def role(self, name: str) -> Role:
        for r in self.roles:
            if r.name == name:
                return r
        raise AutoscaleError(f"policy has no role {name!r}")
