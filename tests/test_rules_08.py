"""Notebook 08's rules as seams: the controller quorum's ``KafkaRaftClient`` asks ``grant_vote``
and ``metadata_truncation_offset`` through its ``Rules``; a student's functions run the quorum
under guard, and the quorum's tester (``minikafka.course.judge``, dispatched to
``course.tester_raft``) catches the classic wrong rules: two leaders in one epoch, a committed
metadata record lost or changed, a quorum that never elects a leader after the faults heal."""

from __future__ import annotations

import pytest

from minikafka import Cluster, KafkaProducer
from minikafka import rules as R
from minikafka.checker.raft import RaftHarness, run_raft_schedule
from minikafka.course import judge
from minikafka.course.tester_raft import (
    DEFAULT_SCHEDULES,
    RaftVerdict,
    deposed_leader_returns_behind_in_an_older_epoch,
    stale_leader_returns_with_a_longer_log,
)
from minikafka.errors import IllegalArgumentError
from minikafka.rules import REFERENCE, RULES, Request, RuleError, Voter, end_offset_for

# --- the classic wrong rules, per seam ----------------------------------------------------------------


def _epoch_voted_leader(voter, request):
    if request.epoch > voter.epoch:
        return None, None
    return voter.voted_for, voter.leader


def vote_without_comparing_logs(voter, request):
    voted_for, leader = _epoch_voted_leader(voter, request)
    return request.epoch >= voter.epoch and leader is None and voted_for in (None, request.candidate)


def vote_for_the_longer_log(voter, request):  # the log end alone, not the last epoch first
    return vote_without_comparing_logs(voter, request) and request.log_end >= voter.log_end


def vote_for_the_newer_last_epoch(voter, request):  # the last epoch alone, not the log end after it
    return vote_without_comparing_logs(voter, request) and request.last_epoch >= voter.last_epoch


def vote_again_for_anyone(voter, request):  # forgets whom it voted for in this epoch
    _, leader = _epoch_voted_leader(voter, request)
    return (request.epoch >= voter.epoch and leader is None
            and (request.last_epoch, request.log_end) >= (voter.last_epoch, voter.log_end))


def vote_only_for_a_longer_log(voter, request):  # "more up to date" read as strictly more
    return (vote_without_comparing_logs(voter, request)
            and (request.last_epoch, request.log_end) > (voter.last_epoch, voter.log_end))


def never_cut(diverging_epoch, diverging_end_offset, follower_epochs, follower_leo, follower_log_start):
    return follower_leo


def cut_at_own_epoch_end(diverging_epoch, diverging_end_offset, follower_epochs, follower_leo, follower_log_start):
    epoch, end = end_offset_for(follower_epochs, diverging_epoch, follower_leo)  # the leader's end ignored
    return end if epoch >= 0 else follower_log_start


def cut_everything(diverging_epoch, diverging_end_offset, follower_epochs, follower_leo, follower_log_start):
    return follower_log_start


def cut_at_the_leaders_end(diverging_epoch, diverging_end_offset, follower_epochs, follower_leo, follower_log_start):
    return diverging_end_offset  # its own epoch cache ignored (and it may be past its own end)


WRONG = [
    ("grant_vote", vote_without_comparing_logs, {"committed-changed", "committed-lost", "assertion"}),
    ("grant_vote", vote_for_the_longer_log, {"committed-changed", "committed-lost", "assertion"}),
    ("grant_vote", vote_for_the_newer_last_epoch, {"committed-changed", "committed-lost", "assertion"}),
    ("grant_vote", vote_again_for_anyone, {"double-vote", "two-leaders"}),
    ("grant_vote", vote_only_for_a_longer_log, {"no-convergence"}),
    ("metadata_truncation_offset", never_cut, {"committed-lost", "committed-changed"}),
    ("metadata_truncation_offset", cut_at_own_epoch_end, {"committed-lost", "committed-changed"}),
    ("metadata_truncation_offset", cut_everything, {"assertion"}),
    ("metadata_truncation_offset", cut_at_the_leaders_end, {"rule-error", "no-convergence"}),
]


def student_vote(voter, request):
    "A correct student's vote rule, written differently from the reference."
    if request.epoch < voter.epoch:
        return False
    fresh = request.epoch > voter.epoch
    free = fresh or (voter.leader is None and voter.voted_for in (None, request.candidate))
    newer = request.last_epoch > voter.last_epoch
    return free and (newer or (request.last_epoch == voter.last_epoch and request.log_end >= voter.log_end))


# --- the seams ------------------------------------------------------------------------------------------


def test_the_quorums_rules_have_the_exercises_signatures_and_run_unwrapped():
    assert RULES["grant_vote"].signature == "grant_vote(voter, request)"
    assert RULES["grant_vote"].lecture == RULES["metadata_truncation_offset"].lecture == "08"
    assert RULES["metadata_truncation_offset"].signature == (
        "metadata_truncation_offset(diverging_epoch, diverging_end_offset, follower_epochs, follower_leo, "
        "follower_log_start)")
    assert REFERENCE.grant_vote is R.grant_vote
    with Cluster(brokers=1, controllers=3, seed=1) as cluster:
        assert all(cluster.world.nodes[c].raft.rules is REFERENCE for c in cluster.controller_ids)
        assert cluster.broker(1).raft.rules is REFERENCE


def test_the_reference_vote_rule_on_the_exercises_cases():
    cases = [
        (Voter(3, None, None, 3, 10), Request(2, 3, 3, 10), True),
        (Voter(3, None, None, 3, 10), Request(2, 3, 3, 9), False),
        (Voter(3, None, None, 3, 10), Request(2, 4, 3, 9), False),
        (Voter(3, None, None, 2, 10), Request(2, 4, 3, 4), True),
        (Voter(3, None, None, 3, 10), Request(2, 2, 3, 12), False),
        (Voter(3, 3, None, 3, 10), Request(2, 3, 3, 12), False),
        (Voter(3, 2, None, 3, 10), Request(2, 3, 3, 12), True),
        (Voter(3, 3, None, 3, 10), Request(2, 4, 3, 12), True),
        (Voter(3, 3, 3, 3, 10), Request(2, 3, 3, 12), False),
        (Voter(0, None, None, -1, 0), Request(2, 1, -1, 0), True),
    ]
    assert [R.grant_vote(v, r) for v, r, _ in cases] == [granted for _, _, granted in cases]
    assert R.metadata_truncation_offset(1, 5, [(1, 0), (2, 3)], 8, 0) == 3
    assert R.metadata_truncation_offset(2, 9, [(1, 0), (2, 3)], 8, 0) == 8
    assert R.metadata_truncation_offset(0, 0, [(1, 0)], 8, 0) == 0


def test_a_correct_student_vote_rule_runs_the_same_quorum_as_kafkas_and_is_called():
    outcomes, calls = [], {}
    for rules in (None, {"grant_vote": student_vote}):
        with Cluster(brokers=1, controllers=3, seed=4, rules=rules) as cluster:
            first = cluster.active_controller.node_id
            cluster.kill(first)
            assert cluster.run_until(lambda: cluster.active_controller is not None, 10_000)
            cluster.create_topic("t", partitions=1, replication_factor=1)
            producer = KafkaProducer(bootstrap_servers=cluster, acks="all")
            offsets = [producer.send("t", value=b"v%d" % i).get(timeout=10).offset for i in range(3)]
            outcomes.append((first, cluster.active_controller.node_id, offsets, cluster.now,
                             cluster.world.events_processed, cluster.world.rng.getstate()))
            calls = dict(cluster.rule_trace.calls)
    assert outcomes[0] == outcomes[1] and outcomes[0][0] != outcomes[0][1]
    assert calls["grant_vote"] >= 2 and not cluster.rule_trace.differing


def test_a_vote_rule_that_raises_stops_the_cluster_naming_the_controller_and_the_call():
    def grant(voter, request):
        return voter.voted_for.startswith("3")  # AttributeError: ids are ints, and None has no startswith

    with pytest.raises(RuleError) as e:
        Cluster(brokers=1, controllers=3, seed=2, rules={"grant_vote": grant})
    text = str(e.value)
    first = text.splitlines()[0]
    assert first.startswith("your rule grant_vote broke on controller 300") and " ms: it raised AttributeError: " in first
    assert "  called with: grant_vote(voter=Voter(epoch=0, voted_for=None, leader=None, last_epoch=-1, log_end=0), " \
           "request=Request(candidate=300" in text
    assert "  Kafka's rule returns: True (no vote for an older epoch;" in text


@pytest.mark.parametrize("fn, problem", [
    (lambda voter, request: "yes", "it returned str 'yes', not True or False"),
    (lambda voter, request: True, "it granted a vote in epoch 1, older than the voter's epoch 2"),
])
def test_nonsense_votes_are_caught_at_the_call(fn, problem):
    guarded = R.Rules({"grant_vote": fn}, node="voter 1", clock=lambda: 7)
    with pytest.raises(RuleError) as e:
        guarded.grant_vote(Voter(2, None, None, 1, 4), Request(2, 1 if "older" in problem else 3, 1, 4))
    assert str(e.value).startswith(f"your rule grant_vote broke on voter 1 at t=7 ms: {problem}")


def test_a_cut_past_the_log_end_is_nonsense():
    guarded = R.Rules({"metadata_truncation_offset": cut_at_the_leaders_end}, node="voter 2", clock=lambda: 0)
    with pytest.raises(RuleError, match="it cut the log at 9, past its end 8: a cut never lengthens a log"):
        guarded.metadata_truncation_offset(1, 9, [(1, 0)], 8, 0)


# --- the judge --------------------------------------------------------------------------------------------


@pytest.mark.campaign
def test_kafkas_rules_pass_the_quorums_campaign_through_the_guard():
    yours = {"grant_vote": lambda v, r: R.grant_vote(v, r),
             "metadata_truncation_offset": lambda *args: R.metadata_truncation_offset(*args)}
    verdict = judge(yours)
    assert isinstance(verdict, RaftVerdict)
    assert verdict.ok and verdict.passed == verdict.schedules == DEFAULT_SCHEDULES
    assert str(verdict).startswith(f"0 violations in {DEFAULT_SCHEDULES} schedules (seed 0) and 2 scenarios; "
                                   "your rules: grant_vote, metadata_truncation_offset")


@pytest.mark.parametrize("seam, rule, kinds", WRONG, ids=[r.__name__ for _, r, _ in WRONG])
def test_a_classic_wrong_rule_is_caught_within_the_default_schedules(seam, rule, kinds):
    verdict = judge({seam: rule}, shrinking=False)
    assert not verdict.ok and verdict.failure.kind in kinds, verdict
    assert verdict.passed < DEFAULT_SCHEDULES and verdict.failure.scenario is None  # a random schedule did it
    assert verdict.failure.rule_calls[seam] > 0


@pytest.mark.parametrize("seed", range(4))
def test_the_scenario_elects_a_stale_longer_log_under_a_rule_comparing_log_ends_alone(seed):
    # Random schedules line this up rarely (seeds 1 and 2 of the judge pass all 80): the scenario does.
    assert stale_leader_returns_with_a_longer_log({"grant_vote": student_vote}, seed) is None
    finding = stale_leader_returns_with_a_longer_log({"grant_vote": vote_for_the_longer_log}, seed)
    assert finding.kind == "assertion" and "would lose committed records" in finding.what
    assert finding.scenario == "a cut-off leader returns with a longer log of an older epoch"
    assert any(c.returned is True and c.reference is False for c in finding.calls)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.campaign
def test_the_scenario_catches_a_cut_at_the_leaders_end_alone(seed):
    # Random schedules line this up rarely (the judge's seed 1 passes all 80): the scenario does.
    kafka = {"metadata_truncation_offset": lambda *args: R.metadata_truncation_offset(*args)}
    assert deposed_leader_returns_behind_in_an_older_epoch(kafka, seed) is None
    with pytest.raises(RuleError, match="it cut the log at 7, past its end 4") as e:
        deposed_leader_returns_behind_in_an_older_epoch({"metadata_truncation_offset": cut_at_the_leaders_end}, seed)
    # The first cut (7, inside the 6-record batch of epoch 2) drops the whole batch; the leader
    # answers the same again, and the same rule now cuts past the log's end.
    assert [(c.args["follower_leo"], c.returned, c.reference) for c in e.value.trace.differing] == [(10, 7, 3)]
    verdict = judge({"metadata_truncation_offset": cut_at_the_leaders_end}, seed=1, shrinking=False)
    assert verdict.failure.scenario == "a deposed leader returns with records of an epoch the new leader never had"
    assert verdict.failure.kind == "rule-error" and verdict.passed == DEFAULT_SCHEDULES


def test_the_verdict_shows_the_shrunk_schedule_as_a_timeline():
    verdict = judge({"grant_vote": vote_without_comparing_logs})
    text = str(verdict)
    lines = text.splitlines()
    assert lines[0].startswith(f"FAILED: schedule {verdict.passed + 1} of {DEFAULT_SCHEDULES} (seed ")
    assert "shrunk: " in lines[0] and "not shrunk" not in lines[0]
    assert lines[1].startswith("your rules: grant_vote; ") and "answered differently from Kafka's" in lines[1]
    assert any("nemesis: " in line for line in lines)
    assert any(": grant_vote(voter=Voter(" in line and "-> True; Kafka's rule: False" in line for line in lines)
    assert lines[-1].startswith(f"then: {verdict.failure.kind}: ")
    assert verdict.failure.shrunk  # a smaller schedule still fails
    assert judge({"grant_vote": vote_without_comparing_logs}).failure.timeline() == verdict.failure.timeline()


@pytest.mark.campaign
def test_rules_of_two_lectures_are_judged_each_by_its_campaign():
    verdict = judge({"grant_vote": vote_again_for_anyone, "high_watermark": R.high_watermark}, shrinking=False)
    assert isinstance(verdict, RaftVerdict) and verdict.failure.kind in {"double-vote", "two-leaders"}
    with pytest.raises(IllegalArgumentError, match="no rule named 'grant_votes'"):
        judge({"grant_votes": student_vote})


@pytest.mark.campaign
def test_rules_of_two_lectures_that_pass_are_both_in_the_verdict():
    # A student trial: judge(mine) with 04's and 08's rules, both right, said only "your rules:
    # grant_vote"; with no rule at all it answered None.
    verdict = judge({"grant_vote": R.grant_vote, "high_watermark": R.high_watermark}, schedules=1)
    assert verdict.ok and verdict.failure is None and set(verdict.rules) == {"grant_vote", "high_watermark"}
    lines = str(verdict).splitlines()
    assert any("your rules: high_watermark" in line for line in lines), lines
    assert any("your rules: grant_vote" in line for line in lines), lines
    with pytest.raises(IllegalArgumentError, match="no rules to judge"):
        judge({})


def test_a_raft_schedule_with_kafkas_rules_is_the_same_run_as_without_rules():
    a = run_raft_schedule(5)
    b = run_raft_schedule(5, rules={"grant_vote": student_vote})
    assert (a.committed, a.deliveries, a.elections) == (b.committed, b.deliveries, b.elections) and a.ok


def test_the_harness_names_its_nodes_in_rule_calls(tmp_path):
    h = RaftHarness(tmp_path, voters=3, observers=1, rules={"grant_vote": vote_only_for_a_longer_log})
    try:
        h.run(2_000)
        assert h.leader() is None  # equal empty logs: nobody is ever "more" up to date
        assert {c.node for c in h.rule_trace.differing} <= {"voter 1", "voter 2", "voter 3"}
    finally:
        h.close()


# --- the public API the lecture uses ----------------------------------------------------------------------


def test_the_active_controller_is_public_and_none_while_a_majority_is_down():
    with Cluster(brokers=1, controllers=3, seed=6) as cluster:
        active = cluster.active_controller
        assert active is not None and active.active and active.node_id in cluster.controller_ids
        others = [c for c in cluster.controller_ids if c != active.node_id]
        cluster.kill(others[0])
        cluster.kill(others[1])
        cluster.advance(5_000)  # check-quorum: a leader without a majority resigns
        assert cluster.active_controller is None
