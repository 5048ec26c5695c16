"""Notebook 06's rules as seams: the group leader's assignors call ``range_assign`` and
``reassign`` (``minikafka.rules``), a student's run the group under guard, and the tester
(``minikafka.course.tester_groups``, reached through ``judge``) catches the classic wrong ones."""

from __future__ import annotations

import random

import pytest

from minikafka import Cluster, KafkaConsumer, KafkaProducer
from minikafka.assignors import RangeAssignor, StickyAssignor, Subscription, range_assign, reassign
from minikafka.course import tester_groups
from minikafka.course.tester import judge
from minikafka.errors import IllegalArgumentError
from minikafka.rules import REFERENCE, RULES, RuleError, Rules
from minikafka.topic import TopicPartition as TP


# --- classic wrong assignors students write ---------------------------------------------------------------


def range_unsorted(partitions_per_topic, subscriptions):
    "Members in the order they came (the coordinator's join order), not sorted by id."
    out = {m: [] for m in subscriptions}
    for t in sorted(partitions_per_topic):
        readers = [m for m in subscriptions if t in subscriptions[m]]
        if not readers:
            continue
        q, e = divmod(partitions_per_topic[t], len(readers))
        start = 0
        for i, m in enumerate(readers):
            k = q + (1 if i < e else 0)
            out[m] += [(t, p) for p in range(start, start + k)]
            start += k
    return out


def range_drops_remainder(partitions_per_topic, subscriptions):
    "n // m each, and the n % m left over go to nobody."
    out = {m: [] for m in subscriptions}
    for t in sorted(partitions_per_topic):
        readers = sorted(m for m in subscriptions if t in subscriptions[m])
        if readers:
            q = partitions_per_topic[t] // len(readers)
            for i, m in enumerate(readers):
                out[m] += [(t, p) for p in range(i * q, i * q + q)]
    return out


def range_ceil(partitions_per_topic, subscriptions):
    "ceil(n / m) each while partitions last: the last members get less, or nothing."
    out = {m: [] for m in subscriptions}
    for t in sorted(partitions_per_topic):
        readers = sorted(m for m in subscriptions if t in subscriptions[m])
        if readers:
            n = partitions_per_topic[t]
            size = -(-n // len(readers))
            for i, m in enumerate(readers):
                out[m] += [(t, p) for p in range(i * size, min(n, (i + 1) * size))]
    return out


def range_ignores_subscriptions(partitions_per_topic, subscriptions):
    "Every topic cut among all members, whether they read it or not."
    out = {m: [] for m in subscriptions}
    readers = sorted(subscriptions)
    for t in sorted(partitions_per_topic):
        q, e = divmod(partitions_per_topic[t], len(readers))
        start = 0
        for i, m in enumerate(readers):
            k = q + (1 if i < e else 0)
            out[m] += [(t, p) for p in range(start, start + k)]
            start += k
    return out


def range_overlapping(partitions_per_topic, subscriptions):
    "The first n % m members get one more, but every range starts at i * (n // m): ranges overlap."
    out = {m: [] for m in subscriptions}
    for t in sorted(partitions_per_topic):
        readers = sorted(m for m in subscriptions if t in subscriptions[m])
        if readers:
            q, e = divmod(partitions_per_topic[t], len(readers))
            for i, m in enumerate(readers):
                out[m] += [(t, p) for p in range(i * q, i * q + q + (1 if i < e else 0))]
    return out


def sticky_forgets(num_partitions, previous, members):
    "Ignores what members owned: a fresh deal each time (balanced, but moves nearly everything)."
    ms = sorted(members)
    return {m: [p for p in range(num_partitions) if p % len(ms) == i] for i, m in enumerate(ms)}


def sticky_never_rebalances(num_partitions, previous, members):
    "Keeps everything owned; only the partitions nobody owns go to the least loaded."
    out = {m: [p for p in previous.get(m, []) if p < num_partitions] for m in members}
    taken = {p for ps in out.values() for p in ps}
    for p in range(num_partitions):
        if p not in taken:
            out[min(sorted(members), key=lambda m: len(out[m]))].append(p)
    return {m: sorted(ps) for m, ps in out.items()}


def sticky_orphans(num_partitions, previous, members):
    "Trims what members owned to the quota, but partitions of members that left go nowhere."
    ms = sorted(members)
    quota = num_partitions // len(ms)
    out = {m: sorted(p for p in previous.get(m, []) if p < num_partitions)[:quota + 1] for m in ms}
    if not any(out.values()):  # the first generation: nothing owned yet
        return sticky_forgets(num_partitions, previous, members)
    return out


def sticky_extras_by_id(num_partitions, previous, members):
    "Balanced and keeps what it can, but the n % m members allowed one more are the first by id, "
    "not those that own the most: a member over that cap gives up a partition it could keep."
    ms = sorted(members)
    q, e = divmod(num_partitions, len(ms))
    cap = {m: q + (1 if i < e else 0) for i, m in enumerate(ms)}
    out = {m: sorted(p for p in previous.get(m, []) if p < num_partitions)[:cap[m]] for m in ms}
    free = [p for p in range(num_partitions) if not any(p in ps for ps in out.values())]
    for m in ms:
        while len(out[m]) < cap[m]:
            out[m].append(free.pop(0))
    return {m: sorted(ps) for m, ps in out.items()}


WRONG = [
    ("range_assign", range_unsorted, "order-dependent"),
    ("range_assign", range_drops_remainder, "unassigned"),
    ("range_assign", range_ceil, "unbalanced"),
    ("range_assign", range_ignores_subscriptions, "not-subscribed"),
    ("range_assign", range_overlapping, "two-owners"),
    ("reassign", sticky_forgets, "needless-moves"),
    ("reassign", sticky_never_rebalances, "unbalanced"),
    ("reassign", sticky_orphans, "unassigned"),
    ("reassign", sticky_extras_by_id, "needless-moves"),
    ("reassign", "sticky_join_order_ties", "order-dependent"),  # JOIN_ORDER_TIES, below
]


# --- the seams ----------------------------------------------------------------------------------------------


def test_the_rules_of_06_have_the_exercises_signatures():
    assert RULES["range_assign"].signature == "range_assign(partitions_per_topic, subscriptions)"
    assert RULES["reassign"].signature == "reassign(num_partitions, previous, members)"
    assert RULES["range_assign"].lecture == RULES["reassign"].lecture == "06"


def test_the_reference_functions_are_what_the_assignors_answer():
    rng = random.Random(6)
    for _ in range(300):
        counts = {f"t{i}": rng.randint(0, 7) for i in range(rng.randint(1, 3))}
        members = sorted({f"C{rng.randint(0, 20)}" for _ in range(rng.randint(1, 6))})
        subs = {m: rng.sample(sorted(counts) + ["gone"], rng.randint(1, len(counts) + 1)) for m in members}
        via_class = RangeAssignor().assign(counts, {m: Subscription(tuple(ts)) for m, ts in subs.items()})
        assert range_assign(counts, subs) == {m: [(tp.topic, tp.partition) for tp in tps]
                                              for m, tps in via_class.items()}
        n = rng.randint(1, 12)
        previous = {m: rng.sample(range(n), rng.randint(0, n)) for m in members}
        previous = {m: [p for p in ps if not any(p in previous[o] for o in members if o < m)]
                    for m, ps in previous.items()}
        joined = members + ["N1"]
        via_class = StickyAssignor().assign({"t": n}, {m: Subscription(("t",), owned_partitions=tuple(
            TP("t", p) for p in previous.get(m, ()))) for m in joined})
        got = reassign(n, previous, joined)
        assert got == {m: [tp.partition for tp in tps] for m, tps in via_class.items()}
        assert len(got) == len(joined) and tester_groups.sticky_problem(reassign, (n, previous, joined), got) is None


def test_the_reference_sticky_rule_moves_no_more_than_balance_needs():
    rng = random.Random(60)
    for _ in range(500):
        n = rng.randint(1, 20)
        old = [f"C{i}" for i in range(rng.randint(1, 8))]
        previous = {m: [] for m in old}
        for p in range(rng.randint(1, n)):
            previous[rng.choice(old)].append(p)
        members = sorted([m for m in old if rng.random() < 0.7] + [f"N{i}" for i in range(rng.randint(0, 3))]) or ["N0"]
        assert tester_groups.sticky_problem(reassign, (n, previous, members), reassign(n, previous, members)) is None


def group(cluster: Cluster, n: int, strategy: str) -> list[KafkaConsumer]:
    cluster.create_topic("trucks_gps", partitions=6, replication_factor=1)
    consumers = [KafkaConsumer("trucks_gps", bootstrap_servers=cluster, group_id="g", client_id=f"eta-{i}",
                               partition_assignment_strategy=(strategy,), auto_offset_reset="earliest")
                 for i in range(n)]
    for _ in range(100):
        for c in consumers:
            c.poll(timeout_ms=0)
        cluster.advance(100)
        if sum(len(c.assignment()) for c in consumers) == 6 and all(c.assignment() for c in consumers):
            break
    return consumers


def test_without_rules_the_leader_runs_kafkas_rules_unwrapped():
    with Cluster(brokers=1, seed=1) as cluster:
        consumers = group(cluster, 2, "range")
        assert all(c._node.coordinator.rules is REFERENCE for c in consumers)
        assert sorted(len(c.assignment()) for c in consumers) == [3, 3]


@pytest.mark.parametrize("name, strategy", [("range_assign", "range"), ("reassign", "sticky")])
def test_a_students_rule_is_what_the_group_leader_runs(name, strategy):
    calls = []

    def mine(*args):
        calls.append(args)
        return RULES[name].reference(*args)

    with Cluster(brokers=1, seed=1, rules={name: mine}) as cluster:
        consumers = group(cluster, 3, strategy)
        assert calls and sorted(len(c.assignment()) for c in consumers) == [2, 2, 2]
        assert cluster.rule_trace.calls[name] == len(calls)


def test_a_students_assignment_reaches_the_members_as_it_is():
    def everything_to_the_first(partitions_per_topic, subscriptions):
        first = sorted(subscriptions)[0]
        return {m: [(t, p) for t, n in partitions_per_topic.items() for p in range(n)] if m == first else []
                for m in subscriptions}

    with Cluster(brokers=1, seed=1, rules={"range_assign": everything_to_the_first}) as cluster:
        consumers = group(cluster, 2, "range")
        assert sorted(len(c.assignment()) for c in consumers) == [0, 6]
        assert cluster.rule_trace.differing_count >= 1


@pytest.mark.parametrize("name, strategy, fn, problem", [
    ("range_assign", "range", lambda counts, subs: [("trucks_gps", 0)], "it returned list [("),
    ("range_assign", "range", lambda counts, subs: {m: [("trucks_gps", 6)] for m in subs},
     "'trucks_gps' has partitions 0 to 5"),
    ("range_assign", "range", lambda counts, subs: {"nobody": []}, "it assigned to 'nobody', who is not a member"),
    ("reassign", "sticky", lambda n, previous, members: {m: [n] for m in members}, "the topic has partitions 0 to 5"),
    ("reassign", "sticky", lambda n, previous, members: 1 / 0, "it raised ZeroDivisionError"),
])
def test_nonsense_from_an_assignor_stops_the_group_with_one_message(name, strategy, fn, problem):
    cluster = Cluster(brokers=1, seed=1, rules={name: fn})
    with pytest.raises(RuleError) as e:
        group(cluster, 2, strategy)
    first = str(e.value).splitlines()[0]
    assert first.startswith(f"your rule {name} broke on consumer-") and problem in first
    assert f"  called with: {name}(" in str(e.value) and "  Kafka's rule returns: {" in str(e.value)
    cluster.close()


def test_a_guarded_assignor_gets_copies_of_the_subscriptions():
    def greedy(partitions_per_topic, subscriptions):
        for topics in subscriptions.values():
            topics.append("stolen")
        return range_assign(partitions_per_topic, subscriptions)

    rules = Rules({"range_assign": greedy}, node="consumer 3")
    subs = {"a": ["t"], "b": ["t"]}
    assert rules.range_assign({"t": 2}, subs) == {"a": [("t", 0)], "b": [("t", 1)]}
    assert subs == {"a": ["t"], "b": ["t"]}


# --- the tester -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["range_assign", "reassign"])
@pytest.mark.campaign
def test_kafkas_assignors_pass_the_group_campaign_through_the_guard(name):
    verdict = judge({name: lambda *args: RULES[name].reference(*args)})
    assert verdict.ok, str(verdict)
    assert str(verdict).startswith(f"0 anomalies in {tester_groups.DEFAULT_SCHEDULES} schedules (seed 0) and "
                                   f"1 scenario; your rules: {name}")


# Grading seeds on which a judge once failed Kafka's own rule (a false positive is an unfair grade): found by
# the seed sweep (`make seed-sweep`, benchmarks/seed_sweep.py) or by CI. Schedules as in the notebook's hidden check.
@pytest.mark.parametrize("name, schedules, seed", [
    ("range_assign", 4, 33),  # eta-1 and eta-3, eta's only readers, both killed: never-consumed (8707fbf)
    ("range_assign", 4, 34),
])
def test_kafkas_assignors_pass_the_hidden_check_on_grading_seeds_that_once_failed_them(name, schedules, seed):
    verdict = judge({name: lambda *args: RULES[name].reference(*args)}, schedules=schedules, seed=seed)
    assert verdict.ok, str(verdict)


def _wrong(fn):
    if isinstance(fn, str):  # a rule written as the source of a student's cell
        namespace = {}
        exec(JOIN_ORDER_TIES, namespace)
        return namespace["reassign"]
    return fn


@pytest.mark.parametrize("name, fn, kind", WRONG, ids=[getattr(fn, "__name__", fn) for _, fn, _ in WRONG])
@pytest.mark.campaign
def test_a_classic_wrong_assignor_is_caught_within_the_default_schedules(name, fn, kind):
    verdict = judge({name: _wrong(fn)})
    assert not verdict.ok and verdict.failure.kind == kind, str(verdict)
    assert verdict.failure.rule == name and f"then: {kind}: " in str(verdict)


def test_the_verdict_names_the_schedule_the_faults_and_the_differing_calls():
    verdict = judge({"reassign": sticky_forgets}, schedules=4, seed=0)
    text = str(verdict)
    assert text.startswith("FAILED: schedule 1 of 4 (seed ") and "shrunk: faults=1): needless-moves" in text
    assert "nemesis: " in text and "consumer eta-" in text and " consumer-3: reassign(num_partitions=10, previous=" in text


def test_the_judge_sends_each_lectures_rules_to_its_campaign_and_checks_its_arguments():
    with pytest.raises(IllegalArgumentError, match="no rule named 'range'"):
        judge({"range": range_assign})
    with pytest.raises(IllegalArgumentError, match="schedules must be an int >= 1"):
        judge({"range_assign": range_assign}, schedules=0)
    assert isinstance(judge({"range_assign": range_unsorted}, schedules=1), tester_groups.GroupVerdict)


def test_an_assignor_that_never_returns_is_interrupted_and_reported():
    def forever(partitions_per_topic, subscriptions):
        while True:
            pass

    rules = Rules({"range_assign": forever}, node="consumer 4", clock=lambda: 12, budget_s=0.05)
    with pytest.raises(RuleError) as e:
        rules.range_assign({"t": 2}, {"a": ["t"]})
    assert str(e.value).splitlines()[0] == ("your rule range_assign broke on consumer 4 at t=12 ms: it was still "
                                            "running after 0.05 s of wall time (a loop that never ends?)")
    assert "  Kafka's rule returns: {'a': [('t', 0), ('t', 1)]} (per topic" in str(e.value)


def test_the_fewest_moves_balance_needs():
    # Six partitions, three members with two each, a fourth joins: two may keep two, one keeps one.
    assert tester_groups.minimal_moves(6, {"a": [0, 1], "b": [2, 3], "c": [4, 5]}, ["a", "b", "c", "d"]) == 1
    # The extra partition goes to a member that owns the most: b keeps three, nothing moves.
    assert tester_groups.minimal_moves(7, {"a": [0, 1], "b": [2, 3, 4]}, ["a", "b", "c"]) == 0
    # Only one member may keep three: the other gives one up.
    assert tester_groups.minimal_moves(7, {"a": [0, 1, 2], "b": [3, 4, 5]}, ["a", "b", "c"]) == 1
    assert tester_groups.minimal_moves(7, {"a": [0, 1, 2], "b": [3, 4, 5, 6]}, ["a", "b"]) == 0
    # Members that left and partitions that are gone count for nothing.
    assert tester_groups.minimal_moves(4, {"gone": [0, 1], "a": [2, 3, 9]}, ["a", "b"]) == 0


def test_a_record_read_again_after_its_commit_is_more_than_at_least_once():
    key = ("trucks_gps", 3, 17)
    # Read, not committed (the reader crashed), read again: at-least-once allows it.
    assert tester_groups._read_twice({key: [(100, "eta-1", False), (900, "eta-2", True)]}) is None
    # Read and committed, then read again by another member: a duplicate no delivery semantics allow.
    assert tester_groups._read_twice({key: [(100, "eta-1", True), (900, "eta-2", True)]}) == (
        key, (100, "eta-1", True), (900, "eta-2", True))


# --- grading: the tester is a hidden check ----------------------------------------------------------------

# Exercise 3's solution with one change a student makes: the members allowed one more partition are
# sorted by what they own only, ties left in the order given. The visible checks pass their members
# sorted, so it passes them all; a group leader passes them in join order, and the tester sees it.
JOIN_ORDER_TIES = (
    "def reassign(num_partitions, previous, members):\n"
    "    quota, extra = divmod(num_partitions, len(members))\n"
    "    kept = {m: sorted(p for p in previous.get(m, []) if p < num_partitions) for m in members}\n"
    "    by_ownership = sorted(members, key=lambda m: -len(kept[m]))\n"
    "    capacity = {m: quota + (1 if i < extra else 0) for i, m in enumerate(by_ownership)}\n"
    "    assignment = {m: kept[m][:capacity[m]] for m in members}\n"
    "    taken = {p for ps in assignment.values() for p in ps}\n"
    "    free = [p for p in range(num_partitions) if p not in taken]\n"
    "    for m in by_ownership:\n"
    "        while len(assignment[m]) < capacity[m]:\n"
    "            assignment[m].append(free.pop(0))\n"
    "    return {m: sorted(ps) for m, ps in assignment.items()}\n")


@pytest.mark.notebooks
def test_a_rule_that_passes_the_comparisons_but_not_the_tester_scores_0(tmp_path):
    import json
    from pathlib import Path

    from minikafka.course.grade import Settings
    from minikafka.course.gradebook import feedback, grade_all

    root = Path(__file__).resolve().parents[1]
    solution = json.loads((root / "solutions" / "06-consumer-groups.ipynb").read_text())
    submission = json.loads((root / "exercises" / "06-consumer-groups.ipynb").read_text())
    solved = {c["id"]: "".join(line for line in c["source"] if "### " not in line) for c in solution["cells"]}
    for cell in submission["cells"]:
        if "exercise" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = JOIN_ORDER_TIES if cell["id"] == "ex3" else solved[cell["id"]]
    (tmp_path / "06-consumer-groups.ipynb").write_text(json.dumps(submission))
    [result] = grade_all(tmp_path, root / "solutions", Settings(sanitize=root / "tests" / "nbval-sanitize.cfg"))
    first, second, third = result.exercises
    assert first.earned == first.points and second.earned == second.points, feedback(result)
    assert third.earned == 0, feedback(result)
    failed = [c.label for c in third.checks if not c.passed]
    passed = [c.label for c in third.checks if c.passed]
    # The examples, the 500 random changes and their hidden twin pass; "run your cluster" and the
    # hidden judge do not.
    assert failed == ["check 3", "hidden check 2"] and passed[:3] == ["check 1", "check 2", "hidden check 1"], \
        feedback(result)


def test_kafkas_assignors_keep_their_invariant_check_when_other_rules_are_a_students():
    class Broken(RangeAssignor):
        def _assign_with(self, partitions_per_topic, subscriptions, topics_of, rules):
            return {m: [TP("t", 0)] for m in topics_of}  # t-0 twice, t-1 to nobody

    subs = {"a": Subscription(("t",)), "b": Subscription(("t",))}
    with pytest.raises(Exception, match="gave t-0 to both 'a' and 'b'"):
        Broken().assign({"t": 2}, subs, Rules({"high_watermark": lambda *a: a[0]}))
    # With the student's own range rule in place, the answer goes out as it is (the tester judges it).
    assert Broken().assign({"t": 2}, subs, Rules({"range_assign": range_assign})) == {"a": [TP("t", 0)],
                                                                                     "b": [TP("t", 0)]}
