"""The records of the metadata log ``__cluster_metadata``: KRaft's ``*Record`` types.

Theory of operation
-------------------
In KRaft every fact about the cluster is a record in one replicated log: a broker
registered, a broker fenced, a topic created, a partition's leader or ISR changed, a topic
removed, a block of producer ids handed out. The active controller decides and appends;
every controller and every broker applies the *committed* records, in log order, to a
``MetadataImage``. Whoever replays the same log gets the same image: that is what makes
the metadata survive a controller's death, and what lets a broker know exactly which
topics were deleted while it was down.

The records carry Kafka's names and fields (``metadata/src/main/resources/common/metadata/
*.json`` in Kafka's repository), in camelCase as Kafka's ``kafka-dump-log
--cluster-metadata-decoder`` prints them. On disk a record is the record type as the key
and its fields as JSON in the value, inside ordinary v2 batches whose partition leader
epoch is the Raft epoch. (Kafka frames each record in a compact binary form instead; JSON
is what a student can read with ``cat``.) ``LeaderChange`` is written by the Raft layer
itself at the start of every epoch.

Never: put anything in a record that a replica could not recompute from the log alone
(wall time goes in only as data the controller decided on, never read on replay).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from minikafka.errors import CorruptRecordError


@dataclass(frozen=True)
class RegisterBrokerRecord:
    """A broker (re)joined: a new incarnation. It starts fenced until it has caught up."""

    brokerId: int
    incarnationId: int
    host: str = ""
    port: int = 0
    fenced: bool = True
    interBrokerPort: int = 0  # its inter-broker listener (Kafka: the endPoint of inter.broker.listener.name)


@dataclass(frozen=True)
class UnregisterBrokerRecord:
    brokerId: int
    incarnationId: int


@dataclass(frozen=True)
class FenceBrokerRecord:
    """The broker's session expired (or it restarted): it leads nothing, it is in no ISR."""

    id: int
    epoch: int  # the incarnation fenced


@dataclass(frozen=True)
class UnfenceBrokerRecord:
    id: int
    epoch: int


@dataclass(frozen=True)
class BrokerRegistrationChangeRecord:
    """A registered broker's log directories changed: some went offline (its heartbeat said
    so). Kafka's record of that name lists the directories still online (``LogDirs``, by
    uuid); a broker here has one directory, so the record names the offline ones instead. A
    broker with an offline directory may not lead or be in an ISR of the partitions on it
    until a new incarnation registers."""

    brokerId: int
    brokerEpoch: int  # the incarnation it is about
    offlineLogDirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopicRecord:
    name: str
    topicId: str


@dataclass(frozen=True)
class PartitionRecord:
    partitionId: int
    topicId: str
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leaderEpoch: int = 0
    partitionEpoch: int = 0


@dataclass(frozen=True)
class PartitionChangeRecord:
    """A change of one partition; fields left ``None`` stay as they were. A new leader bumps
    the leader epoch; every change bumps the partition epoch (as in Kafka)."""

    partitionId: int
    topicId: str
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    unclean: bool = False  # an unclean election (shown in the log; Kafka records it as leaderRecoveryState)


@dataclass(frozen=True)
class RemoveTopicRecord:
    topicId: str


@dataclass(frozen=True)
class ConfigRecord:
    """A config override; ``value`` None deletes it. ``resourceType`` 2 = topic, 4 = broker."""

    resourceType: int
    resourceName: str
    name: str
    value: str | None


@dataclass(frozen=True)
class ProducerIdsRecord:
    """A block of producer ids went to a broker; ``nextProducerId`` is the first id not yet given."""

    brokerId: int
    brokerEpoch: int
    nextProducerId: int


@dataclass(frozen=True)
class LeaderChangeRecord:
    """Written by the Raft layer when a leader starts its epoch (Kafka's LeaderChangeMessage)."""

    leaderId: int
    leaderEpoch: int
    voters: tuple[int, ...] = ()


RECORD_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        RegisterBrokerRecord, UnregisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord,
        BrokerRegistrationChangeRecord, TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord, ConfigRecord,
        ProducerIdsRecord,
    )
}
LEADER_CHANGE_KEY = b"LeaderChange"


def encode(record: Any) -> tuple[bytes, bytes]:
    """(key, value) of one metadata record, as it goes into the log."""
    name = type(record).__name__
    if name not in RECORD_TYPES:
        raise TypeError(f"{name} is not a metadata record")
    return name.encode(), json.dumps(asdict(record), separators=(",", ":"), sort_keys=True).encode()


def decode(key: bytes | None, value: bytes | None) -> Any:
    """The record a (key, value) pair of the log holds; ``LeaderChangeRecord`` for the Raft
    layer's own marker. Raises ``CorruptRecordError`` naming what was wrong."""
    if key == LEADER_CHANGE_KEY:
        try:
            data = json.loads(value or b"{}")
            return LeaderChangeRecord(int(data["leaderId"]), int(data["leaderEpoch"]),
                                      tuple(int(v) for v in data.get("voters", ())))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptRecordError(f"unreadable LeaderChange record: {e}") from None
    name = (key or b"").decode("utf-8", "replace")
    cls = RECORD_TYPES.get(name)
    if cls is None:
        raise CorruptRecordError(f"unknown metadata record type {name!r}")
    try:
        data = json.loads(value or b"")
        kwargs = {}
        for f in fields(cls):
            if f.name in data:
                v = data[f.name]
                kwargs[f.name] = tuple(v) if isinstance(v, list) else v
        return cls(**kwargs)
    except (ValueError, TypeError) as e:
        raise CorruptRecordError(f"unreadable {name}: {e}") from None


def describe(record: Any) -> str:
    """One line, as ``kafka-dump-log --cluster-metadata-decoder`` prints a record."""
    body = json.dumps(asdict(record), separators=(", ", ": "))
    return f"{type(record).__name__} {body}"
