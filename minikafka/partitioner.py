"""Partitioners: which partition of a topic a record goes to.

Theory of operation
-------------------
A producer asks its partitioner one question per record: "this topic has
``num_partitions`` partitions; where does this key go?"  Kafka answers in two
ways, and so does this file:

* **Keyed records are hashed.**  ``partition = to_positive(murmur2(key)) % n``.
  Every record with the same key lands in the same partition, so it is read
  back in the order it was written (Kafka orders records only within a
  partition).  The truck-GPS topic relies on this: key = truck id, so one
  truck's positions stay in order.
* **Null-key records are spread out.**  There is no order to keep, so the goal
  is throughput: stick to one partition until the producer has filled a batch,
  then move on (KIP-480, "sticky"), or visit the partitions in turn
  ("round robin").

Invariants
    * Same key -> same partition, as long as the partition count is fixed.
      Adding partitions changes ``% n`` and so remaps keys: Kafka never
      re-shuffles old records, which is why "add partitions later" breaks
      per-key ordering across the change.
    * ``murmur2`` and ``to_positive`` are bit-exact with Kafka's Java
      ``Utils.murmur2`` and ``Utils.toPositive``, so a key written by this
      producer and one written by a Java or kafka-python producer land in the
      same partition of the same topic.

Never
    * No I/O, no clock, no global ``random`` state.  Randomness comes from an
      injected ``random.Random`` so a simulated run replays exactly from its
      seed.  Partitioners see the partition *count* only, never the cluster.
"""

from __future__ import annotations

import random
import struct

__all__ = [
    "murmur2",
    "to_positive",
    "partition_for_key",
    "Partitioner",
    "DefaultPartitioner",
    "StickyPartitioner",
    "RoundRobinPartitioner",
]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def _check_key(key: object, *, allow_none: bool) -> None:
    if key is None and allow_none:
        return
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(
            f"keys must be serialized to bytes first (got {type(key).__name__}: {key!r}); "
            "encode it, e.g. key.encode('utf-8'), or set a key_serializer"
        )


def _check_num_partitions(num_partitions: object) -> None:
    is_int = isinstance(num_partitions, int) and not isinstance(num_partitions, bool)
    if not is_int or num_partitions < 1:
        raise ValueError(f"num_partitions must be an int >= 1, got {num_partitions!r}")


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit MurmurHash2 of ``data``, as a signed int like Java's.

    >>> murmur2(b"21")
    -973932308
    """
    _check_key(data, allow_none=False)
    length = len(data)
    # Java ints wrap at 32 bits; Python ints do not, so every multiply is masked.
    h = (_SEED ^ length) & _MASK32
    body = length - length % 4
    # Little-endian 4-byte blocks. Java masks each byte with 0xff because its
    # bytes are signed; Python's bytes are already 0..255.
    for (k,) in struct.iter_unpack("<I", data[:body]):
        k = (k * _M) & _MASK32
        k ^= k >> _R  # k is unsigned here, so >> is Java's >>>
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    # The tail: Java's switch falls through from case 3 to case 2 to case 1.
    tail = length - body
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    # Back to Java's signed view, so values match Kafka's tests and logs.
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit.

    Not ``abs()``: in Java ``Math.abs(Integer.MIN_VALUE)`` is still negative,
    and a negative hash ``% n`` would name a negative partition.

    >>> to_positive(-973932308)
    1173551340
    """
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's producer picks for a non-null ``key``.

    >>> partition_for_key(b"truck-7", 10)
    9
    """
    _check_key(key, allow_none=False)
    _check_num_partitions(num_partitions)
    return to_positive(murmur2(key)) % num_partitions


class Partitioner:
    """What a producer needs from a partitioner (Kafka's ``Partitioner`` interface)."""

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        raise NotImplementedError

    def on_new_batch(self, topic: str, num_partitions: int) -> None:
        """The producer closed a batch for ``topic``; most partitioners ignore this."""


class StickyPartitioner(Partitioner):
    """Send every record of a topic to one partition until the batch is done.

    Kafka's ``UniformStickyPartitioner`` (KIP-480): the key is ignored, so use
    :class:`DefaultPartitioner` when keys must keep their order.  Filling one
    batch at a time gives fewer, bigger requests than spraying records over
    every partition, while ``on_new_batch`` still spreads load over time.

    >>> p = StickyPartitioner(random.Random(1))
    >>> [p.partition("logs", None, 4) for _ in range(3)]
    [1, 1, 1]
    >>> p.on_new_batch("logs", 4)
    >>> p.partition("logs", None, 4)
    3
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        # A fixed default seed keeps simulated runs reproducible.
        self._rng = rng if rng is not None else random.Random(0)
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        _check_key(key, allow_none=True)
        _check_num_partitions(num_partitions)
        current = self._sticky.get(topic)
        if current is None or current >= num_partitions:  # new topic, or it shrank
            current = self._sticky[topic] = self._rng.randrange(num_partitions)
        return current

    def on_new_batch(self, topic: str, num_partitions: int) -> None:
        _check_num_partitions(num_partitions)
        current = self._sticky.get(topic)
        if current is None or current >= num_partitions or num_partitions == 1:
            self._sticky[topic] = self._rng.randrange(num_partitions)
            return
        # Uniform over the *other* partitions, in one draw: pick among n-1 and
        # step over the current one.
        choice = self._rng.randrange(num_partitions - 1)
        self._sticky[topic] = choice + 1 if choice >= current else choice


class DefaultPartitioner(Partitioner):
    """Kafka's default (since 2.4): hash keyed records, stick null-key ones.

    >>> p = DefaultPartitioner(random.Random(1))
    >>> p.partition("trucks_gps", b"truck-7", 10)
    9
    >>> p.partition("trucks_gps", None, 10)  # no key: the sticky partition
    2
    """

    def __init__(self, rng: random.Random | None = None, rules: object = None) -> None:
        self._sticky = StickyPartitioner(rng)
        # Where a key goes is a rule (``minikafka.rules.partition_for_key``, this module's
        # function by default): a ``Rules`` object may put a student's in its place.
        self._partition_for_key = partition_for_key if rules is None else rules.partition_for_key

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is None:
            return self._sticky.partition(topic, None, num_partitions)
        return self._partition_for_key(key, num_partitions)

    def on_new_batch(self, topic: str, num_partitions: int) -> None:
        self._sticky.on_new_batch(topic, num_partitions)


class RoundRobinPartitioner(Partitioner):
    """Kafka's ``RoundRobinPartitioner``: 0, 1, ..., n-1, 0, ... per topic; keys ignored.

    >>> p = RoundRobinPartitioner()
    >>> [p.partition("t", None, 3) for _ in range(4)]
    [0, 1, 2, 0]
    """

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        _check_key(key, allow_none=True)
        _check_num_partitions(num_partitions)
        n = self._counters.get(topic, 0)
        self._counters[topic] = n + 1
        return n % num_partitions
