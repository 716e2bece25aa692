"""The fleet measurements' judgement (harness.scale_judgement; harness/scale.py runs the fleet, `make
scale`): percentiles, the growth fit, the bounds table of docs/scale.md, and the rollout,
autoscaling and placement judgements on made-up timelines."""

from __future__ import annotations

import math

import pytest

from harness import growth, pod_timeline, scale_judgement
from mooncake_pd import paths


def test_percentiles_interpolate_between_ranks():
    assert growth.percentile([1, 2, 3, 4], 50) == 2.5
    assert growth.percentile([4, 1, 3, 2], 0) == 1 and growth.percentile([4, 1, 3, 2], 100) == 4
    assert growth.percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert growth.percentile([7.0], 90) == 7.0
    with pytest.raises(ValueError):
        growth.percentile([], 50)
    with pytest.raises(ValueError):
        growth.percentile([1], 101)
    assert growth.summary([1, 2, 3, 4]) == {"n": 4, "p50": 2.5, "p90": 3.7, "p99": 3.97, "max": 4}
    assert growth.summary([]) == {"n": 0}


def test_the_fit_finds_the_exponent_and_flags_growth_worse_than_linear():
    n = [25, 50, 100, 200]
    linear = growth.fit(n, [3 + 0.5 * x for x in n])
    assert linear.slope == pytest.approx(0.5) and linear.intercept == pytest.approx(3)
    assert linear.r2_linear == pytest.approx(1)
    assert linear.exponent < 1  # a fixed part makes log-log flatter than 1
    assert not growth.worse_than_linear(linear, 1.0)
    square = growth.fit(n, [0.01 * x**2 for x in n])
    assert square.exponent == pytest.approx(2) and square.coefficient == pytest.approx(0.01)
    assert square.r2_power == pytest.approx(1)
    assert growth.worse_than_linear(square, 1.3)
    # A token bucket's burst (10 pods at once, then 5 a second) steepens the fit over all sizes;
    # the slope between the two largest reads the growth where it is measured.
    bucket = [max(0.5, (2 * x - 10) / 5) for x in n]
    assert growth.fit(n, bucket).exponent > growth.local_exponent(n, bucket) > 1
    assert growth.local_exponent(n, bucket) == pytest.approx(math.log(78 / 38) / math.log(2))
    assert growth.local_exponent([200, 25, 100, 50], [0.04 * 200**2, 1, 0.04 * 100**2, 1]) == pytest.approx(2)
    with pytest.raises(ValueError):
        growth.local_exponent([10], [1])
    with pytest.raises(ValueError):
        growth.fit([10, 10], [1, 2])
    with pytest.raises(ValueError):
        growth.fit([10, 20], [0, 2])


def test_the_bounds_table_is_read_from_docs_and_judged():
    text = "\n".join([
        "| Figure | What | Measured | full | quick |",
        "| --- | --- | --- | --- | --- |",
        "| `rollout-s` | seconds | 120 | 300 | 60.5 |",
        "| `autoscale-ratio-violations` | count | 0 | 0 | 0 |",
        "| not a figure | x | 1 | 2 | 3 |",
    ])  # fmt: skip
    limits = scale_judgement.bounds(text)
    assert limits == {
        "rollout-s": scale_judgement.Bound(300, 60.5),
        "autoscale-ratio-violations": scale_judgement.Bound(0, 0),
    }
    assert scale_judgement.broken({"rollout-s": 200, "autoscale-ratio-violations": 0}, limits, quick=False) == []
    assert scale_judgement.broken({"rollout-s": 200}, limits, quick=True) == ["rollout-s: 200, documented at most 60.5"]
    assert scale_judgement.broken({"autoscale-ratio-violations": 1}, limits, quick=False) == [
        "autoscale-ratio-violations: 1, documented at most 0"
    ]
    assert scale_judgement.broken({"rollout-s": None}, limits, quick=False) == [
        "rollout-s: not measured (documented at most 300)"
    ]
    assert scale_judgement.broken({"unbounded": 1e9}, limits, quick=False) == []


def test_docs_scale_bounds_every_figure_the_script_judges():
    limits = scale_judgement.read_bounds(paths.REPO / "docs" / "scale.md")
    for name in (
        "bringup-all-running-s",
        "bringup-growth-exponent",
        "rollout-groups-down-over-max-unavailable",
        "rollout-groups-serving-two-revisions",
        "autoscale-ratio-violations",
        "short-idle-nodes",
    ):
        assert name in limits, name
    for name in ("rollout-groups-down-over-max-unavailable", "rollout-groups-serving-two-revisions"):
        assert limits[name] == scale_judgement.Bound(0, 0), name


def ev(t, name, group, role, revision, serving=True, terminating=False, gone=False, node=""):
    return pod_timeline.PodEvent(t, name, group, role, revision, serving, terminating, gone, node)


def test_bring_up_times_a_group_by_its_last_pod():
    events = [
        ev(10, "g0-p", "g0", "prefill", "r1", serving=False),
        ev(10.5, "g0-p", "g0", "prefill", "r1", serving=False, node="n0"),
        ev(11, "g0-p", "g0", "prefill", "r1", node="n0"),
        ev(12, "g0-d", "g0", "decode", "r1"),
        ev(12, "g1-p", "g1", "prefill", "r1"),
        ev(13, "g1-p", "g1", "prefill", "r1"),  # seen again: its first time counts
        ev(20, "g1-d", "g1", "decode", "r1"),
    ]
    judged = pod_timeline.bring_up(events, expected_pods=4, pods_per_group=2, since=10)
    assert judged.pods == {"g0-p": 1, "g0-d": 2, "g1-p": 2, "g1-d": 10}
    assert judged.created == {"g0-p": 0, "g0-d": 2, "g1-p": 2, "g1-d": 10}
    assert judged.as_dict()["pods_created_per_s"] == 0.3  # 3 more pods in 10 s
    assert pod_timeline.rate([5]) is None and pod_timeline.rate([1, 1]) is None and pod_timeline.rate([0, 1, 2]) == 1
    assert judged.groups == {"g0": 2, "g1": 10} and judged.all_s == 10 and judged.missing_pods == 0
    assert judged.bound == {"g0-p": 0.5}
    partial = pod_timeline.bring_up(events[:5], expected_pods=4, pods_per_group=2, since=10)
    assert partial.all_s is None and partial.missing_pods == 1 and partial.groups == {"g0": 2}


def groups_of(n):
    return [
        ev(0, f"g{g}-{role}-old", f"g{g}", role, "old") for g in range(n) for role in ("prefill", "decode")
    ]  # fmt: skip


def roll_group(t, g, new=None, overlap=False):
    """Group g replaced by group `new` (Kthena makes it again under a new ordinal; the same one
    for the first): its old pods terminate and go, the new ones come (overlap: the new decode
    serves while the old prefill still does, not yet terminating). A new pod serving beside an
    old one that terminates is no overlap: the router drops terminating pods."""
    new = g if new is None else new
    out = [ev(t, f"g{g}-decode-old", f"g{g}", "decode", "old", terminating=True)]
    if overlap:
        out.append(ev(t + 0.5, f"g{new}-decode-new", f"g{new}", "decode", "new"))
    else:
        out.append(ev(t + 0.2, f"g{new}-decode-new", f"g{new}", "decode", "new", serving=False))
    out += [ev(t + 0.7, f"g{g}-prefill-old", f"g{g}", "prefill", "old", terminating=True)]
    out += [
        ev(t + 1, f"g{g}-prefill-old", f"g{g}", "prefill", "old", terminating=True, gone=True),
        ev(t + 1, f"g{g}-decode-old", f"g{g}", "decode", "old", terminating=True, gone=True),
        ev(t + 2, f"g{new}-prefill-new", f"g{new}", "prefill", "new", serving=False),
        ev(t + 3, f"g{new}-prefill-new", f"g{new}", "prefill", "new"),
    ]
    if not overlap:
        out.append(ev(t + 3, f"g{new}-decode-new", f"g{new}", "decode", "new"))
    return out


ROLES = {"prefill": 1, "decode": 1}


def test_a_rollout_one_group_at_a_time_keeps_one_down_and_ends_on_the_new_revision():
    # As Kthena v1.0.0 rolls three groups: the last under its own ordinal, then new ordinals.
    initial = groups_of(3)
    events = roll_group(10, 2) + roll_group(20, 1, new=3) + roll_group(30, 0, new=4)
    judged = pod_timeline.rollout(initial, events, ROLES, 3, "new", since=10)
    assert judged.most_down == 1 and judged.mixed == {}
    assert judged.done_s == 23 and judged.groups_updated == 3
    assert judged.down_series == [(0.0, 0), (0, 1), (3, 0), (10, 1), (13, 0), (20, 1), (23, 0)]


def test_a_rollout_that_takes_two_groups_down_at_once_is_seen():
    initial = groups_of(3)
    events = sorted(roll_group(10, 2) + roll_group(10.5, 1, new=3) + roll_group(30, 0, new=4), key=lambda e: e.t)
    judged = pod_timeline.rollout(initial, events, ROLES, 3, "new", since=10)
    assert judged.most_down == 2 and judged.most_down_at == pytest.approx(0.5)


def test_a_group_serving_prefill_and_decode_of_two_revisions_is_named():
    initial = groups_of(2)
    events = roll_group(10, 1, overlap=True) + roll_group(20, 0, new=2)
    judged = pod_timeline.rollout(initial, events, ROLES, 2, "new", since=10)
    assert list(judged.mixed) == ["g1"] and judged.mixed["g1"] == pytest.approx(0.5)
    # The overlapping group is down meanwhile: its revisions differ.
    assert judged.most_down == 1
    # A new group under a new ordinal never shares a name with old pods.
    assert pod_timeline.rollout(initial, roll_group(10, 1, new=2, overlap=True), ROLES, 2, "new").mixed == {}


def test_a_rollout_that_does_not_finish_has_no_end():
    initial = groups_of(2)
    judged = pod_timeline.rollout(initial, roll_group(10, 1), ROLES, 2, "new")
    assert judged.done_s is None and judged.groups_updated == 1
    # A group missing from the start counts as down.
    assert pod_timeline.rollout(groups_of(1), [], ROLES, 2, "old").most_down == 1


def test_max_unavailable_as_kthena_scales_it():
    assert pod_timeline.max_unavailable(3, 200) == 3
    assert pod_timeline.max_unavailable("10%", 200) == 20
    assert pod_timeline.max_unavailable("10%", 15) == 1  # rounded down
    assert pod_timeline.max_unavailable("10%", 9) == 0  # Kthena then rolls nothing
    assert pod_timeline.max_unavailable("4", 10) == 4


def test_autoscaling_steps_their_ratio_and_settling():
    r = scale_judgement.Replicas
    observed = [
        r(0, 1, 1, 1, 1),
        r(15, 1, 2, 1, 1),
        r(16, 1, 2, 1, 2),
        r(30, 2, 4, 1, 2),
        r(33, 2, 4, 2, 4),
        r(45, 1, 4, 2, 4),  # prefill dropped under the band: 0.25
        r(60, 2, 4, 2, 4),
    ]
    found = scale_judgement.steps(observed, 0.5, 1.5)
    assert [(s.before, s.after) for s in found] == [
        ((1, 1), (1, 2)),
        ((1, 2), (2, 4)),
        ((2, 4), (1, 4)),
        ((1, 4), (2, 4)),
    ]
    assert [s.since_previous_s for s in found] == [15, 15, 15, 15]
    assert [s.settled_s for s in found] == [1, 3, None, 0]
    assert [s.within for s in found] == [True, True, False, True]
    assert scale_judgement.ratio_violations(observed, 0.5, 1.5) == [observed[5]]
    assert scale_judgement.steps([], 0.5, 1.5) == []
    assert not scale_judgement.ratio_within(1, 0, 0.5, 1.5)
    assert scale_judgement.ratio_within(1, 2, 0.5, 1.5) and scale_judgement.ratio_within(3, 2, 0.5, 1.5)
    assert math.isclose(found[1].ratio, 0.5)


def test_placement_counts_partly_placed_groups_and_the_devices_they_hold():
    pods = [
        {"group": "g0", "bound": True, "devices": 16},
        {"group": "g0", "bound": True, "devices": 16},
        {"group": "g1", "bound": True, "devices": 16},
        {"group": "g1", "bound": False, "devices": 16},
        {"group": "g2", "bound": False, "devices": 16},
        {"group": "g2", "bound": False, "devices": 16},
        {"group": "g3", "bound": True, "devices": 8},
        {"group": "g3", "bound": False, "devices": 8},
    ]
    placed = scale_judgement.placement(pods, 2)
    assert (placed.complete, placed.partial, placed.unplaced) == (1, 2, 1)
    assert placed.held_devices == 24 and placed.bound_pods == 4 and placed.pending_pods == 4


def test_apiserver_requests_are_summed_by_verb_and_resource():
    before = "\n".join([
        "# HELP apiserver_request_total x",
        'apiserver_request_total{code="201",component="apiserver",group="",resource="pods",scope="resource",'
        'subresource="",verb="POST",version="v1"} 10',
        'apiserver_request_total{code="409",component="apiserver",group="",resource="pods",scope="resource",'
        'subresource="",verb="POST",version="v1"} 2',
        'apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",'
        'subresource="status",verb="PATCH",version="v1"} 5',
        'apiserver_request_duration_seconds_bucket{verb="POST",le="1"} 99',
    ])  # fmt: skip
    counts = scale_judgement.requests_by_verb_resource(before)
    assert counts == {"POST pods": 12, "PATCH pods/status": 5}
    after = {"POST pods": 112, "PATCH pods/status": 5, "DELETE pods": 3}
    assert scale_judgement.difference(after, counts) == {"POST pods": 100, "DELETE pods": 3}
