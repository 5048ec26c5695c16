"""What the group coordinator writes to ``__consumer_offsets``: Kafka's record schemas.

Theory of operation
-------------------
``__consumer_offsets`` is an ordinary compacted topic whose records are the coordinator's
memory written down. Two kinds of record, told apart by the version that opens the key
(Kafka's ``GroupCoordinatorRecordSerde``, schemas in ``group-coordinator/src/main/resources/
common/message/``):

- an *offset commit*: key ``OffsetCommitKey`` (version 1: group, topic, partition), value
  ``OffsetCommitValue`` (version 3: offset, leader epoch, metadata, commit timestamp);
- a *group's metadata*: key ``GroupMetadataKey`` (version 2: group), value
  ``GroupMetadataValue`` (version 3: protocol type, generation, protocol, leader, state
  timestamp, members with their subscriptions and assignments).

A group of KIP-848's protocol (type "consumer") is written as six more kinds of record, key
versions 3 to 8 (Kafka's ``ConsumerGroup*Key``/``Value``; the keys are non-flexible like the
two above, the values *flexible*: compact strings and arrays, a tagged-field section):

====  ==========================================  ============================================
key   record (key fields)                         value
====  ==========================================  ============================================
3     ConsumerGroupMetadata (group)               the group epoch
4     ConsumerGroupPartitionMetadata (group)      each subscribed topic's id, name, partitions
5     ConsumerGroupMemberMetadata (group, member) instance id, client, subscription, assignor
6     ConsumerGroupTargetAssignmentMetadata (g)   the target assignment's epoch
7     ConsumerGroupTargetAssignmentMember (g, m)  the member's target partitions (topic ids)
8     ConsumerGroupCurrentMemberAssignment (g, m) member epoch, previous epoch, state, owned
                                                  partitions and those pending revocation
====  ==========================================  ============================================

A member that leaves gets tombstones for its three keys; a new coordinator replays them all
and knows every member, its epoch and its partitions.

Because the key of a commit is (group, topic, partition), compaction keeps exactly the
latest commit of every partition of every group; a *tombstone* (value None) deletes an
offset or a whole group. A coordinator that becomes leader of a partition of
``__consumer_offsets`` replays it from the start and knows every group that lives there.

Invariants: these bytes are Kafka's own, so the same log could be read by Kafka's tools;
the layout is written by hand with ``struct`` because it is short and is what the chapter
shows on disk. Nothing here touches the log or reads a clock.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass

from minikafka.errors import CorruptRecordError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
# KIP-848's records: the key's version says which (Kafka's CoordinatorRecordType); values are v0.
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_KEYS = range(CONSUMER_GROUP_METADATA, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT + 1)
_PER_MEMBER = (CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
               CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)


# --- tiny writer / reader for Kafka's non-flexible encoding -----------------------------------------


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    if b is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(b)) + b


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def _take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise CorruptRecordError(f"{self.what} truncated at byte {self.pos}")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what} truncated at byte {self.pos}")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what} truncated at byte {self.pos}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


# --- ... and for the flexible values of KIP-848's records (compact lengths are unsigned varints + 1)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _compact_array(items: list[bytes] | tuple[bytes, ...]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


_NO_TAGS = b"\x00"  # an empty tagged-field section


def _uuid(topic_id: str) -> bytes:
    """minikafka's topic id (Kafka's text form: URL-safe base64 of 16 bytes, unpadded) as 16 bytes."""
    if not topic_id:
        return bytes(16)
    raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    if len(raw) != 16:
        raise ValueError(f"topic id {topic_id!r} is not 16 bytes of URL-safe base64")
    return raw


def _topic_id_text(raw: bytes) -> str:
    return "" if raw == bytes(16) else base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class _FlexibleReader(_Reader):
    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(5):
            b = self._take(">B")
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise CorruptRecordError(f"{self.what}: a varint longer than 5 bytes at byte {self.pos}")

    def int8(self) -> int:
        return self._take(">b")

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what} truncated at byte {self.pos}")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def count(self) -> int:
        n = self.uvarint() - 1
        if n < 0:
            raise CorruptRecordError(f"{self.what}: a null array at byte {self.pos}")
        return n

    def uuid(self) -> str:
        if self.pos + 16 > len(self.data):
            raise CorruptRecordError(f"{self.what} truncated at byte {self.pos}")
        raw = self.data[self.pos:self.pos + 16]
        self.pos += 16
        return _topic_id_text(raw)

    def tags(self) -> None:
        """Skip a tagged-field section (fields a newer Kafka may add: none are needed here)."""
        for _ in range(self.uvarint()):
            self.uvarint()
            size = self.uvarint()
            if self.pos + size > len(self.data):
                raise CorruptRecordError(f"{self.what} truncated at byte {self.pos}")
            self.pos += size

    def value_version(self) -> None:
        version = self.int16()
        if version != 0:
            raise CorruptRecordError(f"{self.what} has unknown version {version}")


# --- keys ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        return (struct.pack(">h", OFFSET_COMMIT_KEY_VERSION) + _string(self.group) + _string(self.topic)
                + struct.pack(">i", self.partition))


@dataclass(frozen=True)
class GroupKey:
    group: str

    def encode(self) -> bytes:
        return struct.pack(">h", GROUP_METADATA_KEY_VERSION) + _string(self.group)


@dataclass(frozen=True)
class ConsumerGroupKey:
    """A key of one of KIP-848's records: ``kind`` is its version (3-8), ``member`` is set for
    the per-member ones (5, 7, 8)."""

    kind: int
    group: str
    member: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in CONSUMER_GROUP_KEYS:
            raise ValueError(f"a consumer group record key has version 3-8, not {self.kind}")
        if (self.member is not None) != (self.kind in _PER_MEMBER):
            raise ValueError(f"key version {self.kind} {'needs' if self.kind in _PER_MEMBER else 'has no'} member id")

    def encode(self) -> bytes:
        out = struct.pack(">h", self.kind) + _string(self.group)
        return out + (_string(self.member) if self.member is not None else b"")

    @classmethod
    def decode(cls, data: bytes) -> "ConsumerGroupKey":
        r = _Reader(data, "__consumer_offsets key")
        kind = r.int16()
        if kind not in CONSUMER_GROUP_KEYS:
            raise CorruptRecordError(f"__consumer_offsets key version {kind} is not a consumer group's (3-8)")
        group = r.string() or ""
        return cls(kind, group, (r.string() or "") if kind in _PER_MEMBER else None)


def key_version(data: bytes) -> int:
    """The int16 that opens every key of ``__consumer_offsets``: which kind of record it is."""
    if len(data) < 2:
        raise CorruptRecordError(f"__consumer_offsets key of {len(data)} bytes has no version")
    return struct.unpack_from(">h", data)[0]


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = _Reader(data, "__consumer_offsets key")
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupKey(r.string())
    raise CorruptRecordError(f"__consumer_offsets key has unknown version {version}")


def read_key(data: bytes) -> tuple:
    """A key of ``__consumer_offsets`` as lecture 07's exercise 3 returns it: ``("offset", group,
    topic, partition)`` or ``("group", group)``. The coordinator's replay reads every key through
    it (the rule ``decode_key``, ``minikafka.rules``)."""
    key = decode_key(data)
    if isinstance(key, OffsetKey):
        return ("offset", key.group, key.topic, key.partition)
    return ("group", key.group)


# --- values ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1

    def encode(self) -> bytes:
        return (struct.pack(">hqi", OFFSET_COMMIT_VALUE_VERSION, self.offset, self.leader_epoch)
                + _string(self.metadata or "") + struct.pack(">q", self.commit_timestamp))

    @classmethod
    def decode(cls, data: bytes) -> "OffsetValue":
        r = _Reader(data, "offset commit value")
        version = r.int16()
        if version > 4:
            raise CorruptRecordError(f"offset commit value has unknown version {version}")
        offset = r.int64()
        epoch = r.int32() if version >= 3 else -1
        metadata = r.string() or ""
        timestamp = r.int64()
        return cls(offset, epoch, metadata, timestamp)


@dataclass(frozen=True)
class MemberValue:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...] = ()

    def encode(self) -> bytes:
        out = bytearray(struct.pack(">h", GROUP_METADATA_VALUE_VERSION))
        out += _string(self.protocol_type) + struct.pack(">i", self.generation)
        out += _string(self.protocol) + _string(self.leader) + struct.pack(">q", self.current_state_timestamp)
        out += struct.pack(">i", len(self.members))
        for m in self.members:
            out += _string(m.member_id) + _string(m.group_instance_id) + _string(m.client_id)
            out += _string(m.client_host) + struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms)
            out += _bytes(m.subscription) + _bytes(m.assignment)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> "GroupValue":
        r = _Reader(data, "group metadata value")
        version = r.int16()
        if version > 4:
            raise CorruptRecordError(f"group metadata value has unknown version {version}")
        protocol_type = r.string() or ""
        generation = r.int32()
        protocol = r.string()
        leader = r.string()
        timestamp = r.int64() if version >= 2 else -1
        members = []
        for _ in range(r.int32()):
            member_id = r.string() or ""
            instance = r.string() if version >= 3 else None
            client_id = r.string() or ""
            host = r.string() or ""
            rebalance = r.int32() if version >= 1 else 0
            session = r.int32()
            if version == 0:
                rebalance = session
            members.append(MemberValue(member_id, client_id, host, rebalance, session,
                                       r.bytes_() or b"", r.bytes_() or b"", instance))
        return cls(protocol_type, generation, protocol, leader, timestamp, tuple(members))


# --- KIP-848's values ------------------------------------------------------------------------------

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]  # ((topic id, (partition, ...)), ...)


def _topic_partitions(parts: TopicPartitions) -> bytes:
    return _compact_array([_uuid(t) + _compact_array([struct.pack(">i", p) for p in ps]) + _NO_TAGS
                           for t, ps in parts])


def _read_topic_partitions(r: _FlexibleReader) -> TopicPartitions:
    out = []
    for _ in range(r.count()):
        topic = r.uuid()
        ps = tuple(r.int32() for _ in range(r.count()))
        r.tags()
        out.append((topic, ps))
    return tuple(out)


@dataclass(frozen=True)
class _EpochValue:
    """A value that is one epoch and nothing else (keys 3 and 6), flexible v0."""
    epoch: int

    def encode(self) -> bytes:
        return struct.pack(">hi", 0, self.epoch) + _NO_TAGS

    @classmethod
    def decode(cls, data: bytes):
        r = _FlexibleReader(data, cls.WHAT)
        r.value_version()
        epoch = r.int32()
        r.tags()
        return cls(epoch)


@dataclass(frozen=True)
class ConsumerGroupMetadataValue(_EpochValue):  # key 3: the group epoch
    WHAT = "consumer group metadata value"


@dataclass(frozen=True)
class ConsumerGroupPartitionMetadataValue:  # key 4
    epoch: int
    topics: tuple[tuple[str, str, int], ...]  # (topic id, name, partitions) of each subscribed topic

    def encode(self) -> bytes:
        topics = [_uuid(tid) + _compact_string(name) + struct.pack(">i", n) + _compact_array([]) + _NO_TAGS
                  for tid, name, n in self.topics]
        return struct.pack(">hi", 0, self.epoch) + _compact_array(topics) + _NO_TAGS

    @classmethod
    def decode(cls, data: bytes) -> "ConsumerGroupPartitionMetadataValue":
        r = _FlexibleReader(data, "consumer group partition metadata value")
        r.value_version()
        epoch = r.int32()
        topics = []
        for _ in range(r.count()):
            tid, name, n = r.uuid(), r.compact_string() or "", r.int32()
            for _ in range(r.count()):  # PartitionRacks: minikafka has no racks
                r.int32()
                for _ in range(r.count()):
                    r.compact_string()
                r.tags()
            r.tags()
            topics.append((tid, name, n))
        r.tags()
        return cls(epoch, tuple(topics))


@dataclass(frozen=True)
class ConsumerGroupMemberMetadataValue:  # key 5
    instance_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    rebalance_timeout_ms: int
    server_assignor: str | None

    def encode(self) -> bytes:
        return (struct.pack(">h", 0) + _compact_string(self.instance_id) + _compact_string(None)  # no rack
                + _compact_string(self.client_id) + _compact_string(self.client_host)
                + _compact_array([_compact_string(t) for t in self.subscribed_topics]) + _compact_string(None)
                + struct.pack(">i", self.rebalance_timeout_ms) + _compact_string(self.server_assignor) + _NO_TAGS)

    @classmethod
    def decode(cls, data: bytes) -> "ConsumerGroupMemberMetadataValue":
        r = _FlexibleReader(data, "consumer group member metadata value")
        r.value_version()
        instance, _rack = r.compact_string(), r.compact_string()
        client_id, host = r.compact_string() or "", r.compact_string() or ""
        topics = tuple(r.compact_string() or "" for _ in range(r.count()))
        _regex = r.compact_string()
        rebalance = r.int32()
        assignor = r.compact_string()
        r.tags()
        return cls(instance, client_id, host, topics, rebalance, assignor)


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMetadataValue(_EpochValue):  # key 6: the assignment epoch
    WHAT = "consumer group target assignment metadata value"


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMemberValue:  # key 7
    partitions: TopicPartitions

    def encode(self) -> bytes:
        return struct.pack(">h", 0) + _topic_partitions(self.partitions) + _NO_TAGS

    @classmethod
    def decode(cls, data: bytes) -> "ConsumerGroupTargetAssignmentMemberValue":
        r = _FlexibleReader(data, "consumer group target assignment member value")
        r.value_version()
        parts = _read_topic_partitions(r)
        r.tags()
        return cls(parts)


@dataclass(frozen=True)
class ConsumerGroupCurrentMemberAssignmentValue:  # key 8
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState byte: 0 Stable, 1 UnrevokedPartitions, 2 UnreleasedPartitions
    assigned: TopicPartitions
    pending_revocation: TopicPartitions

    def encode(self) -> bytes:
        return (struct.pack(">hiib", 0, self.member_epoch, self.previous_member_epoch, self.state)
                + _topic_partitions(self.assigned) + _topic_partitions(self.pending_revocation) + _NO_TAGS)

    @classmethod
    def decode(cls, data: bytes) -> "ConsumerGroupCurrentMemberAssignmentValue":
        r = _FlexibleReader(data, "consumer group current member assignment value")
        r.value_version()
        epoch, previous, state = r.int32(), r.int32(), r.int8()
        assigned, pending = _read_topic_partitions(r), _read_topic_partitions(r)
        r.tags()
        return cls(epoch, previous, state, assigned, pending)


CONSUMER_GROUP_VALUES = {
    CONSUMER_GROUP_METADATA: ConsumerGroupMetadataValue,
    CONSUMER_GROUP_PARTITION_METADATA: ConsumerGroupPartitionMetadataValue,
    CONSUMER_GROUP_MEMBER_METADATA: ConsumerGroupMemberMetadataValue,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: ConsumerGroupTargetAssignmentMetadataValue,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: ConsumerGroupTargetAssignmentMemberValue,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentValue,
}


def describe_record(key: bytes | None, value: bytes | None) -> str:
    """One line for a record of ``__consumer_offsets``, as Kafka's
    ``kafka-console-consumer --formatter ...OffsetsMessageFormatter`` prints it."""
    if key is None:
        return "(no key)"
    if key_version(key) in CONSUMER_GROUP_KEYS:
        ck = ConsumerGroupKey.decode(key)
        head = f"[{ck.group}{'' if ck.member is None else ',' + ck.member}]"
        name = CONSUMER_GROUP_VALUES[ck.kind].__name__.removesuffix("Value")
        if value is None:
            return f"{head}::{name}::NULL"
        return f"{head}::{CONSUMER_GROUP_VALUES[ck.kind].decode(value)}"
    k = decode_key(key)
    if isinstance(k, OffsetKey):
        head = f"[{k.group},{k.topic},{k.partition}]"
        if value is None:
            return f"{head}::NULL"
        v = OffsetValue.decode(value)
        return f"{head}::OffsetAndMetadata(offset={v.offset}, leaderEpoch={v.leader_epoch}, " \
               f"metadata={v.metadata!r}, commitTimestamp={v.commit_timestamp})"
    if value is None:
        return f"[{k.group}]::NULL"
    g = GroupValue.decode(value)
    members = ",".join(m.member_id for m in g.members)
    return f"[{k.group}]::GroupMetadata(protocolType={g.protocol_type}, generation={g.generation}, " \
           f"protocol={g.protocol}, leader={g.leader}, members=[{members}])"
