"""Rules as seams (``minikafka.rules``): the brokers call Kafka's rules through one ``Rules``
object; a student's function takes a rule's place under guard, and what it does wrong stops
the cluster with one readable ``RuleError``."""

from __future__ import annotations

import time

import pytest

from minikafka import Cluster, KafkaProducer
from minikafka import rules as R
from minikafka.errors import IllegalArgumentError
from minikafka.rules import REFERENCE, RULES, RuleError, Rules, RuleTrace


def run(cluster: Cluster, n: int = 12) -> list[int]:
    """Create a topic, write ``n`` records acks=all, one at a time: their offsets."""
    cluster.create_topic("t", partitions=1, replication_factor=3)
    producer = KafkaProducer(bootstrap_servers=cluster, acks="all")
    return [producer.send("t", value=b"v%d" % i).get(timeout=10).offset for i in range(n)]


def hw_student(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    "A correct student's high watermark, written differently from the reference."
    members = set(isr) | set(pending_isr or ())
    return max(hw, min([leader_leo] + [follower_leos.get(b, -1) for b in members if b != leader]))


# --- the seam ---------------------------------------------------------------------------------------


def test_every_rule_has_a_reference_a_statement_and_the_exercise_signature():
    assert R.table().count("called in") == len(RULES)
    assert sorted(r.name for r in RULES.values() if r.lecture == "04") == \
        ["high_watermark", "last_caught_up", "truncation_offset"]
    assert RULES["high_watermark"].signature == \
        "high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr)"
    assert RULES["last_caught_up"].signature == "last_caught_up(last_caught_up_ms, fetch, previous_fetch)"
    assert RULES["truncation_offset"].signature == \
        "truncation_offset(leader_epoch, leader_end_offset, follower_epochs, follower_leo, follower_log_start)"


def test_the_brokers_run_the_reference_functions_themselves_unwrapped():
    with Cluster(brokers=3, seed=3) as cluster:
        run(cluster, 2)
        for b in cluster.broker_ids:
            p = cluster.replica(b, "t", 0)
            assert p.rules is REFERENCE and cluster.broker(b).replica_manager.rules is REFERENCE
        assert REFERENCE.high_watermark is R.high_watermark
        assert REFERENCE.truncation_offset is R.truncation_offset


def test_a_correct_student_rule_runs_the_same_cluster_as_kafkas_and_is_called():
    outcomes = []
    for rules in (None, {"high_watermark": hw_student, "last_caught_up": lambda a, b, c: R.last_caught_up(a, b, c)}):
        with Cluster(brokers=3, seed=5, rules=rules) as cluster:
            offsets = run(cluster)
            cluster.advance(3_000)
            outcomes.append((offsets, cluster.describe("t"), cluster.now, cluster.world.events_processed,
                             cluster.world.rng.getstate()))
            calls = dict(cluster.rule_trace.calls)
    assert outcomes[0] == outcomes[1]
    assert calls["high_watermark"] > 20 and calls["last_caught_up"] > 20
    assert outcomes[0][0] == list(range(12))


def test_the_reference_rules_on_the_exercises_cases():
    assert R.high_watermark(5, 1, 8, {2: 8, 3: 5}, (1, 2), (1, 2, 3)) == 5  # pending ISR counts
    assert R.high_watermark(5, 1, 8, {2: 8, 3: 5}, (1, 2), None) == 8
    assert R.high_watermark(6, 1, 8, {2: 3, 3: 8}, (1, 2, 3), None) == 6  # never backwards
    assert R.high_watermark(0, 2, 4, {1: -1, 3: 4}, (1, 2, 3), None) == 0  # not fetched yet
    assert R.last_caught_up(0, (100, 5, 5), None) == 100
    assert R.last_caught_up(100, (200, 5, 9), (100, 5, 5)) == 100
    assert R.last_caught_up(100, (300, 9, 12), (200, 5, 9)) == 200  # at the leader's end of last time
    assert R.last_caught_up(0, (300, 7, 12), None) == 0
    assert R.end_offset_for([(0, 0), (2, 5), (3, 9)], 1, 12) == (0, 5)
    assert R.end_offset_for([(0, 0), (2, 5)], -1, 12) == (-1, -1)
    # the leader's epoch 0 ended at 5; the follower's epoch 0 ended at 3, where its epoch 1 began
    assert R.truncation_offset(0, 5, [(0, 0), (1, 3)], 7, 0) == 3
    # the leader's answer names its epoch 2: the follower's largest epoch <= 2 is its 1, which runs to its end
    assert R.truncation_offset(2, 9, [(0, 0), (1, 3)], 7, 0) == 7
    assert R.truncation_offset(1, 5, [(0, 0), (1, 2)], 7, 0) == 5
    assert R.truncation_offset(-1, 0, [(3, 4)], 6, 4) == 4  # nothing in common: the log start


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize("rules, message", [
    ({"high_water_mark": hw_student}, "no rule named 'high_water_mark'; the rules are high_watermark, "),
    ({"high_watermark": 3}, "rules['high_watermark'] must be a function high_watermark(hw, leader, "),
    ({"high_watermark": lambda hw, leader: hw}, "must take the arguments high_watermark(hw, leader, leader_leo"),
    ([hw_student], "rules must be a dict {rule name: function}"),
])
def test_bad_rules_are_refused_by_name(rules, message):
    with pytest.raises(IllegalArgumentError) as e:
        Cluster(brokers=1, rules=rules)
    assert message in str(e.value)


# --- the guard ------------------------------------------------------------------------------------------


def _tracebacks(error):
    tb = error.__traceback__
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_a_rule_that_raises_stops_the_cluster_with_one_message_naming_the_call():
    def hw(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        return min(follower_leos[b] for b in isr)  # KeyError: the leader is in the ISR, not a follower

    cluster = Cluster(brokers=3, seed=2, rules={"high_watermark": hw})
    with pytest.raises(RuleError) as e:
        run(cluster)
    text = str(e.value)
    first = text.splitlines()[0]
    assert first.startswith("your rule high_watermark broke on broker ") and " ms: it raised KeyError: " in first
    assert "  called with: high_watermark(hw=0, leader=" in text
    assert "  it returned: (raised KeyError: " in text
    assert "  Kafka's rule returns: 0 (the least log end offset among the leader" in text
    assert e.value.call.node in cluster.broker_ids and e.value.call.reference == 0
    # ... and the traceback reaches the student's line: the KeyError is its cause.
    assert isinstance(e.value.__cause__, KeyError) and e.value.__cause__.__traceback__.tb_next is not None
    assert any(t.tb_frame.f_code is hw.__code__ for t in _tracebacks(e.value.__cause__))
    assert not any(cluster.world.alive(n) for n in cluster.broker_ids + cluster.controller_ids)
    cluster.close()


@pytest.mark.parametrize("rule, fn, problem", [
    ("high_watermark", lambda hw, leader, leader_leo, f, isr, p: str(leader_leo), "it returned str '"),
    ("high_watermark", lambda hw, leader, leader_leo, f, isr, p: leader_leo + 1, "above the leader's log end"),
    ("high_watermark", lambda hw, leader, leader_leo, f, isr, p: min([leader_leo, *f.values()]),
     "it moved the high watermark backwards, from "),
    ("last_caught_up", lambda last, fetch, previous: fetch[0] + 1, "after the fetch at "),
    ("last_caught_up", lambda last, fetch, previous: None, "it returned NoneType None, not a time in ms"),
])
def test_nonsense_is_caught_at_the_call(rule, fn, problem):
    cluster = Cluster(brokers=3, seed=1, rules={rule: fn})
    with pytest.raises(RuleError) as e:
        run(cluster)
        cluster.advance(5_000)
    assert problem in str(e.value).splitlines()[0]
    assert e.value.call.rule == rule and e.value.call.time_ms >= 0
    cluster.close()


def test_a_truncation_past_the_log_end_is_nonsense():
    guarded = Rules({"truncation_offset": lambda e, end, epochs, leo, start: end}, node=2, clock=lambda: 40)
    with pytest.raises(RuleError) as e:
        guarded.truncation_offset(1, 9, [(0, 0), (1, 3)], 6, 0)
    assert str(e.value).splitlines()[0] == ("your rule truncation_offset broke on broker 2 at t=40 ms: it cut the "
                                            "log at 9, past its end 6: a cut never lengthens a log")
    assert "Kafka's rule returns: 6 " in str(e.value)


def test_a_rule_that_never_returns_is_interrupted_and_reported():
    def forever(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        while True:
            pass

    guarded = Rules({"high_watermark": forever}, node=1, clock=lambda: 7, budget_s=0.05)
    with pytest.raises(RuleError) as e:
        guarded.high_watermark(0, 1, 3, {2: 3}, (1, 2), None)
    assert "it was still running after 0.05 s of wall time" in str(e.value)
    assert "it returned: (nothing: still running after 0.05 s)" in str(e.value)


def test_a_rule_that_mutates_its_arguments_cannot_change_the_broker():
    def greedy(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        answer = R.high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr)
        follower_leos.clear()
        return answer

    results = []
    for rules in (None, {"high_watermark": greedy}):
        with Cluster(brokers=3, seed=4, rules=rules) as cluster:
            results.append((run(cluster, 6), cluster.describe("t")))
    assert results[0] == results[1]


def test_calls_that_differ_from_kafkas_are_traced():
    trace = RuleTrace(keep=2)
    guarded = Rules({"high_watermark": lambda hw, leader, leo, f, isr, p: leo}, node=3, clock=lambda: 11, trace=trace)
    assert guarded.high_watermark(0, 3, 5, {1: 2, 2: 5}, (1, 2, 3), None) == 5
    assert guarded.high_watermark(2, 3, 5, {1: 5, 2: 5}, (1, 2, 3), None) == 5  # the same as Kafka's
    for _ in range(3):
        guarded.high_watermark(2, 3, 6, {1: 5, 2: 5}, (1, 2, 3), None)
    assert trace.calls == {"high_watermark": 5} and trace.differing_count == 4 and len(trace.differing) == 2
    assert trace.differing[0].line() == ("t=    11 ms  broker 3: high_watermark(hw=0, leader=3, leader_leo=5, "
                                         "follower_leos={1: 2, 2: 5}, isr=(1, 2, 3), pending_isr=None) -> 5; "
                                         "Kafka's rule: 2")


# --- the judge's allowance: slow on every call, never past the per-call budget ----------------------


def test_calls_inside_an_allowance_stop_once_it_is_spent_and_say_where_it_went():
    from minikafka.rules import allowance, out_of_time

    ran = []

    def slow(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        ran.append(1)
        time.sleep(0.02)
        return R.high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr)

    guarded = Rules({"high_watermark": slow}, node=1, clock=lambda: 7)  # 2 s a call: never reached
    with allowance(0.2) as spending, pytest.raises(RuleError) as e:
        for _ in range(1_000):
            guarded.high_watermark(0, 1, 3, {2: 3}, (1, 2), None)
    calls, seconds = spending.spent["high_watermark"]
    assert len(ran) == calls < 1_000 and seconds >= 0.2
    message = str(e.value)
    assert message.startswith("your rule high_watermark broke on broker 1 at t=7 ms: your rules used up the "
                              "judge's allowance of 0.2 s of wall time in all (high_watermark ")
    assert f"in {calls} calls (" in message and "ms a call)" in message and "Kafka's rules take microseconds" in message
    with allowance(0.2):
        assert not out_of_time()
    # Spent, every later call stops at once: the student's function never runs again.
    with allowance(0.2) as spending:
        with pytest.raises(RuleError):
            for _ in range(1_000):
                guarded.high_watermark(0, 1, 3, {2: 3}, (1, 2), None)
        assert out_of_time()
        before = len(ran)
        with pytest.raises(RuleError) as again:
            guarded.high_watermark(0, 1, 3, {2: 3}, (1, 2), None)
        assert len(ran) == before and again.value is spending.error
    guarded.high_watermark(0, 1, 3, {2: 3}, (1, 2), None)  # outside any allowance: the call's own budget only


def test_a_call_inside_another_guarded_call_spends_nothing_twice():
    from minikafka.rules import allowance

    inner = Rules({"high_watermark": lambda *a: (time.sleep(0.05), R.high_watermark(*a))[1]}, node=1)

    def outer(hw, leader, leader_leo, follower_leos, isr, pending_isr):  # as an application's step runs the world
        return inner.high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr)

    guarded = Rules({"high_watermark": outer}, node=2)
    with allowance(10) as spending:
        guarded.high_watermark(0, 1, 3, {2: 3}, (1, 2), None)
    assert spending.spent["high_watermark"][0] == 1 and spending.spent["high_watermark"][1] >= 0.05


def test_a_judges_count_of_calls_says_apart_the_call_that_broke():
    """A student trial read "1 high_watermark calls, 1 answered differently from Kafka's" for a rule
    stopped at its first call: it answered nothing. The call that broke is said apart, and one
    call is one call."""
    from minikafka.rules import calls_said

    assert calls_said({"index_lookup": 15}, 3) == "15 index_lookup calls, 3 answered differently from Kafka's"
    assert calls_said({"high_watermark": 1}, 1, broke=True) == "1 high_watermark call; the last one broke"
    assert calls_said({"high_watermark": 40, "last_caught_up": 7}, 5, broke=True) == (
        "40 high_watermark calls, 7 last_caught_up calls; the last one broke, 4 before it answered differently "
        "from Kafka's")
    assert calls_said({}, 0) == "no calls, 0 answered differently from Kafka's"
