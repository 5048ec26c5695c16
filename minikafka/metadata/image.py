"""``MetadataImage``: the cluster's metadata as the committed records of ``__cluster_metadata`` build it.

Theory of operation
-------------------
An image is a fold over the metadata log: start empty, ``apply`` every committed record in
offset order. Controllers and brokers each keep one, and since they apply the same records
in the same order, they hold the same image at the same offset (Kafka's ``MetadataImage``
and ``MetadataDelta``). Each ``apply`` also notes what changed in ``delta`` (partitions,
removed topics, brokers, configs), so a broker can act on a change (become leader, drop a
deleted topic's log) without comparing whole images; the owner takes the delta with
``take_delta()``.

Invariants: the image changes only through ``apply``; applying a record is deterministic
and reads nothing but the record (its time comes from the batch that carried it). A
record that does not fit the image (a partition of an unknown topic id, say) is ignored
and counted in ``skipped``: a log written by a correct controller never has one, and a
replica must never stop replaying over it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from minikafka.messages import PartitionState, TopicConfig
from minikafka.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FenceBrokerRecord,
    LeaderChangeRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    decode,
)

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


@dataclass
class BrokerRegistration:
    broker_id: int
    incarnation: int
    host: str = ""
    port: int = 0
    fenced: bool = True
    registered_at: int = 0  # offset of the RegisterBrokerRecord: caught up once past it
    inter_broker_port: int = 0  # where other brokers (followers) reach it
    offline_log_dirs: tuple[str, ...] = ()  # failed directories: no leadership, no ISR for what is on them


@dataclass
class MetadataDelta:
    """What changed since the owner last looked."""

    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    removed_topics: dict[str, str] = field(default_factory=dict)  # name -> topic id
    topics: set[str] = field(default_factory=set)  # created, or their configs changed
    brokers_changed: bool = False

    def __bool__(self) -> bool:
        return bool(self.partitions or self.removed_topics or self.topics or self.brokers_changed)


class MetadataImage:
    def __init__(self) -> None:
        self.offset = -1  # the last record applied
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topic_ids: dict[str, str] = {}  # name -> id
        self.topic_names: dict[str, str] = {}  # id -> name
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}  # "" = cluster default
        self.next_producer_id = 0
        self.leader: tuple[int, int] | None = None  # (controller id, epoch) of the last LeaderChange
        # (time, topic, partition, old leader, new leader, unclean): every leader decision, for pictures
        self.elections: list[tuple[int, str, int, int, int, bool]] = []
        self.skipped = 0
        self.delta = MetadataDelta()

    # --- views ---------------------------------------------------------------------------------------------

    @property
    def live_brokers(self) -> tuple[int, ...]:
        """Registered and unfenced: the brokers that may lead and be in an ISR."""
        return tuple(sorted(b for b, reg in self.brokers.items() if not reg.fenced))

    def is_alive(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is not None and not reg.fenced

    def can_replicate(self, broker_id: int) -> bool:
        """Alive, and its log directory online: it may lead and be in an ISR (Kafka's
        ``isAcceptableLeader`` asks the same of the replica's directory; a broker here has one)."""
        reg = self.brokers.get(broker_id)
        return reg is not None and not reg.fenced and not reg.offline_log_dirs

    def endpoints(self) -> dict[int, tuple[str, int]]:
        """Where clients reach each live broker (its client listener)."""
        return {b: (r.host, r.port) for b, r in sorted(self.brokers.items()) if not r.fenced and r.host}

    def inter_broker_endpoints(self) -> dict[int, tuple[str, int]]:
        """Where other nodes reach each live broker (its inter-broker listener)."""
        return {b: (r.host, r.inter_broker_port) for b, r in sorted(self.brokers.items())
                if not r.fenced and r.host and r.inter_broker_port}

    def partition_count(self, topic: str) -> int:
        n = 0
        while (topic, n) in self.partitions:
            n += 1
        return n

    def topic_config(self, topic: str) -> TopicConfig:
        """The topic as the rest of the code knows it (name, partitions, RF, overrides)."""
        n = self.partition_count(topic)
        rf = len(self.partitions[(topic, 0)].replicas) if n else 0
        return TopicConfig(topic, n, rf, tuple(sorted(self.topic_configs.get(topic, {}).items())))

    @property
    def topics(self) -> dict[str, TopicConfig]:
        return {name: self.topic_config(name) for name in sorted(self.topic_ids)}

    def topic_id(self, name: str) -> str | None:
        return self.topic_ids.get(name)

    # --- applying records ---------------------------------------------------------------------------------

    def apply(self, record: Any, offset: int, timestamp: int = 0) -> None:
        self.offset = offset
        handler = _APPLY.get(type(record))
        if handler is None:
            self.skipped += 1
            return
        handler(self, record, offset, timestamp)

    def apply_committed(self, records: Any) -> MetadataDelta:
        """Apply a run of committed log records (key and value still encoded) and return what
        they changed. A record that does not decode is skipped like one that does not fit."""
        for rec in records:
            try:
                decoded = decode(rec.key, rec.value)
            except Exception:
                self.skipped += 1
                self.offset = rec.offset
                continue
            self.apply(decoded, rec.offset, rec.timestamp)
        return self.take_delta()

    def take_delta(self) -> MetadataDelta:
        delta, self.delta = self.delta, MetadataDelta()
        return delta

    def _register(self, r: RegisterBrokerRecord, offset: int, ts: int) -> None:
        self.brokers[r.brokerId] = BrokerRegistration(r.brokerId, r.incarnationId, r.host, r.port, r.fenced, offset,
                                                  r.interBrokerPort)
        self.delta.brokers_changed = True

    def _unregister(self, r: UnregisterBrokerRecord, offset: int, ts: int) -> None:
        self.brokers.pop(r.brokerId, None)
        self.delta.brokers_changed = True

    def _fence(self, r: FenceBrokerRecord, offset: int, ts: int) -> None:
        reg = self.brokers.get(r.id)
        if reg is None or reg.incarnation != r.epoch:
            self.skipped += 1
            return
        reg.fenced = True
        self.delta.brokers_changed = True

    def _unfence(self, r: UnfenceBrokerRecord, offset: int, ts: int) -> None:
        reg = self.brokers.get(r.id)
        if reg is None or reg.incarnation != r.epoch:
            self.skipped += 1
            return
        reg.fenced = False
        self.delta.brokers_changed = True

    def _registration_change(self, r: BrokerRegistrationChangeRecord, offset: int, ts: int) -> None:
        reg = self.brokers.get(r.brokerId)
        if reg is None or reg.incarnation != r.brokerEpoch:
            self.skipped += 1
            return
        reg.offline_log_dirs = tuple(sorted(set(reg.offline_log_dirs) | set(r.offlineLogDirs)))
        self.delta.brokers_changed = True

    def _topic(self, r: TopicRecord, offset: int, ts: int) -> None:
        self.topic_ids[r.name] = r.topicId
        self.topic_names[r.topicId] = r.name
        self.topic_configs.setdefault(r.name, {})
        self.delta.topics.add(r.name)
        self.delta.removed_topics.pop(r.name, None)

    def _partition(self, r: PartitionRecord, offset: int, ts: int) -> None:
        name = self.topic_names.get(r.topicId)
        if name is None:
            self.skipped += 1
            return
        state = PartitionState(name, r.partitionId, r.leader, r.leaderEpoch, tuple(r.isr), tuple(r.replicas),
                               r.partitionEpoch)
        self._set(state)
        self.delta.topics.add(name)

    def _partition_change(self, r: PartitionChangeRecord, offset: int, ts: int) -> None:
        name = self.topic_names.get(r.topicId)
        old = self.partitions.get((name, r.partitionId)) if name else None
        if old is None:
            self.skipped += 1
            return
        changes: dict[str, Any] = {"partition_epoch": old.partition_epoch + 1}
        if r.isr is not None:
            changes["isr"] = tuple(r.isr)
        if r.replicas is not None:
            changes["replicas"] = tuple(r.replicas)
        if r.leader is not None and r.leader != old.leader:
            changes["leader"] = r.leader
            changes["leader_epoch"] = old.leader_epoch + 1
        if r.leader is not None:
            self.elections.append((ts, name, r.partitionId, old.leader, r.leader, r.unclean))
        self._set(replace(old, **changes))

    def _set(self, state: PartitionState) -> None:
        key = (state.topic, state.partition)
        self.partitions[key] = state
        self.delta.partitions[key] = state

    def _remove_topic(self, r: RemoveTopicRecord, offset: int, ts: int) -> None:
        name = self.topic_names.pop(r.topicId, None)
        if name is None:
            self.skipped += 1
            return
        del self.topic_ids[name]
        self.topic_configs.pop(name, None)
        for key in [k for k in self.partitions if k[0] == name]:
            del self.partitions[key]
            self.delta.partitions.pop(key, None)
        self.delta.topics.discard(name)
        self.delta.removed_topics[name] = r.topicId

    def _config(self, r: ConfigRecord, offset: int, ts: int) -> None:
        if r.resourceType == TOPIC_RESOURCE:
            if r.resourceName not in self.topic_ids:
                self.skipped += 1
                return
            target = self.topic_configs.setdefault(r.resourceName, {})
            self.delta.topics.add(r.resourceName)
        elif r.resourceType == BROKER_RESOURCE:
            target = self.broker_configs.setdefault(r.resourceName, {})
            self.delta.brokers_changed = True
        else:
            self.skipped += 1
            return
        if r.value is None:
            target.pop(r.name, None)
        else:
            target[r.name] = r.value

    def _producer_ids(self, r: ProducerIdsRecord, offset: int, ts: int) -> None:
        self.next_producer_id = max(self.next_producer_id, r.nextProducerId)

    def _leader_change(self, r: LeaderChangeRecord, offset: int, ts: int) -> None:
        self.leader = (r.leaderId, r.leaderEpoch)


_APPLY = {
    RegisterBrokerRecord: MetadataImage._register,
    UnregisterBrokerRecord: MetadataImage._unregister,
    FenceBrokerRecord: MetadataImage._fence,
    UnfenceBrokerRecord: MetadataImage._unfence,
    BrokerRegistrationChangeRecord: MetadataImage._registration_change,
    TopicRecord: MetadataImage._topic,
    PartitionRecord: MetadataImage._partition,
    PartitionChangeRecord: MetadataImage._partition_change,
    RemoveTopicRecord: MetadataImage._remove_topic,
    ConfigRecord: MetadataImage._config,
    ProducerIdsRecord: MetadataImage._producer_ids,
    LeaderChangeRecord: MetadataImage._leader_change,
}
