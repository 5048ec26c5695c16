"""Partitioners: bit-exact with Kafka, sticky and round-robin behave as Kafka's do."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from kafka.partitioner.default import DefaultPartitioner as KafkaPythonDefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from minikafka.partitioner import (
    DefaultPartitioner,
    RoundRobinPartitioner,
    StickyPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

# From Kafka's own clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
# (testMurmur2): Java's signed results, byte for byte.
JAVA_MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

SPECIAL_KEYS = [
    b"",
    b"\x00",
    b"\xff",
    b"\xff" * 7,
    b"\x80\x00\x00\x00",
    "camión-7".encode(),
    "🚚".encode(),  # 4 bytes: one full block, no tail
    "🚚 truck-42 📍".encode(),
    "Ελλάδα".encode(),
    "東京-3".encode(),
    b"truck-7",
]


def random_keys(count: int = 10_000, seed: int = 480) -> list[bytes]:
    """Seeded keys whose lengths run 0..64, so every tail length (0-3) appears often."""
    rng = random.Random(seed)
    return [rng.randbytes(i % 65) for i in range(count)]


class _Cluster:
    """Just enough of kafka-python's ClusterMetadata for its DefaultPartitioner."""

    def __init__(self, topic: str, num_partitions: int) -> None:
        self._topic, self._partitions = topic, set(range(num_partitions))

    def topics(self):
        return {self._topic}

    def partitions_for_topic(self, topic):
        return self._partitions

    def available_partitions_for_topic(self, topic):
        return self._partitions


# -- murmur2 ---------------------------------------------------------------


@pytest.mark.parametrize("key, expected", JAVA_MURMUR2_VECTORS)
def test_murmur2_matches_kafkas_java_test_vectors(key, expected):
    assert murmur2(key) == expected


def test_murmur2_bit_exact_with_kafka_python_on_random_and_unicode_keys():
    keys = random_keys() + SPECIAL_KEYS
    assert {len(k) % 4 for k in keys} == {0, 1, 2, 3}
    assert {len(k) for k in keys} >= set(range(65))
    for key in keys:
        ours = murmur2(key)
        # kafka-python returns the unsigned view of the same 32 bits.
        assert ours & 0xFFFFFFFF == kafka_python_murmur2(key), key


def test_murmur2_returns_a_signed_32_bit_int_like_java():
    hashes = [murmur2(k) for k in random_keys(2_000)]
    assert all(-(2**31) <= h < 2**31 for h in hashes)
    assert any(h < 0 for h in hashes) and any(h > 0 for h in hashes)


def test_murmur2_accepts_bytearray():
    assert murmur2(bytearray(b"foobar")) == murmur2(b"foobar")


# -- to_positive and partition_for_key --------------------------------------


@pytest.mark.parametrize(
    "n, expected",
    [
        (0, 0),
        (5, 5),
        (2**31 - 1, 2**31 - 1),
        (-1, 2**31 - 1),
        (-(2**31), 0),
        (-973932308, 1173551340),
    ],
)
def test_to_positive_clears_the_sign_bit_like_java(n, expected):
    assert to_positive(n) == expected


@pytest.mark.parametrize("num_partitions", [1, 2, 3, 10, 12, 50, 1000])
def test_partition_for_key_matches_kafka_python_default_partitioner(num_partitions):
    theirs = KafkaPythonDefaultPartitioner()
    cluster = _Cluster("trucks_gps", num_partitions)
    for key in random_keys(1_000, seed=num_partitions) + SPECIAL_KEYS:
        expected = theirs.partition("trucks_gps", None, key, None, None, cluster)
        assert partition_for_key(key, num_partitions) == expected, key


def test_partition_for_key_java_vectors():
    # Derived from the Java vectors above: toPositive(murmur2(key)) % n.
    for key, h in JAVA_MURMUR2_VECTORS:
        for n in (3, 10, 12):
            assert partition_for_key(key, n) == (h & 0x7FFFFFFF) % n


def test_same_key_always_lands_on_the_same_partition():
    trucks = [f"truck-{i}".encode() for i in range(200)]
    first = {k: partition_for_key(k, 10) for k in trucks}
    p = DefaultPartitioner(random.Random(1))
    for _ in range(3):
        for k in trucks:
            assert p.partition("trucks_gps", k, 10) == first[k]
            p.on_new_batch("trucks_gps", 10)  # batches never move keyed records
    assert set(first.values()) == set(range(10))


def test_adding_partitions_remaps_some_keys():
    trucks = [f"truck-{i}".encode() for i in range(1_000)]
    before = {k: partition_for_key(k, 10) for k in trucks}
    after = {k: partition_for_key(k, 12) for k in trucks}
    for k in trucks:
        h = to_positive(murmur2(k))
        assert (before[k], after[k]) == (h % 10, h % 12)
    moved = [k for k in trucks if before[k] != after[k]]
    # Only keys with h % 60 < 10 keep their partition: about 1 in 6 stay.
    assert 0 < len(moved) < len(trucks)
    assert 700 < len(moved) < 930


# -- StickyPartitioner -------------------------------------------------------


def test_sticky_stays_on_one_partition_until_a_new_batch():
    p = StickyPartitioner(random.Random(7))
    first = p.partition("logs", None, 6)
    assert [p.partition("logs", None, 6) for _ in range(50)] == [first] * 50
    p.on_new_batch("logs", 6)
    second = p.partition("logs", None, 6)
    assert second != first
    assert [p.partition("logs", None, 6) for _ in range(50)] == [second] * 50


def test_sticky_never_picks_the_same_partition_twice_in_a_row():
    p = StickyPartitioner(random.Random(3))
    previous = p.partition("logs", None, 2)
    for _ in range(500):
        p.on_new_batch("logs", 2)
        current = p.partition("logs", None, 2)
        assert current != previous
        previous = current


def test_sticky_spreads_batches_over_all_partitions():
    p = StickyPartitioner(random.Random(11))
    counts = Counter()
    for _ in range(6_000):
        counts[p.partition("logs", None, 6)] += 1
        p.on_new_batch("logs", 6)
    assert set(counts) == set(range(6))
    assert all(800 < c < 1_200 for c in counts.values()), counts


def test_sticky_ignores_keys_like_kafkas_uniform_sticky_partitioner():
    p = StickyPartitioner(random.Random(5))
    first = p.partition("logs", None, 8)
    assert {p.partition("logs", f"k{i}".encode(), 8) for i in range(20)} == {first}


def test_sticky_is_deterministic_for_a_seed():
    def run(seed: int) -> list[int]:
        p = StickyPartitioner(random.Random(seed))
        out = []
        for _ in range(100):
            out.append(p.partition("logs", None, 10))
            p.on_new_batch("logs", 10)
        return out

    assert run(42) == run(42)
    assert run(42) != run(43)


def test_sticky_keeps_one_sticky_partition_per_topic():
    p = StickyPartitioner(random.Random(9))
    a, b = p.partition("a", None, 1000), p.partition("b", None, 1000)
    p.on_new_batch("a", 1000)
    assert p.partition("a", None, 1000) != a
    assert p.partition("b", None, 1000) == b


def test_sticky_with_one_partition_and_after_the_topic_shrinks():
    p = StickyPartitioner(random.Random(0))
    p.on_new_batch("solo", 1)
    assert p.partition("solo", None, 1) == 0
    for _ in range(20):
        p.on_new_batch("t", 50)
        stuck = p.partition("t", None, 50)
        if stuck >= 5:
            break
    assert stuck >= 5
    assert p.partition("t", None, 5) < 5


def test_partitioners_leave_the_global_random_state_alone():
    state = random.getstate()
    p, d = StickyPartitioner(), DefaultPartitioner()
    for _ in range(100):
        p.partition("t", None, 10)
        p.on_new_batch("t", 10)
        d.partition("t", None, 10)
        d.on_new_batch("t", 10)
    assert random.getstate() == state


# -- DefaultPartitioner --------------------------------------------------------


def test_default_hashes_keys_and_sticks_null_keys():
    p = DefaultPartitioner(random.Random(2))
    for key in SPECIAL_KEYS:
        assert p.partition("trucks_gps", key, 10) == partition_for_key(key, 10)
    stuck = p.partition("trucks_gps", None, 10)
    assert [p.partition("trucks_gps", None, 10) for _ in range(20)] == [stuck] * 20
    p.on_new_batch("trucks_gps", 10)
    assert p.partition("trucks_gps", None, 10) != stuck


# -- RoundRobinPartitioner -----------------------------------------------------


def test_round_robin_cycles_each_topic_independently():
    p = RoundRobinPartitioner()
    a = [p.partition("a", None, 3) for _ in range(4)]
    b = [p.partition("b", b"ignored", 5) for _ in range(7)]
    a += [p.partition("a", b"also-ignored", 3) for _ in range(3)]
    assert a == [0, 1, 2, 0, 1, 2, 0]
    assert b == [0, 1, 2, 3, 4, 0, 1]


def test_round_robin_on_new_batch_does_not_skip():
    p = RoundRobinPartitioner()
    out = []
    for _ in range(6):
        out.append(p.partition("t", None, 3))
        p.on_new_batch("t", 3)
    assert out == [0, 1, 2, 0, 1, 2]


# -- bad input -----------------------------------------------------------------

ALL_PARTITIONERS = [DefaultPartitioner, StickyPartitioner, RoundRobinPartitioner]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_num_partitions_is_a_value_error_naming_the_value(bad):
    with pytest.raises(ValueError, match=f"num_partitions.*{bad!r}"):
        partition_for_key(b"k", bad)
    for make in ALL_PARTITIONERS:
        with pytest.raises(ValueError, match=f"num_partitions.*{bad!r}"):
            make().partition("t", None, bad)
    with pytest.raises(ValueError, match=f"num_partitions.*{bad!r}"):
        StickyPartitioner().on_new_batch("t", bad)


@pytest.mark.parametrize("bad, type_name", [("truck-7", "str"), (7, "int"), (["k"], "list")])
def test_unserialized_key_is_a_type_error_naming_the_type(bad, type_name):
    expected = f"serialized to bytes.*{type_name}"
    with pytest.raises(TypeError, match=expected):
        murmur2(bad)
    with pytest.raises(TypeError, match=expected):
        partition_for_key(bad, 10)
    for make in ALL_PARTITIONERS:
        with pytest.raises(TypeError, match=expected):
            make().partition("t", bad, 10)


def test_partition_for_key_rejects_a_null_key():
    with pytest.raises(TypeError, match="NoneType"):
        partition_for_key(None, 10)
