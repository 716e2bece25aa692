"""Kthena's autoscaler as pure functions: replay a metric series through an AutoscalingPolicy.

A model of volcano-sh/kthena at commit 3cc057284c34469fcb0ed22a12dac84b1d120719 (just after
v1.0.0). Every rule cites the Go source it follows, as `file:lines` at that commit, with these
abbreviations:

- types: pkg/apis/workload/v1alpha1/autoscalingpolicy_types.go
- mutator: pkg/autoscaler/webhook/autoscalingpolicy_mutator.go
- validator: pkg/autoscaler/webhook/autoscalingpolicy_validator.go
- controller: pkg/autoscaler/controller/autoscale_controller.go
- dscaler: pkg/autoscaler/autoscaler/disaggregated_scaler.go
- scaler: pkg/autoscaler/autoscaler/scaler.go
- status: pkg/autoscaler/autoscaler/status.go
- collector: pkg/autoscaler/autoscaler/metric_collector.go
- recommendation: pkg/autoscaler/algorithm/recommendation.go
- revision: pkg/autoscaler/algorithm/revision.go
- ratio: pkg/autoscaler/algorithm/disaggregated_ratio.go
- window: pkg/autoscaler/datastructure/sliding_window.go

What the model takes as given: the metric values Kthena would have collected at each reconcile
(for a pod source, the sum over the role's ready entry pods, collector:339 and 443-453; for a
Prometheus source, the query's single value, collector:477-523), the number of not-ready pods,
and that a replica patch is seen by the next reconcile (the controller reads the ModelServing
spec, not the pods: controller:426-448). It does not model pods that failed or restarted
(collector:271-282 then drops that metric for the cycle) nor histogram quantiles (collector:454-471).

The package follows the model's sections, each module importing only from those before it
(tests/test_autoscale_simulate.py checks it): `policy` (the policy, AutoscaleError), `parsing`
(durations, quantities, the policy with its defaults), `samples` (the metric series), `window`
(Kthena's sliding windows, a role's state), `algorithm` (one reconcile, the replay) and `output`
(JSON, the table). The names below are the package's interface.
"""

from __future__ import annotations

from mooncake_pd.autoscale.algorithm import (
    EPOCH_MS,
    INT32_MAX,
    INT32_MIN,
    SYNC_PERIOD_SECONDS,
    RoleTick,
    Tick,
    correct,
    enforce_ratio,
    parse_start,
    recommend,
    record,
    simulate,
    step,
)
from mooncake_pd.autoscale.output import table, ticks_to_json
from mooncake_pd.autoscale.parsing import (
    defaulted_behavior,
    find_policy_spec,
    parse_duration_ms,
    parse_quantity,
    policy_from_spec,
)
from mooncake_pd.autoscale.policy import (
    HOMOGENEOUS_UNIT,
    AutoscaleError,
    Behavior,
    Metric,
    PanicPolicy,
    Policy,
    RatioConstraint,
    Role,
    StablePolicy,
)
from mooncake_pd.autoscale.samples import UNREADY, Sample, parse_series, series_from_rows
from mooncake_pd.autoscale.window import LineWindow, RecordWindow, RoleState, initial_state

# The order of the sections: a module imports only from the ones before it.
SECTIONS = ("policy", "parsing", "samples", "window", "algorithm", "output")

__all__ = [
    "EPOCH_MS",
    "HOMOGENEOUS_UNIT",
    "INT32_MAX",
    "INT32_MIN",
    "SECTIONS",
    "SYNC_PERIOD_SECONDS",
    "UNREADY",
    "AutoscaleError",
    "Behavior",
    "LineWindow",
    "Metric",
    "PanicPolicy",
    "Policy",
    "RatioConstraint",
    "RecordWindow",
    "Role",
    "RoleState",
    "RoleTick",
    "Sample",
    "StablePolicy",
    "Tick",
    "correct",
    "defaulted_behavior",
    "enforce_ratio",
    "find_policy_spec",
    "initial_state",
    "parse_duration_ms",
    "parse_quantity",
    "parse_series",
    "parse_start",
    "policy_from_spec",
    "recommend",
    "record",
    "series_from_rows",
    "simulate",
    "step",
    "table",
    "ticks_to_json",
]
