"""Notebook 07's rules as seams: the application's loop (where to commit, where to start, what one
transaction holds) runs a simulated cluster's consumers through ``Cluster(rules=...)``, and the
tester (``minikafka.course.tester_delivery``, reached through ``judge``) catches the classic wrong
ones by the guarantee each promises."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from minikafka import Cluster, KafkaConsumer, KafkaProducer, recipes
from minikafka.broker import group_metadata
from minikafka.course import tester_delivery
from minikafka.course.tester import judge
from minikafka.errors import IllegalArgumentError
from minikafka.rules import REFERENCE, RULES, RuleError, Rules
from minikafka.topic import OffsetAndMetadata

# --- classic wrong loops students write ---------------------------------------------------------------------


def lost_commit_first(consumer, process):
    "Commits before processing (at-most-once where at-least-once was asked)."
    batch = consumer.poll(timeout_ms=1_000)
    consumer.commit()
    for tp, records in batch.items():
        for record in records:
            process(record)


def lost_commit_last_offset(consumer, process):
    "Commits the offset of the last record processed, not last + 1."
    batch = consumer.poll(timeout_ms=1_000)
    for tp, records in batch.items():
        for record in records:
            process(record)
    if batch:
        consumer.commit({tp: OffsetAndMetadata(records[-1].offset, "", -1) for tp, records in batch.items()})


def lost_never_commits(consumer, process):
    "Never commits: nothing is lost, but every crash repeats everything since the start."
    for tp, records in consumer.poll(timeout_ms=1_000).items():
        for record in records:
            process(record)


def lost_commit_after_first_record(consumer, process):
    "Commits once the first record is processed (the consumer's position is already the batch's end)."
    for tp, records in consumer.poll(timeout_ms=1_000).items():
        for i, record in enumerate(records):
            process(record)
            if i == 0:
                consumer.commit()


def twice_process_first(consumer, process):
    "Processes, then commits (at-least-once where at-most-once was asked)."
    recipes.no_record_lost(consumer, process)


def twice_commit_last_offset(consumer, process):
    "Commits the offset of the last record polled, not last + 1, before processing."
    batch = consumer.poll(timeout_ms=1_000)
    if batch:
        consumer.commit({tp: OffsetAndMetadata(records[-1].offset, "", -1) for tp, records in batch.items()})
    for tp, records in batch.items():
        for record in records:
            process(record)


def twice_never_commits(consumer, process):
    "Never commits: each crash starts over from the beginning."
    lost_never_commits(consumer, process)


def assigned_no_seek(consumer, partitions, db):
    "No seek: the consumer starts at Kafka's committed offset (none here: the earliest)."


def assigned_kafkas_offset(consumer, partitions, db):
    "Seeks to Kafka's committed offset, not the database's."
    for tp in partitions:
        consumer.seek(tp, consumer.committed(tp) or 0)


def assigned_one_past(consumer, partitions, db):
    """Seeks one past the stored offset (as if it were the last record counted): at the partition's end that
    is past the log end, and auto_offset_reset starts over from the earliest."""
    for tp in partitions:
        stored = db.get(("offset", tp.topic, tp.partition))
        if stored is not None:
            consumer.seek(tp, stored + 1)


def assigned_one_before(consumer, partitions, db):
    "Seeks one before the stored offset."
    for tp in partitions:
        stored = db.get(("offset", tp.topic, tp.partition))
        if stored is not None:
            consumer.seek(tp, max(0, stored - 1))


def count_two_transactions(consumer, records, db):
    "The count and the offset in two transactions: a crash between them counts the record twice."
    for record in records:
        count = ("count", record.key)
        db.transaction({count: db.get(count, 0) + 1})
        db.transaction({("offset", record.topic, record.partition): record.offset + 1})


def count_then_kafka_commit(consumer, records, db):
    "Counts in the database, commits the offsets to Kafka after: at-least-once."
    for record in records:
        count = ("count", record.key)
        db.transaction({count: db.get(count, 0) + 1})
    if records:
        consumer.commit()


def count_stores_last_offset(consumer, records, db):
    "Stores the offset of the record counted, not the next one."
    for record in records:
        count = ("count", record.key)
        db.transaction({count: db.get(count, 0) + 1, ("offset", record.topic, record.partition): record.offset})


def count_kafka_commit_first(consumer, records, db):
    "Commits to Kafka before counting: at-most-once."
    if records:
        consumer.commit()
    for record in records:
        count = ("count", record.key)
        db.transaction({count: db.get(count, 0) + 1})


def txn_consumer_commit_after(consumer, producer, transform):
    "The outputs in a transaction, the offsets committed by the consumer after it."
    batch = consumer.poll(timeout_ms=1_000)
    if not batch:
        return
    producer.begin_transaction()
    for tp, records in batch.items():
        for record in records:
            producer.send("out", transform(record), partition=record.partition)
    producer.commit_transaction()
    consumer.commit()


def txn_consumer_commit_first(consumer, producer, transform):
    "The consumer commits its offsets before the transaction."
    batch = consumer.poll(timeout_ms=1_000)
    if not batch:
        return
    consumer.commit()
    producer.begin_transaction()
    for tp, records in batch.items():
        for record in records:
            producer.send("out", transform(record), partition=record.partition)
    producer.commit_transaction()


def txn_last_offset(consumer, producer, transform):
    "The offsets in the transaction, but of the last record, not last + 1."
    batch = consumer.poll(timeout_ms=1_000)
    if not batch:
        return
    producer.begin_transaction()
    for tp, records in batch.items():
        for record in records:
            producer.send("out", transform(record), partition=record.partition)
    producer.send_offsets_to_transaction(
        {tp: OffsetAndMetadata(records[-1].offset, "", -1) for tp, records in batch.items()}, "upper")
    producer.commit_transaction()


def txn_offsets_in_their_own_transaction(consumer, producer, transform):
    "The outputs in one transaction, the offsets in a second one."
    batch = consumer.poll(timeout_ms=1_000)
    if not batch:
        return
    producer.begin_transaction()
    for tp, records in batch.items():
        for record in records:
            producer.send("out", transform(record), partition=record.partition)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        {tp: OffsetAndMetadata(records[-1].offset + 1, "", -1) for tp, records in batch.items()}, "upper")
    producer.commit_transaction()


def txn_no_offsets(consumer, producer, transform):
    "No offsets at all: the group never records its progress."
    batch = consumer.poll(timeout_ms=1_000)
    if not batch:
        return
    producer.begin_transaction()
    for tp, records in batch.items():
        for record in records:
            producer.send("out", transform(record), partition=record.partition)
    producer.commit_transaction()


def key_short_partition(data):
    "Reads the partition as an int16 (the first two bytes of the int32: 0 for every partition < 65536)."
    (version,) = struct.unpack_from(">h", data, 0)
    (n,) = struct.unpack_from(">h", data, 2)
    group = data[4:4 + n].decode()
    if version == 2:
        return ("group", group)
    (m,) = struct.unpack_from(">h", data, 4 + n)
    topic = data[6 + n:6 + n + m].decode()
    (partition,) = struct.unpack_from(">h", data, 6 + n + m)
    return ("offset", group, topic, partition)


def key_latin1(data):
    "Decodes the strings as Latin-1, not UTF-8 (right for ASCII names only)."
    return tuple(x.encode().decode("latin-1") if isinstance(x, str) and i else x
                 for i, x in enumerate(group_metadata.read_key(data)))


def key_group_and_topic_swapped(data):
    "Returns the topic where the group goes and the group where the topic goes."
    kind, *rest = group_metadata.read_key(data)
    return ("offset", rest[1], rest[0], rest[2]) if kind == "offset" else (kind, *rest)


def key_little_endian(data):
    "Reads the lengths little-endian."
    (version,) = struct.unpack_from("<h", data, 0)
    (n,) = struct.unpack_from("<h", data, 2)
    group = data[4:4 + n].decode()
    if version == 2:
        return ("group", group)
    (m,) = struct.unpack_from("<h", data, 4 + n)
    return ("offset", group, data[6 + n:6 + n + m].decode(), struct.unpack_from("<i", data, 6 + n + m)[0])


WRONG = [
    ("no_record_lost", lost_commit_first, "lost"),
    ("no_record_lost", lost_commit_last_offset, "processed-again"),
    ("no_record_lost", lost_never_commits, "processed-again"),
    ("no_record_lost", lost_commit_after_first_record, "lost"),
    ("no_record_twice", twice_process_first, "processed-twice"),
    ("no_record_twice", twice_commit_last_offset, "processed-twice"),
    ("no_record_twice", twice_never_commits, "processed-twice"),
    ("on_assigned", assigned_no_seek, "counted-twice"),
    ("on_assigned", assigned_kafkas_offset, "counted-twice"),
    ("on_assigned", assigned_one_past, "counted-twice"),
    ("on_assigned", assigned_one_before, "counted-twice"),
    ("count_reports", count_two_transactions, "counted-twice"),
    ("count_reports", count_then_kafka_commit, "counted-twice"),
    ("count_reports", count_stores_last_offset, "counted-twice"),
    ("count_reports", count_kafka_commit_first, "lost"),
    ("transactional_step", txn_consumer_commit_after, "counted-twice"),
    ("transactional_step", txn_consumer_commit_first, "lost"),
    ("transactional_step", txn_last_offset, "counted-twice"),
    ("transactional_step", txn_offsets_in_their_own_transaction, "counted-twice"),
    ("transactional_step", txn_no_offsets, "counted-twice"),
    ("decode_key", key_short_partition, "offsets-lost"),
    ("decode_key", key_latin1, "offsets-lost"),
    ("decode_key", key_group_and_topic_swapped, "offsets-lost"),
    ("decode_key", key_little_endian, "rule-error"),
]
NAMES07 = ["no_record_lost", "no_record_twice", "on_assigned", "count_reports", "transactional_step"]


# --- the seams --------------------------------------------------------------------------------------------------


def test_the_rules_of_07_have_the_exercises_signatures():
    assert [RULES[n].signature for n in NAMES07] == [
        "no_record_lost(consumer, process)", "no_record_twice(consumer, process)",
        "on_assigned(consumer, partitions, db)", "count_reports(consumer, records, db)",
        "transactional_step(consumer, producer, transform)"]
    assert all(RULES[n].lecture == "07" and RULES[n].effects for n in NAMES07)
    assert all(getattr(REFERENCE, n) is getattr(recipes, n) for n in NAMES07)  # unwrapped: no cost


def test_a_consumers_rules_are_the_clusters_under_guard_and_kafkas_without():
    with Cluster(brokers=1, seed=1) as cluster:
        assert cluster.client_rules("consumer-3").no_record_lost is recipes.no_record_lost
    with Cluster(brokers=1, seed=1, rules={"no_record_lost": lost_commit_first}) as cluster:
        rules = cluster.client_rules("consumer-3")
        assert rules.no_record_lost.fn is lost_commit_first and rules.no_record_twice is recipes.no_record_twice


def test_the_guard_never_runs_kafkas_step_beside_a_students():
    seen = []

    def mine(consumer, process):
        seen.append("mine")

    rules = Rules({"no_record_lost": mine}, node="consumer-3")
    assert rules.no_record_lost(None, lambda r: seen.append("processed")) is None
    assert seen == ["mine"]  # recipes.no_record_lost(None, ...) would have raised: it never ran


def test_a_step_that_raises_stops_the_cluster_with_one_message():
    def broken(consumer, process):
        batch = consumer.poll(timeout_ms=1_000)
        raise KeyError("offsets")

    verdict = judge({"no_record_lost": broken}, schedules=1)
    assert not verdict.ok and verdict.failure.kind == "rule-error"
    text = str(verdict)
    assert "your rule no_record_lost broke on consumer-3 at t=" in text
    assert "it raised KeyError: 'offsets'" in text and "called with: no_record_lost(consumer=<KafkaConsumer" in text
    assert "Kafka's rule returns None, having acted: at-least-once: poll, process" in text


def test_a_crash_passes_through_a_students_except_exception():
    def swallows(consumer, process):
        try:
            recipes.no_record_lost(consumer, process)
        except Exception:
            pass

    assert judge({"no_record_lost": swallows}, schedules=2).ok  # the process died all the same


def test_a_step_that_never_returns_is_interrupted_and_reported(monkeypatch):
    def forever(consumer, process):
        while True:
            pass

    monkeypatch.setitem(RULES, "no_record_lost", dataclasses.replace(RULES["no_record_lost"], budget_s=0.1))
    verdict = judge({"no_record_lost": forever}, schedules=1, shrinking=False)
    assert verdict.failure.kind == "rule-error"
    assert "it was still running after 0.1 s of wall time (a loop that never ends?)" in str(verdict)


def test_a_students_step_is_what_the_consumer_runs():
    with Cluster(brokers=1, seed=2, rules={"no_record_twice": twice_process_first}) as cluster:
        cluster.create_topic("orders", partitions=1, replication_factor=1)
        producer = KafkaProducer(bootstrap_servers=cluster)
        for i in range(5):
            producer.send("orders", b"order %d" % i)
        producer.flush()
        consumer = KafkaConsumer("orders", bootstrap_servers=cluster, group_id="billing", enable_auto_commit=False,
                                 auto_offset_reset="earliest")
        rules = cluster.client_rules(str(consumer.node_id))
        processed, steps = [], 0
        while len(processed) < 5 and steps < 30:  # the first polls wait for the group's first assignment
            rules.no_record_twice(consumer, lambda record: processed.append(record.offset))
            steps += 1
        assert processed == [0, 1, 2, 3, 4] and rules.trace.calls == {"no_record_twice": steps}


def test_the_judge_checks_its_arguments():
    with pytest.raises(IllegalArgumentError, match=r"must take the arguments no_record_lost\(consumer, process\)"):
        judge({"no_record_lost": lambda consumer: None})


# --- the tester -------------------------------------------------------------------------------------------------


def test_the_coordinators_replay_reads_keys_through_decode_key():
    key = bytes.fromhex("00 01 00 08 64 69 73 70 61 74 63 68 00 0a 74 72 75 63 6b 73 5f 67 70 73 00 00 00 00")
    assert RULES["decode_key"].signature == "decode_key(data)" and RULES["decode_key"].lecture == "07"
    assert REFERENCE.decode_key(key) == ("offset", "dispatch", "trucks_gps", 0)
    assert REFERENCE.decode_key(bytes.fromhex("00 02 00 05 66 6c 65 65 74")) == ("group", "fleet")
    rules = Rules({"decode_key": lambda data: ("offset", "g", "t")}, node=2, clock=lambda: 7)
    with pytest.raises(RuleError) as e:
        rules.decode_key(key)
    assert str(e.value).splitlines()[0] == (
        "your rule decode_key broke on broker 2 at t=7 ms: it returned tuple ('offset', 'g', 't'), "
        "not ('offset', group, topic, partition) or ('group', group)")
    assert "  Kafka's rule returns: ('offset', 'dispatch', 'trucks_gps', 0) (an int16 version" in str(e.value)


@pytest.mark.parametrize("name", NAMES07 + ["decode_key"])
def test_kafkas_recipes_pass_the_delivery_campaign_through_the_guard(name):
    reference = RULES[name].reference
    verdict = judge({name: lambda *args: reference(*args)})
    assert verdict.ok, str(verdict)
    assert str(verdict).startswith(f"0 anomalies in {tester_delivery.DEFAULT_SCHEDULES} schedules (seed 0); "
                                   f"your rules: {name}")


@pytest.mark.parametrize("name, fn, kind", WRONG, ids=[fn.__name__ for _, fn, _ in WRONG])
def test_a_classic_wrong_loop_is_caught_within_the_default_schedules(name, fn, kind):
    verdict = judge({name: fn})
    assert not verdict.ok and verdict.failure.kind == kind, str(verdict)
    assert f"then: {kind}: " in str(verdict)


def test_the_verdict_names_the_schedule_the_crashes_and_the_records():
    verdict = judge({"no_record_lost": lost_commit_first}, schedules=3, seed=0)
    text = str(verdict)
    assert text.startswith("FAILED: at-least-once, schedule 1 of 3 (seed ")
    assert "shrunk to {" in text and "consumer-3 crashes " in text
    assert "consumer-3 restarts: a new member, from the committed offsets" in text
    assert "then: lost: " in text and " records never processed: orders-" in text
