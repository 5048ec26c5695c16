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

Because the key of a commit is (group, topic, partition), compaction keeps exactly the
latest commit of every partition of every group; a *tombstone* (value None) deletes an
offset or a whole group. A coordinator that becomes leader of a partition of
``__consumer_offsets`` replays it from the start and knows every group that lives there.

Invariants: these bytes are Kafka's own, so the same log could be read by Kafka's tools;
the layout is written by hand with ``struct`` because it is short and is what the chapter
shows on disk. Nothing here touches the log or reads a clock.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from minikafka.errors import CorruptRecordError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


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


def describe_record(key: bytes | None, value: bytes | None) -> str:
    """One line for a record of ``__consumer_offsets``, as Kafka's
    ``kafka-console-consumer --formatter ...OffsetsMessageFormatter`` prints it."""
    if key is None:
        return "(no key)"
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
