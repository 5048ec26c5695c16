"""Notebook 03's rules as seams: the controller places replicas with ``assign_replicas`` and
elects leaders with ``elect_leader`` (``minikafka.rules``), a student's run the controller under
guard, and the tester (``minikafka.course.tester_cluster``, reached through ``judge``) catches the
classic wrong ones."""

from __future__ import annotations

import random

import pytest

from minikafka import Cluster, KafkaProducer
from minikafka.checker.campaign import CAMPAIGN_BROKER_CONFIG
from minikafka.controller import assign_replicas as controller_assign_replicas
from minikafka.course import tester_cluster
from minikafka.course.tester import judge
from minikafka.errors import IllegalArgumentError
from minikafka.replicas import assign_replicas, elect_leader
from minikafka.rules import REFERENCE, RULES, RuleError, Rules

# --- classic wrong rules students write ---------------------------------------------------------------------


def place_without_start(n_partitions, rf, brokers, start_index, next_replica_shift):
    "Kafka's placement, but every topic starts at the first broker (start_index ignored)."
    return assign_replicas(n_partitions, rf, brokers, 0, next_replica_shift)


def place_without_shift(n_partitions, rf, brokers, start_index, next_replica_shift):
    "The followers are simply the next brokers round the list (the shift ignored)."
    n = len(brokers)
    return [tuple(brokers[((p + start_index) % n + j) % n] for j in range(rf)) for p in range(n_partitions)]


def place_shift_mod_n(n_partitions, rf, brokers, start_index, next_replica_shift):
    "Followers `(shift + j) % n` places on, forgetting the 1 + and the n - 1: offset 0 is the leader itself."
    n = len(brokers)
    out = []
    for p in range(n_partitions):
        if p > 0 and p % n == 0:
            next_replica_shift += 1
        first = (p + start_index) % n
        out.append(tuple([brokers[first]] + [brokers[(first + (next_replica_shift + j) % n) % n]
                                             for j in range(rf - 1)]))
    return out


def place_positions(n_partitions, rf, brokers, start_index, next_replica_shift):
    "Positions in the broker list instead of broker ids."
    n = len(brokers)
    return [tuple(brokers.index(b) for b in replicas)
            for replicas in assign_replicas(n_partitions, rf, list(range(1, n + 1)), start_index, next_replica_shift)]


def elect_ignoring_isr(replicas, isr, live_brokers, unclean):
    "The first live replica, in sync or not (an unclean election every time)."
    return next((r for r in replicas if r in live_brokers), None)


def elect_ignoring_liveness(replicas, isr, live_brokers, unclean):
    "The first in-sync replica, dead or alive."
    return next((r for r in replicas if r in isr), None)


def elect_last_in_sync(replicas, isr, live_brokers, unclean):
    "The last live member of the ISR."
    alive = [r for r in isr if r in live_brokers]
    return alive[-1] if alive else None


def elect_random_in_sync(replicas, isr, live_brokers, unclean, _rng=random.Random(3)):
    "Any live member of the ISR (seeded here, so the test is deterministic)."
    alive = [r for r in isr if r in live_brokers]
    return _rng.choice(alive) if alive else None


def elect_in_isr_order(replicas, isr, live_brokers, unclean):
    "The first live member in the ISR's order, not the assignment's: right until the ISR is reordered."
    return next((r for r in isr if r in live_brokers), None)


def elect_unclean_first_live(replicas, isr, live_brokers, unclean):
    "Right with unclean off; with it on, the first live replica even when an in-sync one is alive."
    for r in replicas:
        if r in live_brokers and (unclean or r in isr):
            return r
    return None


def elect_any_live_broker(replicas, isr, live_brokers, unclean):
    "The highest live broker, replica or not (the Metadata's broker list, not the partition's)."
    return max(live_brokers)


WRONG = [
    ("assign_replicas", place_without_start, "placement-leaders"),
    ("assign_replicas", place_without_shift, "placement-followers"),
    ("assign_replicas", place_shift_mod_n, "rule-error"),
    ("assign_replicas", place_positions, "rule-error"),
    ("elect_leader", elect_ignoring_isr, "lost-write"),
    ("elect_leader", elect_ignoring_liveness, "unavailable"),
    ("elect_leader", elect_last_in_sync, "leader-order"),
    ("elect_leader", elect_random_in_sync, "leader-order"),
    ("elect_leader", elect_in_isr_order, "leader-order"),
    ("elect_leader", elect_any_live_broker, "rule-error"),
    ("elect_leader", elect_unclean_first_live, "lost-write"),
]


# --- the seams ----------------------------------------------------------------------------------------------


def test_the_rules_of_03_have_the_exercises_signatures():
    assert RULES["assign_replicas"].signature == (
        "assign_replicas(n_partitions, rf, brokers, start_index, next_replica_shift)")
    assert RULES["elect_leader"].signature == "elect_leader(replicas, isr, live_brokers, unclean)"
    assert RULES["assign_replicas"].lecture == RULES["elect_leader"].lecture == "03"
    assert controller_assign_replicas is assign_replicas  # the old import path still works


def test_the_reference_election_on_the_cases_of_exercise_2():
    assert elect_leader((1, 2, 3), (1, 3), (2, 3), False) == 3  # 2 is alive but out of sync
    assert elect_leader((1, 2, 3), (1,), (2, 3), False) is None  # offline
    assert elect_leader((1, 2, 3), (1,), (2, 3), True) == 2  # unclean: the first live replica
    assert elect_leader((3, 1, 2), (1, 2, 3), (1, 2, 3), False) == 3  # assignment order, not the ISR's
    assert elect_leader((4,), (4,), (), True) is None


def test_without_rules_the_controller_runs_kafkas_rules_unwrapped():
    with Cluster(brokers=3, seed=1) as cluster:
        assert cluster.controller.rules is REFERENCE
        cluster.create_topic("trucks_gps", partitions=6, replication_factor=3)
        placed = [s.replicas for s in cluster.partitions_of("trucks_gps")]
        assert any(placed == assign_replicas(6, 3, [1, 2, 3], start, shift) for start in range(3) for shift in range(3))


def test_a_students_rules_are_what_the_controller_runs():
    calls = {"assign_replicas": [], "elect_leader": []}

    def recorded(name):
        def mine(*args):
            calls[name].append(args)
            return RULES[name].reference(*args)
        return mine

    with Cluster(brokers=3, seed=1, rules={name: recorded(name) for name in calls}) as cluster:
        cluster.create_topic("trucks_gps", partitions=3, replication_factor=3)
        [(n, rf, brokers, start, shift)] = calls["assign_replicas"]
        assert (n, rf, brokers) == (3, 3, [1, 2, 3])
        placed = [s.replicas for s in cluster.partitions_of("trucks_gps")]
        assert placed == assign_replicas(3, 3, [1, 2, 3], start, shift)
        led = [s for s in cluster.partitions_of("trucks_gps") if s.leader == 1]
        cluster.kill(1)
        cluster.run_until(lambda: 1 not in cluster.controller.live_brokers, 10_000)
        assert len(calls["elect_leader"]) == len(led) and all(
            live == (2, 3) and unclean is False for _, _, live, unclean in calls["elect_leader"])
        assert cluster.rule_trace.calls == {"assign_replicas": 1, "elect_leader": len(led)}
        assert all(s.leader in (2, 3) for s in cluster.partitions_of("trucks_gps"))


def test_a_leader_from_outside_the_isr_is_an_unclean_election():
    def first_live(replicas, isr, live_brokers, unclean):
        return next((r for r in replicas if r in live_brokers), None)

    with Cluster(brokers=3, seed=2, config=CAMPAIGN_BROKER_CONFIG, rules={"elect_leader": first_live}) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        a, b, c = cluster.partition_state("t", 0).replicas
        producer = KafkaProducer(bootstrap_servers=cluster, acks="all")
        cluster.partition([b], [a])
        for _ in range(1_000):  # writes go on until the leader drops b, cut off, from the ISR
            if b not in cluster.partition_state("t", 0).isr:
                break
            producer.send("t", b"x")
            cluster.advance(10)
        assert cluster.partition_state("t", 0).isr == tuple(sorted((a, c)))
        cluster.kill(a)
        assert cluster.run_until(lambda: cluster.partition_state("t", 0).leader == b, 20_000)
        # (time, topic, partition, old leader, new leader, unclean): b took over, out of sync
        assert [e[3:] for e in cluster.controller.elections if e[1] == "t"] == [(a, b, True)]


@pytest.mark.parametrize("name, fn, problem", [
    ("assign_replicas", lambda n, rf, brokers, start, shift: [tuple([brokers[0]] * rf)] * n,
     "it put the same broker twice in partition 0 (1, 1, 1): two copies on one broker are one copy"),
    ("assign_replicas", lambda n, rf, brokers, start, shift: [tuple(brokers[:rf])] * (n - 1),
     "it placed 2 partition(s), not the 3 asked for"),
    ("assign_replicas", lambda n, rf, brokers, start, shift: [tuple(brokers[:rf - 1])] * n,
     "it gave partition 0 2 replica(s) (1, 2), not replication factor 3"),
    ("assign_replicas", place_positions, "0 is not one of the brokers [1, 2, 3] (ids, not positions in the list)"),
    ("assign_replicas", lambda n, rf, brokers, start, shift: 1 / 0, "it raised ZeroDivisionError"),
])
def test_a_placement_that_breaks_the_contract_stops_the_cluster_with_one_message(name, fn, problem):
    cluster = Cluster(brokers=3, seed=1, rules={name: fn})
    with pytest.raises(RuleError) as e:
        cluster.create_topic("trucks_gps", partitions=3, replication_factor=3)
    text = str(e.value)
    assert text.splitlines()[0].startswith("your rule assign_replicas broke on controller 3000 at t=")
    assert problem in text.splitlines()[0], text
    assert "  called with: assign_replicas(n_partitions=3, rf=3, brokers=[1, 2, 3], start_index=" in text
    assert "  Kafka's rule returns: [(" in text and "  the cluster is stopped." in text
    cluster.close()


@pytest.mark.parametrize("fn, problem", [
    (lambda replicas, isr, live, unclean: next(b for b in live if b not in replicas),
     "which is not a replica of the partition ("),
    (lambda replicas, isr, live, unclean: str(replicas[1]), "it returned str '"),
    (lambda replicas, isr, live, unclean: {}[0], "it raised KeyError: 0"),
])
def test_an_election_that_breaks_the_contract_stops_the_cluster_with_one_message(fn, problem):
    cluster = Cluster(brokers=3, seed=1, rules={"elect_leader": fn})
    cluster.create_topic("t", partitions=1, replication_factor=2)
    cluster.kill(cluster.partition_state("t", 0).leader)
    with pytest.raises(RuleError) as e:
        cluster.run_until(lambda: False, 10_000)
    text = str(e.value)
    first = text.splitlines()[0]
    assert first.startswith("your rule elect_leader broke on controller 3000 at t=") and problem in first, text
    assert "  called with: elect_leader(replicas=(" in text and ", unclean=False)" in text
    assert "  Kafka's rule returns: " in text
    cluster.close()


def test_an_election_that_never_returns_is_interrupted_and_reported():
    def forever(replicas, isr, live_brokers, unclean):
        while True:
            pass

    rules = Rules({"elect_leader": forever}, node="controller 3000", clock=lambda: 40, budget_s=0.05)
    with pytest.raises(RuleError) as e:
        rules.elect_leader((1, 2, 3), (1, 3), (2, 3), False)
    assert str(e.value).splitlines()[0] == ("your rule elect_leader broke on controller 3000 at t=40 ms: it was "
                                            "still running after 0.05 s of wall time (a loop that never ends?)")
    assert "  Kafka's rule returns: 3 (the first replica in assignment order" in str(e.value)


# --- the tester -------------------------------------------------------------------------------------------------


def test_kafkas_placement_keeps_the_testers_balance_properties_for_every_draw():
    for n in range(2, 7):
        brokers = [3 * i + 1 for i in range(n)]
        for start in range(n):
            for shift in range(n):
                placed = assign_replicas(n * (n - 1), 3 if n > 2 else 2, brokers, start, shift)
                assert tester_cluster.placement_problem({tester_cluster.BIG_TOPIC: placed}, brokers) is None


@pytest.mark.campaign
def test_kafkas_rules_pass_the_cluster_campaign_through_the_guard():
    verdict = judge({name: (lambda name: lambda *args: RULES[name].reference(*args))(name)
                     for name in ("assign_replicas", "elect_leader")})
    assert verdict.ok, str(verdict)
    assert str(verdict).startswith(f"0 anomalies in {tester_cluster.DEFAULT_SCHEDULES} schedules (seed 0); "
                                   f"your rules: assign_replicas, elect_leader")


@pytest.mark.parametrize("seed", [1, 2, 2024])
@pytest.mark.campaign
def test_kafkas_rules_pass_on_other_seeds(seed):
    assert judge({"elect_leader": lambda *args: elect_leader(*args)}, seed=seed).ok


@pytest.mark.parametrize("name, fn, kind", WRONG, ids=[fn.__name__ for _, fn, _ in WRONG])
def test_a_classic_wrong_rule_is_caught_within_the_default_schedules(name, fn, kind):
    verdict = judge({name: fn})
    assert not verdict.ok and verdict.failure.kind == kind, str(verdict)
    assert f"then: {kind}: " in str(verdict) and f"your rules: {name}; " in str(verdict)


def test_the_verdict_names_the_scenario_the_faults_and_the_differing_calls():
    text = str(judge({"elect_leader": elect_ignoring_isr}, seed=0))
    assert text.startswith("FAILED: schedule 1 of 3 (seed ") and "an out-of-sync follower is alive" in text
    assert "nemesis: cut " in text and "controller 3000: elect_leader(replicas=(" in text
    assert "then: lost-write: " in text


def test_a_returning_preferred_leader_must_get_its_partitions_back():
    text = str(judge({"elect_leader": elect_in_isr_order}))
    assert "is back in every ISR" in text and "its preferred leader" in text and "(first replica) was back" in text


def test_the_judge_sends_lecture_03s_rules_to_its_campaign_and_checks_its_arguments():
    with pytest.raises(IllegalArgumentError, match="schedules must be an int >= 1"):
        judge({"elect_leader": elect_leader}, schedules=0)
    with pytest.raises(IllegalArgumentError, match=r"must take the arguments elect_leader\(replicas, isr"):
        judge({"elect_leader": lambda response, broker, extra: None})
    assert isinstance(judge({"elect_leader": elect_last_in_sync}, schedules=1), tester_cluster.ClusterVerdict)


def test_unclean_election_is_the_last_resort_even_when_allowed():
    text = str(judge({"elect_leader": elect_unclean_first_live}))
    assert "unclean.leader.election.enable=true" in text and "then: lost-write: " in text, text


# --- grading: the tester is a hidden check ----------------------------------------------------------------

# Exercise 2a's rule with one change a student makes: "unclean" read as "any live replica will do". Every
# comparison of the exercise passes (its unclean cases have no live in-sync replica); the tester, which
# also runs a topic that allows unclean election, sees it lose acknowledged records.
UNCLEAN_FIRST_LIVE = (
    "def elect_leader(replicas, isr, live_brokers, unclean):\n"
    "    for r in replicas:\n"
    "        if r in live_brokers and (unclean or r in isr):\n"
    "            return r\n"
    "    return None\n")


@pytest.mark.notebooks
def test_an_election_that_passes_the_comparisons_but_not_the_tester_scores_0(tmp_path):
    import json
    from pathlib import Path

    from minikafka.course.grade import Settings
    from minikafka.course.gradebook import feedback, grade_all

    root = Path(__file__).resolve().parents[1]
    solution = json.loads((root / "solutions" / "03-brokers-and-cluster.ipynb").read_text())
    submission = json.loads((root / "exercises" / "03-brokers-and-cluster.ipynb").read_text())
    solved = {c["id"]: "".join(line for line in c["source"] if "### " not in line) for c in solution["cells"]}
    for cell in submission["cells"]:
        if "exercise" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = UNCLEAN_FIRST_LIVE if cell["id"] == "ex2-elect" else solved[cell["id"]]
    (tmp_path / "03-brokers-and-cluster.ipynb").write_text(json.dumps(submission))
    [result] = grade_all(tmp_path, root / "solutions", Settings(sanitize=root / "tests" / "nbval-sanitize.cfg"))
    first, second, third = result.exercises
    assert first.earned == first.points and third.earned == third.points, feedback(result)
    assert second.earned == 0, feedback(result)
    # The rule's cases, their hidden twin, the Metadata predictions and the kills pass; "run your
    # cluster" (its verdict) and the hidden judge do not.
    # And the hidden property (properties.py), whose draws include that case.
    assert {c.cell_id or c.label for c in second.checks if not c.passed} == {
        "ex2-yours", "hidden-ex2-judge", "hidden property: elect_leader"}, feedback(result)
