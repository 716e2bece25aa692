"""The fault drills' judgement (harness.drill_judgement): how a request is classed against the greedy
reference, what a drill's recovery time is, and the thresholds docs/failure-modes.md documents
(harness/drills.py runs the drills on real engines: `make drills`)."""

from __future__ import annotations

from pathlib import Path

from harness import drill_judgement
from mooncake_pd import paths

REFERENCE = ["a b c", "d e f"]


def request(start: float, end: float, prompt: int = 0, text: str | None = "a b c", complete: bool = True):
    return drill_judgement.Request(start, end, prompt, text, complete, "" if complete else "broken")


def test_requests_are_ok_failed_truncated_or_silently_wrong():
    assert drill_judgement.classify(request(0, 1), REFERENCE) == "ok"
    assert drill_judgement.classify(request(0, 1, text=None, complete=False), REFERENCE) == "failed"
    assert drill_judgement.classify(request(0, 1, text="a b", complete=False), REFERENCE) == "truncated"
    # Answered in full with other text: the silent failure.
    assert drill_judgement.classify(request(0, 1, prompt=1, text="a b c"), REFERENCE) == "wrong"


def test_recovery_is_the_first_right_answer_to_a_request_sent_after_the_fault():
    requests = [
        request(1, 2),
        request(4, 12),  # sent before the fault at 5: answered, but no proof of recovery
        request(5.5, 6, text=None, complete=False),
        request(6, 9.5, text="a", complete=False),
        request(7, 9),
        request(8, 8.5),
    ]
    summary = drill_judgement.summarize("prefill-killed", requests, REFERENCE, fault_at=5)
    assert summary.counts == {"ok": 4, "failed": 1, "truncated": 1}
    assert summary.recovery_s == 3.5 and summary.errors == ["broken"]
    assert summary.in_flight == {"ok": 1}
    assert drill_judgement.summarize("x", requests[:2], REFERENCE, fault_at=5).recovery_s is None


def test_outage_is_the_longest_time_without_a_right_answer_from_the_fault_on():
    requests = [
        request(0, 4.5),  # ends after the fault at 4: 0.5 s
        request(5, 6, text=None, complete=False),
        request(6, 7, text=None, complete=False),
        request(7, 12),  # 4.5 -> 12: the longest gap, 7.5 s
        request(12, 13),
        request(13, 15, text=None, complete=False),  # 13 -> 15 without a right answer: 2 s
    ]
    summary = drill_judgement.summarize("x", requests, REFERENCE, fault_at=4)
    assert summary.outage_s == 7.5
    assert drill_judgement.summarize("x", requests[1:3], REFERENCE, fault_at=4).outage_s == 3.0  # nothing right after


def test_a_rollout_recovers_with_the_first_right_answer_after_it_settled():
    """The old pods still answer while the rollout goes on: those answers do not end it."""
    requests = [request(1, 2), request(3, 4), request(10, 11), request(21, 22)]
    summary = drill_judgement.summarize("kthena-rollout", requests, REFERENCE, fault_at=0.5, settled_at=20)
    assert summary.settled_s == 19.5 and summary.recovery_s == 21.5
    assert summary.as_dict()["settled_s"] == 19.5
    assert "settled_s" not in drill_judgement.summarize("x", requests, REFERENCE, fault_at=0.5).as_dict()


def test_a_drill_worse_than_documented_is_named(tmp_path: Path):
    doc = tmp_path / "failure-modes.md"
    doc.write_text(
        "| Drill | what | failed | truncated | wrong | recovery (s) |\n"
        "| --- | --- | --- | --- | --- | --- |\n"
        "| `prefill-killed` | SIGKILL | 6 | 0 | 0 | 40 |\n"
    )
    limits = drill_judgement.thresholds(doc)
    assert limits == {"prefill-killed": drill_judgement.Threshold(6, 0, 0, 40.0)}
    within = drill_judgement.Summary("prefill-killed", 20, {"ok": 14, "failed": 6}, 30.0, [], {})
    assert drill_judgement.worse_than_documented(within, limits["prefill-killed"]) == []
    worse = drill_judgement.Summary("prefill-killed", 20, {"ok": 10, "failed": 7, "wrong": 1}, 41.0, [], {})
    assert drill_judgement.worse_than_documented(worse, limits["prefill-killed"]) == [
        "prefill-killed: 7 failed requests, documented at most 6",
        "prefill-killed: 1 wrong requests, documented at most 0",
        "prefill-killed: recovered in 41.0 s, documented 40 s",
    ]
    missing = drill_judgement.worse_than_documented(within, None)
    assert missing == ["prefill-killed: no documented threshold in docs/failure-modes.md"]


def test_every_drill_has_its_documented_thresholds():
    """The drills harness/drills.py runs, each with a row in docs/failure-modes.md."""
    limits = drill_judgement.thresholds(paths.REPO / "docs" / "failure-modes.md")
    source = (paths.REPO / "harness" / "drills.py").read_text()
    names = ("prefill-killed", "decode-killed", "proxy-killed", "prefill-restarted")
    kthena = ("kthena-router-restarted", "kthena-prefill-killed", "kthena-decode-killed", "kthena-rollout")
    kthena += ("kthena-rollout-two-groups",)
    for name in names + kthena:
        assert f'"{name}"' in source and name in limits, name
        assert limits[name].wrong == 0, f"{name}: a drill may fail requests, never answer one wrong"
