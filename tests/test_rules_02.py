"""Notebook 02's rules as seams: a producer made on a ``Cluster(rules=...)`` hashes keys with
the student's ``murmur2`` / ``partition_for_key``, and the partitioner judge
(``minikafka.course.tester_log.judge_partitioner``) writes the same keys through it and through
kafka-python's own ``DefaultPartitioner``: a key whose records land in two partitions is caught
with the order a consumer read them in."""

from __future__ import annotations

import zlib

import pytest

from minikafka import Cluster, KafkaProducer
from minikafka import partitioner as P
from minikafka import rules as R
from minikafka.course import judge
from minikafka.course.tester_log import kafka_python_partitioner
from minikafka.rules import REFERENCE, RULES, RuleError

SEED, M, MASK = 0x9747B28C, 0x5BD1E995, 0xFFFFFFFF


def hash_(data, *, order="little", fall_through=True, final_mix=True, mask=MASK, seed=SEED):
    "murmur2 as a student writes it, with one of its classic slips switchable."
    n = len(data)
    h = (seed ^ n) & mask
    body = n - n % 4
    for i in range(0, body, 4):
        k = (int.from_bytes(data[i:i + 4], order) * M) & mask
        k ^= k >> 24
        h = ((h * M) & mask) ^ ((k * M) & mask)
    tail = n - body
    if fall_through:
        if tail == 3:
            h ^= data[body + 2] << 16
        if tail >= 2:
            h ^= data[body + 1] << 8
        if tail >= 1:
            h = ((h ^ data[body]) * M) & mask
    elif tail == 3:
        h ^= data[body + 2] << 16
    elif tail == 2:
        h ^= data[body + 1] << 8
    elif tail == 1:
        h = ((h ^ data[body]) * M) & mask
    if final_mix:
        h ^= h >> 13
        h = (h * M) & mask
        h ^= h >> 15
    return h - (1 << 32) if mask == MASK and h & 0x80000000 else h


def murmur2_ok(data):
    return hash_(data)


def murmur2_big_endian(data):
    return hash_(data, order="big")


def murmur2_switch_without_fall_through(data):
    return hash_(data, fall_through=False)


def murmur2_without_final_mix(data):
    return hash_(data, final_mix=False)


def murmur2_not_kept_to_32_bits(data):
    return hash_(data, mask=(1 << 256) - 1)


def partition_ok(key, num_partitions):
    return (hash_(key) & 0x7FFFFFFF) % num_partitions


def partition_with_abs(key, num_partitions):
    return abs(hash_(key)) % num_partitions


def partition_with_python_modulo(key, num_partitions):
    "Python's % of a negative hash is already >= 0, but it is not Kafka's toPositive"
    return hash_(key) % num_partitions


def partition_with_unsigned_mask(key, num_partitions):
    return (hash_(key) & 0xFFFFFFFF) % num_partitions


def partition_by_crc32(key, num_partitions):
    return zlib.crc32(key) % num_partitions


WRONG = [
    ("murmur2", murmur2_big_endian, "key-split"),
    ("murmur2", murmur2_switch_without_fall_through, "key-split"),
    ("murmur2", murmur2_without_final_mix, "key-split"),
    ("murmur2", murmur2_not_kept_to_32_bits, "rule-error"),
    ("partition_for_key", partition_with_abs, "key-split"),
    ("partition_for_key", partition_with_python_modulo, "key-split"),
    ("partition_for_key", partition_with_unsigned_mask, "key-split"),
    ("partition_for_key", partition_by_crc32, "key-split"),
]


def test_the_rules_of_02_are_the_partitioners_functions_with_the_exercises_signatures():
    assert RULES["murmur2"].signature == "murmur2(data)"
    assert RULES["partition_for_key"].signature == "partition_for_key(key, num_partitions)"
    assert REFERENCE.murmur2 is P.murmur2 and REFERENCE.partition_for_key is P.partition_for_key


def test_kafka_pythons_partitioner_agrees_with_the_reference():
    keys = [b"", b"21", b"truck-007", "東京-3".encode(), b"\xff" * 7] + [bytes([i]) * i for i in range(1, 30)]
    for n in (1, 3, 10, 12):
        place = kafka_python_partitioner("t", n)
        assert [place(k, list(range(n)), list(range(n))) for k in keys] == [P.partition_for_key(k, n) for k in keys]


def test_a_producer_on_the_cluster_calls_the_students_rule_and_a_murmur2_alone_goes_through_topositive():
    with Cluster(brokers=1, seed=4, rules={"murmur2": murmur2_ok}) as cluster:
        cluster.create_topic("t", 10, 1)
        producer = KafkaProducer(bootstrap_servers=cluster)
        placed = [producer.send("t", key=b"truck-%03d" % i, value=b"x").get(timeout=10).partition for i in range(20)]
        assert placed == [P.partition_for_key(b"truck-%03d" % i, 10) for i in range(20)]
        assert cluster.rule_trace.calls == {"murmur2": 20} and cluster.rule_trace.differing_count == 0


def test_a_partition_out_of_range_stops_the_producer_with_one_message_naming_it():
    with pytest.raises(RuleError) as caught:
        with Cluster(brokers=1, seed=4, rules={"partition_for_key": lambda key, n: n}) as cluster:
            cluster.create_topic("t", 3, 1)
            KafkaProducer(bootstrap_servers=cluster).send("t", key=b"k", value=b"v")
    message = str(caught.value)
    assert message.startswith("your rule partition_for_key broke on producer-")
    assert "it returned partition 3, outside 0..2" in message
    assert "called with: partition_for_key(key=b'k', num_partitions=3)" in message


def test_correct_students_rules_pass_the_partitioner_judge():
    verdict = judge({"murmur2": murmur2_ok})
    assert verdict.ok, str(verdict)
    assert judge({"partition_for_key": partition_ok}).ok
    assert str(verdict).startswith("0 anomalies in 4 schedules (seed 0)")


@pytest.mark.parametrize("rule,fn,kind", WRONG, ids=[fn.__name__ for _, fn, _ in WRONG])
def test_each_classic_wrong_rule_splits_a_key_between_your_producer_and_kafka_pythons(rule, fn, kind):
    verdict = judge({rule: fn})
    assert not verdict.ok
    assert verdict.failure.kind == kind, str(verdict)
    if kind == "key-split":
        assert "kafka-python's DefaultPartitioner in partition" in verdict.failure.what
        assert "a consumer of the topic read them in the order" in verdict.failure.what
