"""Notebook 05's rules as seams: the broker's ``ProducerStateManager`` asks ``check_batch`` and
the producer's ``RecordAccumulator`` asks ``batch_ready`` (``minikafka.rules``), a student's run
the cluster under guard, and the tester (``minikafka.course.tester_producer``, reached through
``judge``) catches the classic wrong ones."""

from __future__ import annotations

import random

import pytest

from minikafka import Cluster, KafkaProducer
from minikafka.broker.producer_state import ProducerStateManager
from minikafka.clients.record_accumulator import RecordAccumulator
from minikafka.course import tester_producer
from minikafka.course.tester import JUDGES, judge
from minikafka.errors import IllegalArgumentError
from minikafka.messages import DUPLICATE_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, NO_ERROR, OUT_OF_ORDER_SEQUENCE_NUMBER
from minikafka.rules import REFERENCE, RULES, RuleError, Rules, batch_ready, check_batch

# --- classic wrong idempotence checks students write -------------------------------------------------------


def gap_accepted(state, producer_id, epoch, first_seq, count):
    "Any sequence past the last one is appended: a gap (first_seq > last + 1) too."
    if producer_id == -1 or producer_id not in state:
        return "append"
    known, batches = state[producer_id]
    if epoch != known:
        return "fenced" if epoch < known else "append"
    if (first_seq, (first_seq + count - 1) % 2**31) in batches:
        return "duplicate"
    return "append" if first_seq > (batches[-1][1] if batches else -1) else "out of order"


def every_repeat_new(state, producer_id, epoch, first_seq, count):
    "No duplicate detection: a retried batch is appended again."
    if producer_id in state and epoch < state[producer_id][0]:
        return "fenced"
    return "append"


def epoch_ignored(state, producer_id, epoch, first_seq, count):
    "Sequences only, whatever the epoch says."
    if producer_id == -1:
        return "append"
    if producer_id not in state:
        return "append" if first_seq == 0 else "out of order"
    batches = state[producer_id][1]
    if (first_seq, (first_seq + count - 1) % 2**31) in batches:
        return "duplicate"
    return "append" if first_seq == ((batches[-1][1] if batches else -1) + 1) % 2**31 else "out of order"


def first_seq_only(state, producer_id, epoch, first_seq, count):
    "A duplicate if a remembered batch has the same first sequence, whatever its range."
    if producer_id == -1:
        return "append"
    if producer_id not in state:
        return "append" if first_seq == 0 else "out of order"
    known, batches = state[producer_id]
    if epoch != known:
        return "fenced" if epoch < known else ("append" if first_seq == 0 else "out of order")
    if any(f == first_seq for f, _ in batches):
        return "duplicate"
    return "append" if first_seq == ((batches[-1][1] if batches else -1) + 1) % 2**31 else "out of order"


# --- classic wrong "ready" rules --------------------------------------------------------------------------


def never_until_full(batch_bytes, batch_size, queued_behind, waited_ms, linger_ms, flushing):
    "Waits for a full batch: linger_ms never sends anything."
    return queued_behind > 0 or batch_bytes >= batch_size or flushing


def at_once(batch_bytes, batch_size, queued_behind, waited_ms, linger_ms, flushing):
    "Ignores linger_ms: every batch goes as soon as it has a record."
    return True


def ignores_flush(batch_bytes, batch_size, queued_behind, waited_ms, linger_ms, flushing):
    "Forgets the producer that flushes or closes."
    return queued_behind > 0 or batch_bytes >= batch_size or waited_ms >= linger_ms


def linger_off_by_one(batch_bytes, batch_size, queued_behind, waited_ms, linger_ms, flushing):
    "waited_ms > linger_ms: one millisecond late."
    return queued_behind > 0 or batch_bytes >= batch_size or waited_ms > linger_ms or flushing


def ignores_queue(batch_bytes, batch_size, queued_behind, waited_ms, linger_ms, flushing):
    "Full by its own bytes only, not when a batch waits behind it."
    return batch_bytes >= batch_size or waited_ms >= linger_ms or flushing


# --- the seams ------------------------------------------------------------------------------------------


def test_the_rules_of_05_have_the_exercises_signatures():
    assert RULES["check_batch"].signature == "check_batch(state, producer_id, epoch, first_seq, count)"
    assert RULES["batch_ready"].signature == (
        "batch_ready(batch_bytes, batch_size, queued_behind, waited_ms, linger_ms, flushing)")
    assert {RULES["check_batch"].lecture, RULES["batch_ready"].lecture} == {"05"}
    assert "05" in JUDGES


def test_the_reference_check_answers_the_exercises_cases():
    state = {7: (1, [(0, 4), (5, 9)]), 9: (0, [(2**31 - 3, 2**31 - 1)]), 4: (3, [])}
    cases = [((7, 1, 10, 5), "append"), ((7, 1, 5, 5), "duplicate"), ((7, 1, 0, 5), "duplicate"),
             ((7, 1, 12, 3), "out of order"), ((7, 1, 8, 5), "out of order"), ((7, 0, 10, 5), "fenced"),
             ((7, 2, 0, 3), "append"), ((7, 2, 10, 5), "out of order"), ((8, 0, 0, 1), "append"),
             ((8, 0, 3, 1), "out of order"), ((-1, -1, -1, 4), "append"), ((9, 0, 0, 2), "append"),
             ((9, 0, 2**31 - 3, 3), "duplicate"), ((4, 3, 0, 2), "append"), ((4, 3, 1, 2), "out of order")]
    for args, expected in cases:
        assert check_batch(state, *args) == expected, args


def test_the_broker_answers_what_the_rule_decides():
    manager = ProducerStateManager()
    manager.update(7, 1, 0, 0, 4)
    manager.update(7, 1, 5, 5, 9)
    assert manager.check(7, 1, 10, 5) == (NO_ERROR, -1)
    assert manager.check(7, 1, 5, 5) == (DUPLICATE_SEQUENCE_NUMBER, 5)
    assert manager.check(7, 1, 12, 1) == (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert manager.check(7, 0, 10, 1) == (INVALID_PRODUCER_EPOCH, -1)
    assert manager.check(-1, -1, -1, 3) == (NO_ERROR, -1)
    seen = []
    manager.rules = Rules({"check_batch": lambda *args: seen.append(args) or "append"})
    assert manager.check(7, 1, 12, 1) == (NO_ERROR, -1)
    assert seen == [({7: (1, [(0, 4), (5, 9)])}, 7, 1, 12, 1)]


def test_the_reference_ready_rule_is_kafkas():
    assert batch_ready(100, 16_384, 1, 0, 10, False)  # a batch waits behind it
    assert batch_ready(400, 400, 0, 0, 10, False)  # full
    assert batch_ready(100, 400, 0, 10, 10, False)  # lingered linger_ms exactly
    assert not batch_ready(100, 400, 0, 9, 10, False)
    assert batch_ready(100, 400, 0, 0, 10, True)  # flushing


def test_without_rules_the_nodes_run_kafkas_rules_unwrapped():
    assert REFERENCE.check_batch is check_batch and REFERENCE.batch_ready is batch_ready
    assert ProducerStateManager().rules is REFERENCE
    assert RecordAccumulator().rules is REFERENCE
    with Cluster(brokers=1, seed=3) as c:
        c.create_topic("t", partitions=1, replication_factor=1)
        assert c.replica(1, "t", 0).producer_state.rules is REFERENCE
        assert c.client_rules("producer-9") is REFERENCE


def test_a_students_rules_are_what_the_broker_and_the_producer_run():
    asked = {"check_batch": 0, "batch_ready": 0}

    def mine_check(*args):
        asked["check_batch"] += 1
        return check_batch(*args)

    def mine_ready(*args):
        asked["batch_ready"] += 1
        return batch_ready(*args)

    with Cluster(brokers=1, seed=3, rules={"check_batch": mine_check, "batch_ready": mine_ready}) as c:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = KafkaProducer(bootstrap_servers=c, acks="all", enable_idempotence=True, linger_ms=5)
        futures = [p.send("t", value=b"v%d" % i, partition=0) for i in range(3)]
        p.flush()
        assert all(f.succeeded() for f in futures)
        assert asked["check_batch"] >= 1 and asked["batch_ready"] >= 1
        assert c.rule_trace.calls == asked


@pytest.mark.parametrize("rule, fn, problem", [
    ("check_batch", lambda *a: "ok", "not one of 'append', 'duplicate', 'out of order', 'fenced'"),
    ("check_batch", lambda *a: "duplicate", "no remembered batch from sequence 0"),
    ("check_batch", lambda *a: 1 / 0, "raised ZeroDivisionError"),
    ("batch_ready", lambda *a: 1, "not True or False"),
    ("batch_ready", lambda *a: None, "not True or False"),
])
def test_nonsense_from_a_rule_stops_the_cluster_with_one_message(rule, fn, problem):
    with Cluster(brokers=1, seed=3, rules={rule: fn}) as c:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = KafkaProducer(bootstrap_servers=c, acks="all", enable_idempotence=True)
        with pytest.raises(RuleError) as caught:
            p.send("t", value=b"x", partition=0)
            c.advance(500)
    message = str(caught.value)
    assert f"your rule {rule} broke on" in message and problem in message
    assert f"called with: {rule}(" in message and "Kafka's rule returns:" in message and "t=" in message


def test_a_rule_that_never_returns_is_interrupted_and_reported():
    def forever(*args):
        while True:
            pass

    rules = Rules({"batch_ready": forever}, node="producer-1", clock=lambda: 42, budget_s=0.2)
    with pytest.raises(RuleError) as caught:
        rules.batch_ready(100, 16_384, 0, 3, 5, False)
    assert "still running after 0.2 s" in str(caught.value) and "producer-1 at t=42 ms" in str(caught.value)


def test_a_rule_with_the_wrong_arguments_is_refused_before_the_run():
    with pytest.raises(IllegalArgumentError, match="batch_ready"):
        Cluster(brokers=1, rules={"batch_ready": lambda batch_bytes, linger_ms: True})


# --- the judge --------------------------------------------------------------------------------------------


@pytest.mark.campaign
def test_kafkas_rules_pass_the_judge_through_the_guard():
    verdict = judge({"check_batch": lambda *a: check_batch(*a), "batch_ready": lambda *a: batch_ready(*a)})
    assert verdict.ok, str(verdict)
    assert str(verdict).startswith("0 anomalies in 14 schedules")


@pytest.mark.parametrize("fn, kind", [
    (gap_accepted, "unacknowledged"),
    (every_repeat_new, "duplicate"),
    (epoch_ignored, "lost-write"),
])
@pytest.mark.campaign
def test_a_classic_wrong_idempotence_check_is_caught_within_the_default_schedules(fn, kind):
    verdict = judge({"check_batch": fn})
    assert not verdict.ok
    assert verdict.failure.kind == kind, str(verdict)
    assert "check_batch" in str(verdict)


def test_a_check_comparing_first_sequences_only_answers_like_kafkas_for_every_batch_a_producer_sends():
    # Not caught, and why: minikafka's producer resends a batch byte for byte (same first and
    # last sequence), so no batch ever repeats a first sequence with another range.
    assert tester_producer.lost_request({"check_batch": first_seq_only}) is None
    assert tester_producer.restarted_producer({"check_batch": first_seq_only}) is None
    state = {7: (1, [(0, 4)])}
    assert first_seq_only(state, 7, 1, 0, 3) == "duplicate" != check_batch(state, 7, 1, 0, 3)


@pytest.mark.parametrize("fn, kind", [
    (never_until_full, "late"),
    (at_once, "tiny-batches"),
    (ignores_flush, "flush-waited"),
    (linger_off_by_one, "late"),
    (ignores_queue, "late"),
])
def test_a_classic_wrong_ready_rule_is_caught_within_the_default_schedules(fn, kind):
    verdict = judge({"batch_ready": fn})
    assert not verdict.ok
    assert verdict.failure.kind == kind, str(verdict)
    assert "batch_ready(" in str(verdict)  # the calls that differed from Kafka's


def test_a_ready_rule_that_waits_for_full_batches_leaves_records_in_the_producer():
    rng = random.Random(1)
    found = [tester_producer.run_ready_schedule({"batch_ready": never_until_full}, rng.randrange(10**6))
             for _ in range(4)]
    assert any(f is not None and "still in the producer" in f.what for f in found), [str(f) for f in found]
